"""The frames between the grader and the worker (autograder/worker/protocol.py): exact round
trips of plain data and tensors, and refusal of anything malformed, with no pickle read."""
from __future__ import annotations

import io
import json
import os
import pickle
import socket
import struct

import pytest
import torch

from autograder.worker import protocol


def roundtrip(obj):
    frame = protocol.encode(obj)
    return protocol.decode(bytearray(frame[protocol.HEADER.size:]))


def frame_of(table, message, payload=b"") -> bytearray:
    head, text = json.dumps(table).encode(), json.dumps(message).encode()
    body = struct.pack("!I", len(head)) + head + struct.pack("!I", len(text)) + text
    return bytearray(body + bytes(-len(body) % protocol.ALIGN) + payload)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


@pytest.mark.filterwarnings("ignore:ComplexHalf")
@pytest.mark.parametrize("dtype", list(protocol.DTYPES.values()), ids=list(protocol.DTYPES))
def test_every_framed_dtype_round_trips_bit_for_bit(dtype):
    source = torch.arange(-6, 18).reshape(2, 3, 4).to(torch.float32)
    t = (source > 3) if dtype == torch.bool else source.to(dtype)
    got = roundtrip({"x": [t, t[:, 1:, ::2], t[0, 0, 0], t[:0]]})["x"]
    for have, want in zip(got, (t, t[:, 1:, ::2], t[0, 0, 0], t[:0])):
        assert have.dtype == want.dtype and have.shape == want.shape
        assert torch.equal(bits(have), bits(want))


def test_plain_data_round_trips_with_tuples_as_lists():
    obj = {"s": "é\x00\u2603", "n": [1, -2**62, 0.5, float("inf"), None, True], "t": (1, 2), "d": {"k": {}}}
    got = roundtrip(obj)
    assert got == {**obj, "t": [1, 2]}
    assert roundtrip({"nan": float("nan")})["nan"] != roundtrip({"nan": float("nan")})["nan"]


def test_objects_that_are_not_plain_data_cannot_be_sent():
    for bad in (object(), {1, 2}, b"bytes", torch.zeros(2).to_sparse()):
        with pytest.raises(TypeError):
            protocol.encode({"value": bad})


def test_bool_bytes_other_than_zero_and_one_are_read_as_true():
    frame = frame_of([["bool", [4], 0]], {"\x00": 0}, bytes([0, 1, 2, 255]))
    assert protocol.decode(frame).tolist() == [False, True, True, True]


@pytest.mark.parametrize("table,message,payload", [
    ([["float32", [1000], 0]], {"\x00": 0}, bytes(64)),  # past the end of the frame
    ([["float32", [4], 2**40]], {"\x00": 0}, bytes(64)),  # offset past the end
    ([["object", [1], 0]], {"\x00": 0}, bytes(64)),  # a dtype not on the list
    ([["float32", [-1], 0]], {"\x00": 0}, bytes(64)),  # a negative size
    ([["float32", [2] * 65, 0]], {"\x00": 0}, bytes(64)),  # too many dimensions
    ([["float32", [1], 0]], {"\x00": 1}, bytes(64)),  # a reference to no tensor
    ([["float32", [1], 0]], {"\x00": "0"}, bytes(64)),  # a reference that is not a number
    ([["float32", [1], 0]], {"\x00": 0, "x": 1}, bytes(64)),  # a reference with company
    ({"not": "a list"}, {}, b""),
], ids=["past-end", "offset", "dtype", "negative", "dims", "no-tensor", "text-ref", "extra-key", "table"])
def test_malformed_frames_are_refused(table, message, payload):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(frame_of(table, message, payload))


def test_a_pickle_on_the_socket_is_refused_unread(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    data = pickle.dumps({"ok": True, "value": Evil()})
    buf = io.BytesIO()
    torch.save({"ok": True}, buf)
    a, b = socket.socketpair()
    with a, b:
        for blob in (data, buf.getvalue(), b"\xff" * 64, b"[" * 100000):
            a.sendall(protocol.HEADER.pack(len(blob)) + blob)
            with pytest.raises(protocol.ProtocolError):
                protocol.recv(b)
    assert not marker.exists()


def test_deeply_nested_json_is_refused_not_a_crash():
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(frame_of([], None)[:0] + struct.pack("!I", 2) + b"[]" + struct.pack("!I", 200000)
                        + b"[" * 100000 + b"]" * 100000)
