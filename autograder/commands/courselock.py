"""One writer per course: a lock on the course directory, held while grade-class or grade-gpu runs.

The lock is an flock(2) on COURSE/.autograder.lock. The kernel releases it when its holder
ends, however it ends (SIGKILL included): a lock is never left stale. The file also says who
holds it (pid, command, user, since when), so that a second run can name the first.
"""
from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import time
from pathlib import Path

LOCK_NAME = ".autograder.lock"


class CourseBusy(Exception):
    """Another run holds the course; str() is one line naming it."""


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return (f"{info['command']} (pid {info['pid']}, user {info['user']}, running since "
                f"{time.strftime('%H:%M:%S', time.localtime(info['started']))})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another grading run"


@contextlib.contextmanager
def hold(course: Path, command: str, wait: float = 0.0):
    """Hold the course's lock for the block; wait up to `wait` seconds for it, then CourseBusy."""
    path = Path(course) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise CourseBusy(f"{path}: the course's lock cannot be created ({exc.strerror})") from None
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise CourseBusy(f"{course} is being graded by {_holder(fd)}: wait for it to finish (or pass "
                                     "--wait SECONDS to wait for it)") from None
                time.sleep(0.2)
        info = {"pid": os.getpid(), "command": command, "started": time.time(), "user": _user()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
