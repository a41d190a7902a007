"""What `nbgrader autograde` (the course's configuration) makes of a submitted file that is odd but not hostile, on one
notebook (01_scores) of a small class, checked against `python -m autograder grade` of the same file (issue 45).

Claims: the cap on a notebook's JSON values counts the submitted file in both paths: a notebook just under it scores
the same in both, one over it 0 in both with the same sentence.
"""
from __future__ import annotations

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
# near and over pad their notebook with empty markdown cells to just under and just over the cap.
STUDENTS = ("near", "over")


def path_of(root: Path, student: str) -> Path:
    return root / "submitted" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb"


def padded(nb: dict, values: int) -> dict:
    """`nb` with as many empty markdown cells as keep its JSON at most `values` values (json.dumps)."""
    cell, low, high = {"cell_type": "markdown", "metadata": {}, "source": ""}, 0, values
    while low < high:
        mid = (low + high + 1) // 2
        fits = json_values(json.dumps({**nb, "cells": nb["cells"] + [cell] * mid}).encode()) <= values
        low, high = (mid, high) if fits else (low, mid - 1)
    return {**nb, "cells": nb["cells"] + [dict(cell) for _ in range(low)]}


def edit(root: Path, student: str) -> dict:
    """The student's odd notebook, written in place of the collected one; what was done (positions from 1)."""
    nb = json.loads(path_of(root, student).read_text())
    done: dict = {}
    if student in ("near", "over"):
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
