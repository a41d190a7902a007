"""The sandbox and hostile suites again, as an ordinary user: the way a university's JupyterHub runs the
grader (the instructor is not root). CI runs as root; there the test creates a system user, copies what
the suites need into a folder that user can read, and runs them as that user (setpriv) in a mount
namespace where the Python installation is reachable even when it lives under /root. Run as an ordinary
user already, it runs them as that user.

Inside: every layer of the sandbox from inside a worker (tests/test_sandbox.py: nobody, no capability, no
write outside /tmp, no cover unmounted, every protection on), the attacks that worked on a grader that
was not root (unmount every cover and read the solutions; search the disk; write outside; the instructor's
keyring, io_uring, perf events, userfaultfd and user namespaces; millions of files in /tmp), the worker's
image (no secret of the instructor's environment, no shared mapping, no capability), and a grading process's
memory limit, which its workers must not inherit. Apart: the submitted-files suite (tests/test_submitted_links.py:
links out of a submission and copies refused by grade, grade-class, nbgrader collect and autograde), the hostile
class and the feedback pages' limits (tests/test_feedback_limits.py), in a course the user builds. And the browser
tests of formgrader and the feedback pages (tests/browser/): Chromium, run by the user, in its own sandbox (no
`--no-sandbox`, which only root needs), opens a hostile written answer in formgrader served by the user's lab, and a
feedback page with a student's scripts.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.runcache import machine_wide

REPO = Path(__file__).resolve().parent.parent
USER = "autograder-test"
INNER = ["tests/test_sandbox.py", "tests/test_hostile.py", "tests/test_seed.py",  # the whole sandbox, hostile and seed suites
         "tests/test_hfshell.py",  # the worker's view of the venv without transformers, its shell in place
         "tests/test_worker_image.py::test_a_worker_of_grade_holds_no_secret_no_shared_memory_and_no_capability",
         "tests/test_trusted_memory.py::test_a_grading_process_caps_its_own_memory_and_its_workers_do_not_inherit_it"]
# The submitted-files suite (links, copies) with grade, grade-class and nbgrader: a course of its own, built by
# nbgrader as the user from the first assignment's instructor notebooks and the course's configuration.
LINKS = ["tests/test_submitted_links.py", "tests/test_hostile_class.py",
         "tests/test_feedback_limits.py"]  # (each feedback page rendered in a child under a deadline and RLIMIT_DATA)
COPIED = ["autograder", "solutions", "examples", "tests/hostile", "tests/conftest.py", "tests/runcache.py",
          "tests/test_sandbox.py", "tests/test_hostile.py", "tests/test_seed.py", "tests/test_hfshell.py", "tests/test_worker_image.py", "tests/test_trusted_memory.py",
          "pyproject.toml", *LINKS, "source/self_attention", "nbgrader_config.py"]

# The browser tests of formgrader and the feedback pages (Debian's Chromium installed first, as root, if missing),
# and what they need beside the above (course.lab serves formgrader).
BROWSER = ["tests/browser/test_feedback_page_in_chromium.py", "tests/browser/test_formgrader_hostile_answer.py"]
COPIED += ["tests/browser", "course"]


def _ensure_user() -> None:
    with machine_wide(f"users-{USER}"):  # (another run on this machine creating it at the same moment)
        if subprocess.run(["id", "-u", USER], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                           check=True, capture_output=True)


def _copy(dest: Path) -> None:
    for rel in COPIED:
        src, out = REPO / rel, dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, out)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def _unreachable_tops(paths) -> dict[str, set[str]]:
    """For each path the user could not reach (a folder on the way without o+x, such as /root): the topmost
    such folder -> the paths below it to bind back."""
    tops: dict[str, set[str]] = {}
    for path in paths:
        parts = Path(path).parts
        for i in range(2, len(parts)):
            folder = str(Path(*parts[:i]))
            if not os.stat(folder).st_mode & 0o001:
                tops.setdefault(folder, set()).add(path)
                break
    return tops


def _as_user_script(argv: list[str]) -> str:
    """bash: in a private mount namespace, cover each unreachable folder with a readable tmpfs, bind what Python
    needs back, then become the user and run `argv`."""
    needed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(
        sys.executable)))}
    lines = ["set -e", "stage=$(mktemp -d)"]
    for n, (top, subs) in enumerate(sorted(_unreachable_tops(sorted(needed)).items())):
        for m, sub in enumerate(sorted(subs)):
            lines.append(f"mkdir -p $stage/{n}_{m} && mount --bind {shlex.quote(sub)} $stage/{n}_{m}")
        lines.append(f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(top)}")
        for m, sub in enumerate(sorted(subs)):
            lines.append(f"mkdir -p {shlex.quote(sub)} && mount --bind $stage/{n}_{m} {shlex.quote(sub)}")
    lines.append(f"exec setpriv --reuid={USER} --regid={USER} --clear-groups --inh-caps=-all "
                 + " ".join(map(shlex.quote, argv)))
    return "\n".join(lines)


def run_as_user(tests: list[str], timeout: float) -> subprocess.CompletedProcess:
    """pytest on `tests` as the ordinary user, in a copy of what the suites need (COPIED)."""
    home = Path(tempfile.mkdtemp(prefix="autograder-unprivileged-"))
    try:
        _copy(home / "repo")
        (home / "repo" / "build").mkdir()
        (home / "repo" / "build").chmod(0o777)  # (the browser tests' screenshots and logs)
        env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        pytest_argv = ["sh", "-c", 'echo "ran as uid $(id -u)"; exec "$@"', "sh",
                       sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *tests]
        if os.getuid() == 0:
            _ensure_user()
            home.chmod(0o755)
            cmd = ["unshare", "--mount", "--propagation", "private", "bash", "-c", _as_user_script(pytest_argv)]
        else:
            cmd = pytest_argv
        return subprocess.run(cmd, cwd=home / "repo", env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def user_run():
    """INNER, LINKS and BROWSER in one pytest run as the user: one copy, one collection, one grader warmed for all
    (a run of each would copy, collect, build and warm them again)."""
    from tests.browser.conftest import ensure_tools

    ensure_tools()  # (as root: Debian's Chromium, its driver and the fonts, before the user needs them)
    return run_as_user(["-vv", *INNER, *LINKS, *BROWSER], 1200)  # (-q -vv: one line per test, its outcome)


OUTCOME = re.compile(r"^(tests/\S+?)::(.*) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")


def assert_files_passed_as_an_ordinary_user(proc: subprocess.CompletedProcess, files: list[str]) -> None:
    """Every test of `files` (a file, or a file::test; lines of a `pytest -v` run's output) ran and passed, as a
    user other than root."""
    out = proc.stdout + proc.stderr
    assert "ran as uid " in out, out[-4000:]
    uid = int(out.split("ran as uid ", 1)[1].split()[0])
    assert uid != 0, "the inner suite ran as root"
    wanted = {entry.split("::", 1)[0]: entry for entry in files}
    ran = {(m[1], m[2]): m[3] for m in map(OUTCOME.match, proc.stdout.splitlines())
           if m and m[1] in wanted and (wanted[m[1]] == m[1] or wanted[m[1]] == f"{m[1]}::{m[2]}")}
    assert {file for file, _ in ran} == set(wanted), (sorted(ran), out[-3000:])
    assert set(ran.values()) == {"PASSED"}, ({t: o for t, o in ran.items() if o != "PASSED"}, out[-3000:])


def test_the_sandbox_and_hostile_suites_pass_as_an_ordinary_user(user_run):
    assert_files_passed_as_an_ordinary_user(user_run, INNER)


def test_linked_and_copied_notebooks_score_0_as_an_ordinary_user_too(user_run):
    """tests/test_submitted_links.py (grade, grade-class, nbgrader collect and autograde), the class with a hostile
    student of each kind (tests/test_hostile_class.py) and the feedback pages' deadline and memory limit
    (tests/test_feedback_limits.py) as a hub's instructor."""
    assert_files_passed_as_an_ordinary_user(user_run, LINKS)


def test_the_browser_tests_of_formgrader_and_the_feedback_pages_pass_as_an_ordinary_user(user_run):
    """tests/browser/'s formgrader (a hostile written answer, graded in the user's lab) and feedback page tests,
    with Chromium started by the user in its own sandbox."""
    assert_files_passed_as_an_ordinary_user(user_run, BROWSER)
