"""Length-prefixed messages between the trusted grader and the sandboxed worker.

Every message is a `torch.save` payload. The trusted side reads with
`torch.load(weights_only=True)`, which rebuilds only plain tensors, numbers, strings,
booleans, None, lists, tuples and dicts: nothing in a message can run code on load.
"""
from __future__ import annotations

import io
import socket
import struct
import time

import torch

HEADER = struct.Struct("!Q")
MAX_MESSAGE_BYTES = 320 * 2**20  # a reply larger than this is refused unread


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed message."""


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """n bytes; with a deadline (time.monotonic()), the whole read must finish by then, so a
    peer that trickles one byte at a time cannot stretch a timeout without end."""
    chunks, left = [], n
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("deadline passed")
            sock.settimeout(remaining)
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send(sock: socket.socket, obj) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    sock.sendall(HEADER.pack(len(data)) + data)


def recv(sock: socket.socket, max_bytes: int = MAX_MESSAGE_BYTES, deadline: float | None = None):
    (size,) = HEADER.unpack(recv_exact(sock, HEADER.size, deadline))
    if size > max_bytes:
        raise ProtocolError(f"message of {size} bytes is over the {max_bytes}-byte limit")
    data = recv_exact(sock, size, deadline)
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # noqa: BLE001 - anything but plain data is refused here
        raise ProtocolError(f"refused a message that is not plain data: {type(exc).__name__}") from None
