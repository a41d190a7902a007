"""The student's workspace and the two labs (course/lab.py), without starting a server
(tests/browser/ drives the real one).

Claims: the release is copied on first use and a file already in the workspace is never
overwritten; the workspace is ignored by git; --allow-root only as root; the student's lab
config switches off every nbgrader server and lab extension of the environment except Validate.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import course.lab as lab

REPO = Path(__file__).resolve().parent.parent
NBGRADER = Path(__import__("nbgrader").__file__).parent


@pytest.fixture
def release(tmp_path):
    """A release folder as nbgrader writes it: one folder per assignment."""
    folder = tmp_path / "release"
    (folder / "alpha" / ".ipynb_checkpoints").mkdir(parents=True)
    (folder / "beta").mkdir()
    (folder / "alpha" / "01_scores.ipynb").write_text("released 01")
    (folder / "alpha" / "02_masks.ipynb").write_text("released 02")
    (folder / "alpha" / "visible_checks.py").write_text("released checks")
    (folder / "alpha" / ".ipynb_checkpoints" / "01_scores-checkpoint.ipynb").write_text("old")
    (folder / "beta" / "01_positions.ipynb").write_text("released beta")
    return folder


def test_first_use_copies_every_release_file_of_every_assignment_but_checkpoints(release, tmp_path):
    ws = lab.prepare_workspace(release, tmp_path / "ws")
    assert ws.copied == ("alpha/01_scores.ipynb", "alpha/02_masks.ipynb", "alpha/visible_checks.py",
                         "beta/01_positions.ipynb") and ws.kept == ()
    assert (ws.path / "alpha" / "02_masks.ipynb").read_text() == "released 02"
    assert not (ws.path / "alpha" / ".ipynb_checkpoints").exists()
    assert "4 file(s) (alpha, beta)" in lab.describe(ws)


def test_a_students_saved_work_is_never_overwritten_and_missing_files_come_back(release, tmp_path):
    work = tmp_path / "ws"
    lab.prepare_workspace(release, work)
    (work / "alpha" / "01_scores.ipynb").write_text("my work")
    (work / "alpha" / "02_masks.ipynb").unlink()
    (work / "alpha" / "visible_checks.py").write_text("edited checks")
    (release / "alpha" / "01_scores.ipynb").write_text("a new release")
    ws = lab.prepare_workspace(release, work)
    assert (work / "alpha" / "01_scores.ipynb").read_text() == "my work"
    assert ws.copied == ("alpha/02_masks.ipynb",)
    assert ws.kept == ("alpha/01_scores.ipynb", "alpha/visible_checks.py", "beta/01_positions.ipynb")
    assert ws.differ == ("alpha/visible_checks.py",)  # notebooks differ as soon as one works in them: not reported
    assert "alpha/visible_checks.py differs from the release" in lab.describe(ws)


def _notebook(solution: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "source": solution, "metadata": {"nbgrader": {
        "solution": True, "grade_id": "cell"}}}]})


def test_the_lines_speak_chinese_for_a_workspace_worked_in_the_chinese_edition_else_the_systems_language(tmp_path,
                                                                                                       monkeypatch):
    from autograder.commands import workspace as make_grade

    release = tmp_path / "release"
    for edition in ("self_attention", "self_attention_zh"):
        (release / edition).mkdir(parents=True)
        (release / edition / "01_scores.ipynb").write_text(_notebook("raise NotImplementedError"))
    ws = lab.prepare_workspace(release, tmp_path / "ws")
    for variable in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    assert make_grade.workspace_language(ws.path, release) == "en"  # nothing worked on: the system's language
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert make_grade.workspace_language(ws.path, release) == "zh"
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    (ws.path / "self_attention_zh" / "01_scores.ipynb").write_text(_notebook("return Q @ K.mT"))
    assert make_grade.workspace_language(ws.path, release) == "zh"  # the folder worked in
    said = lab.describe(lab.prepare_workspace(release, ws.path), "zh")
    assert said.startswith("你的工作目录：") and "make grade" in said and not re.search(r"\b(kept|Check|file)\b", said), said
    assert lab.describe(ws, "en").startswith("Your workspace: ")


def test_a_file_in_place_of_the_workspace_is_refused_in_one_line(release, tmp_path):
    (tmp_path / "ws").write_text("not a folder")
    with pytest.raises(SystemExit, match="exists and is not a folder"):
        lab.prepare_workspace(release, tmp_path / "ws")


def test_the_workspace_is_ignored_by_git_and_is_the_makefiles():
    done = subprocess.run(["git", "check-ignore", "-q", str(lab.WORKSPACE / "self_attention" / "01_scores.ipynb")], cwd=REPO)
    assert done.returncode == 0, "workspace/ must be ignored by git (.gitignore)"
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^WORKSPACE = (\S+)$", makefile, re.M).group(1) == str(lab.WORKSPACE.relative_to(REPO))


@pytest.mark.parametrize("uid", [0, 1000])
def test_allow_root_only_as_root(monkeypatch, uid):
    monkeypatch.setattr(lab.os, "geteuid", lambda: uid)
    argv, _ = lab.lab_command(lab.WORKSPACE, ["--no-browser"], student=True)
    assert argv[:3] == [sys.executable, "-m", "jupyterlab"] and argv[-1] == "--no-browser"
    assert ("--allow-root" in argv) == (uid == 0)


def test_only_the_student_lab_reads_the_student_config(monkeypatch):
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "/elsewhere")
    _, student_env = lab.lab_command(lab.WORKSPACE, [], student=True)
    _, instructor_env = lab.lab_command(lab.REPO, [], student=False)
    assert student_env["JUPYTER_CONFIG_PATH"].split(":") == [str(lab.STUDENT_CONFIG), "/elsewhere"]
    assert instructor_env["JUPYTER_CONFIG_PATH"] == "/elsewhere"


def test_both_labs_find_the_environments_programs_first(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin")
    for student in (True, False):
        _, env = lab.lab_command(lab.REPO, [], student=student)
        assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)  # formgrader runs `alembic` from there


def test_student_server_config_disables_every_nbgrader_server_extension_but_validate():
    enabled = json.loads((Path(sys.prefix) / "etc/jupyter/jupyter_server_config.d/nbgrader.json").read_text())
    ours = json.loads((lab.STUDENT_CONFIG / "jupyter_server_config.json").read_text())
    switches = ours["ServerApp"]["jpserver_extensions"]
    assert set(switches) == set(enabled["ServerApp"]["jpserver_extensions"])
    assert {name for name, on in switches.items() if on} == {"nbgrader.server_extensions.validate_assignment"}


def test_student_page_config_disables_every_nbgrader_lab_plugin_but_validate():
    bundle = "".join(p.read_text() for p in (NBGRADER / "labextension" / "static").glob("*.js"))
    plugins = set(re.findall(r'"(@jupyter/nbgrader:[a-z-]+)"', bundle))
    disabled = json.loads((lab.STUDENT_CONFIG / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert "@jupyter/nbgrader:validate-assignment" in plugins
    assert {name for name, off in disabled.items() if off} == plugins - {"@jupyter/nbgrader:validate-assignment"}


HUB_CONFIG = REPO / "course" / "student_lab_config_hub"


def test_the_hub_variant_is_the_student_lab_plus_the_assignment_list_on_both_sides():
    student = json.loads((lab.STUDENT_CONFIG / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"]
    hub = json.loads((HUB_CONFIG / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"]
    assert set(hub) == set(student)
    assert {name for name in hub if hub[name] != student[name]} == {"nbgrader.server_extensions.assignment_list"}
    assert hub["nbgrader.server_extensions.assignment_list"] is True
    student = json.loads((lab.STUDENT_CONFIG / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    hub = json.loads((HUB_CONFIG / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert set(hub) == set(student)
    assert {name for name in hub if hub[name] != student[name]} == {"@jupyter/nbgrader:assignment-list"}
    assert hub["@jupyter/nbgrader:assignment-list"] is False
    assert "c.Execute.timeout = 120" in (HUB_CONFIG / "nbgrader_config.py").read_text()


def _validator_config(folder: Path, notebooks: list[Path], monkeypatch):
    """The Validator that `nbgrader validate NOTEBOOK...` builds from the nbgrader_config.py in `folder`."""
    from nbgrader.validator import Validator
    from traitlets.config.loader import PyFileConfigLoader

    monkeypatch.setattr(sys, "argv", ["nbgrader", "validate", *map(str, notebooks)])
    return Validator(config=PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config())


@pytest.mark.parametrize("folder", [lab.STUDENT_CONFIG, HUB_CONFIG], ids=["lab", "hub"])
def test_nbgrader_validate_frames_its_failures_in_chinese_for_notebooks_of_the_chinese_edition_only(folder, tmp_path,
                                                                                                    monkeypatch):
    chinese = tmp_path / "generation_zh" / "01_cache.ipynb"
    english = tmp_path / "generation" / "01_cache.ipynb"
    warnings = ("failed_warning", "changed_warning", "type_changed_warning")
    validator = _validator_config(folder, [chinese], monkeypatch)
    for name in warnings:
        text = getattr(validator, name).format(num_failed=2, num_changed=2)
        assert re.search(r"[\u4e00-\u9fff]", text) and "2 个" in text and not re.search("[A-Za-z]", text), text
    for notebooks in ([english], [chinese, english], []):  # English, or both editions at once: nbgrader's own
        validator = _validator_config(folder, notebooks, monkeypatch)
        assert [getattr(validator, name) for name in warnings] == [getattr(type(validator), name).default_value
                                                                     for name in warnings]


def test_the_readmes_name_the_lines_of_nbgrader_that_hard_code_validates_success_line():
    """no setting of nbgrader's changes "Success! Your notebook passes all the tests." (nor the frame around a failing
    cell): both READMEs say so, at the installed nbgrader's lines, and what it means"""
    import nbgrader

    lines = (NBGRADER / "validator.py").read_text().splitlines()
    where = [next(i + 1 for i, line in enumerate(lines) if f'"{text}' in line)
             for text in ("The following cell failed:", "The error was:", "Success! Your notebook passes all the tests.")]
    dialog = [p.name for p in (NBGRADER / "labextension" / "static").glob("*.js")
              if "Success! Your notebook passes all the tests." in p.read_text(errors="replace")]  # the button's
    english, chinese = (REPO / "README.md").read_text(), (REPO / "README.zh-CN.md").read_text()
    assert len(dialog) == 1 and dialog[0] in english and dialog[0] in chinese, dialog
    assert f"nbgrader {nbgrader.__version__}" in english and f"nbgrader {nbgrader.__version__}" in chinese
    assert "lines {}, {} and {}".format(*where) in english, where
    assert "第 {}、{} 和 {} 行".format(*where) in chinese, where
    assert "every visible check passes, not the hidden ones" in english
    assert "所有可见检查都通过了，并不包括隐藏检查" in chinese
