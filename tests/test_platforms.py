"""Platforms without the Linux sandbox (macOS, Windows): the grader imports, `grade` and `grade-class` refuse in one
line pointing to Linux, WSL2 or a container, and `make grade` grades a student's own work without the sandbox; the
released notebooks' helpers need nothing but torch (no /proc, no Linux-only module).

The platform is simulated in a subprocess: sys.platform set after torch is imported (torch's own import of urllib
reads it), the Linux-only modules made unimportable, and /proc unreadable.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RELEASES = sorted(p for p in (REPO / "assignments").iterdir() if p.is_dir())

SIMULATE = """
import builtins, io, os, sys
import sysconfig, torch, urllib.request  # (before sys.platform changes: they read it)
sysconfig.get_paths()
sys.platform = {platform!r}
if sys.platform == "win32":
    for name in ("resource", "fcntl", "termios", "pwd", "grp"):
        sys.modules[name] = None  # ImportError on import
    del os.fork
_open = builtins.open
def _no_proc(file, *args, **kwargs):
    if str(file).startswith("/proc"):
        raise FileNotFoundError(2, "No such file or directory (simulated)", str(file))
    return _open(file, *args, **kwargs)
builtins.open = io.open = _no_proc
"""


def _simulated(platform: str, code: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SIMULATE.format(platform=platform) + code], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _cli(argv: list[str]) -> str:
    return f"from autograder.commands.cli import main\nsys.exit(main({argv!r}))\n"


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_the_graders_modules_import_on_a_platform_without_the_linux_sandbox(platform):
    proc = _simulated(platform, "import autograder.commands.cli, autograder.foundation.hosts\n"
                                "from autograder.foundation.limits import platform_refusal\n"
                                "print(str(platform_refusal()))\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"the sandbox needs Linux and this is {platform}" in proc.stdout


@pytest.mark.parametrize("platform,command", [(p, c) for p in ("darwin", "win32") for c in (
    ["grade", "solutions/attention.py"], ["grade-class", "no-such-course"])] + [("win32", ["grade-workspace"])],
                         ids=["macos-grade", "macos-grade-class", "windows-grade", "windows-grade-class",
                              "windows-make-grade"])
def test_grade_and_grade_class_off_linux_refuse_in_one_line_pointing_to_linux_wsl2_or_a_container(platform, command):
    """(and on Windows, where no worker can start, make grade too)"""
    proc = _simulated(platform, _cli(command))
    assert proc.returncode == 2, (proc.stdout[-1000:], proc.stderr[-1000:])
    out = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(out) == 1, out
    assert f"refusing to grade: the sandbox needs Linux and this is {platform}" in out[0]
    assert "Linux" in out[0] and "WSL2" in out[0] and "container" in out[0] and "Traceback" not in out[0]


def test_make_grade_on_macos_grades_the_students_own_work_saying_so_in_one_line(tmp_path):
    ws = tmp_path / "workspace"
    (ws / "self_attention").mkdir(parents=True)
    for nb in (REPO / "assignments" / "self_attention").iterdir():
        if nb.is_file():
            (ws / "self_attention" / nb.name).write_bytes(nb.read_bytes())
    proc = _simulated("darwin", _cli(["grade-workspace", str(ws), "--assignment", "self_attention"]))
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = proc.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("make grade: grading without the sandbox"), said
    assert "needs Linux and this is darwin" in said[0] and "your own machine" in said[0]
    assert "0/100" in proc.stdout


@pytest.mark.parametrize("release", RELEASES, ids=[r.name for r in RELEASES])
def test_each_releases_helper_modules_import_with_only_torch_no_proc_and_no_linux_modules(release):
    helpers = sorted(p.stem for p in release.glob("*.py"))
    assert "visible_checks" in helpers
    proc = _simulated("win32", f"sys.path.insert(0, {str(release)!r})\n"
                               f"for name in {helpers!r}:\n    __import__(name)\n"
                               "print(json.dumps(sorted(sys.modules)))\n".replace("json.", "__import__('json').")
                      , cwd=release)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = set(json.loads(proc.stdout.splitlines()[-1]))
    assert set(helpers) <= loaded
