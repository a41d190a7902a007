"""The trusted side's memory: what a submission makes the grader itself hold (issue 32, item 3).

A reply's JSON is capped in bytes and values (tests/test_hostile.py: json_flood, the grader in this process); here
the same attack, and a notebook of millions of values, through grade-class and nbgrader autograde: the student is
recorded with 0 and the reason, the rest of the class is graded, a rerun does not pay again; each grading process
has a memory limit of its own, which its sandboxed workers do not inherit; nbgrader grades each notebook in a child
with a deadline, so that a notebook, not the run, is lost.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.foundation.spec import ASSIGNMENT, PARTS
from examples.make_class import collect, nbgrader
from tests.runcache import released_course

REPO = Path(__file__).resolve().parent.parent
FLOOD = (REPO / "tests" / "hostile" / "json_flood.py").read_text().split("# --- attack ---")[1]
HANG = "import time\nwhile True:\n    time.sleep(0.05)\n"  # never finishes loading, and spends no CPU on it
NOTEBOOK_SECONDS = 12


def edit_notebook(course: Path, student: str, notebook: str, code: str = "", metadata=None) -> None:
    """The student's `notebook` (already collected) with `code` after its last solution code cell's code and `metadata`
    in the notebook's metadata."""
    path = course / "submitted" / student / ASSIGNMENT / f"{notebook}.ipynb"
    nb = json.loads(path.read_text())
    if code:
        cell = [c for c in nb["cells"] if c["cell_type"] == "code"
                and (c.get("metadata") or {}).get("nbgrader", {}).get("solution")][-1]
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        cell["source"] = (code + "\n" + source) if code is HANG else (source + "\n" + code)
    if metadata is not None:
        nb["metadata"]["extra"] = metadata
    path.write_text(json.dumps(nb))


@pytest.fixture(scope="module")
def course(private_tmp):
    """good; flood (01_scores answers with frames of millions of JSON values); huge (01_scores of 2 million empty
    lists in its metadata, 6 MB); hang (02_masks never finishes loading)."""
    root = released_course(private_tmp / "trusted" / "course")
    collect(root, {"good": "correct", "flood": "correct", "huge": "correct", "hang": "correct"})
    edit_notebook(root, "flood", "01_scores", FLOOD)
    edit_notebook(root, "huge", "01_scores", metadata=[[] for _ in range(2_000_000)])
    edit_notebook(root, "hang", "02_masks", HANG)
    with (root / "nbgrader_config.py").open("a") as config:
        config.write(f"c.AutograderPreprocessor.notebook_seconds = {NOTEBOOK_SECONDS}\n")
    return root


