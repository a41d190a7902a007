"""One writer per course, and a gradebook that another writer holds or that the disk cannot take:
a second run refuses with one line naming the first (or waits for it), a busy gradebook is waited
for and then given up with one line naming its holder, a full disk stops the run with one line;
in every case the gradebook stays consistent and a rerun makes it the one a clean run writes."""
from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder.commands import courselock
from autograder.commands.classgrade import Settings, Stopped, grade_class
from autograder.foundation.spec import ASSIGNMENT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from faultkit import STUDENTS, dump, resume, sqlite_url

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def holder(code: str, ready: str = "held"):
    """Another process (formgrader, a second instructor): runs `code` until it prints `ready`, then
    holds on until the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert proc.stdout.readline().strip() == ready
        yield proc
    finally:
        proc.kill()
        proc.wait()


def sqlite_writer(course: Path, seconds: float) -> str:
    """A writer that holds the gradebook's write lock (readers still read) for `seconds`, then lets go."""
    return f"""
        import sqlite3, sys, time
        db = sqlite3.connect({str(course / 'gradebook.db')!r}, isolation_level=None)
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE course SET id = id")
        print("held", flush=True)
        time.sleep({seconds})
        db.execute("ROLLBACK")
        sys.stdin.read()
    """


def one_line(text: str) -> bool:
    return bool(text) and "\n" not in text.strip() and "Traceback" not in text


def test_a_second_run_refuses_with_one_line_naming_the_first(copy_course):
    course = copy_course("lock-refused")
    code = f"""
        from pathlib import Path
        from autograder.commands import courselock
        with courselock.hold(Path({str(course)!r}), "grade-class self_attention"):
            print("held", flush=True)
            input()
    """
    with holder(code) as first:
        with pytest.raises(courselock.CourseBusy) as busy:
            grade_class(course, settings=Settings(progress=False), grader=object())  # (refused before it grades anything)
        assert one_line(str(busy.value)) and f"pid {first.pid}" in str(busy.value)
        proc = subprocess.run([sys.executable, "-m", "autograder", "grade-class", str(course)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 1 and "is being graded by grade-class" in proc.stdout
    assert not (course / "autograder_reports" / ASSIGNMENT / ".state.json").exists()


def test_a_second_run_told_to_wait_grades_once_the_first_is_done(copy_course, memo, clean):
    course = copy_course("lock-waited")
    code = f"""
        import time
        from pathlib import Path
        from autograder.commands import courselock
        with courselock.hold(Path({str(course)!r}), "grade-gpu self_attention"):
            print("held", flush=True)
            time.sleep(1.0)
        input()
    """
    with holder(code):
        started = time.monotonic()
        outcomes = grade_class(course, settings=Settings(progress=False, lock_wait=60), grader=memo)
    assert time.monotonic() - started >= 0.5
    assert {o.status for o in outcomes} == {"graded"}
    assert dump(sqlite_url(course)) == clean


def test_a_gradebook_held_too_long_stops_the_run_with_one_line_naming_the_holder(copy_course, memo, clean):
    course = copy_course("busy-stopped")
    before = dump(sqlite_url(course))
    with holder(sqlite_writer(course, 60)) as other:
        with pytest.raises(Stopped) as stopped:
            grade_class(course, settings=Settings(progress=False, gradebook_wait=1.0), grader=memo)
    message = str(stopped.value)
    assert one_line(message) and "stayed locked" in message and f"pid {other.pid}" in message
    assert stopped.value.exit_code == 1
    assert dump(sqlite_url(course)) == before  # the first student's transaction was rolled back, whole
    resume(course, memo)
    assert dump(sqlite_url(course)) == clean


def test_a_gradebook_held_for_a_while_is_waited_for(copy_course, memo, clean):
    course = copy_course("busy-waited")
    with holder(sqlite_writer(course, 2.0)):
        outcomes = grade_class(course, settings=Settings(progress=False, gradebook_wait=60), grader=memo)
    assert {o.status for o in outcomes} == {"graded"}
    assert dump(sqlite_url(course)) == clean


# --------------------------------------------------------------------------- a full disk
@pytest.fixture()
def small_disk(fault_root):
    """A 6 MiB tmpfs; skipped with the reason where it cannot be mounted (not root, no mount namespace...)."""
    mount = fault_root / "small-disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"a small tmpfs cannot be mounted here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """A file that takes all the free space of `disk` but `leave` bytes."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb") as f:
        f.truncate(0)
        f.write(b"\0" * max(free - leave, 0))
    return filler


def test_a_full_disk_stops_with_one_line_and_a_consistent_gradebook(small_disk, copy_course, memo, clean):
    course = copy_course("course", where=small_disk)
    filler = fill(small_disk, 24 * 1024)
    with pytest.raises(Stopped) as stopped:
        grade_class(course, settings=Settings(progress=False), grader=memo)
    assert one_line(str(stopped.value)) and "full" in str(stopped.value) and stopped.value.exit_code == 1
    db = sqlite3.connect(course / "gradebook.db")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    now = dump(sqlite_url(course))
    written = {o.student for o in stopped.value.outcomes if o.status == "graded"}
    assert len(written) < len(STUDENTS)
    assert all(now[(s, ASSIGNMENT)] == clean[(s, ASSIGNMENT)] for s in written)
    assert all(now.get((s, ASSIGNMENT)) in (None, clean[(s, ASSIGNMENT)]) for s in STUDENTS)  # whole, or not at all
    assert not list((course / "autograder_reports").rglob("*.tmp"))
    filler.unlink()
    resume(course, memo)
    assert dump(sqlite_url(course)) == clean
