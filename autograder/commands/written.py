"""Written answers in nbgrader: the cells an instructor grades by hand in formgrader, beside the autograded parts.

A written answer is nbgrader's "manually graded answer": a markdown cell that is a solution cell and a grade
cell, with points. Its source holds the model answer and the rubric between the solution markers, which
`generate_assignment` replaces with the answer stub (in the edition's language: `TEXT_STUBS`). Here:

* `ForgetWrittenChecksums` (the release's last preprocessor): the released answer cells carry no checksum, so
  nbgrader's Validate (`nbgrader validate`, the lab's Validate button) says nothing about them, neither "failed"
  for an answer not written yet nor "passed"; the gradebook keeps the checksum (SaveCells ran before), and
  autograde's OverwriteCells puts it back, so an answer left as released still scores 0 with "No response.";
* `SaveAutoGradesKeepingManual` (in place of nbgrader's SaveAutoGrades): autograde never touches a grade an
  instructor gave to a written answer: its points, its comment, and its "graded" state, also when autograde
  runs again after the manual grading (stock nbgrader keeps the points but marks the answer "needs manual
  grade" again);
* `written_grade`: the same rule for grade-class, which writes the gradebook itself (gradebook.py);
* `WrittenCsvExport` (`nbgrader export`): nbgrader's CSV with three more columns, the autograded points, the
  written points and the written maximum, per student and assignment.
"""
from __future__ import annotations

import csv

from nbgrader import utils
from nbgrader.plugins import CsvExportPlugin
from nbgrader.preprocessors import NbGraderPreprocessor, SaveAutoGrades

# The stub of an answer cell in the release, by the notebook's edition language (metadata course.lang).
TEXT_STUBS = {"en": "YOUR ANSWER HERE", "zh": "在这里写你的答案"}
# The columns WrittenCsvExport adds to nbgrader's.
EXTRA_COLUMNS = ("autograded_score", "written_score", "written_max_score")


def is_written(cell) -> bool:
    """Whether `cell` (a notebook cell, or a gradebook cell row) is a written answer: graded by hand."""
    if isinstance(cell, dict):  # a notebook's cell (nbformat's NotebookNode); a gradebook row is no dict
        return cell.get("cell_type") == "markdown" and utils.is_grade(cell) and utils.is_solution(cell)
    return getattr(cell, "cell_type", None) == "markdown"


class ForgetWrittenChecksums(NbGraderPreprocessor):
    """generate_assignment's last step: no checksum on a released written answer (Validate then ignores it)."""

    def preprocess_cell(self, cell, resources, index):
        if is_written(cell):
            cell.metadata.nbgrader.pop("checksum", None)
        return cell, resources


def needs_review(manual_score, auto_score, written: bool) -> bool:
    """nbgrader's needs_manual_grade after autograde. A written answer needs a grader until one has graded it
    (an answer left as released scores 0 by itself); an autograded cell whose score a grader overrode is
    shown again for review, as stock nbgrader does."""
    if written:
        return manual_score is None and auto_score is None
    return manual_score is not None or auto_score is None


class SaveAutoGradesKeepingManual(SaveAutoGrades):
    """nbgrader's SaveAutoGrades, except that a written answer an instructor graded stays graded."""

    def _add_score(self, cell, resources) -> None:
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        grade.auto_score, _ = utils.determine_grade(cell, self.log)
        grade.needs_manual_grade = needs_review(grade.manual_score, grade.auto_score, is_written(cell))
        self.gradebook.db.commit()


def written_grade(grade, answered: bool) -> None:
    """grade-class's row of a written answer (a gradebook Grade): 0 when left as released (nbgrader's "no
    response"), else nothing until an instructor grades it; an instructor's grade is never touched."""
    grade.auto_score = None if answered else 0.0
    grade.needs_manual_grade = needs_review(grade.manual_score, grade.auto_score, written=True)


def split_score(submission) -> tuple[float, float, float]:
    """(autograded points, written points, written maximum) of a gradebook SubmittedAssignment."""
    auto = written = written_max = 0.0
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            if is_written(grade.cell):
                written += grade.score or 0.0
                written_max += grade.max_score or 0.0
            else:
                auto += grade.score or 0.0
    return auto, written, written_max


class WrittenCsvExport(CsvExportPlugin):
    """nbgrader's CSV export, each row with the autograded points and the written points in their own columns."""

    def export(self, gradebook) -> None:
        from nbgrader.api import MissingEntry  # noqa: PLC0415 - nbgrader's own module

        super().export(gradebook)
        dest = self.to or "grades.csv"  # (nbgrader's default)
        with open(dest, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        if not rows:
            return
        header, body = rows[0], rows[1:]
        where = {name: header.index(name) for name in ("assignment", "student_id")}
        out = [header + list(EXTRA_COLUMNS)]
        for row in body:
            try:
                submission = gradebook.find_submission(row[where["assignment"]], row[where["student_id"]])
            except MissingEntry:  # no submission: nothing autograded, nothing written
                out.append(row + ["0.0", "0.0", str(written_maximum(gradebook, row[where["assignment"]]))])
                continue
            out.append(row + [str(round(x, 4)) for x in split_score(submission)])
        with open(dest, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(out)


def grade_by_hand(gradebook, assignment: str, student: str, notebook: str, cell: str, points: float,
                  comment: str) -> None:
    """What formgrader does when an instructor grades a written answer: the points as the manual score (it is
    graded now), the comment as the manual comment. `gradebook` is an open nbgrader Gradebook."""
    grade = gradebook.find_grade(cell, notebook, assignment, student)
    grade.manual_score = float(points)
    grade.needs_manual_grade = False
    gradebook.find_comment(cell, notebook, assignment, student).manual_comment = comment
    gradebook.db.commit()


def written_maximum(gb, assignment: str) -> float:
    """The points of `assignment`'s written answers in the open gradebook `gb`."""
    return float(sum(c.max_score for nb in gb.find_assignment(assignment).notebooks for c in nb.grade_cells
                     if is_written(c)))


def written_scores(gb, assignment: str, students) -> tuple[dict, float]:
    """({student: their written points, or None while an answer waits for a grader}, the written maximum) of
    `assignment` in the open gradebook `gb` (a student without a submission: 0, as in the CSV)."""
    from nbgrader.api import MissingEntry  # noqa: PLC0415 - nbgrader's own module

    points: dict = {}
    for student in students:
        try:
            grades = [g for nb in gb.find_submission(assignment, student).notebooks for g in nb.grades
                      if is_written(g.cell)]
        except MissingEntry:  # nothing submitted: nothing to grade
            points[student] = 0.0
            continue
        waiting = any(g.needs_manual_grade or needs_review(g.manual_score, g.auto_score, written=True) for g in grades)
        points[student] = None if waiting else float(sum(g.score or 0.0 for g in grades))
    return points, written_maximum(gb, assignment)
