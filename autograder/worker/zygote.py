"""The fork server: a process that has imported torch once and forks a sandboxed worker per request.

Starting Python and importing torch costs seconds; forking a process that already did
costs milliseconds. The zygote itself never runs student code and never imports the
solutions or the hidden checks, so a forked worker finds nothing secret in its memory.

Protocol on the control socket (fd given on the command line): the grader sends a
message {"config": {...}} together with one end of a fresh socket pair (SCM_RIGHTS);
the zygote forks, the child confines itself and serves that socket, and the zygote
answers {"pid": child_pid}.
"""
from __future__ import annotations

import array
import os
import signal
import socket
import sys

# Import everything a worker may need before any fork: a worker cannot import from
# the covered repository later, and imports in every child would cost time.
import torch  # noqa: F401
import torch.nn  # noqa: F401
import torch.nn.functional  # noqa: F401
import torch.utils._python_dispatch  # noqa: F401
import torch.utils._pytree  # noqa: F401

from . import protocol, runtime, sandbox


def _recv_with_fd(sock: socket.socket):
    fds = array.array("i")
    header, ancdata, _flags, _addr = sock.recvmsg(protocol.HEADER.size, socket.CMSG_LEN(fds.itemsize))
    if not header:
        raise EOFError
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    (size,) = protocol.HEADER.unpack(header)
    import io

    body = protocol._recv_exact(sock, size)
    return torch.load(io.BytesIO(body), weights_only=True), (fds[0] if fds else None)


def _child(worker_fd: int, control: socket.socket, config: dict) -> None:
    control.close()
    try:
        prot = sandbox.confine(worker_fd, sandbox.SandboxConfig(**config))
        sock = socket.socket(fileno=worker_fd)
        torch.set_num_threads(1)
        protocol.send(sock, {"hello": True, "protections": {"on": prot.on, "off": prot.off}})
        runtime.Worker(sock).serve()
    finally:
        os._exit(0)


def main(control_fd: int) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    control = socket.socket(fileno=control_fd)
    while True:
        try:
            request, worker_fd = _recv_with_fd(control)
        except (EOFError, ConnectionError):
            return
        if request.get("kind") == "exit":
            return
        if worker_fd is None:
            protocol.send(control, {"error": "no socket was passed"})
            continue
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _child(worker_fd, control, request.get("config", {}))
        os.close(worker_fd)
        protocol.send(control, {"pid": pid})


if __name__ == "__main__":
    main(int(sys.argv[1]))
