"""`make demo`'s example class of `real_models` (examples/class/real_models.json): the students who register their
attention the practitioner's way (AttentionInterface plus a mask function) with a typical mistake lose
`attention_interface` only, each with its cause named, and keep every other part at the reference's points.
Graded from their notebooks (examples/make_class.py's edits of the released solutions) by the session's warm grader.

Alone: .venv/bin/python -m pytest -q -n 0 tests/test_example_class.py
"""
from __future__ import annotations

import pytest

from autograder.foundation import spec
from examples.make_class import REAL_MODELS_MISTAKES, collect, example_class

ASSIGNMENT = "real_models"
# the registration mistakes of the class -> words that one failed check of attention_interface must contain
CAUSES = {"iface_no_mask_function": "received attention_mask=None on a causal batch",
          "iface_flex_mask": "you registered flex_attention_mask"}


@pytest.fixture(scope="module")
def graded(repo_course, grader) -> dict:
    """mistake -> the grade of the class's first student making it (and "correct": the reference's)."""
    students = {}
    for student, mistake in example_class(ASSIGNMENT).items():
        if mistake == "correct" or mistake in CAUSES:
            students.setdefault(mistake, student)
    collect(repo_course, {s: m for m, s in students.items()}, ASSIGNMENT)
    return {m: grader.grade(repo_course / "submitted" / s / ASSIGNMENT, assignment=spec.assignment(ASSIGNMENT))
            for m, s in students.items()}


def test_the_class_holds_a_student_for_each_registration_mistake():
    students = example_class(ASSIGNMENT)
    assert set(CAUSES) <= set(students.values()) and "correct" in students.values(), students
    for mistake in CAUSES:  # each edits the attention_interface notebook only
        assert {edit[0] for edit in REAL_MODELS_MISTAKES[mistake][1]} == {"04_interface"}, mistake


@pytest.mark.parametrize("mistake", sorted(CAUSES))
def test_a_registration_mistake_costs_attention_interface_only_and_names_its_cause(graded, mistake):
    reference = {p.id: (p.score, p.max_score) for p in graded["correct"].parts}
    assert reference["attention_interface"][0] == reference["attention_interface"][1], "the reference lost points"
    result = graded[mistake]
    for part in result.parts:
        if part.id == "attention_interface":
            assert part.score < reference[part.id][0], f"{mistake}: attention_interface kept {part.score}"
        else:
            assert part.score == pytest.approx(reference[part.id][0]), (mistake, part.id, part.score)
    failed = [c.message for c in result.part("attention_interface").checks if not c.passed]
    assert any(CAUSES[mistake] in message for message in failed), failed
