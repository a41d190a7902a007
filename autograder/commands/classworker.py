"""A grading process of grade-class: `python -m autograder.commands.classworker TASKS_FD RESULTS_FD PARENT_PID`.

Started by classpool.py (the protocol is there). It dies with grade-class (parent-death signal) and
leaves stop signals to it; it starts its zygote (prestart: by exec, before the grader is imported), warms
one Grader, says it is ready, then grades one submission folder per message until its pipe closes.
"""
from __future__ import annotations

import signal
import sys

from . import classpool
from ..sandbox import prestart
from ..sandbox.lifetime import STOP_SIGNALS, init_pool_process
from ..foundation.limits import SandboxUnavailable


def main(tasks: int, results: int, parent: int) -> None:
    init_pool_process(parent)  # dies with grade-class; Ctrl-C and SIGHUP are the parent's to handle
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # (blocked since its start: ignored from here)
    limits = classpool.recv(tasks)
    prestart.prefork()  # the zygote imports torch while this process imports the grader
    from .classgrade import grade_folder  # noqa: PLC0415 - after the zygote's start: torch, seconds
    from ..grading.grade import Grader  # noqa: PLC0415

    with Grader(limits) as grader:
        grader.zygote.ping()  # (so that a submission's deadline never counts the zygote's import of torch)
        classpool.send(results, ("ready",))
        while True:
            try:
                student, (folder, assignment, compared) = classpool.recv(tasks)
            except EOFError:
                return
            try:
                reply = ("ok", grade_folder(folder, assignment, grader, compared))
            except SandboxUnavailable as exc:
                reply = ("refused", str(exc))
            except Exception as exc:  # noqa: BLE001 - the grader's own failure: reported by grade-class
                reply = ("error", f"{type(exc).__name__}: {str(exc)[:300]}")
            classpool.send(results, reply)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
