"""`make grade` (autograder/commands/workspace.py): the folders the student worked in, one summary table each, on one
screen; an untouched workspace fits in 80 lines."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from autograder.commands import workspace
from course import lab

REPO = Path(__file__).resolve().parent.parent
SCREEN = 80


@pytest.fixture(scope="module")
def untouched(tmp_path_factory) -> Path:
    """A workspace as `make lab` leaves it: the four released folders, nothing changed."""
    return lab.prepare_workspace(lab.RELEASE, tmp_path_factory.mktemp("ws") / "workspace").path


def make_grade(ws: Path, *variables: str) -> subprocess.CompletedProcess:
    # (-o: the virtual environment counts as installed, whatever the date of requirements.txt)
    env = dict(os.environ, COLUMNS="80")
    return subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "grade", f"WORKSPACE={ws}",
                           *variables], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)


def with_class(ws: Path, edition: str, notebook: str, name: str, code: str) -> None:
    path = ws / edition / f"{notebook}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if f"class {name}" in "".join(c["source"]) and c["cell_type"] == "code")
    cell["source"] = code
    path.write_text(json.dumps(nb), encoding="utf-8")


def test_an_untouched_workspace_grades_nothing_and_says_how_to_name_a_folder(untouched):
    folders = workspace.folders(untouched)
    assert len(folders) == len(list((REPO / "assignments").iterdir())) and all(f.changed == () for f in folders)
    proc = make_grade(untouched)
    assert proc.returncode == 0, proc.stderr
    assert "Nothing to grade yet" in proc.stdout and "make grade ASSIGNMENT=self_attention" in proc.stdout
    assert len(proc.stdout.splitlines()) <= SCREEN


def test_a_named_untouched_folder_fits_on_one_screen_with_every_part_and_the_total(untouched):
    proc = make_grade(untouched, "ASSIGNMENT=self_attention")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= SCREEN, f"{len(lines)} lines:\n{proc.stdout}"
    for part in ("qkv_projection", "scaled_scores", "masks", "module", "official_parity", "multihead", "long_sequence"):
        assert part in proc.stdout
    assert "total" in proc.stdout and "0/100" in proc.stdout
    assert "scaled_scores is not implemented yet" in proc.stdout  # the failing checks' message
    assert "the written answers, 10 points per assignment, graded by hand" in proc.stdout  # on top of the 100
    assert "graded_cells.py" not in proc.stdout and "generation" not in proc.stdout.replace("make grade", "")


def test_only_the_folder_worked_in_is_graded_with_its_messages(untouched, tmp_path):
    ws = tmp_path / "workspace"
    subprocess.run(["cp", "-r", str(untouched), str(ws)], check=True)
    with_class(ws, "generation", "03_cross_attention", "CrossAttention", "class CrossAttention:\n    pass\n")
    assert [f.edition for f in workspace.choose(ws)] == ["generation"]
    proc = make_grade(ws)
    assert proc.returncode == 0, proc.stderr
    assert f"{ws}/generation" in proc.stdout.replace("\n", "")
    assert "self_attention" not in proc.stdout and "generation_zh" not in proc.stdout
    assert "cross_attention" in proc.stdout and "total" in proc.stdout
    assert len(proc.stdout.splitlines()) <= SCREEN


def test_a_missing_workspace_or_an_unknown_folder_is_one_line(tmp_path, untouched):
    proc = make_grade(tmp_path / "nowhere")
    said = [line for line in proc.stderr.splitlines() if not line.startswith("make")]  # (make adds its own line)
    assert proc.returncode == 2 and len(said) == 1 and "run `make lab` first" in said[0]
    proc = make_grade(untouched, "ASSIGNMENT=attention")
    said = [line for line in proc.stderr.splitlines() if not line.startswith("make")]
    assert proc.returncode == 2 and len(said) == 1 and "self_attention" in said[0]


def test_the_line_under_the_tables_speaks_the_language_of_the_folder_graded(tmp_path):
    """The footer was English in the Chinese edition's folder too (issue 47)."""
    zh = workspace.footer(workspace.Folder(tmp_path / "self_attention_zh", "self_attention_zh", ()))
    en = workspace.footer(workspace.Folder(tmp_path / "self_attention", "self_attention", ()))
    assert "完整报告" in zh and "make grade FULL=1" in zh and str(tmp_path / "self_attention_zh") in zh
    assert en.startswith("The whole report, one row per check: make grade FULL=1")


def test_the_written_points_make_grade_names_are_those_of_each_released_folder():
    from course.content.written import ASSIGNMENT_QUESTIONS, written_points

    for assignment in ASSIGNMENT_QUESTIONS:
        for folder in (REPO / "assignments").glob(f"{assignment}*"):
            assert workspace.written_points(folder) == written_points(folder.name) > 0, folder.name
