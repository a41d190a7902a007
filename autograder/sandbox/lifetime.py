"""How long the grader's processes live: they end with the process that started them, and a run
stops at once, cleanly, on SIGINT or SIGTERM.

The chain of processes of a class grading, and what ends each one whatever kills the one above:

    grade-class (this process)         SIGINT/SIGTERM/SIGHUP: `Stopper` stops the queue, kills the processes
      └─ seed (commands/seed.py)       parent-death signal, set before it imports torch (worker/start.py)
           ├─ monitor                  parent-death signal; reports its grading process's pid and exit code
           │    └─ grading process (one per core, classworker.py; the stop signals ignored: grade-class's)
           │                           parent-death signal (SIGKILL), set in `init_pool_process`
           └─ zygote of a grading process (own session)   ends when its grading process's socket closes
                └─ sandboxed worker    parent-death signal, and its own PID namespace: its death ends
                                       every process the student's code started

(nbgrader's plugin: the same chain below nbgrader's process, with one grading process.)

So a SIGKILL to grade-class alone, which no handler can see, still takes every process down
within moments; and a grading process never sees Ctrl-C itself (the parent decides, and says so
in one line).
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading

from ..worker.sandbox import die_with_parent

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Exception):
    """A stop signal arrived; the run ends after what it was writing is written."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def init_pool_process(parent: int) -> None:
    """In a grading pool process, first thing: die with the parent, leave stop signals to it."""
    if not die_with_parent(parent):
        os._exit(1)
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


class Stopper:
    """While active, a stop signal is noted, never raised where it lands (inside an import or a
    database driver it would leave them half done): the run calls `check()` where stopping is safe
    (between results, several times a second while it waits), which raises Interrupted. Inside
    `critical()` (a gradebook transaction and its state file) the check waits for the block's end."""

    def __init__(self) -> None:
        self.pending: int | None = None
        self.depth = 0
        self.eager_depth = 0
        self.saved: dict = {}

    def _handle(self, signum, _frame) -> None:
        if self.pending is None:
            self.pending = signum
        if self.eager_depth and not self.depth:
            raise Interrupted(signum)  # (inside eager(): nothing there needs finishing, the process ends)

    @contextlib.contextmanager
    def eager(self):
        """A stop signal raises where it lands, for work whose interruption leaves nothing half done that
        matters (the first import of nbgrader, a read of the gradebook): seconds of it on a busy machine
        would otherwise pass before the next check()."""
        self.check()
        self.eager_depth += 1
        try:
            yield
        finally:
            self.eager_depth -= 1

    def check(self) -> None:
        if self.pending is not None and not self.depth:
            raise Interrupted(self.pending)

    def __enter__(self) -> Stopper:
        if threading.current_thread() is threading.main_thread():  # (only there can Python take signals)
            self.saved = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self.saved.items():
            signal.signal(s, handler)

    @contextlib.contextmanager
    def critical(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        self.check()


def kill_processes(pids) -> None:
    """SIGKILL each process (the ones below it follow by their parent-death signal)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
