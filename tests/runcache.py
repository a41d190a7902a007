"""What one test run builds once and every test file shares, across pytest-xdist's workers too.

A folder per run (`run_dir()`): made by the process that starts the run (tests/conftest.py's pytest_configure,
in the xdist controller or the one serial process), named in the environment the workers inherit
(AUTOGRADER_TEST_RUN_DIR), removed when the run ends. `shared(name, build)` builds `name` in it once, under a
file lock: whichever worker gets there first builds, the others wait for it and then reuse it. A build that
fails leaves nothing behind, so the next test that needs it tries again (and fails with its own error).

Share only what tests read, never what they change: callers copy it (`released_course`).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

ENV = "AUTOGRADER_TEST_RUN_DIR"


def start_run() -> Path | None:
    """The run's folder, made and named in the environment by the process that starts the run; None when an
    outer process (the xdist controller) already made it."""
    if os.environ.get(ENV):
        return None
    path = Path(tempfile.mkdtemp(prefix="autograder-run-"))
    os.environ[ENV] = str(path)
    return path


def run_dir() -> Path:
    """This run's folder (a worker started without the controller's environment: one named by xdist's run id)."""
    named = os.environ.get(ENV)
    if named:
        return Path(named)
    path = Path(tempfile.gettempdir()) / f"autograder-run-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


@contextmanager
def locked(name: str):
    """An exclusive lock on `name` for this run (a file lock: it holds across processes)."""
    with open(run_dir() / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def machine_wide(name: str):
    """An exclusive lock on `name` for every test run on this machine (Unix users a test creates and deletes by a
    fixed name: a second run, a CI job beside a developer's, waits for the first instead of deleting its users)."""
    with open(Path(tempfile.gettempdir()) / f"autograder-tests-{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def shared(name: str, build: Callable[[Path], object]) -> Path:
    """run_dir()/name, made by `build(folder)` the first time any process of the run asks for it."""
    final = run_dir() / name
    with locked(name):
        if not final.exists():
            partial = run_dir() / f"{name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            try:
                build(partial)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            partial.rename(final)
    return final


def once(name: str, action: Callable[[], object]) -> None:
    """Run `action` once per run, whichever process asks first (the others wait until it is done)."""
    shared(f"once-{name}", lambda folder: (action(), folder.mkdir()))


def released_course(dest: Path, assignments: tuple[str, ...] | None = None) -> Path:
    """A copy, at `dest`, of examples/make_class.make_course(..., assignments=assignments): source/, config,
    release/ and gradebook.db of each assignment (nbgrader generate_assignment), built once per run. The course's
    config names no path (make_class.course_config), so a copy is a course of its own."""
    from examples.make_class import make_course
    from autograder.foundation.spec import ASSIGNMENT

    assignments = assignments or (ASSIGNMENT,)
    built = shared("course-" + "+".join(assignments), lambda folder: make_course(folder, assignments=assignments))
    shutil.copytree(built, dest, symlinks=True, dirs_exist_ok=True)
    return Path(dest)
