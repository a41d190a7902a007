"""Start the zygote (the worker pool) early, from `exec`, with nothing of the grader in it.

Both processes spend seconds importing torch; started first, the zygote does it at the same
time as the grader instead of after it (`prestart`: one submission, where time to the result
counts; `prefork`: a process that grades many, before it imports the grader).

The zygote is always a fresh program (`subprocess`: fork, then exec at once), never a fork of
the grading process: a fork would carry the grader's memory into every worker, the
instructor's original environment block included (readable through /proc/self/environ once
the worker makes itself dumpable), and the shared mappings of the pool's semaphores
(/dev/shm/sem.mp-*), which a student could zero to stop the whole class. After exec, a worker
holds only the zygote's minimal environment (`ZYGOTE_ENV`), no shared mapping, and one socket.

grade-class starts one such zygote by exec, the seed (`launch(SEED)`), and has it fork the zygote of each
grading process (`zygote_from`, worker/zygote.py) and each grading process too (commands/seed.py): torch is
imported once for the whole class, and the grading processes, zygotes and workers share its pages. A forked zygote is a copy of the
seed, never of a grader: the same minimal environment, no shared mapping, and one socket, whose other end
only its grading process holds (`adopt`); it ends when that socket closes.
"""
from __future__ import annotations

import array
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)
# Everything of the grader's environment the zygote (and so every worker's memory) receives. LD_LIBRARY_PATH and
# CUDA_VISIBLE_DEVICES: where the GPU stage finds the CUDA driver and which device it may use (the dynamic
# loader reads them when the zygote starts; a worker's emptied os.environ does not change that).
ZYGOTE_ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PACKAGE_PARENT, "OMP_NUM_THREADS": "1",
              "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
PASSED_THROUGH = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")
_started: tuple[socket.socket, subprocess.Popen | None] | None = None


ZYGOTE = "autograder.worker.start"
SEED = "autograder.commands.seed"  # a zygote that also forks grade-class's grading processes


def launch(program: str = ZYGOTE) -> tuple[socket.socket, subprocess.Popen]:
    """A new zygote process (`program`: ZYGOTE, or SEED for grade-class) and our end of its control socket."""
    control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    env = dict(ZYGOTE_ENV)
    env.update({k: os.environ[k] for k in PASSED_THROUGH if k in os.environ})
    proc = subprocess.Popen(
        # (worker/start.py: the zygote dies with this process, SIGKILL included, and with it every worker)
        [sys.executable, "-m", program, str(theirs.fileno()), str(os.getpid())],
        pass_fds=[theirs.fileno()], close_fds=True, env=env, cwd="/", stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=None if os.environ.get("AUTOGRADER_DEBUG") else subprocess.DEVNULL,
        start_new_session=True,
    )
    theirs.close()
    return control, proc


def prestart() -> None:
    global _started
    if _started is None:
        _started = launch()


def prefork() -> None:
    """A grading process of a class: start its zygote now, before the grader is imported (the name is the
    historical one: the zygote is no longer forked from this process, see the module's note)."""
    prestart()


def take() -> tuple[socket.socket, subprocess.Popen | None]:
    """The prestarted zygote if there is one (each is taken once), else a new one."""
    global _started
    started, _started = _started, None
    return started or launch()


def plain_frame(message: dict) -> bytes:
    """worker/protocol.py's frame of a message that holds no tensor (`protocol.encode`), built here without
    importing torch: grade-class's own process never imports it (tests/test_start_cost.py)."""
    text = json.dumps(message, separators=(",", ":")).encode()
    body = struct.pack("!I", 2) + b"[]" + struct.pack("!I", len(text)) + text
    body += bytes(-len(body) % 64)
    return struct.pack("!Q", len(body)) + body


def zygote_from(seed: socket.socket) -> socket.socket:
    """A new zygote, forked by the seed (a zygote started by `launch`) as soon as the seed has imported torch;
    returns our end of its control socket at once, for a grading process to `adopt`."""
    control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        ask(seed, "zygote", [theirs.fileno()])
    finally:
        theirs.close()
    return control


def ask(seed: socket.socket, kind: str, fds: list[int]) -> None:
    """Send the seed a request of `kind` with the descriptors `fds` (ours stay open: the caller closes them)."""
    seed.sendmsg([plain_frame({"kind": kind})], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def adopt(fd: int) -> None:
    """A grading process of a class: its zygote is the one grade-class had the seed fork for it (control socket
    `fd`), not one of its own. Not passed on to any process this one may start: the zygote ends when it closes."""
    global _started
    os.set_inheritable(fd, False)
    _started = (socket.socket(fileno=fd), None)
