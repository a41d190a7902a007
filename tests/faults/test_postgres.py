"""The gradebook on a real PostgreSQL server (a course shared by several instructors on JupyterHub):
nbgrader releases into it, grade-class grades the class into it, a run stopped by a signal resumes,
and the rows are those a clean run writes into SQLite.

The server is Debian's `postgresql` (installed here when missing: CI is a clean machine), started
for this module as the `postgres` user on a Unix socket in a temporary folder, no TCP port. The
test is skipped, with the reason, only when no server can be started at all.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.commands import gradebook
from autograder.commands.classgrade import Settings, Stopped, grade_class
from examples.make_class import nbgrader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from faultkit import STUDENTS, dump

APT_TIMEOUT = 600


def _server_binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def _install() -> str | None:
    """Debian's postgresql, when it is missing; None when it is there, else why not."""
    if _server_binaries():
        return None
    if os.getuid() != 0 or not shutil.which("apt-get"):
        return "postgresql is not installed and this user cannot install it (needs root and apt-get)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=APT_TIMEOUT)
        if proc.returncode != 0:
            return f"`{' '.join(cmd)}` failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
    return None if _server_binaries() else "postgresql was installed but has no pg_ctl"


def _as(user: str, *cmd: str) -> subprocess.CompletedProcess:
    entry = pwd.getpwnam(user)
    return subprocess.run(["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups", *cmd],
                          capture_output=True, text=True, timeout=120, cwd="/")


@pytest.fixture(scope="module")
def postgres_url():
    """postgresql+psycopg://... of a fresh server's database `gradebook`, on a socket in a temp folder."""
    why = _install()
    if why:
        pytest.skip(f"no PostgreSQL server: {why}")
    bin_dir = _server_binaries()
    user = next((u for u in ("postgres", "nobody") if _user_exists(u)), None)
    if os.getuid() == 0 and user is None:
        pytest.skip("no PostgreSQL server: no non-root user (postgres, nobody) to run it as")
    home = Path(tempfile.mkdtemp(prefix="autograder-pg-"))
    home.chmod(0o755)
    run = (lambda *cmd: _as(user, *cmd)) if os.getuid() == 0 else (
        lambda *cmd: subprocess.run(cmd, capture_output=True, text=True, timeout=120))
    if os.getuid() == 0:
        shutil.chown(home, user)
    data = home / "data"
    started = False
    try:
        for cmd in ([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                    [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(home / "log"), "-w", "-t", "60", "-o",
                     f"-k {home} -c listen_addresses= -c fsync=off -c full_page_writes=off", "start"]):
            proc = run(*cmd)
            if proc.returncode != 0:
                log = (home / "log").read_text() if (home / "log").exists() else ""
                pytest.skip(f"no PostgreSQL server: {Path(cmd[0]).name} failed: "
                            f"{(proc.stderr + proc.stdout + log).strip().splitlines()[-1:]}")
        started = True
        import psycopg

        with psycopg.connect(host=str(home), user="postgres", dbname="postgres", autocommit=True) as db:
            db.execute("CREATE DATABASE gradebook")
        yield f"postgresql+psycopg://postgres@/gradebook?host={home}"
    finally:
        if started:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(home, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture(scope="module")
def pg_course(postgres_url, copy_course) -> Path:
    """The pristine class, its configuration pointing at the server, released there by nbgrader."""
    course = copy_course("postgres")
    with open(course / "nbgrader_config.py", "a") as f:
        f.write(f"c.CourseDirectory.db_url = {postgres_url!r}\n")
    nbgrader(course, "generate_assignment", "self_attention", "--force")
    assert gradebook.locate(course).db_url == postgres_url
    return course


def test_a_class_graded_into_postgres_resumes_after_a_signal_and_matches_a_clean_sqlite_run(
        pg_course, postgres_url, memo, clean, monkeypatch):
    writes = []
    real = gradebook.Writer.write_part_grades

    def write_then_interrupt(writer, assignment, student, *args, **kwargs):  # Ctrl-C while the first is written
        real(writer, assignment, student, *args, **kwargs)
        writes.append(student)
        if len(writes) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(gradebook.Writer, "write_part_grades", write_then_interrupt)
    with pytest.raises(Stopped) as stopped:
        grade_class(pg_course, settings=Settings(progress=False), grader=memo)
    assert stopped.value.exit_code == 130 and "interrupted by SIGINT: 1 submission graded" in str(stopped.value)
    assert list(dump(postgres_url)) == [(writes[0], "self_attention")]  # that student whole, nobody else

    again = {o.student: o.status for o in grade_class(pg_course, settings=Settings(progress=False), grader=memo)}
    assert again == {s: "skipped" if s == writes[0] else "graded" for s in STUDENTS}
    assert dump(postgres_url) == clean
    third = grade_class(pg_course, settings=Settings(progress=False), grader=memo)
    assert {o.status for o in third} == {"skipped"}
