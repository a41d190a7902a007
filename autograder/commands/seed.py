"""grade-class's seed: `python -m autograder.commands.seed CONTROL_FD PARENT_PID`.

A zygote (autograder/worker/zygote.py) started by exec with the zygote's minimal environment
(sandbox/prestart.py), which imports torch once for the whole class and then forks, on request, the zygote of
each grading process (`{"kind": "zygote"}`, as any zygote does) and the grading process itself
(`{"kind": "grader"}`, here): neither imports torch again, and every one of them shares the seed's pages.

A grader request carries four descriptors: the grading process's task pipe, its result pipe, the control socket
of its zygote (forked just before) and a status pipe. The seed forks a monitor, which forks the grading process
(classworker.forked) and writes to the status pipe the grading process's pid, then, once it has ended, its exit
code (grade-class is not its parent, so this is how it learns why a grading process ended: classpool.Forked).

Nothing of the grader passes through the seed: the grading process receives the instructor's environment and
working folder over its task pipe, from grade-class, after the fork. The seed's memory, which every zygote and
worker copies, never holds them (tests/test_seed.py). Each process dies with the one above it: the seed
with grade-class (worker/start.py), the monitor with the seed, the grading process with its monitor.
"""
from __future__ import annotations

import os
import signal
import sys
import traceback

from ..worker import start
from ..worker.sandbox import die_with_parent


def _grading_process(tasks: int, results: int, zygote: int, monitor: int) -> int:
    from . import classworker  # noqa: PLC0415 - in the forked process only: the seed never imports the grader

    try:
        classworker.forked(tasks, results, monitor, zygote)
        return 0
    except BaseException:  # noqa: BLE001 - as an exec'd one would: its traceback on its stderr (AUTOGRADER_DEBUG)
        traceback.print_exc()
        return 1


def _monitor(fds: list[int], seed: int) -> None:
    from .classpool import STATUS  # noqa: PLC0415 - in the monitor only (nothing of the grader in the seed)

    tasks, results, zygote, status = fds
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # (the seed ignores it: its children are reaped by the kernel)
    if not die_with_parent(seed):
        return
    me = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(status)
        os._exit(_grading_process(tasks, results, zygote, me))
    for fd in (tasks, results, zygote):
        os.close(fd)
    os.write(status, STATUS.pack(pid))
    _, how = os.waitpid(pid, 0)
    os.write(status, STATUS.pack(os.waitstatus_to_exitcode(how)))


def fork_grader(fds: list[int], control) -> None:
    """The seed's handler of a grader request (the seed closes `fds` on return)."""
    if len(fds) != 4:
        return
    seed = os.getpid()
    if os.fork() == 0:
        try:
            control.close()  # (the seed's socket to grade-class: not the monitor's, nor the grading process's)
            _monitor(fds, seed)
        finally:
            os._exit(0)


def main(control_fd: int, parent: int) -> None:
    start.main(control_fd, parent, {"grader": fork_grader})


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
