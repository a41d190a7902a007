"""The instructor's commands warn in one line when other users can read the course directory."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.commands import exposure

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def tmp_path():
    """A folder every user can enter, as a home directory of mode 755 is (pytest's own are 700)."""
    path = Path(tempfile.mkdtemp(prefix="exposure-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def course_in(tmp_path: Path, mode: int) -> Path:
    course = tmp_path / "course"
    course.mkdir()
    course.chmod(mode)
    return course


def test_a_course_of_mode_755_under_open_folders_is_readable_by_others_and_warned_about(tmp_path):
    course = course_in(tmp_path, 0o755)
    assert exposure.others_can_enter(tmp_path)
    assert exposure.readable_by_others(course)
    line = exposure.warning(course)
    assert "\n" not in line and f"chmod 700 {course}" in line and "mode 755" in line


def test_chmod_700_on_the_course_or_a_closed_folder_above_it_silences_the_warning(tmp_path):
    course = course_in(tmp_path, 0o700)
    assert exposure.warning(course) is None
    course.chmod(0o755)
    tmp_path.chmod(0o700)  # a home directory of mode 700 hides the course too
    try:
        assert exposure.warning(course) is None
    finally:
        tmp_path.chmod(0o755)


def test_grade_class_prints_the_warning_for_a_readable_course(tmp_path):
    course = course_in(tmp_path, 0o755)  # (no submitted/: grade-class stops at once, after the warning)
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade-class", str(course)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"warning: other users of this machine can read the course directory {course}" in proc.stderr
    course.chmod(0o700)
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade-class", str(course)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "warning: other users" not in proc.stderr
