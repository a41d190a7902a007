"""grade-class: a whole nbgrader class graded in parallel, resumable, never stopped by a bad submission,
writing the gradebook one transaction per submission."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


from autograder.foundation.spec import ASSIGNMENT, PARTS
from examples.make_class import collect, own_file
from tests.runcache import released_course

REPO = Path(__file__).resolve().parent.parent
STUDENTS = {"good": "correct", "jo": "corrupt", "miss": "missing"}


def auto_scores(course: Path) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {(s, p.id): gb.find_grade(p.id, p.notebook, ASSIGNMENT, s).auto_score
                for s in STUDENTS for p in PARTS}


@pytest.fixture(scope="module")
def course(private_tmp):
    root = released_course(private_tmp / "classgrade" / "course")  # (make_course, built once per run)
    collect(root, STUDENTS)
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade-class", str(root), "--workers", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    root.joinpath("first-run.txt").write_text(proc.stdout)
    return root



def report(course: Path, student: str) -> dict:
    return json.loads((course / "autograder_reports" / ASSIGNMENT / f"{student}.json").read_text())


def test_cli_grades_every_student_and_prints_the_summary_table(course):
    out = course.joinpath("first-run.txt").read_text()
    assert "graded 3" in out and "errors 0" in out
    for student in STUDENTS:
        assert student in out


def test_bad_submissions_get_zeros_with_a_message_and_the_rest_full_marks(course):
    scores = auto_scores(course)
    for p in PARTS:
        assert scores[("good", p.id)] == p.points
    jo = {p["id"]: p for p in report(course, "jo")["parts"]}
    assert scores[("jo", "masks")] == 0 and "could not be read" in json.dumps(jo["masks"])
    assert all(scores[("jo", p.id)] == p.points for p in PARTS if p.notebook != "02_masks")
    miss = {p["id"]: p for p in report(course, "miss")["parts"]}
    assert scores[("miss", "long_sequence")] == 0 and "was not submitted" in json.dumps(miss["long_sequence"])


def test_unchanged_submissions_are_skipped_changed_ones_regraded_and_force_regrades_all(course, grader):
    from autograder.commands.classgrade import Settings, grade_class

    before = auto_scores(course)
    again = grade_class(course, settings=Settings(progress=False), grader=grader)
    assert {o.status for o in again} == {"skipped"}
    assert auto_scores(course) == before
    # jo fixes the corrupt notebook (the right code, in jo's own file: a copy of good's file would be refused):
    # only jo is graded again
    good = course / "submitted" / "good" / ASSIGNMENT / "02_masks.ipynb"
    (course / "submitted" / "jo" / ASSIGNMENT / "02_masks.ipynb").write_text(own_file(good.read_text(), "jo"))
    third = {o.student: o.status for o in grade_class(course, settings=Settings(progress=False), grader=grader)}
    assert third == {"good": "skipped", "jo": "graded", "miss": "skipped"}
    assert auto_scores(course)[("jo", "masks")] == next(p.points for p in PARTS if p.id == "masks")
    forced = grade_class(course, settings=Settings(progress=False, force=True), grader=grader)
    assert {o.status for o in forced} == {"graded"}


def test_a_failure_while_writing_leaves_the_submission_as_it_was(course, monkeypatch):
    from autograder.commands import gradebook
    from autograder.foundation.results import PartResult

    before = auto_scores(course)
    zeros = [PartResult(p.id, p.points) for p in PARTS]

    def boom(*_args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(gradebook, "_answered", boom)  # runs after the grades were set
    with pytest.raises(RuntimeError):
        gradebook.write_part_grades(gradebook.Location(f"sqlite:///{course / 'gradebook.db'}", "self_attention_course"),
                                    ASSIGNMENT, "good", course / "submitted" / "good" / ASSIGNMENT, zeros)
    assert auto_scores(course) == before


def test_a_forced_run_opens_the_gradebook_once_for_all_its_writes(course, grader, monkeypatch):
    from autograder.commands import gradebook
    from autograder.commands.classgrade import Settings, grade_class

    opened = []
    connect = gradebook.connect
    monkeypatch.setattr(gradebook, "connect", lambda location: opened.append(location) or connect(location))
    before = auto_scores(course)
    forced = grade_class(course, settings=Settings(progress=False, force=True), grader=grader)
    assert [o.status for o in forced] == ["graded"] * len(STUDENTS)
    assert len(opened) == 1, f"{len(opened)} gradebook connections for one run of {len(STUDENTS)} writes"
    assert auto_scores(course) == before


def test_after_a_failed_write_the_writer_opens_a_new_connection_and_the_next_write_lands(course, monkeypatch):
    from autograder.commands import gradebook
    from autograder.foundation.results import PartResult

    location = gradebook.Location(f"sqlite:///{course / 'gradebook.db'}", "self_attention_course")
    before = auto_scores(course)
    zeros = [PartResult(p.id, p.points) for p in PARTS]
    folder = course / "submitted" / "good" / ASSIGNMENT
    answered = gradebook._answered
    calls = []

    def fails_once(*args):
        calls.append(args)
        if len(calls) == 1:
            raise RuntimeError("the connection went away")
        return answered(*args)

    monkeypatch.setattr(gradebook, "_answered", fails_once)
    with gradebook.Writer(location) as writer:
        with pytest.raises(RuntimeError):
            writer.write_part_grades(ASSIGNMENT, "good", folder, zeros)
        assert writer._gb is None, "a failed write left its connection open for the next one"
        assert auto_scores(course) == before
        writer.write_part_grades(ASSIGNMENT, "good", folder, zeros)
    assert all(auto_scores(course)[("good", p.id)] == 0 for p in PARTS)
    with gradebook.opened(location) as gb:  # (as it was, for the tests after this one)
        for (student, part_id), score in before.items():
            notebook = next(p.notebook for p in PARTS if p.id == part_id)
            gb.find_grade(part_id, notebook, ASSIGNMENT, student).auto_score = score
        gb.db.commit()
    assert auto_scores(course) == before


def test_a_folder_without_a_released_assignment_exits_2_and_says_what_to_do(private_tmp):
    folder = private_tmp / "not-a-course"
    (folder / "submitted" / "x" / ASSIGNMENT).mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade-class", str(folder)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "generate_assignment" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def test_grade_class_writes_the_class_report_next_to_the_students_reports_and_prints_its_path(course):
    page = course.resolve() / "autograder_reports" / ASSIGNMENT / "class_report.html"
    assert f"class report: {page}" in course.joinpath("first-run.txt").read_text()
    text = page.read_text(encoding="utf-8")
    assert 'src="data:image/svg+xml;base64,' in text
    for student in STUDENTS:
        assert f'href="{student}.json"' in text
