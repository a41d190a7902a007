"""nbgrader end to end, on the real source/ notebooks of three assignments (self_attention, generation, and serving,
whose checks run the student's layers inside the grader's model and caches): generate_assignment, autograde
with this grader's preprocessor, generate_feedback, export; and grade-class on the same submissions.

Claims: the gradebook's per-part scores equal `Grader().grade(folder)` (the CLI's grading of the
same folder), and grade-class writes the same rows as `nbgrader autograde`.
"""
from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import pytest

from autograder.foundation import spec
from course.content.written import written_points
from examples.make_class import collect, nbgrader, repo_source
from tests.runcache import released_course

REPO = Path(__file__).resolve().parent.parent
# assignment -> {student: mistake}, and the part (with its notebook) the buggy student's mistake is in
STUDENTS = {"self_attention": {"good": "correct", "buggy": "seed_broadcast"},
            "generation": {"good": "correct", "buggy": "top_left_decode"},
            "serving": {"good": "correct", "buggy": "sample_first_token"}}
BUGGY_PART = {"self_attention": "masks", "generation": "kv_cache", "serving": "continuous_batching"}
ASSIGNMENTS = list(STUDENTS)


def rows(db: Path, assignment: str) -> dict:
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(f"sqlite:///{db}") as gb:
        for student in STUDENTS[assignment]:
            sub = gb.find_submission(assignment, student)
            for nb in sub.notebooks:
                for g in nb.grades:
                    out[(student, nb.name, g.name)] = (g.auto_score, g.needs_manual_grade)
                for c in nb.comments:
                    out[(student, nb.name, "comment:" + c.name)] = c.auto_comment
    return out


@pytest.fixture(scope="module")
def course(private_tmp):
    for assignment in ASSIGNMENTS:
        assert repo_source(assignment=assignment) is not None, f"source/{assignment}/ is missing: run `make release`"
    root = released_course(private_tmp / "e2e" / "course", tuple(ASSIGNMENTS))  # (make_course, once per run)
    for assignment in ASSIGNMENTS:
        collect(root, STUDENTS[assignment], assignment)
    shutil.copy(root / "gradebook.db", root.parent / "fresh-gradebook.db")
    # every assignment in one nbgrader process each (the assignment id is a glob): one warm grading process, not three
    nbgrader(root, "autograde", "*")
    # the page read below, and every notebook of each assignment rendered (the buggy student's others are correct);
    # the good student's pages would cost a second each and prove nothing more
    nbgrader(root, "generate_feedback", "*", "--student=buggy")
    nbgrader(root, "export", "--to", str(root / "grades.csv"))
    return root


@pytest.fixture(scope="module")
def cli_results(course, grader):
    return {(a, s): grader.grade(course / "submitted" / s / a, assignment=spec.assignment(a))
            for a in ASSIGNMENTS for s in STUDENTS[a]}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_buggy_student_loses_points_only_where_the_bug_is(cli_results, assignment):
    good, buggy, bug = cli_results[(assignment, "good")], cli_results[(assignment, "buggy")], BUGGY_PART[assignment]
    assert good.score == spec.assignment(assignment).max_score
    assert buggy.part(bug).score < buggy.part(bug).max_score
    assert all(p.score == p.max_score for p in buggy.parts if p.id != bug)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_gradebook_per_part_scores_equal_the_cli_on_the_same_folder(course, cli_results, assignment):
    got = rows(course / "gradebook.db", assignment)
    for student in STUDENTS[assignment]:
        result = cli_results[(assignment, student)]
        for part in spec.assignment(assignment).parts:
            auto, manual = got[(student, part.notebook, part.id)]
            assert auto == pytest.approx(result.part(part.id).score, abs=1e-3), (student, part.id)
            assert manual is False


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_feedback_shows_the_graders_messages_and_no_hidden_test_source(course, cli_results, assignment):
    bug = spec.assignment(assignment).part(BUGGY_PART[assignment])
    html = (course / "feedback" / "buggy" / assignment / f"{bug.notebook}.html").read_text()
    failing = [c for c in cli_results[(assignment, "buggy")].part(bug.id).checks if not c.passed]
    assert failing
    import html as htmllib

    text = htmllib.unescape(html)
    for c in failing:
        assert c.name in text and c.message.splitlines()[0] in text
    hidden = spec.assignment(assignment).check_file(bug).read_text()
    for line in hidden.splitlines():
        line = line.strip()
        if len(line) > 30 and re.match(r"(def test_|assert |student\.|expect)", line):
            assert line not in text, f"hidden check source leaked into feedback: {line}"


def test_export_writes_the_totals_of_every_assignment_and_the_written_points_apart(course, cli_results):
    with open(course / "grades.csv", newline="") as f:
        table = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(f)}
    for (assignment, student), result in cli_results.items():
        assert float(table[(assignment, student)]["raw_score"]) == pytest.approx(result.score, abs=1e-3)
        # nbgrader's maximum: the autograded parts' and the written questions' (graded by hand: 0 here, unanswered)
        assert float(table[(assignment, student)]["max_score"]) == (spec.assignment(assignment).max_score
                                                                    + written_points(assignment))
        assert float(table[(assignment, student)]["autograded_score"]) == pytest.approx(result.score, abs=1e-3)
        assert float(table[(assignment, student)]["written_score"]) == 0.0


def test_grade_class_writes_the_same_rows_as_nbgrader_autograde(course, grader, private_tmp):
    from autograder.commands.classgrade import Settings, grade_class

    copy = private_tmp / "copy" / "course"
    shutil.copytree(course, copy, ignore=shutil.ignore_patterns("autograded", "feedback", "gradebook.db"))
    shutil.copy(course.parent / "fresh-gradebook.db", copy / "gradebook.db")
    cfg = copy / "nbgrader_config.py"
    cfg.write_text(cfg.read_text().replace(str(course), str(copy)))
    for assignment in ASSIGNMENTS:
        outcomes = grade_class(copy, assignment, settings=Settings(progress=False), grader=grader)
        assert {o.student: o.status for o in outcomes} == {s: "graded" for s in STUDENTS[assignment]}
        assert rows(copy / "gradebook.db", assignment) == rows(course / "gradebook.db", assignment)


@pytest.mark.parametrize("score, expected", [(0.0, 0.0), (7.25, 7.25), (15.0, 15.0), (15.0000001, 15.0),
                                             (-1e-9, 0.0)])
def test_nbgrader_reads_back_the_score_the_preprocessor_writes(score, expected):
    """nbgrader's determine_grade turns 0 into 0 (not full marks) and never sees a value above the points."""
    from nbformat import from_dict
    from nbgrader.utils import determine_grade

    from autograder.nbgrader_plugin import annotate
    from autograder.foundation.results import CheckResult, PartResult

    nb = {"cells": [{"cell_type": "code", "source": "", "outputs": [], "execution_count": None,
                     "metadata": {"nbgrader": {"grade": True, "solution": False, "grade_id": "masks",
                                               "points": 15, "locked": True}}}]}
    part = PartResult("masks", 15, (CheckResult("a check", score >= 15, score, 15, "" if score >= 15 else "why"),))
    annotate(nb, {"masks": part}, [])
    got, points = determine_grade(from_dict(nb["cells"][0]))
    assert (got, points) == (pytest.approx(expected), 15.0)
    assert all(o.get("name") != "stderr" for o in nb["cells"][0]["outputs"])
