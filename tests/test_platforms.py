"""Platforms without the Linux sandbox (macOS, Windows): the grader imports, `grade` and `grade-class` refuse in one
line pointing to Linux, WSL2 or a container, and `make grade` grades a student's own work without the sandbox; the
released notebooks' helpers need nothing but torch (no /proc, no Linux-only module).

The platform is simulated in a subprocess: sys.platform set after torch is imported (torch's own import of urllib
reads it), the Linux-only modules made unimportable, and /proc unreadable. One such process per platform for the
module, torch imported once: each command runs in a child forked from it, as `python -c` would run it after the
simulation (its own output, exit status and working folder; what the simulation itself printed comes first).
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
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
# Before the simulation: what the children are forked with (Windows' has no os.fork) and the channel of requests.
FORK_FIRST = """
import json as _json, os as _os
_fork, _reply = _os.fork, int(_os.environ.pop("SIMULATED_REPLY_FD"))
"""
# After it: one request a line on stdin ({"code", "cwd", "out", "err"}), each run in a forked child as `python -c`
# runs its code (in __main__, '' first on sys.path, stdout and stderr to the request's files); its exit status back.
CHILDREN = """
for _line in sys.stdin:
    _request = _json.loads(_line)
    _pid = _fork()
    if _pid == 0:
        _os.chdir(_request["cwd"])
        for _fd, _name in ((1, "out"), (2, "err")):
            _os.dup2(_os.open(_request[_name], _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC, 0o600), _fd)
        _os.dup2(_os.open(_os.devnull, _os.O_RDONLY), 0)
        sys.stdin = _open(_os.devnull)
        exec(compile(_request["code"], "<string>", "exec"), globals())
        sys.exit(0)
    _os.write(_reply, (str(_os.waitstatus_to_exitcode(_os.waitpid(_pid, 0)[1])) + "\\n").encode())
"""


class Simulated:
    """A process that simulated `platform` once (torch imported): run(code, cwd) forks a child for each command."""

    def __init__(self, platform: str, folder: Path):
        self.folder, self.count = folder, 0
        read, write = os.pipe()
        self.prelude = (folder / "prelude.out", folder / "prelude.err")
        with open(self.prelude[0], "w") as out, open(self.prelude[1], "w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-c", FORK_FIRST + SIMULATE.format(platform=platform) + CHILDREN], cwd=REPO,
                stdin=subprocess.PIPE, stdout=out, stderr=err, text=True, pass_fds=(write,),
                env={**os.environ, "SIMULATED_REPLY_FD": str(write)})
        os.close(write)
        self.replies = os.fdopen(read)

    def run(self, code: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
        self.count += 1
        out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
        self.process.stdin.write(json.dumps({"code": code, "cwd": str(cwd), "out": str(out), "err": str(err)}) + "\n")
        self.process.stdin.flush()
        if not select.select([self.replies], [], [], timeout)[0]:
            raise TimeoutError(f"no answer within {timeout:.0f} s from the simulated platform's child")
        reply = self.replies.readline()
        prelude_out, prelude_err = (path.read_text() for path in self.prelude)
        assert reply, f"the simulated platform's process ended: {prelude_err[-2000:]}"
        return subprocess.CompletedProcess(code, int(reply), prelude_out + out.read_text(), prelude_err + err.read_text())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(60)
        self.replies.close()


@pytest.fixture(scope="module")
def simulated():
    """platform -> its Simulated process, started when first asked for; all stopped at the module's end."""
    folder = Path(tempfile.mkdtemp(prefix="autograder-platforms-"))
    started: dict[str, Simulated] = {}

    def run(platform: str, code: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
        if platform not in started:
            (folder / platform).mkdir()
            started[platform] = Simulated(platform, folder / platform)
        return started[platform].run(code, cwd)

    try:
        yield run
    finally:
        for process in started.values():
            process.close()
        shutil.rmtree(folder, ignore_errors=True)


def _cli(argv: list[str]) -> str:
    return f"from autograder.commands.cli import main\nsys.exit(main({argv!r}))\n"


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_the_graders_modules_import_on_a_platform_without_the_linux_sandbox(simulated, platform):
    proc = simulated(platform, "import autograder.commands.cli, autograder.foundation.hosts\n"
                                "from autograder.foundation.limits import platform_refusal\n"
                                "print(str(platform_refusal()))\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"the sandbox needs Linux and this is {platform}" in proc.stdout


@pytest.mark.parametrize("platform,command", [(p, c) for p in ("darwin", "win32") for c in (
    ["grade", "solutions/attention.py"], ["grade-class", "no-such-course"])] + [("win32", ["grade-workspace"])],
                         ids=["macos-grade", "macos-grade-class", "windows-grade", "windows-grade-class",
                              "windows-make-grade"])
def test_grade_and_grade_class_off_linux_refuse_in_one_line_pointing_to_linux_wsl2_or_a_container(simulated, platform,
                                                                                                 command):
    """(and on Windows, where no worker can start, make grade too)"""
    proc = simulated(platform, _cli(command))
    assert proc.returncode == 2, (proc.stdout[-1000:], proc.stderr[-1000:])
    out = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(out) == 1, out
    assert f"refusing to grade: the sandbox needs Linux and this is {platform}" in out[0]
    assert "Linux" in out[0] and "WSL2" in out[0] and "container" in out[0] and "Traceback" not in out[0]


def test_make_grade_on_macos_grades_the_students_own_work_saying_so_in_one_line(simulated, tmp_path):
    ws = tmp_path / "workspace"
    (ws / "self_attention").mkdir(parents=True)
    for nb in (REPO / "assignments" / "self_attention").iterdir():
        if nb.is_file():
            (ws / "self_attention" / nb.name).write_bytes(nb.read_bytes())
    proc = simulated("darwin", _cli(["grade-workspace", str(ws), "--assignment", "self_attention"]))
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = proc.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("make grade: grading without the sandbox"), said
    assert "needs Linux and this is darwin" in said[0] and "your own machine" in said[0]
    assert "0/100" in proc.stdout


@pytest.mark.parametrize("release", RELEASES, ids=[r.name for r in RELEASES])
def test_each_releases_helper_modules_import_with_only_torch_no_proc_and_no_linux_modules(simulated, release):
    helpers = sorted(p.stem for p in release.glob("*.py"))
    assert "visible_checks" in helpers
    proc = simulated("win32", f"sys.path.insert(0, {str(release)!r})\n"
                               f"for name in {helpers!r}:\n    __import__(name)\n"
                               "print(json.dumps(sorted(sys.modules)))\n".replace("json.", "__import__('json').")
                      , cwd=release)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = set(json.loads(proc.stdout.splitlines()[-1]))
    assert set(helpers) <= loaded
