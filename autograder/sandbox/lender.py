"""The trusted side of a lent function: the reference's result for the arguments a stand-in sent.

While a part that borrows other parts' functions is graded (spec.Part.borrows), the worker holds stand-ins
for the student's wrong copies (worker/borrowed.py). Each of their calls reaches this side as a "piece"
message during the request; `Lender.answer` checks its arguments exactly as a reply's value
(wire.decode_reply: dense CPU tensors, bounded sizes, plain values), runs the reference on the meta device
first (no result larger than a reply may be is ever computed), then for real, and answers with tensors and
plain values only. No code of the grader ever reaches the worker.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..worker import wire
from ..worker.borrowed import WRITES, written

ANSWERED_ERRORS = ("TypeError", "ValueError", "IndexError", "RuntimeError")
MAX_KEY, MAX_KEPT = 1000, 4096  # the dry runs remembered: each signature's length, and how many


@dataclass(frozen=True)
class Lender:
    """The reference module whose functions `names` stand in for the student's in one part."""

    reference: object
    names: frozenset[str]
    # (name, the arguments' shapes, dtypes and plain values) -> the elements of an oversized result, 0 if none: the
    # dry run costs about a millisecond, and a part calls its pieces on the same shapes again and again
    oversized: dict = field(default_factory=dict, compare=False, repr=False)
    # the pieces whose student's version, run next to a witness stand-in, gave another result than the reference's
    # on the same arguments (cleared by the caller before the checks it asks about)
    differed: set = field(default_factory=set, compare=False, repr=False)

    def answer(self, message: dict) -> dict:
        """The answer to one "piece" message: {"ok": True, "value": ...} or {"ok": False, "type", "error"}."""
        name = message.get("name")
        if name not in self.names:
            return refusal("TypeError", f"{wire.clean_text(name, 100)} is not lent to this part")
        try:
            args, kwargs = arguments(message)
        except wire.Refused as exc:
            return refusal("TypeError", "refused its arguments: " + str(exc).replace("returned", "passed"))
        function = getattr(self.reference, name)
        key = (name, signature(args), signature(kwargs))
        too_large = self.oversized.get(key) if len(repr(key)) <= MAX_KEY else None
        if too_large is None:
            too_large = dry_run(function, args, kwargs)
            if len(repr(key)) <= MAX_KEY and len(self.oversized) < MAX_KEPT:  # (a bounded memory of shapes)
                self.oversized[key] = too_large
        if too_large:
            return refusal("ValueError", f"refused to compute a result of {too_large:,} elements, far more than "
                                         "a call here needs")
        try:
            with torch.no_grad():
                value = function(*args, **kwargs)
            if name in WRITES:  # (reshape_and_cache: its result is what it wrote into its arguments)
                value = written(name, args, kwargs)
            if "own" in message and not same_answer(message["own"], value):
                self.differed.add(name)
            return {"ok": True, "value": wire.encode(value)}
        except Exception as exc:  # noqa: BLE001 - the student's arguments made the reference raise: say so
            kind = type(exc).__name__
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else kind
            return refusal(kind if kind in ANSWERED_ERRORS else "RuntimeError", wire.clean_text(first, 300))


def same_answer(own, expected, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Whether what the student's piece returned (`own`, as the worker sent it) is the reference's `expected`:
    tensors of the same shape close to each other (NaN meeting NaN, -inf meeting -inf), plain values equal."""
    try:
        got = wire.decode_reply(own, "cpu")
    except wire.Refused:
        return False
    return _same(got, expected, atol, rtol)


def _same(got, expected, atol: float, rtol: float) -> bool:
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            return False
        if got.dtype == torch.bool or expected.dtype == torch.bool:
            return got.dtype == expected.dtype and bool(torch.equal(got, expected))
        return bool(torch.allclose(got.double(), expected.double(), atol=atol, rtol=rtol, equal_nan=True))
    if isinstance(expected, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(expected) and \
            all(_same(g, e, atol, rtol) for g, e in zip(got, expected))
    return got == expected


def dry_run(function, args: list, kwargs: dict) -> int:
    """The elements of the first tensor of `function`'s result over the wire's limit, found on the meta device
    (shapes only, nothing allocated); 0 if none is, or if the dry run fails (a data-dependent step: the real call
    then says what it says)."""
    try:
        with torch.no_grad(), torch.device("meta"):  # (what the reference creates is on the meta device too)
            return oversized(function(*on_meta(args), **on_meta(kwargs)))
    except Exception:  # noqa: BLE001 - see above
        return 0


def signature(value):
    """What a result's shape can depend on: tensors' shapes and dtypes, plain values as they are (hashable)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(signature(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, signature(v)) for k, v in value.items()))
    return ("value", type(value).__name__, value)


def refusal(kind: str, error: str) -> dict:
    return {"ok": False, "type": kind, "error": error}


def arguments(message: dict) -> tuple[list, dict]:
    """(args, kwargs) of a piece message, checked as a reply's values are; objects left in the worker refused."""
    args = wire.decode_reply(message.get("args"), "cpu")
    kwargs = wire.decode_reply(message.get("kwargs"), "cpu")
    if type(args) is not list or type(kwargs) is not dict or not all(type(k) is str for k in kwargs):
        raise wire.Refused("your code returned arguments that are not a list and a dict of names")
    if holds_handle(args) or holds_handle(kwargs):
        raise wire.Refused("your code returned an object that cannot leave the worker (only tensors and plain values)")
    return args, kwargs


def holds_handle(value) -> bool:
    if isinstance(value, wire.Handle):
        return True
    if isinstance(value, (list, tuple)):
        return any(holds_handle(v) for v in value)
    if isinstance(value, dict):
        return any(holds_handle(v) for v in value.values())
    return False


def on_meta(value):
    """`value` with every tensor on the meta device (shapes and dtypes only), for the dry run."""
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, (list, tuple)):
        return type(value)(on_meta(v) for v in value)
    if isinstance(value, dict):
        return {k: on_meta(v) for k, v in value.items()}
    return value


def oversized(value) -> int:
    """The elements of the first tensor in `value` over the wire's limit (0 if none is)."""
    if isinstance(value, torch.Tensor):
        return value.numel() if value.numel() > wire.MAX_TENSOR_ELEMENTS else 0
    if isinstance(value, (list, tuple)):
        return next((n for n in map(oversized, value) if n), 0)
    if isinstance(value, dict):
        return next((n for n in map(oversized, value.values()) if n), 0)
    return 0
