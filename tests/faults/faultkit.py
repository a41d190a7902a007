"""What the fault-injection suite's tests share: the class, and the gradebook as plain data.
Not a test module; tests/faults/conftest.py and the tests import it."""
from __future__ import annotations

from pathlib import Path

STUDENTS = {"ada": "correct", "bob": "no_scale", "jo": "corrupt"}


def dump(db_url: str) -> dict:
    """Everything grading writes to a gradebook, as plain data: per student, the submission's timestamp
    and each notebook's grades and comments (ids and creation times left out)."""
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(db_url, "self_attention_course") as gb:
        for student in gb.students:
            for sub in student.submissions:
                out[(student.id, sub.assignment.name)] = {
                    "timestamp": str(sub.timestamp),
                    "grades": sorted((nb.notebook.name, g.name, g.auto_score, g.manual_score, g.extra_credit,
                                      g.needs_manual_grade) for nb in sub.notebooks for g in nb.grades),
                    "comments": sorted((nb.notebook.name, c.name, c.auto_comment) for nb in sub.notebooks
                                       for c in nb.comments)}
    return out


def sqlite_url(course: Path) -> str:
    return f"sqlite:///{course / 'gradebook.db'}"


class MemoGrader:
    """A warm grader that grades each distinct submission once: the faults are in the gradebook, the
    locks and the processes, not in the checks, and every copy of the class holds the same three
    submissions. grade-class's code (the queue, the writes, the resumption) runs unchanged around it."""

    def __init__(self, grader):
        self.grader = grader
        self.seen: dict = {}

    def grade(self, submission, **kwargs):
        from autograder.commands.resume import submission_hash

        path = Path(submission.path)  # (grade_folder hands over the submission it extracted)
        key = (path.name, submission_hash(path), repr(sorted(kwargs.items(), key=str)))
        if key not in self.seen:
            self.seen[key] = self.grader.grade(submission, **kwargs)
        return self.seen[key]


def resume(course: Path, grader) -> list:
    """Run grade-class again, as an instructor does after a fault (a warm grader, in this process)."""
    from autograder.commands.classgrade import Settings, grade_class

    return grade_class(course, settings=Settings(progress=False), grader=grader)
