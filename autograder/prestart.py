"""Start the zygote (the worker pool) before the trusted process imports torch.

Both processes spend seconds importing torch; started first, the zygote does it at the
same time as the grader instead of after it (`prestart`: one submission, where time to the
result counts). A grading process of a class (classgrade.py) instead forks its zygote once it
has imported torch, before it imports the grader, the checks or the solutions (`prefork`):
one import of torch for the two, since the processes of a class compete for the same cores.
Nothing here imports torch until `prefork` does.
"""
from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
_started: tuple[socket.socket, subprocess.Popen | Forked] | None = None


class Forked:
    """A zygote forked from this process: what Zygote.close needs of a Popen."""

    def __init__(self, pid: int):
        self.pid = pid

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self) -> None:
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def launch() -> tuple[socket.socket, subprocess.Popen]:
    """A new zygote process and our end of its control socket."""
    control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": PACKAGE_PARENT,
           "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    # Where the GPU stage finds the CUDA driver and which device it may use (the dynamic loader
    # reads these when the zygote starts; a worker's emptied environment does not change that).
    env.update({k: os.environ[k] for k in ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES") if k in os.environ})
    proc = subprocess.Popen(
        # (worker/start.py: the zygote dies with this process, SIGKILL included, and with it every worker)
        [sys.executable, "-m", "autograder.worker.start", str(theirs.fileno()), str(os.getpid())],
        pass_fds=[theirs.fileno()], env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=None if os.environ.get("AUTOGRADER_DEBUG") else subprocess.DEVNULL, start_new_session=True,
    )
    theirs.close()
    return control, proc


def fork() -> tuple[socket.socket, Forked]:
    """A zygote forked from this process, which imports torch and the worker's modules first (and has
    imported nothing of the grader's checks or solutions yet). The child keeps only its control
    socket (0, 1 and 2 on /dev/null), leads its own session, dies with this process, and serves."""
    from .worker import sandbox, zygote  # noqa: PLC0415 - torch: seconds, the one import the two processes share

    control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the zygote
        try:
            keep = theirs.fileno()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.closerange(3, keep)
            os.closerange(keep + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
            os.setsid()
            os.chdir("/")
            if sandbox.die_with_parent(parent):  # (lifetime.py: the zygote dies with its grading process)
                zygote.main(keep)
        finally:
            os._exit(0)
    theirs.close()
    return control, Forked(pid)


def prestart() -> None:
    global _started
    if _started is None:
        _started = launch()


def prefork() -> None:
    """Fork the zygote of this grading process now (see the module's note)."""
    global _started
    if _started is None:
        _started = fork()


def take() -> tuple[socket.socket, subprocess.Popen | Forked]:
    """The prestarted zygote if there is one (each is taken once), else a new one."""
    global _started
    started, _started = _started, None
    return started or launch()
