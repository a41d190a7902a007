"""Fixtures shared by the project's tests, and the run's shared folder (tests/runcache.py)."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from tests import runcache

# The files that take longest, longest first (measured with `--durations=0`, setups included): under
# pytest-xdist (`make test`: `-n auto --dist loadfile --no-loadscope-reorder`) they are handed out first, then
# the others, most tests first, so that a run ends on short files on every core, not on one long file while
# the other cores wait.
LONGEST_FIRST = (
    "tests/test_catalogue.py", "tests/browser/test_student_lab.py", "tests/test_unprivileged.py",
    "tests/test_trusted_memory.py", "tests/test_efficient_notebooks.py", "tests/test_nbgrader_e2e.py",
    "tests/test_student_text_class.py", "tests/test_nbgrader_submitted.py",
    "tests/test_editions.py", "tests/test_notebooks.py", "tests/test_hub_exchange.py", "tests/test_platforms.py",
    "tests/test_worker_image.py", "tests/browser/test_formgrader_written.py", "tests/test_written.py",
    "tests/test_personal_config.py", "tests/test_restricted_hosts.py", "tests/test_submitted_links.py",
    "tests/browser/test_class_report.py", "tests/test_gradescope.py", "tests/test_generation_notebooks.py",
    "tests/test_hostile.py", "tests/faults/test_signals.py", "tests/test_seed.py", "tests/test_validate.py",
    "tests/test_release.py", "tests/test_hostile_class.py", "tests/test_gpu_stage.py",
    "tests/faults/test_postgres.py", "tests/test_feedback_page.py", "tests/test_feedback_limits.py",
    "tests/browser/test_formgrader_hostile_answer.py",
)
_RUN_DIR: list[Path] = []


def pytest_configure(config):
    made = runcache.start_run()
    if made is not None:
        _RUN_DIR.append(made)


def pytest_unconfigure(config):
    for path in _RUN_DIR:
        shutil.rmtree(path, ignore_errors=True)


def pytest_collection_modifyitems(session, config, items):
    """Under pytest-xdist, the longest files first, then the files of most tests (each file's own order kept;
    every worker sorts alike)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return

    def file_of(item) -> str:
        return item.nodeid.split("::", 1)[0]

    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    count = Counter(map(file_of, items))
    items.sort(key=lambda item: (rank.get(file_of(item), len(rank)), -count[file_of(item)], file_of(item)))


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
