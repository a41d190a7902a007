"""Stage 2 of grading, the trusted side of the worker pool: run the student's code in a sandboxed worker.

The trusted side starts a zygote (a fork server that has imported torch), asks it for
a fresh sandboxed worker per submission, loads the extracted code there, and sends it
requests. Replies are plain data; everything else stays in the worker behind a handle.
"""
from __future__ import annotations

import array
import functools
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import prestart
from ..foundation.extract import Source
from ..foundation.limits import SandboxUnavailable, platform_refusal, reason, refusal
from ..worker import protocol
from ..worker.borrowed import PIECE
from ..worker.sandbox import SandboxConfig


class WorkerGone(Exception):
    """The worker died (os._exit, a crash, a memory or CPU limit) or was killed."""


class SandboxFailed(WorkerGone):
    """The sandboxed worker did not come up at all: a problem of this machine, not of the student's code."""


class WorkerTimeout(Exception):
    """The worker did not answer within its time limit and was killed."""


class Zygote:
    """A fork server process; one per grading process, reused for every submission."""

    def __init__(self) -> None:
        self.control, self.proc = prestart.take()
        # False: kill_tree returns once its request is sent, and its answer is read before the next request (a
        # grading process of grade-class: the kernel's tear-down of a worker's namespaces, tens of milliseconds,
        # overlaps the next submission's reading and scanning). The zygote serves one request at a time, so the
        # next worker is forked only once every process of the last one has ended, either way.
        self.wait_for_kills = True
        self._unanswered = 0

    def spawn(self, config: SandboxConfig, timeout: float = 120.0, warm: tuple[str, ...] = ()) -> "WorkerProcess":
        """A fresh sandboxed worker; `warm`: the zygote's warm-ups (worker/warmup.py) to run first, once."""
        self.settle()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        data = protocol.encode({"kind": "spawn", "config": config.as_dict(), "warm": list(warm)})
        self.control.settimeout(timeout)  # the first spawn waits for the zygote to import torch
        try:
            self.control.sendmsg([data],
                                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [theirs.fileno()]))])
            reply = self._answer()
        except (OSError, EOFError) as exc:
            raise RuntimeError(f"the worker pool did not start: {exc}") from None
        finally:
            theirs.close()
        if "pid" not in reply:
            raise RuntimeError(f"the worker pool refused: {reply}")
        return WorkerProcess(mine, reply["pid"], zygote=self)

    def ping(self, timeout: float = 300.0) -> None:
        """Wait until the zygote answers (it has imported torch): from then on a worker starts in milliseconds."""
        self.settle()
        self.control.settimeout(timeout)
        try:
            protocol.send(self.control, {"kind": "ping"})
            self._answer()
        except (OSError, EOFError, protocol.ProtocolError) as exc:
            raise RuntimeError(f"the worker pool did not start: {exc}") from None

    def kill_tree(self, pid: int, timeout: float = 10.0) -> int:
        """Ask the zygote to SIGKILL a worker and every process it started (daemons included); the number of
        processes killed (0 without `wait_for_kills`: the answer is read later, by `settle`)."""
        try:
            self.settle(timeout)
            self.control.settimeout(timeout)
            protocol.send(self.control, {"kind": "kill", "pid": pid})
            if not self.wait_for_kills:
                self._unanswered += 1
                return 0
            return int(protocol.recv(self.control).get("killed", 0))
        except (OSError, EOFError, protocol.ProtocolError):
            return 0

    def _answer(self) -> dict:
        """The answer to the request just sent (one to a kill that `settle` gave up waiting for comes first)."""
        reply = protocol.recv(self.control)
        while "killed" in reply:
            reply = protocol.recv(self.control)
        return reply

    def settle(self, timeout: float = 10.0) -> None:
        """Wait for the answers of the kill requests sent without waiting: every process of those workers ended."""
        try:
            while self._unanswered:
                self.control.settimeout(timeout)
                protocol.recv(self.control)
                self._unanswered -= 1
        except (OSError, EOFError, protocol.ProtocolError):
            self._unanswered = 0  # (the zygote is gone: the next request says so)

    def close(self) -> None:
        """End the pool. Its workers were killed with their sessions; the zygote itself holds no
        state, so it is killed rather than left to tear torch down (close to a second). One forked by
        grade-class's seed (prestart.adopt: no process of ours) ends on its own once its socket closes."""
        self.settle()
        self.control.close()
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class WorkerProcess:
    sock: socket.socket
    pid: int
    alive: bool = True
    protections: dict = field(default_factory=dict)
    zygote: "Zygote | None" = field(default=None, repr=False)
    # answers the worker's "piece" messages (a stand-in of a lent function called, worker/borrowed.py) while a reply
    # is awaited: message -> answer (Session.answer_piece); None: such a message breaks the protocol
    lender: "Callable[[dict], dict] | None" = field(default=None, repr=False)

    def request(self, message: dict, timeout: float) -> dict:
        """Send one request and wait for its reply; the whole exchange must fit in `timeout` seconds."""
        deadline = time.monotonic() + max(timeout, 0.05)
        self.send(message, deadline)
        return self.receive(deadline)

    def send(self, message: dict, deadline: float) -> None:
        """Send a request (a batch answers with one reply per step: read each with `receive`)."""
        self._guarded(lambda: protocol.send(self.sock, message), deadline)

    def receive(self, deadline: float) -> dict:
        """The next reply, read by `deadline` (time.monotonic()); the stand-ins' calls that come before it are
        answered on the way (`lender`), within the same deadline."""
        while True:
            message = self._guarded(lambda: protocol.recv(self.sock, deadline=deadline), deadline)
            if not (isinstance(message, dict) and message.get("kind") == PIECE):
                return message
            if self.lender is None:
                self.kill()
                raise protocol.ProtocolError("a call of a lent function where none is lent")
            self._guarded(functools.partial(protocol.send, self.sock, self.lender(message)), deadline)

    def _guarded(self, exchange, deadline: float):
        if not self.alive:
            raise WorkerGone("the worker is no longer running")
        timeout = deadline - time.monotonic()
        self.sock.settimeout(max(timeout, 0.05))
        try:
            return exchange()
        except socket.timeout:
            self.kill()
            raise WorkerTimeout(f"no answer within {max(timeout, 0.05):.1f} s") from None
        except protocol.ProtocolError:
            self.kill()
            raise
        except (EOFError, OSError):
            self.kill()
            raise WorkerGone("the worker process ended") from None

    def hello(self, timeout: float) -> dict:
        self.sock.settimeout(timeout)
        try:
            reply = protocol.recv(self.sock, deadline=time.monotonic() + timeout)
        except (socket.timeout, EOFError, OSError, protocol.ProtocolError) as exc:
            self.kill()
            raise SandboxFailed(f"the sandboxed worker did not start: {exc or type(exc).__name__}") from None
        self.protections = reply.get("protections", {})
        return reply

    def kill(self) -> None:
        """End the worker and everything it started. Safe to call twice."""
        if self.alive:
            self.alive = False
            for kill in (os.killpg, os.kill):  # at once, even if the zygote cannot help
                try:
                    kill(self.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.sock.close()
            if self.zygote is not None:
                self.zygote.kill_tree(self.pid)


def start_worker(zygote: Zygote, sources: list[Source], config: SandboxConfig, timeout: float,
                 warm: tuple[str, ...] = ()):
    """A fresh sandboxed worker with the student's code loaded. Returns (worker, load report)."""
    started = time.perf_counter()
    if not config.unsafe_no_sandbox and (refused := platform_refusal()):  # (no Linux: the zygote cannot confine)
        raise refused
    worker = zygote.spawn(config, warm=warm)
    worker.hello(timeout)
    off = worker.protections.get("off") or {}
    if off and not config.unsafe_no_sandbox:  # before any student code is sent
        worker.kill()
        cause = worker.protections.get("cause", "")
        raise SandboxUnavailable(refusal(off, cause), reason(off, cause))
    left = max(timeout - (time.perf_counter() - started), 1.0)
    reply = worker.request({"kind": "load", "sources": [(s.name, list(s.cells), [s.number(i) for i in range(len(s.cells))])
                                                        for s in sources]}, left)
    return worker, reply
