"""A submission's notebooks must be the student's own files (docs/security.md, "Submitted files": the security
issue's symbolic links). In a course made by examples/make_class.py (nbgrader generate_assignment, the course's
nbgrader_config.py with the grader's plugin), the class:

    ada      01_scores and 02_masks solved (honest)
    linker   every notebook a symbolic link to the instructor's source/self_attention/<notebook> (the attack: it
             scored full marks and nbgrader's feedback showed every solution)
    thief    01_scores a symbolic link to ada's 01_scores; 02_masks solved (their own)
    copier   01_scores a copy (cp) of the source notebook; 02_masks a copy of ada's 02_masks (byte for byte)
    idle1, idle2   01_scores the released notebook, untouched: byte for byte alike, and nobody copied anybody
    hub      collected by `nbgrader collect` from the exchange, where the student made 01_scores a link to the
             instructor's source after `nbgrader submit`

Claims, for `grade`, `grade-class` and `nbgrader autograde`: a link out of the submission's folder is not
followed (a link inside it is); a notebook that still carries the source's solution markers scores 0 with the
reason; one that is the same file as another student's changed notebook keeps its points and is flagged for the
instructor's review on both sides (issue 45: byte identity proves nothing by itself); the student's other notebooks
are graded; the untouched release is never a copy; nbgrader's collect keeps links as links; no feedback shows a
solution.
tests/test_unprivileged.py runs this file again as an ordinary user.
"""
from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pytest

from autograder.commands import cli
from autograder.foundation import spec
from autograder.foundation.extract import extract
from examples.make_class import TIMESTAMP, nbgrader, solved
from tests.runcache import released_course

REPO = Path(__file__).resolve().parent.parent
A = spec.DEFAULT  # self_attention
SCORES, MASKS = "01_scores", "02_masks"
NOTEBOOKS = (SCORES, MASKS)
STUDENTS = ("ada", "linker", "thief", "copier", "idle1", "idle2", "hub")
COURSE_ID = "self_attention_course"  # nbgrader_config.py
SOLUTION_LINE = "Q @ K.transpose(-2, -1) / math.sqrt(d_k)"  # (in source/self_attention/01_scores's solution)
EXCHANGE_TIMESTAMP = "2026-11-30 10:00:00.000000 UTC"


def parts_of(notebook: str) -> list[str]:
    return [p.id for p in A.parts_of(notebook)]


