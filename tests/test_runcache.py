"""tests/runcache.py: what several test files (and pytest-xdist's workers) share is built once per run, by
whichever process asks first, while the others wait; a build that fails leaves nothing that looks built."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import runcache

REPO = Path(__file__).resolve().parent.parent
RACER = """
import sys, time
from pathlib import Path
from tests import runcache

def build(folder):
    with open(sys.argv[1], "a") as log:
        log.write("built\\n")
    time.sleep(1.5)  # long enough that the other process asks while this one builds
    folder.mkdir()
    (folder / "made").write_text("once")

print(runcache.shared("racer", build))
"""


@pytest.fixture()
def fresh_run(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(runcache.ENV, str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    return tmp_path


def test_two_processes_asking_at_once_get_one_build(fresh_run):
    log = fresh_run / "builds.log"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(log)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               text=True) for _ in range(2)]
    paths = {racer.communicate(timeout=60)[0].strip() for racer in racers}
    assert [racer.returncode for racer in racers] == [0, 0]
    assert log.read_text() == "built\n"
    assert paths == {str(fresh_run / "run" / "racer")}
    assert (fresh_run / "run" / "racer" / "made").read_text() == "once"


def test_a_failed_build_leaves_nothing_and_the_next_caller_builds_again(fresh_run):
    def broken(folder: Path) -> None:
        folder.mkdir()
        raise RuntimeError("half built")

    with pytest.raises(RuntimeError, match="half built"):
        runcache.shared("course", broken)
    assert sorted(p.name for p in (fresh_run / "run").iterdir()) == ["course.lock"]
    built = runcache.shared("course", lambda folder: folder.mkdir())
    assert built == fresh_run / "run" / "course" and built.is_dir()


def test_a_released_course_copy_is_a_course_of_its_own(tmp_path):
    """(the run's own course: built here unless another file of the run already did)"""
    first = runcache.released_course(tmp_path / "a" / "course")
    (first / "release" / "self_attention" / "01_scores.ipynb").write_text("changed by a test")
    second = runcache.released_course(tmp_path / "b" / "course")
    assert (second / "release" / "self_attention" / "01_scores.ipynb").read_text() != "changed by a test"
    assert str(first) not in (second / "nbgrader_config.py").read_text()
