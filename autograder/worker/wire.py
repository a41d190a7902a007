"""The wire codec: how values cross between the trusted grader and the sandboxed worker.

protocol.py frames each message (JSON plus raw tensor buffers, read back without running
anything). Inside a message, a value that is not a number, a string, a bool, None, a list or
a str-keyed dict travels as a dict with one marker key:

    {"__tensor__": t, "device": ..., "requires_grad": ..., "cls": ...}  a dense CPU tensor
    {"__tensor__": None, "layout": ...}                              a tensor that cannot travel
    {"__tuple__": [...]}                                             a tuple
    {"__dict__": [[key, value], ...]}                                a dict a student function returned
    {"__dtype__": "float32"}                                         a torch.dtype
    {"__handle__": id, "type": name}                                 an object that stays in the worker
    {"__result__": i}                 (requests only) what step i of the same batched job returned
    {"__result__": [i, j]}            (requests only) item j of it

The trusted side encodes arguments with `encode` and checks every reply value again with
`decode_reply` (student code runs in the worker and can write anything to its socket); the
worker decodes requests and encodes results with a `WorkerCodec`, which keeps the objects
that cannot travel (modules, ...) in its table of handles. Both sides import this module; it
holds nothing of the grader (the worker imports only autograder.worker).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from . import protocol

TENSOR, TUPLE, DICT, DTYPE, HANDLE = "__tensor__", "__tuple__", "__dict__", "__dtype__", "__handle__"
RESULT = "__result__"  # in a batched job's request: what an earlier step of the job returned
MAX_TENSOR_ELEMENTS = 64 * 2**20  # a returned tensor larger than this is refused (the worker says so first)
MAX_DEPTH = 32  # nesting of a returned value, checked by the trusted side
MAX_WORKER_DEPTH = 20  # nesting the worker agrees to encode
MAX_TEXT = 2000  # characters of any text the worker sends (messages, captured output)
DTYPES = {str(d).removeprefix("torch."): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                                     torch.int32, torch.int64, torch.bool)}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # terminal escapes and other control characters


@dataclass(frozen=True)
class Handle:
    """An object living in the worker, named by its number there."""

    id: int
    type: str = "object"


class Refused(ValueError):
    """The trusted side refuses a value the worker sent; str() is the message for the student. `template` (the
    English text, a msgid of the grader's catalog: pybabel extracts `Refused("...")`) and `params` let the
    trusted side say it in the student's language (autograder/foundation/i18n.py; the worker imports nothing of it)."""

    def __init__(self, template: str, **params):
        super().__init__(template.format(**params))
        self.template, self.params = template, params


# --------------------------------------------------------------------------- the trusted side
def encode(value):
    """A check's argument as it travels to the worker (tensors are detached copies)."""
    if isinstance(value, Handle):
        return {HANDLE: value.id}
    if isinstance(value, torch.Tensor):
        return {TENSOR: value.detach()}  # (the frame copies its bytes)
    if isinstance(value, torch.dtype):
        return {DTYPE: str(value).removeprefix("torch.")}
    if isinstance(value, tuple):
        return {TUPLE: [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def _decode_tensor(value: dict, device: str) -> torch.Tensor:
    t = value[TENSOR]
    if t is None:
        raise Refused("your code returned a {layout} tensor: return an ordinary dense tensor",
                      layout=clean_text(value.get("layout"), 100))
    if type(t) is not torch.Tensor:
        raise Refused("your code returned something that only looks like a tensor")
    if t.layout != torch.strided or t.is_quantized or t.device.type != "cpu":
        raise Refused("your code returned a {layout} tensor: return an ordinary dense tensor", layout=t.layout)
    if value.get("cls", "Tensor") not in ("Tensor", "Parameter"):
        raise Refused("your code returned a {cls} (a tensor subclass): return a plain torch.Tensor", cls=value["cls"])
    if t.numel() > MAX_TENSOR_ELEMENTS:
        raise Refused("your code returned a tensor of {count:,} elements, far more than asked for", count=t.numel())
    got = value.get("device", "cpu")
    if device == "cpu" and got != "cpu":
        raise Refused("your code returned a tensor on {device}; keep results on the inputs' device (cpu)", device=got)
    return t


def decode_reply(value, device: str, depth: int = 0):
    """Validate and unwrap a value from the worker: only plain data gets through (types, nesting,
    tensor kind and size are all checked again here)."""
    if depth > MAX_DEPTH:
        raise Refused("your code returned a value nested more than {depth} levels deep", depth=MAX_DEPTH)
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [decode_reply(v, device, depth + 1) for v in value]
    if type(value) is dict:
        if TENSOR in value:
            return _decode_tensor(value, device)
        if TUPLE in value:
            return tuple(decode_reply(v, device, depth + 1) for v in value[TUPLE])
        if DICT in value:
            return {decode_reply(k, device, depth + 1): decode_reply(v, device, depth + 1) for k, v in value[DICT]}
        if DTYPE in value:
            dtype = getattr(torch, str(value[DTYPE]), None)
            if not isinstance(dtype, torch.dtype):
                raise Refused("your code returned an unknown dtype")
            return dtype
        if HANDLE in value:
            return Handle(int(value[HANDLE]), clean_text(value.get("type", "object"), 100))
    raise Refused("your code returned a value of an unexpected kind ({kind})", kind=type(value).__name__)


def clean_text(text, limit: int = MAX_TEXT) -> str:
    """Text from the worker, safe to show: no terminal escapes, bounded length."""
    text = _CONTROL.sub("?", str(text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clean_data(value, depth: int = 0):
    """A load report or error from the worker: plain dicts, lists and cleaned strings only."""
    if depth > 8:
        return None
    if isinstance(value, dict):
        return {clean_text(k, 100): clean_data(v, depth + 1) for k, v in list(value.items())[:1000]}
    if isinstance(value, (list, tuple)):
        return [clean_data(v, depth + 1) for v in list(value)[:1000]]
    if value is None or type(value) in (bool, int, float):
        return value
    return clean_text(value)


# --------------------------------------------------------------------------- the worker
class WorkerCodec:
    """The worker's side: results out as plain data, objects kept here behind handles."""

    def __init__(self) -> None:
        self.objects: dict[int, object] = {}
        self.results: list = []  # the current batched job's step results, for RESULT references

    def encode(self, value, depth: int = 0):
        if depth > MAX_WORKER_DEPTH:
            raise TypeError("returned value nests too deeply")
        if value is None:
            return None
        for plain in (bool, int, float, str):
            if isinstance(value, plain):
                return plain(value)
        if isinstance(value, torch.Tensor):
            return self._encode_tensor(value)
        if isinstance(value, (list, tuple)):
            items = [self.encode(v, depth + 1) for v in value]
            return {TUPLE: items} if isinstance(value, tuple) else items
        if isinstance(value, dict):
            return {DICT: [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()]}
        if isinstance(value, torch.dtype):
            return {DTYPE: str(value).removeprefix("torch.")}
        if hasattr(value, "item") and hasattr(value, "dtype") and not isinstance(value, torch.Tensor):
            return self.encode(value.item(), depth + 1)  # numpy scalars
        handle = len(self.objects) + 1
        self.objects[handle] = value
        return {HANDLE: handle, "type": type(value).__name__}

    @staticmethod
    def _encode_tensor(value: torch.Tensor) -> dict:
        plain = value.detach()
        if type(plain) is not torch.Tensor:
            plain = plain.as_subclass(torch.Tensor)
        if plain.device.type == "meta":
            raise TypeError("the result is a tensor on the 'meta' device, which holds no values")
        if plain.numel() > MAX_TENSOR_ELEMENTS:
            raise TypeError(f"the result has {plain.numel():,} elements, far more than asked for")
        if plain.layout != torch.strided or plain.is_quantized or str(plain.dtype).removeprefix("torch.") not in protocol.DTYPES:
            return {TENSOR: None, "layout": str(plain.layout)}  # refused by the trusted side, with this name
        try:
            copy = plain.to("cpu").contiguous()  # (the frame copies its bytes)
        except RuntimeError as exc:
            raise TypeError(f"the result (on {plain.device}) could not be copied back: {exc}") from None
        return {TENSOR: copy, "device": str(value.device), "requires_grad": bool(value.requires_grad),
                "cls": type(value).__name__}

    def decode(self, value):
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if isinstance(value, dict):
            if HANDLE in value:
                return self.objects[value[HANDLE]]
            if RESULT in value:
                ref = value[RESULT]
                return self.results[ref] if type(ref) is int else self.results[ref[0]][ref[1]]
            if TUPLE in value:
                return tuple(self.decode(v) for v in value[TUPLE])
            if DTYPE in value:
                return DTYPES[value[DTYPE]]
            if TENSOR in value:
                return value[TENSOR]
            return {k: self.decode(v) for k, v in value.items()}
        return value