def write(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.ipynb").write_text(text, encoding="utf-8")


def link(folder: Path, name: str, target: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.ipynb").symlink_to(target)


def own(course: Path, name: str, student: str) -> str:
    nb = solved(course, name)
    nb["metadata"]["example"] = {"student": student}
    return json.dumps(nb, indent=1)


def hub_submission(course: Path) -> None:
    """The student's inbound folder in the exchange after `nbgrader submit`, the notebook replaced by a link to the
    instructor's source; then the instructor's `nbgrader collect` under the course's configuration."""
    exchange = course.parent / "exchange"
    inbound = exchange / COURSE_ID / "inbound" / f"hub+{A.id}+{EXCHANGE_TIMESTAMP}"
    link(inbound, SCORES, course / "source" / A.id / f"{SCORES}.ipynb")
    write(inbound, MASKS, own(course, MASKS, "hub"))
    inbound.joinpath("timestamp.txt").write_text(EXCHANGE_TIMESTAMP)
    nbgrader(course, "collect", A.id, f"--Exchange.root={exchange}")


@pytest.fixture(scope="module")
def course(private_tmp):
    root = released_course(private_tmp / "links" / "course")
    sub = root / "submitted"
    source = root / "source" / A.id
    release = (root / "release" / A.id / f"{SCORES}.ipynb").read_text(encoding="utf-8")
    for name in NOTEBOOKS:
        write(sub / "ada" / A.id, name, own(root, name, "ada"))
    for name in A.notebooks:
        link(sub / "linker" / A.id, name, source / f"{name}.ipynb")
    link(sub / "thief" / A.id, SCORES, sub / "ada" / A.id / f"{SCORES}.ipynb")
    write(sub / "thief" / A.id, MASKS, own(root, MASKS, "thief"))
    (sub / "copier" / A.id).mkdir(parents=True)
    shutil.copy(source / f"{SCORES}.ipynb", sub / "copier" / A.id / f"{SCORES}.ipynb")
    shutil.copy(sub / "ada" / A.id / f"{MASKS}.ipynb", sub / "copier" / A.id / f"{MASKS}.ipynb")
    for student in ("idle1", "idle2"):
        write(sub / student / A.id, SCORES, release)
    for student in STUDENTS[:-1]:
        (sub / student / A.id / "timestamp.txt").write_text(TIMESTAMP)
    hub_submission(root)
    return root


def notes_of(result) -> str:
    return json.dumps([list(result.notes)] + [[c.message for c in p.checks] for p in result.parts])


# --------------------------------------------------------------------------- reading, and collect
def test_a_link_out_of_the_submission_folder_is_not_read_and_a_link_inside_it_is(course, private_tmp):
    linker = extract(course / "submitted" / "linker" / A.id)
    assert all(s.error is not None and "symbolic link" in str(s.error) for s in linker.sources), linker.sources
    inside = private_tmp / "inside"
    write(inside, SCORES, own(course, SCORES, "me"))
    link(inside, MASKS, Path(f"{SCORES}.ipynb"))  # (an alias of the student's own notebook)
    assert [s.error for s in extract(inside).sources] == [None, None]


def test_nbgrader_collect_under_the_course_config_copies_a_link_as_a_link(course):
    collected = course / "submitted" / "hub" / A.id / f"{SCORES}.ipynb"
    assert collected.is_symlink(), "collect copied what the student's link points to"
    assert (course / "submitted" / "hub" / A.id / f"{MASKS}.ipynb").is_file()


# --------------------------------------------------------------------------- grade
def test_grade_scores_notebooks_linked_to_the_source_0_and_shows_no_solution(course, capsys):
    assert cli.main(["grade", str(course / "submitted" / "linker" / A.id), "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert doc["score"] == 0, doc["score"]
    assert "symbolic link" in out and "outside the submission's folder" in out
    assert "BEGIN SOLUTION" not in out


def test_grade_scores_a_copy_of_the_source_0_and_the_students_own_notebook_in_full(course, private_tmp, capsys):
    folder = private_tmp / "grade-copier" / A.id
    write(folder, MASKS, own(course, MASKS, "copier"))
    shutil.copy(course / "source" / A.id / f"{SCORES}.ipynb", folder / f"{SCORES}.ipynb")
    assert cli.main(["grade", str(folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    parts = {p["id"]: p for p in doc["parts"]}
    for pid in parts_of(SCORES):
        assert parts[pid]["score"] == 0 and "solution markers" in json.dumps(parts[pid]), parts[pid]
    for pid in parts_of(MASKS):
        assert parts[pid]["score"] == parts[pid]["max_score"], parts[pid]


# --------------------------------------------------------------------------- grade-class
@pytest.fixture(scope="module")
def class_results(course, grader):
    from autograder.commands.classgrade import Settings, grade_class

    outcomes = grade_class(course, A.id, settings=Settings(progress=False, force=True), grader=grader)
    return {o.student: o.result for o in outcomes}


def test_grade_class_scores_every_linked_or_copied_notebook_0_with_the_reason(class_results):
    r = class_results
    assert r["linker"].score == 0 and "outside the submission's folder" in notes_of(r["linker"])
    for student, why in (("thief", "symbolic link"), ("hub", "symbolic link"), ("copier", "solution markers")):
        for pid in parts_of(SCORES):
            assert r[student].part(pid).score == 0, (student, pid)
        assert why in notes_of(r[student]), (student, notes_of(r[student]))


def test_grade_class_keeps_the_points_of_copied_notebooks_and_flags_both_naming_the_other_for_the_instructor(
        class_results):
    r = class_results
    for student, other in (("copier", "ada"), ("ada", "copier")):  # the same file as the other's, and changed work
        for pid in parts_of(MASKS):
            part = r[student].part(pid)
            assert part.score == part.max_score, (student, pid)
            assert any("much the same code as another student's" in n for n in part.notes), part.notes
            assert other not in " ".join(part.notes), "the student's note names nobody"
            assert any(f"100% the same code as {other}'s" in why for why in part.review), part.review
    from autograder.commands import classreport

    flagged = {(f.student, f.part) for f in classreport.summarize(A.id, list(r.values())).review}
    assert {(s, pid) for s in ("copier", "ada") for pid in parts_of(MASKS)} <= flagged


def test_grade_class_grades_the_students_other_notebooks_and_never_calls_the_untouched_release_a_copy(
        class_results):
    r = class_results
    for student in ("thief", "hub"):
        for pid in parts_of(MASKS):
            assert r[student].part(pid).score == r[student].part(pid).max_score, (student, pid)
    for pid in parts_of(SCORES):
        assert r["ada"].part(pid).score == r["ada"].part(pid).max_score, pid
    for student in ("idle1", "idle2"):
        assert "much the same code" not in notes_of(r[student]), notes_of(r[student])


# --------------------------------------------------------------------------- nbgrader autograde
@pytest.fixture(scope="module")
def autograded(course, class_results):
    nbgrader(course, "autograde", A.id, "--force")
    nbgrader(course, "generate_feedback", A.id, "--force")
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {(s, p.id): gb.find_grade(p.id, p.notebook, A.id, s).auto_score
                for s in STUDENTS for p in A.parts if p.notebook in NOTEBOOKS}


def feedback(course: Path, student: str, notebook: str) -> str:
    return html.unescape((course / "feedback" / student / A.id / f"{notebook}.html").read_text(encoding="utf-8"))


def test_nbgrader_autograde_scores_linked_and_copied_notebooks_0_and_the_others_in_full(autograded):
    points = {p.id: p.points for p in A.parts}
    zero = [("linker", SCORES), ("linker", MASKS), ("thief", SCORES), ("hub", SCORES), ("copier", SCORES)]
    full = [("ada", SCORES), ("thief", MASKS), ("hub", MASKS), ("copier", MASKS), ("ada", MASKS)]  # (twins: kept)
    for student, nb in zero:
        for pid in parts_of(nb):
            assert autograded[(student, pid)] == 0, (student, pid)
    for student, nb in full:
        for pid in parts_of(nb):
            assert autograded[(student, pid)] == points[pid], (student, pid)


def test_nbgrader_feedback_says_why_and_shows_no_solution(course, autograded):
    assert SOLUTION_LINE in (course / "source" / A.id / f"{SCORES}.ipynb").read_text(encoding="utf-8")
    for student, nb, why in (("linker", SCORES, "symbolic link"), ("hub", SCORES, "symbolic link"),
                             ("copier", SCORES, "solution markers"), ("copier", MASKS, "much the same code"),
                             ("ada", MASKS, "flagged for your instructor to compare")):
        text = feedback(course, student, nb)
        assert why in text, (student, nb)
        assert "BEGIN SOLUTION" not in text and SOLUTION_LINE not in text, (student, nb)
    assert "much the same code as another student" not in feedback(course, "idle1", SCORES)
