"""Start the zygote (the worker pool) before the trusted process imports torch.

Both processes spend seconds importing torch; started first, the zygote does it at the
same time as the grader instead of after it. Nothing here imports torch.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
_started: tuple[socket.socket, subprocess.Popen] | None = None


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


def prestart() -> None:
    global _started
    if _started is None:
        _started = launch()


def take() -> tuple[socket.socket, subprocess.Popen]:
    """The prestarted zygote if there is one (each is taken once), else a new one."""
    global _started
    started, _started = _started, None
    return started or launch()
