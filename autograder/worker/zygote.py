"""The fork server: a process that has imported torch once and forks a sandboxed worker per request.

Starting Python and importing torch costs seconds; forking a process that already did
costs milliseconds. The zygote itself never runs student code and never imports the
solutions or the hidden checks, so a forked worker finds nothing secret in its memory.

Protocol on the control socket (fd given on the command line): the grader sends a
message {"config": {...}} together with one end of a fresh socket pair (SCM_RIGHTS);
the zygote forks, the child confines itself and serves that socket, and the zygote
answers {"pid": child_pid}. A message {"kind": "kill", "pid": pid} ends that worker and
every process it started, and answers {"killed": n}; {"kind": "ping"} answers {"pong": true}.

A message {"kind": "zygote"} with a socket forks another zygote that serves that socket (and answers
nothing): grade-class starts one zygote by exec (the seed, autograder/sandbox/prestart.py) and has it
fork the zygote of each grading process, so that torch is imported once for the whole class and its
pages are shared by every zygote and worker. A forked zygote holds what the seed holds (its minimal
environment, torch, this package) and the one socket; it ends when that socket closes (its grading
process ended), after ending every worker it forked.

The seed may serve more (`main(handlers=...)`): grade-class's seed also forks its grading processes
(autograder/commands/seed.py), which the zygote's code never imports.

The zygote is a child subreaper: a process that a worker started and that outlived its
parent (a daemon) becomes the zygote's child, not init's, so that the zygote can find
it and kill it, and it is reaped instead of staying a zombie.
"""
from __future__ import annotations

import array
import ctypes
import os
import signal
import socket
import sys
import time

# Import everything a worker may need before any fork: a worker cannot import from
# the covered repository later, and imports in every child would cost time.
import torch
import torch.nn
import torch.nn.functional
import torch.utils._python_dispatch
import torch.utils._pytree
import torch.fx.experimental.symbolic_shapes

from . import elsewhere, proctree, protocol, runtime, sandbox, warmup

LINUX = sys.platform.startswith("linux")


MOST_FDS = 4  # descriptors one request may carry (a worker's: one; a trusted process's, to a handler: four)


def _recv_with_fds(sock: socket.socket):
    fds = array.array("i")
    header, ancdata, _flags, _addr = sock.recvmsg(protocol.HEADER.size, socket.CMSG_SPACE(MOST_FDS * fds.itemsize))
    if not header:
        raise EOFError
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    (size,) = protocol.HEADER.unpack(header)
    body = protocol.recv_exact(sock, size)
    return protocol.decode(body), list(fds)


PR_SET_CHILD_SUBREAPER = 36


def _close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _signal(pid: int, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int, workers: set[int], wait: float = 2.0) -> int:
    """SIGKILL a worker, its process group, all its descendants, and every orphan it left to us.

    In a PID namespace, killing the namespace's first process (the worker's only child)
    ends every process inside it; the descendants scan covers the case without one.
    Orphans (processes re-parented to this subreaper that are not live workers) are
    daemons some worker started: they are killed too.
    """
    me = os.getpid()
    killed: set[int] = set()
    deadline = time.monotonic() + wait
    while True:
        links = proctree.parent_links()  # live processes only
        orphans = {p for p, parent in links.items() if parent == me and (p not in workers or p == pid)}
        targets = {p for p in proctree.descendants(pid, links) if p in links} | orphans
        if not targets or time.monotonic() > deadline:
            break
        _signal(pid, group=True)
        for p in targets:
            _signal(p)
        killed |= targets
        proctree.wait_gone(targets, deadline)  # (then one more scan: a process started or orphaned meanwhile)
    workers.discard(pid)
    return len(killed)


def _child(worker_fd: int, control: socket.socket, config: dict, zygote: int) -> None:
    control.close()
    try:
        if LINUX and not sandbox.die_with_parent(zygote):  # the zygote ended: so does its worker (and namespace)
            return
        prot = (sandbox.confine if LINUX else elsewhere.confine)(worker_fd, sandbox.SandboxConfig(**config))
        sock = socket.socket(fileno=worker_fd)
        torch.set_num_threads(1)
        protocol.send(sock, {"hello": True, "protections": {"on": prot.on, "off": prot.off,
                                                           "cause": prot.cause}})
        runtime.Worker(sock).serve()
    finally:
        os._exit(0)


def _zygote(control_fd: int, control: socket.socket) -> None:
    """The child of a {"kind": "zygote"} request: a zygote of its own, in its own session, serving `control_fd`
    until it closes (its grading process ended: grade-class's own end ends that one). Not tied to the seed's
    life: an answer to a kill it is giving when grade-class closes the seed is still given in full."""
    control.close()
    try:
        os.setsid()
        main(control_fd)
    finally:
        os._exit(0)  # (never tears torch down: its grading process is waiting for nothing)


def main(control_fd: int, handlers: dict | None = None) -> None:
    """Serve `control_fd` until it closes. `handlers`: kind -> handler(fds, control) for requests of kinds the
    zygote does not know (grade-class's seed: its grading processes, autograder/commands/seed.py); a handler forks
    what it runs, and the descriptors it was given are closed here once it returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    if LINUX:
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of workers come to us
    control = socket.socket(fileno=control_fd)
    workers: set[int] = set()
    try:
        _serve(control, workers, handlers or {})
    except ConnectionError:  # (an answer to a grader that is gone)
        pass
    finally:  # the grader closed the socket (or ended): no worker of ours outlives this process
        for pid in list(workers):
            kill_tree(pid, workers)


def _serve(control: socket.socket, workers: set[int], handlers: dict) -> None:
    me = os.getpid()
    while True:
        try:
            request, fds = _recv_with_fds(control)
        except (EOFError, ConnectionError):
            return
        if request.get("kind") in handlers:
            try:
                handlers[request["kind"]](fds, control)
            finally:
                _close(fds)
            continue
        worker_fd = fds[0] if fds else None
        _close(fds[1:])  # (never inherited by a worker: a request of ours carries one)
        if request.get("kind") == "exit":
            return
        if request.get("kind") == "ping":  # (answered once torch is imported: the pool is ready)
            if worker_fd is not None:
                os.close(worker_fd)
            protocol.send(control, {"pong": True})
            continue
        if request.get("kind") == "kill":
            if worker_fd is not None:
                os.close(worker_fd)
            protocol.send(control, {"killed": kill_tree(int(request["pid"]), workers)})
            continue
        if worker_fd is None:
            protocol.send(control, {"error": "no socket was passed"})
            continue
        if request.get("kind") == "zygote":
            if os.fork() == 0:
                _zygote(worker_fd, control)
            os.close(worker_fd)
            continue
        warmup.warm(request.get("warm", ()))  # once per zygote: what this assignment's workers would each redo
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _child(worker_fd, control, request.get("config", {}), me)
        os.close(worker_fd)
        workers.intersection_update(p for p in workers if proctree.alive(p))
        workers.add(pid)
        protocol.send(control, {"pid": pid})

if __name__ == "__main__":
    main(int(sys.argv[1]))
