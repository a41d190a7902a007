"""What `nbgrader autograde` (the course's configuration) makes of a submitted file that is odd but not hostile, on one
notebook (01_scores) of a small class, checked against `python -m autograder grade` of the same file (issue 45).

Claims: a cell pasted twice (a written answer, a graded cell, a solution cell) or two cells given one grade_id cost
that cell, not the run: it ends with status 0, the students after that one are graded as they would be alone, the
student who pasted is graded on everything else, the real cell is kept, no cell earns its points twice and the code
graded is the code `grade` grades; the instructor's log and the student's feedback say so. The cap on a notebook's JSON
values counts the submitted file in both paths: a notebook just under it scores the same in both, one over it 0 in
both with the same sentence.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from autograder.foundation import i18n
from autograder.foundation.extract import MAX_NOTEBOOK_VALUES, TOO_MANY_VALUES, json_values
from autograder.foundation.spec import ASSIGNMENT
from examples.make_class import collect, nbgrader
from tests.runcache import released_course

NOTEBOOK = "01_scores"
PARTS = ("qkv_projection", "scaled_scores")  # 10 and 15 points
ANSWER = "The raw weights climb towards one as d_k grows: the variance of the dot product is d_k."
BUG = ("Q @ K.transpose(-2, -1) / math.sqrt(d_k)", "Q @ K.transpose(-2, -1)")  # (no scaling: scaled_scores fails)
# ann pastes her written answer; bob, after her, is honest; cat gives two written cells one grade_id; dan pastes the
# graded cell qkv_projection above itself and a copy of a solution cell, with a bug, below it; near and over pad their
# notebook with empty markdown cells to just under and just over the cap.
STUDENTS = ("ann", "bob", "cat", "dan", "near", "over")


def path_of(root: Path, student: str) -> Path:
    return root / "submitted" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb"


def index_of(nb: dict, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb["cells"]) if (c["metadata"].get("nbgrader") or {}).get("grade_id") == grade_id)


def pasted(nb: dict, grade_id: str, where: int, source: str | None = None) -> int:
    """A copy of the cell `grade_id` (a new cell id, as JupyterLab gives it) at `where`; its position from 1."""
    cell = copy.deepcopy(nb["cells"][index_of(nb, grade_id)])
    cell["id"] = f"pasted-{grade_id}"
    if source is not None:
        cell["source"] = source
    nb["cells"].insert(where, cell)
    return where + 1


def padded(nb: dict, values: int) -> dict:
    """`nb` with as many empty markdown cells as keep its JSON at most `values` values (json.dumps). The count is
    linear in the cells on either side of the cap (json_values counts strings' commas only under it): a few steps
    along the line find it, checked at the end (one cell more would go over)."""
    cell = {"cell_type": "markdown", "metadata": {}, "source": ""}

    def counted(cells: int) -> int:
        return json_values(json.dumps({**nb, "cells": nb["cells"] + [cell] * cells}).encode())

    cells = 0
    for _ in range(20):
        now, step = counted(cells), counted(cells + 1) - counted(cells)
        if now <= values < now + step:
            break
        cells = max(0, cells + (values - now) // step)
    assert counted(cells) <= values < counted(cells + 1), (cells, values)
    return {**nb, "cells": nb["cells"] + [dict(cell) for _ in range(cells)]}


def edit(root: Path, student: str) -> dict:
    """The student's odd notebook, written in place of the collected one; what was done (positions from 1)."""
    nb = json.loads(path_of(root, student).read_text())
    done: dict = {}
    if student == "ann":
        nb["cells"][index_of(nb, "written_scale_prediction")]["source"] = ANSWER
        nb["cells"][index_of(nb, "written_scale_sqrt")]["source"] = ANSWER
        done["copy"] = pasted(nb, "written_scale_prediction", index_of(nb, "written_scale_prediction") + 1)
    elif student == "cat":
        nb["cells"][index_of(nb, "written_scale_sqrt")]["metadata"]["nbgrader"]["grade_id"] = "written_scale_prediction"
    elif student == "dan":
        done["graded copy"] = pasted(nb, "qkv_projection", index_of(nb, "qkv_projection"))
        solution = nb["cells"][index_of(nb, "solution_scaled_scores")]
        assert BUG[0] in solution["source"]
        done["solution copy"] = pasted(nb, "solution_scaled_scores", index_of(nb, "solution_scaled_scores") + 1,
                                       solution["source"].replace(*BUG))
    elif student in ("near", "over"):
        nb = padded(nb, MAX_NOTEBOOK_VALUES - 20_000 if student == "near" else MAX_NOTEBOOK_VALUES + 20_000)
    path_of(root, student).write_text(json.dumps(nb))
    return done


@pytest.fixture(scope="module")
def course(private_tmp):
    """The class, autograded once by nbgrader: (course, {student: what was done}, nbgrader's process)."""
    root = released_course(private_tmp / "submitted" / "course")
    collect(root, dict.fromkeys(STUDENTS, "correct"))
    done = {student: edit(root, student) for student in STUDENTS}
    proc = nbgrader(root, "autograde", ASSIGNMENT, "--notebook", NOTEBOOK, check=False, timeout=300)
    return root, done, proc


@pytest.fixture(scope="module")
def by_grade(course, grader):
    """`python -m autograder grade` of each student's 01_scores: {student: {part: (score, its text)}}."""
    root = course[0]
    results = {s: grader.grade(path_of(root, s), part_ids=list(PARTS)) for s in STUDENTS}
    return {s: {p: (r.part(p).score, json.dumps([c.message for c in r.part(p).checks] + list(r.part(p).notes)))
                for p in PARTS} for s, r in results.items()}


def gradebook(root: Path) -> dict:
    """{(student, grade_id): (auto_score, needs_manual_grade)} of 01_scores."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        return {(s, g.name): (g.auto_score, g.needs_manual_grade) for s in STUDENTS
                for g in gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, s).grades}


def autograded(root: Path, student: str) -> dict:
    return json.loads((root / "autograded" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb").read_text())


def cells_of(nb: dict, grade_id: str) -> list[dict]:
    return [c for c in nb["cells"] if (c["metadata"].get("nbgrader") or {}).get("grade_id") == grade_id]


def test_a_pasted_cell_leaves_the_run_at_status_0_and_every_student_graded(course):
    root, _, proc = course
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = gradebook(root)
    assert all(rows[(s, p)][0] is not None for s in STUDENTS for p in PARTS), rows


def test_the_honest_student_after_the_one_who_pasted_scores_as_grade_scores_her(course, by_grade):
    rows = gradebook(course[0])
    assert {p: rows[("bob", p)][0] for p in PARTS} == {"qkv_projection": 10.0, "scaled_scores": 15.0}
    assert {p: rows[("bob", p)][0] for p in PARTS} == {p: by_grade["bob"][p][0] for p in PARTS}


def test_the_student_who_pasted_a_written_answer_keeps_the_original_and_her_other_answers(course):
    root, done, proc = course
    rows, nb = gradebook(root), autograded(root, "ann")
    assert {p: rows[("ann", p)][0] for p in PARTS} == {"qkv_projection": 10.0, "scaled_scores": 15.0}
    kept = cells_of(nb, "written_scale_prediction")
    assert [c["id"] for c in kept] == ["19-written-scale-prediction"]
    assert "nbgrader" not in nb["cells"][done["ann"]["copy"] - 1]["metadata"]
    # both her answers wait for the instructor (an answer left as released would score 0 by itself)
    assert rows[("ann", "written_scale_prediction")] == (None, True)
    assert rows[("ann", "written_scale_sqrt")] == (None, True)
    sentence = (f"{NOTEBOOK}.ipynb: cell {done['ann']['copy']} repeats the grade_id written_scale_prediction of another "
                "cell (a copy pasted in the notebook?)")
    assert sentence in proc.stderr and "student ann" in proc.stderr
    assert sentence in json.dumps([c.get("outputs", []) for c in nb["cells"]])


def test_two_written_cells_given_one_grade_id_keep_the_released_one_and_the_rest_is_graded(course):
    root = course[0]
    rows, nb = gradebook(root), autograded(root, "cat")
    assert {p: rows[("cat", p)][0] for p in PARTS} == {"qkv_projection": 10.0, "scaled_scores": 15.0}
    assert [c["id"] for c in cells_of(nb, "written_scale_prediction")] == ["19-written-scale-prediction"]


def test_a_pasted_graded_cell_earns_its_points_once_and_a_pasted_solution_cell_is_graded_as_grade_grades_it(
        course, by_grade):
    root, done, _ = course
    rows, nb = gradebook(root), autograded(root, "dan")
    graded = [c for c in nb["cells"] if any(o.get("output_type") == "execute_result" for o in c.get("outputs", []))]
    assert [c["id"] for c in graded if "qkv" in c["id"]] == ["13-qkv-projection"]
    assert [c["id"] for c in cells_of(nb, "qkv_projection")] == ["13-qkv-projection"]
    assert "nbgrader" not in nb["cells"][done["dan"]["graded copy"] - 1]["metadata"]
    # the copy of the solution, with its bug, below the original: graded where it stands, in both paths
    assert by_grade["dan"]["scaled_scores"][0] < 15
    assert {p: rows[("dan", p)][0] for p in PARTS} == pytest.approx({p: by_grade["dan"][p][0] for p in PARTS},
                                                                     abs=1e-3)
    assert rows[("dan", "qkv_projection")][0] == 10.0


def test_a_notebook_just_under_the_value_cap_scores_full_marks_in_grade_and_in_nbgrader(course, by_grade):
    root = course[0]
    assert MAX_NOTEBOOK_VALUES - 21_000 < json_values(path_of(root, "near").read_bytes()) <= MAX_NOTEBOOK_VALUES
    rows = gradebook(root)
    assert {p: by_grade["near"][p][0] for p in PARTS} == {"qkv_projection": 10.0, "scaled_scores": 15.0}
    assert {p: rows[("near", p)][0] for p in PARTS} == {"qkv_projection": 10.0, "scaled_scores": 15.0}


def test_a_notebook_over_the_value_cap_scores_0_in_both_with_the_same_sentence(course, by_grade):
    root = course[0]
    assert json_values(path_of(root, "over").read_bytes()) > MAX_NOTEBOOK_VALUES
    sentence = i18n.render(TOO_MANY_VALUES.format(name=f"{NOTEBOOK}.ipynb", count=MAX_NOTEBOOK_VALUES))
    rows = gradebook(root)
    feedback = json.dumps([c.get("outputs", []) for c in autograded(root, "over")["cells"]])
    for part in PARTS:
        assert by_grade["over"][part][0] == 0 and rows[("over", part)][0] == 0
        assert sentence in by_grade["over"][part][1]
    assert sentence in feedback


def cell(grade_id: str, cid: str, kind: str = "code", **flags) -> dict:
    return {"cell_type": kind, "id": cid, "source": "", "metadata": {"nbgrader": {"grade_id": grade_id, **flags}}}


def test_without_the_released_id_the_first_cell_of_a_grade_id_is_kept_and_an_ordinary_cell_is_never_a_copy():
    from autograder.commands.duplicates import Copy, copies

    cells = [cell("a", "x", solution=True), {"cell_type": "code", "id": "p", "source": "", "metadata": {}},
             cell("a", "y", solution=True), cell("b", "z", kind="markdown", grade=True, solution=True),
             cell("b", "w", kind="markdown", grade=True, solution=True), cell("c", "v")]  # (c: no flag, not checked)
    assert copies(cells, {}) == (Copy(3, "a", True), Copy(5, "b", False))
    assert copies(cells, {"a": "y", "b": "nothing"}) == (Copy(1, "a", True), Copy(5, "b", False))


def test_a_submitted_file_cannot_mark_its_own_cells_as_copies_or_give_itself_notes():
    from nbformat import from_dict

    from autograder.commands.duplicates import COPY_KEY, DUPLICATES_KEY, DropDuplicateCells

    forged = cell("solution_x", "x", solution=True)
    plain = {"cell_type": "code", "id": "p", "source": "", "metadata": {COPY_KEY: "solution_x"}}
    nb = from_dict({"cells": [forged, plain], "metadata": {DUPLICATES_KEY: [{"cell": 1, "grade_id": "x"}]}})
    nb, _ = DropDuplicateCells().preprocess(nb, {})
    assert DUPLICATES_KEY not in nb.metadata and COPY_KEY not in nb.cells[1].metadata
    assert nb.cells[0].metadata.nbgrader.grade_id == "solution_x"


def test_a_cell_without_an_id_is_not_taken_for_the_released_one_and_odd_notes_are_ignored():
    from nbformat import from_dict

    from autograder.commands.duplicates import DUPLICATES_KEY, Copy, copies, duplicate_notes

    first, second = cell("a", "x", solution=True), cell("a", "y", solution=True)
    del second["id"]
    assert copies([first, second], {}) == (Copy(2, "a", True),)
    assert duplicate_notes(from_dict({"cells": [], "metadata": {DUPLICATES_KEY: 5}}), "n.ipynb") == []


def test_the_course_configuration_validates_a_notebook_once_per_pass_not_after_every_preprocessor():
    """(nbconvert's per-preprocessor validation took most of the time of a notebook just under the cap.)"""
    from traitlets.config import Config

    from autograder import nbgrader_plugin
    from autograder.commands.feedbackpage import FeedbackExporter
    from autograder.commands.nbgraderread import TolerantNotebookExporter

    config = Config()
    nbgrader_plugin.configure(config)
    assert TolerantNotebookExporter(config=config).optimistic_validation
    assert FeedbackExporter(config=config).optimistic_validation
