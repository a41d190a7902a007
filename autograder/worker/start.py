"""The zygote's entry point: `python -m autograder.worker.start CONTROL_FD PARENT_PID`.

It first asks the kernel to SIGKILL this process when the grader that started it dies (by any
signal, SIGKILL included), then imports the zygote, which spends seconds importing torch: a
grader killed during those seconds leaves nothing behind. Each worker the zygote forks dies with
the zygote in turn (zygote.py), and takes its PID namespace with it.
"""
from __future__ import annotations

import resource
import sys

from .sandbox import die_with_parent


def main(control_fd: int, parent: int, handlers: dict | None = None) -> None:
    """`handlers`: what the zygote serves besides workers (grade-class's seed, autograder/commands/seed.py)."""
    if not die_with_parent(parent):
        return  # the grader is already gone: nothing to serve
    for which in (resource.RLIMIT_DATA, resource.RLIMIT_AS):  # the grader's own memory limit is not the workers'
        resource.setrlimit(which, (resource.getrlimit(which)[1],) * 2)
    from . import zygote  # noqa: PLC0415 - only now: importing torch takes seconds

    zygote.main(control_fd, handlers)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
