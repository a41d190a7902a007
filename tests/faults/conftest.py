"""The fault-injection suite's class: a real nbgrader course (three students: the reference, a mistake,
a truncated notebook) with a real SQLite gradebook, kept pristine; copies of it for each fault; and
the gradebook of a clean run to compare against."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from examples.make_class import collect
from tests.runcache import released_course

sys.path.insert(0, str(Path(__file__).resolve().parent))
from faultkit import STUDENTS, MemoGrader, dump, sqlite_url


@pytest.fixture(scope="session")
def fault_root():
    path = Path(tempfile.mkdtemp(prefix="autograder-faults-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def pristine(fault_root) -> Path:
    """The released course with the class collected, never graded."""
    course = released_course(fault_root / "pristine")  # (make_course, built once per run)
    collect(course, STUDENTS)
    return course


@pytest.fixture(scope="session")
def copy_course(pristine, fault_root):
    """copy_course(name) -> a fresh copy of the pristine course (its config names no path: it is its own)."""
    def make(name: str, where: Path | None = None) -> Path:
        dest = (where or fault_root) / name
        shutil.copytree(pristine, dest, symlinks=True)
        return dest
    return make


@pytest.fixture(scope="session")
def memo(grader) -> MemoGrader:
    """The session's warm grader, grading each distinct submission once (faultkit.MemoGrader)."""
    return MemoGrader(grader)


@pytest.fixture(scope="session")
def clean(copy_course, memo) -> dict:
    """The gradebook after one clean, uninterrupted run."""
    from autograder.commands.classgrade import Settings, grade_class

    course = copy_course("clean")
    grade_class(course, settings=Settings(progress=False), grader=memo)
    return dump(sqlite_url(course))
