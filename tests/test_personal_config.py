"""An instructor's personal nbgrader configuration never redirects the project's own courses.

nbgrader's usual JupyterHub setup puts `c.CourseDirectory.root` (and often `db_url` and the exchange) in
~/.jupyter/nbgrader_config.py. Every nbgrader command the project runs on a course of its own (the demo,
the tests, the benchmark, the course build) is pinned to that course (examples/make_class.py:
nbgrader_command, nbgrader_env), and the repository's nbgrader_config.py names its own folder as the root.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from autograder.commands import gradebook
from examples.make_class import collect, make_course, nbgrader

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def personal_home(tmp_path, monkeypatch) -> Path:
    """HOME with a ~/.jupyter/nbgrader_config.py that points at another course, gradebook and exchange."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    (home / ".jupyter").mkdir(parents=True)
    (elsewhere / "exchange").mkdir(parents=True)
    (home / ".jupyter" / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.root = {str(elsewhere / 'course')!r}\n"
        f"c.CourseDirectory.db_url = 'sqlite:///{elsewhere / 'other-gradebook.db'}'\n"
        f"c.Exchange.root = {str(elsewhere / 'exchange')!r}\n"
        "c.CourseDirectory.submitted_directory = 'handed_in'\n")
    monkeypatch.setenv("HOME", str(home))
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_CONFIG_PATH", "JUPYTER_NO_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return elsewhere


def written_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_personal_config_naming_another_course_leaves_it_untouched_by_the_projects_nbgrader_runs(
        personal_home, tmp_path):
    course = make_course(tmp_path / "course")  # generate_assignment --force
    collect(course, {"ada": "correct"})
    nbgrader(course, "autograde", "self_attention")
    assert written_under(personal_home) == [], "the project's nbgrader runs wrote into the personal config's course"
    assert (course / "release" / "self_attention" / "01_scores.ipynb").exists()
    assert (course / "autograded" / "ada" / "self_attention" / "01_scores.ipynb").exists()
    location = gradebook.locate(course)
    assert location.db_url == f"sqlite:///{course.resolve() / 'gradebook.db'}"
    from nbgrader.api import Gradebook

    with Gradebook(location.db_url, location.course_id) as gb:
        assert [s.student.id for s in gb.assignment_submissions("self_attention")] == ["ada"]


def test_the_repository_config_names_its_own_folder_as_the_course_root_after_a_personal_one(personal_home):
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    merged = Config()
    for folder in (Path.home() / ".jupyter", REPO):  # nbgrader's order: the Jupyter config path, then the cwd
        merged.merge(PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config())
    assert merged.CourseDirectory.root == str(REPO)
