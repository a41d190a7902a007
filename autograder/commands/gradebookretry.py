"""When nbgrader's gradebook cannot be written: a write retried while another writer holds the gradebook, and
why one failed named in one line (another writer, a full disk, the database itself)."""
from __future__ import annotations

import contextlib
import errno
import os
import time

from .gradebook import SQLITE, Location, redact


class GradebookError(Exception):
    """The gradebook cannot be written now: a run stops (str() is one line for the instructor)."""


class GradebookBusy(GradebookError):
    """Another writer held the gradebook for longer than the run would wait."""


class DiskFull(GradebookError):
    """No space left for the gradebook (or the reports beside it)."""


BUSY = ("database is locked", "database table is locked", "unique constraint failed", "duplicate key value")
BUSY_SQLSTATES = {"55P03", "40P01", "40001", "23505"}  # PostgreSQL: lock not available, deadlock, serialization, unique
FULL = ("database or disk is full", "disk i/o error", "no space left")
FULL_SQLSTATES = {"53100"}  # PostgreSQL: disk full


def _chain(exc: BaseException):
    """exc and the exceptions it was raised from (nbgrader wraps SQLAlchemy's, which wraps the driver's)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "orig", None)


def _kind(exc: BaseException) -> str:
    """"busy", "full", "database" (another failure of the gradebook) or "" (not the gradebook's)."""
    kinds = set()
    for e in _chain(exc):
        text, state = str(e).lower(), getattr(e, "sqlstate", None)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return "full"
        if state in FULL_SQLSTATES or any(m in text for m in FULL):
            return "full"
        if state in BUSY_SQLSTATES or any(m in text for m in BUSY):
            kinds.add("busy")
        module = type(e).__module__.split(".")[0]
        if module in ("sqlalchemy", "sqlite3", "psycopg", "psycopg2") or isinstance(e, OSError) or (
                module == "nbgrader" and type(e).__name__ == "InvalidEntry"):
            kinds.add("database")
    return "busy" if "busy" in kinds else "database" if "database" in kinds else ""


def holders(location: Location) -> list[str]:
    """The other processes that have a SQLite gradebook open ("pid N (command)"); [] for a server."""
    if not location.db_url.startswith(SQLITE):
        return []
    db = os.path.realpath(location.db_url[len(SQLITE):].split("?")[0])
    names = {db, db + "-journal", db + "-wal"}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in names for fd in os.listdir(f"/proc/{pid}/fd")):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = " ".join(f.read().replace(b"\0", b" ").decode(errors="replace").split())  # one line
                found.append(f"pid {pid} ({cmd[:80]})")
    return found


def retrying(location: Location, action, wait: float, check=None):
    """action(), retried with back-off while another writer holds the gradebook, for up to `wait` seconds
    (calling `check()` before each pause: it may raise to stop the run). Raises GradebookBusy, DiskFull
    or GradebookError with one line; nothing of a failed try stays written (each write is one transaction)."""
    deadline, delay = time.monotonic() + wait, 0.1
    while True:
        try:
            return action()
        except Exception as exc:
            kind = _kind(exc)
            if not kind:
                raise  # not the gradebook's failure: a bug, shown as one
            if kind == "busy" and time.monotonic() + delay < deadline:
                if check:
                    check()
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            first = (str(list(_chain(exc))[-1]).strip().splitlines() or [type(exc).__name__])[0][:200]
            if kind == "full":
                where = next((e.filename for e in _chain(exc) if isinstance(e, OSError) and e.filename), None)
                raise DiskFull(f"the disk is full: {where or location.shown} could not be written; free some space "
                               "and run again") from None
            if kind == "busy":
                who = holders(location)
                raise GradebookBusy(f"the gradebook {location.shown} stayed locked by another writer for {wait:g} s"
                                    + (f" (open in {', '.join(who)})" if who else "")
                                    + ": close it (formgrader, another nbgrader command) or pass a longer "
                                      "--gradebook-wait, then run again") from None
            raise GradebookError(redact(f"the gradebook {location.shown} could not be written: {first}")) from None
