"""The course on Python 3.10 to 3.13: `make` picks an interpreter that runs (python3.11 first, else the newest of
the range), says which, and stops in one line where there is none (scripts/check_pythons.sh runs the demo on each)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _path_with(tmp: Path, runs: tuple[str, ...], broken: tuple[str, ...] = ()) -> str:
    """A PATH holding make, a shell, and fake pythons: those in `runs` run, those in `broken` exit 127 (as pyenv's
    shim of a version that is installed but not selected does)."""
    bin_ = tmp / "bin"
    bin_.mkdir()
    for tool in ("make", "sh", "bash", "test", "echo"):
        found = shutil.which(tool)
        if found:
            (bin_ / tool).symlink_to(found)
    for name in runs:
        (bin_ / name).write_text(f'#!/bin/sh\necho "Python {name[6:]}.1"\n')
    for name in broken:
        (bin_ / name).write_text("#!/bin/sh\necho \"pyenv: $0: command not found\" >&2\nexit 127\n")
    for p in bin_.iterdir():
        if not p.is_symlink():
            p.chmod(0o755)
    return str(bin_)


def _make_python(tmp: Path, runs: tuple[str, ...], broken: tuple[str, ...] = ()) -> str:
    path = _path_with(tmp, runs, broken)
    proc = subprocess.run(["make", "-s", "-C", str(REPO), "--eval", "which-python: ; @echo '[$(PYTHON)]'",
                           "which-python"], env={"PATH": path, "HOME": str(tmp)}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_make_takes_python3_12_on_a_machine_whose_only_python_is_3_12(tmp_path):
    assert _make_python(tmp_path, ("python3.12",)) == "[python3.12]"


def test_make_prefers_python3_11_then_the_newest_of_3_13_3_12_3_10(tmp_path):
    for i, (runs, want) in enumerate([(("python3.10", "python3.11", "python3.13"), "python3.11"),
                                      (("python3.10", "python3.12", "python3.13"), "python3.13"),
                                      (("python3.10",), "python3.10")]):
        (tmp_path / str(i)).mkdir()
        assert _make_python(tmp_path / str(i), runs) == f"[{want}]"


def test_make_skips_an_interpreter_that_is_on_path_but_does_not_run(tmp_path):
    """pyenv puts a shim for every installed version on PATH; the unselected ones fail with 'command not found'."""
    assert _make_python(tmp_path, ("python3.12",), broken=("python3.11", "python3.13")) == "[python3.12]"


def test_make_without_any_supported_python_stops_in_one_line_naming_the_range_and_PYTHON(tmp_path):
    path = _path_with(tmp_path, (), broken=("python3.11",))
    proc = subprocess.run(["make", "-s", "-C", str(REPO), "venv", f"VENV={tmp_path / 'venv'}"],
                          env={"PATH": path, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    first = proc.stderr.splitlines()[0]
    assert "no Python 3.10 to 3.13 found" in first and "PYTHON=" in first
    assert not (tmp_path / "venv").exists()


def test_make_says_which_python_creates_the_venv(tmp_path):
    path = _path_with(tmp_path, ("python3.13",))
    proc = subprocess.run(["make", "-n", "-C", str(REPO), "venv", f"VENV={tmp_path / 'venv'}"],
                          env={"PATH": path, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "creating" in proc.stdout and "with python3.13" in proc.stdout
    assert f"python3.13 -m venv {tmp_path / 'venv'}" in proc.stdout


def test_requires_python_names_the_range_the_check_script_runs():
    text = (REPO / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.10,<3.14"' in text
    assert os.access(REPO / "scripts" / "check_pythons.sh", os.X_OK)


def test_on_python_3_10_the_watch_names_a_students_method_by_its_qualified_name_as_co_qualname_does():
    """Python 3.10's code objects have no co_qualname: the forbidden-call watch finds the function's __qualname__
    (it raised AttributeError inside every student call of a watched torch function, scoring those parts 0)."""
    from autograder.worker.watch import owner_qualname, qualname_by_referrers

    class SelfAttention:
        def forward(self):
            return None

    def sdpa_attention():
        return None

    for func in (SelfAttention.forward, sdpa_attention):
        assert qualname_by_referrers(func.__code__) == func.__qualname__ == owner_qualname(func.__code__)
    assert qualname_by_referrers(compile("1", "<student:x>", "exec")) == "<module>"
