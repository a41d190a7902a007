"""Kill grading at seeded random points, by every signal an instructor's machine sends, to the whole
process group (Ctrl-C, a closed terminal, `kill -- -PGID`) and to the parent alone (`kill PID`, the
OOM killer): no process it started is left, a SIGINT/SIGTERM exits with one line and 128 + the
signal, and after a rerun the gradebook is the one a clean run writes.

The runs are started together (each on its own copy of the class), so that the suite costs one
run's time; each test then asserts on its own run.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autograder.foundation.spec import ASSIGNMENT
from autograder.worker import proctree

sys.path.insert(0, str(Path(__file__).resolve().parent))
from faultkit import STUDENTS, dump, resume, sqlite_url

from examples.make_class import nbgrader_command, nbgrader_env

REPO = Path(__file__).resolve().parents[2]
SEED = 18


@dataclass(frozen=True)
class Fault:
    name: str
    signum: int
    group: bool  # to the process group, else to the parent alone
    after_written: int  # wait until this many students are in the gradebook (0: until it started a process) ...
    command: str = "grade-class"


@dataclass
class Run:
    fault: Fault
    course: Path
    delay: float = 0.0  # ... then this many seconds more (seeded)
    returncode: int | None = None
    stderr: str = ""
    seen: set = field(default_factory=set)  # every process ever seen below the parent
    left: list = field(default_factory=list)  # those still alive a while after the parent ended
    exit_seconds: float = 0.0  # from the signal to the parent's exit
    shm: set = field(default_factory=set)  # files of /dev/shm (semaphores) any of its processes mapped


FAULTS = [
    Fault("sigkill_group", signal.SIGKILL, True, 0),
    Fault("sigkill_parent", signal.SIGKILL, False, 1),
    Fault("sigterm_group", signal.SIGTERM, True, 0),
    Fault("sigterm_parent", signal.SIGTERM, False, 1),
    Fault("sigint_group", signal.SIGINT, True, 0),
    Fault("sigint_parent", signal.SIGINT, False, 1),
    Fault("sighup_group", signal.SIGHUP, True, 0),  # the terminal closed
    Fault("grade_sigkill_parent", signal.SIGKILL, False, 0, "grade"),
    Fault("nbgrader_autograde_sigkill_parent", signal.SIGKILL, False, 0, "nbgrader"),
]


def written(course: Path) -> int:
    try:
        return len(json.loads((course / "autograder_reports" / ASSIGNMENT / ".state.json").read_text()))
    except (OSError, ValueError):
        return 0


def command(run: Run) -> list[str]:
    if run.fault.command == "grade":
        return [sys.executable, "-m", "autograder", "grade", str(run.course / "submitted" / "ada" / ASSIGNMENT)]
    if run.fault.command == "nbgrader":
        return nbgrader_command(run.course, "autograde", ASSIGNMENT, "--force")  # (pinned to the course)
    return [sys.executable, "-m", "autograder", "grade-class", str(run.course), "--workers", "1"]


def watch(run: Run, pid: int) -> None:
    """Note the processes below `pid`, and what of /dev/shm each maps."""
    found = proctree.descendants(pid)
    run.seen.update(found)
    for p in found:
        try:
            with open(f"/proc/{p}/maps") as maps:
                run.shm.update(line.split()[-1] for line in maps if "/dev/shm/" in line)
        except OSError:
            pass


def execute(run: Run) -> None:
    env = nbgrader_env()  # (no personal Jupyter configuration: the course's own nbgrader_config.py only)
    proc = subprocess.Popen(command(run), cwd=run.course if run.fault.command == "nbgrader" else REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and (
            written(run.course) < run.fault.after_written or len(run.seen) < 2):
        watch(run, proc.pid)  # (the parent itself, and what it started)
        time.sleep(0.05)
    stop_at = time.monotonic() + run.delay
    while proc.poll() is None and time.monotonic() < stop_at:
        watch(run, proc.pid)
        time.sleep(0.05)
    watch(run, proc.pid)
    signalled = time.monotonic()
    if proc.poll() is None:
        (os.killpg if run.fault.group else os.kill)(proc.pid, run.fault.signum)
    try:
        run.returncode = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        run.returncode = proc.wait()
    run.exit_seconds = time.monotonic() - signalled
    reader.join(timeout=10)
    run.stderr = "".join(err)
    run.seen.discard(proc.pid)
    deadline = time.monotonic() + 10  # "within a few seconds"
    while (left := [p for p in run.seen if proctree.alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    run.left = left


@pytest.fixture(scope="module")
def runs(copy_course) -> dict[str, Run]:
    rng = random.Random(SEED)
    # A run signalled once a student is written is signalled at once: grading the other students can take
    # less than the delay, and the signal must find the queue unfinished. (Its delay is drawn all the same.)
    batch = {f.name: Run(f, copy_course(f"signal-{f.name}"), delay=round(rng.uniform(0.0, 2.5), 2) * (not f.after_written))
             for f in FAULTS}
    threads = [threading.Thread(target=execute, args=(run,)) for run in batch.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    yield batch
    for run in batch.values():  # never leave a process behind, even when a test failed
        for pid in run.left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


GRADE_CLASS = [f.name for f in FAULTS if f.command == "grade-class"]


@pytest.mark.parametrize("name", [f.name for f in FAULTS])
def test_no_process_outlives_a_killed_grader(runs, name):
    run = runs[name]
    assert run.seen, "the run started no process before it was killed: nothing was tested"
    assert run.left == [], f"{name}: still alive {run.left} (of {sorted(run.seen)})"


@pytest.mark.parametrize("name", [n for n in GRADE_CLASS if "sigkill" not in n])
def test_sigint_and_sigterm_stop_at_once_with_one_line_and_128_plus_the_signal(runs, name):
    run = runs[name]
    assert run.returncode == 128 + run.fault.signum, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("grade-class:")]
    assert len(lines) == 1 and f"interrupted by {signal.Signals(run.fault.signum).name}" in lines[0]
    assert run.exit_seconds < 15, f"took {run.exit_seconds:.1f} s to stop"


@pytest.mark.parametrize("name", GRADE_CLASS)
def test_no_process_of_a_class_maps_a_semaphore_and_no_kill_warns_of_a_leaked_one(runs, name):
    """No multiprocessing: nothing in /dev/shm that a kill could leave behind or a worker could reach."""
    run = runs[name]
    assert run.shm == set(), run.shm
    assert "leaked semaphore" not in run.stderr and "resource_tracker" not in run.stderr, run.stderr[-2000:]


def test_a_stop_keeps_what_was_graded_and_grades_no_more(runs):
    """SIGINT to the parent alone once a student is written: that student stays, the queue stops."""
    run = runs["sigint_parent"]
    done = written(run.course)
    assert 1 <= done < len(STUDENTS)
    assert f"{done} submission" in run.stderr


@pytest.mark.parametrize("name", GRADE_CLASS)
def test_after_a_kill_a_rerun_writes_the_gradebook_of_a_clean_run(runs, name, clean, memo):
    run = runs[name]
    outcomes = resume(run.course, memo)
    assert {o.student for o in outcomes} == set(STUDENTS)
    assert dump(sqlite_url(run.course)) == clean
