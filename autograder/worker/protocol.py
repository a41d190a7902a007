"""Length-prefixed messages between the trusted grader and the sandboxed worker.

A message is plain data: dicts with string keys, lists (tuples travel as lists), strings,
numbers, booleans, None, and dense CPU tensors. On the wire it is one frame:

    8 bytes   the length of the rest of the frame
    4 bytes   the length of the tensor table, then the table: JSON [[dtype, shape, offset], ...]
    4 bytes   the length of the message, then the message: JSON, each tensor replaced by {"\\u0000": i}
    padding   to a multiple of 64 bytes, then each tensor's raw bytes (row-major), at its offset

Reading a frame runs `json.loads` and `torch.frombuffer` over bytes whose sizes are all
checked against the frame (and each JSON part against MAX_JSON_BYTES and MAX_JSON_VALUES, before it is read): nothing in a message can run code when it is read (the trusted
side reads what student code may have written), and no pickle is ever involved. Tensors are
views of the received buffer (no copy); booleans are rebuilt from their bytes (0 or not).
"""
from __future__ import annotations

import json
import math
import socket
import struct
import time

import torch

HEADER = struct.Struct("!Q")
PART = struct.Struct("!I")
MAX_MESSAGE_BYTES = 320 * 2**20  # a reply larger than this is refused unread
# The JSON parts of a frame (tensors travel raw, outside them): an honest reply's is under a few kB and holds under a
# hundred values; each value read costs the reading side about 60 bytes, so both are capped before json.loads runs.
MAX_JSON_BYTES = 4 * 2**20
MAX_JSON_VALUES = 2**18
MAX_DIMS = 64
ALIGN = 64
MARK = "\x00"  # the key of the dict that stands for a tensor in a message
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
    torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex32, torch.complex64,
    torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2)}


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed message."""


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytearray:
    """n bytes; with a deadline (time.monotonic()), the whole read must finish by then, so a
    peer that trickles one byte at a time cannot stretch a timeout without end."""
    data = bytearray(n)
    view, got = memoryview(data), 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("deadline passed")
            sock.settimeout(remaining)
        count = sock.recv_into(view[got:], min(n - got, 1 << 20))
        if not count:
            raise EOFError("connection closed")
        got += count
    return data


# --------------------------------------------------------------------------- writing
def encode(obj) -> bytes:
    """One frame (its length prefix included) holding `obj`."""
    tensors: list[torch.Tensor] = []

    def stand_in(value):
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            return {MARK: len(tensors) - 1}
        raise TypeError(f"a {type(value).__name__} cannot be sent (plain data and tensors only)")

    message = json.dumps(obj, default=stand_in, separators=(",", ":")).encode()
    table, buffers, offset = [], [], 0
    for t in tensors:
        if t.device.type != "cpu" or t.layout != torch.strided or str(t.dtype).removeprefix("torch.") not in DTYPES:
            raise TypeError(f"a {t.layout} {t.dtype} tensor on {t.device} cannot be sent")
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
        table.append([str(t.dtype).removeprefix("torch."), list(t.shape), offset])
        buffers.append(raw.tobytes())
        offset += -(-len(raw) // ALIGN) * ALIGN
    head = json.dumps(table, separators=(",", ":")).encode()
    body = [PART.pack(len(head)), head, PART.pack(len(message)), message]
    used = sum(len(b) for b in body)
    body.append(bytes(-used % ALIGN))
    for raw in buffers:
        body.append(raw)
        body.append(bytes(-len(raw) % ALIGN))
    size = sum(len(b) for b in body)
    return HEADER.pack(size) + b"".join(body)


def send(sock: socket.socket, obj) -> None:
    sock.sendall(encode(obj))


# --------------------------------------------------------------------------- reading
def _part(data: bytearray, at: int, capped: bool) -> tuple[bytes, int]:
    """One JSON part of a frame; `capped`: refused unread when it is over MAX_JSON_BYTES or may hold over
    MAX_JSON_VALUES values."""
    if at + PART.size > len(data):
        raise ProtocolError("the frame ends inside its header")
    (n,) = PART.unpack_from(data, at)
    at += PART.size
    if at + n > len(data):
        raise ProtocolError("the frame is shorter than its header says")
    if capped and n > MAX_JSON_BYTES:
        raise ProtocolError(f"refused a message whose JSON is {n} bytes, over the {MAX_JSON_BYTES}-byte limit "
                            "(tensors travel apart)")
    part = bytes(data[at:at + n])
    if capped and n > MAX_JSON_VALUES and json_values(part) > MAX_JSON_VALUES:
        raise ProtocolError(f"refused a message of more than {MAX_JSON_VALUES} values")
    return part, at + n


def json_values(text: bytes) -> int:
    """At least the number of values in a JSON document (each but the first follows a comma or opens a list or an
    object; a comma inside a string counts too): counted at C speed, before json.loads builds any of them."""
    return text.count(b",") + text.count(b"[") + text.count(b"{") + 1


def _tensor(entry, data: bytearray, start: int) -> torch.Tensor:
    """One tensor of the table, a view of `data` (bool: rebuilt), every size checked first."""
    if not (isinstance(entry, list) and len(entry) == 3 and entry[0] in DTYPES and isinstance(entry[1], list)
            and len(entry[1]) <= MAX_DIMS and all(type(d) is int and d >= 0 for d in entry[1])
            and type(entry[2]) is int and entry[2] >= 0):
        raise ProtocolError("a tensor entry is malformed")
    dtype, shape, offset = DTYPES[entry[0]], entry[1], entry[2]
    count = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    at = start + offset
    if count * itemsize > len(data) - at:
        raise ProtocolError("a tensor reaches past the end of the frame")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    if dtype == torch.bool:  # any byte but 0 or 1 would be an invalid bool
        return torch.frombuffer(data, dtype=torch.uint8, count=count, offset=at).reshape(shape) != 0
    return torch.frombuffer(data, dtype=dtype, count=count, offset=at).reshape(shape)


def decode(data: bytearray, capped: bool = True):
    """The message of one frame's body (after its length prefix). `capped` (the trusted side): its JSON within
    MAX_JSON_BYTES and MAX_JSON_VALUES; the worker reads the grader's requests (a load carries the student's
    code, which may be larger) uncapped."""
    head, at = _part(data, 0, capped)
    text, at = _part(data, at, capped)
    start = at + (-at % ALIGN)
    try:
        table = json.loads(head)
        if not isinstance(table, list):
            raise ProtocolError("the tensor table is not a list")
        tensors = [_tensor(entry, data, start) for entry in table]

        def resolve(d: dict):
            if MARK in d:
                index = d[MARK]
                if len(d) != 1 or type(index) is not int or not 0 <= index < len(tensors):
                    raise ProtocolError("a tensor reference is malformed")
                return tensors[index]
            return d

        return json.loads(text, object_hook=resolve)
    except ProtocolError:
        raise
    except (ValueError, RecursionError, TypeError, RuntimeError) as exc:
        raise ProtocolError(f"refused a message that is not plain data: {type(exc).__name__}") from None


def recv(sock: socket.socket, max_bytes: int = MAX_MESSAGE_BYTES, deadline: float | None = None,
         capped: bool = True):
    """The next message; ProtocolError for a frame over `max_bytes`, malformed, over the JSON caps (`capped`: see
    decode), or over this process's memory limit."""
    (size,) = HEADER.unpack(recv_exact(sock, HEADER.size, deadline))
    if size > max_bytes:
        raise ProtocolError(f"message of {size} bytes is over the {max_bytes}-byte limit")
    try:
        return decode(recv_exact(sock, size, deadline), capped)
    except MemoryError:
        raise ProtocolError(f"a message of {size} bytes did not fit in the grader's memory limit") from None
