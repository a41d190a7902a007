"""Fixtures shared by the project's tests."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def grader():
    """One warm grader (one zygote, torch imported once) for every test that grades with default limits."""
    from autograder.grading.grade import Grader

    with Grader() as g:
        yield g


@pytest.fixture(scope="module")
def private_tmp():
    """A temp dir of our own: pytest's tmp_path_factory dirs are pruned by other pytest runs on the machine."""
    path = Path(tempfile.mkdtemp(prefix="autograder-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def repo_course(private_tmp):
    """The repository laid out as examples/make_class.py reads a course: release/ and source/ (links)."""
    repo = Path(__file__).resolve().parent.parent
    course = private_tmp / "repo-course"
    course.mkdir()
    (course / "release").symlink_to(repo / "assignments")
    (course / "source").symlink_to(repo / "source")
    return course