def grade_class(course: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade-class", str(course), "--workers", "1",
                           "--load-seconds", "10"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, time.monotonic() - started


@pytest.fixture(scope="module")
def class_runs(course):
    """grade-class twice on the same course: (first run, its seconds, second run, its seconds)."""
    first, first_seconds = grade_class(course)
    second, second_seconds = grade_class(course)
    return first, first_seconds, second, second_seconds


def report(course: Path, student: str) -> dict:
    doc = json.loads((course / "autograder_reports" / ASSIGNMENT / f"{student}.json").read_text())
    return {p["id"]: p for p in doc["parts"]}


def test_grade_class_records_a_flooding_student_with_0_and_the_reason_and_grades_the_rest(course, class_runs):
    first = class_runs[0]
    assert "graded 4" in first.stdout and "errors 0" in first.stdout, first.stdout[-2000:]
    flood = report(course, "flood")
    assert flood["scaled_scores"]["score"] == 0
    assert "over the 4194304-byte limit" in json.dumps(flood["scaled_scores"]), flood["scaled_scores"]
    assert flood["qkv_projection"]["score"] == flood["qkv_projection"]["max_score"]
    good = report(course, "good")
    assert all(p["score"] == p["max_score"] for p in good.values())


def test_grade_class_refuses_a_notebook_of_millions_of_values_with_one_sentence(course, class_runs):
    huge = report(course, "huge")
    assert huge["scaled_scores"]["score"] == 0
    assert "01_scores.ipynb could not be read as a notebook: its JSON holds more than 262144 values" in json.dumps(
        huge["scaled_scores"])
    assert huge["masks"]["score"] == huge["masks"]["max_score"]


def test_a_second_grade_class_run_does_not_pay_again(class_runs):
    _, first_seconds, second, second_seconds = class_runs
    assert "graded 0, unchanged and skipped 4" in second.stdout, second.stdout[-2000:]
    assert second_seconds < 30, f"the rerun took {second_seconds:.0f} s (the first {first_seconds:.0f} s)"


def soft_limit(pid: int, name: str) -> str:
    line = next(x for x in Path(f"/proc/{pid}/limits").read_text().splitlines() if x.startswith(name))
    return re.split(r"\s{2,}", line)[1]


def test_a_grading_process_caps_its_own_memory_and_its_workers_do_not_inherit_it():
    from autograder.commands import classpool
    from autograder.foundation.limits import GIB, Limits

    pool = classpool.Pool(1, Limits(grader_memory_bytes=3 * GIB))
    try:
        proc, seed = pool.procs[0], pool.seed[1].pid
        assert classpool.recv(proc.results) == ("ready",)
        assert soft_limit(proc.proc.pid, "Max data size") == str(3 * GIB)
        children = [int(c) for c in Path(f"/proc/{seed}/task/{seed}/children").read_text().split()]
        zygotes = [c for c in children if os.getsid(c) == c]  # (the seed's other children: the monitors)
        assert zygotes, "no zygote forked by the seed"
        assert [soft_limit(z, "Max data size") for z in zygotes] == ["unlimited"] * len(zygotes)
    finally:
        pool.close()


@pytest.fixture(scope="module")
def autograde(course, class_runs):
    """nbgrader autograde (the course's plugin) of the whole class, after grade-class: (process, seconds)."""
    started = time.monotonic()
    proc = nbgrader(course, "autograde", ASSIGNMENT, "--force", check=False, timeout=900)
    return proc, time.monotonic() - started


def autograded_scores(course: Path) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {(s, p.id): gb.find_grade(p.id, p.notebook, ASSIGNMENT, s).auto_score
                for s in ("good", "flood", "huge", "hang") for p in PARTS}


def feedback(course: Path, student: str, notebook: str) -> str:
    nb = json.loads((course / "autograded" / student / ASSIGNMENT / f"{notebook}.ipynb").read_text())
    return json.dumps([c.get("outputs", []) for c in nb["cells"]])


def test_nbgrader_loses_only_the_huge_notebook_with_the_reason_and_grades_the_rest(course, autograde):
    proc, seconds = autograde
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores = autograded_scores(course)
    points = {p.id: p.points for p in PARTS}
    assert scores[("huge", "scaled_scores")] == 0 and scores[("huge", "qkv_projection")] == 0
    assert "its JSON holds more than 262144 values" in feedback(course, "huge", "01_scores")
    for part in ("masks", "module", "multihead", "official_parity", "long_sequence"):
        assert scores[("huge", part)] == points[part], part
    assert all(scores[("good", p)] == points[p] for p in points)
    assert scores[("flood", "scaled_scores")] == 0 and scores[("flood", "masks")] == points["masks"]


def test_nbgrader_stops_a_notebook_at_its_deadline_and_a_fresh_child_grades_the_next(course, autograde):
    proc, seconds = autograde
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores = autograded_scores(course)
    assert scores[("hang", "masks")] == 0
    assert f"did not finish within {NOTEBOOK_SECONDS} s" in feedback(course, "hang", "02_masks")
    for part in ("qkv_projection", "scaled_scores", "module", "multihead", "long_sequence"):
        assert scores[("hang", part)] == next(p.points for p in PARTS if p.id == part), part


# A grading process that ends whenever it grades the student "dies" (as one killed by the kernel, or out of its
# memory limit, would): the real grading process, forked by a seed whose grade_folder is wrapped.
DYING_SEED = """
import os, sys
from autograder.commands import classgrade, classpool, seed
real = classgrade.grade_folder
def grade_folder(folder, assignment, grader, compared=None):
    if "/dies/" in folder:
        os._exit(classpool.OUT_OF_MEMORY)
    return real(folder, assignment, grader, compared)
classgrade.grade_folder = grade_folder
seed.main(int(sys.argv[1]), int(sys.argv[2]))
"""


def test_a_submission_that_ends_its_grading_process_twice_is_recorded_and_not_graded_again(course, autograde,
                                                                                          monkeypatch, private_tmp):
    from autograder.commands.classgrade import Settings, grade_class
    from autograder.sandbox import prestart

    (private_tmp / "dying_seed.py").write_text(DYING_SEED)
    monkeypatch.setitem(prestart.ZYGOTE_ENV, "PYTHONPATH", os.pathsep.join((str(REPO), str(private_tmp))))
    monkeypatch.setattr(prestart, "SEED", "dying_seed")
    collect(course, {"dies": "correct"})
    first = {o.student: o for o in grade_class(course, settings=Settings(workers=1, progress=False))}
    assert first["dies"].status == "graded", first["dies"]
    dies = report(course, "dies")
    assert all(p["score"] == 0 for p in dies.values())
    assert "ended the grader's own process twice (out of its memory limit)" in json.dumps(dies["masks"])
    again = {o.student: o.status for o in grade_class(course, settings=Settings(workers=1, progress=False))}
    assert again["dies"] == "skipped", again


def test_the_caps_on_replies_leave_a_large_submission_loading(grader, private_tmp):
    """The caps are the trusted side's: the worker still reads a load request of more code than a reply may hold
    JSON (6 MB of source, millions of commas), and the submission is graded."""
    path = private_tmp / "large.py"
    path.write_text((REPO / "solutions" / "attention.py").read_text() + "\nDATA = '" + "1," * 3_000_000 + "'\n")
    result = grader.grade(path, part_ids=["qkv_projection"])
    assert result.part("qkv_projection").score == result.part("qkv_projection").max_score, result.notes
