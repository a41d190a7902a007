"""Another part's functions, answered by the trusted side: what a borrowing part's code calls in their place.

A part whose code calls functions that another part grades (DecoderAttention calls apply_rope) is graded with
stand-ins for the student's wrong copies, so that a mistake there costs points once, in its own part. A
stand-in holds no code of the grader: each call sends its arguments to the trusted side over the worker's
socket (a "piece" message, during the request being answered) and returns what the reference returned
(tensors and plain values only). The trusted side checks the arguments as it checks a reply
(wire.decode_reply), within the part's deadline (autograder/sandbox/lender.py).
"""
from __future__ import annotations

from collections.abc import Callable

from . import protocol, wire

PIECE = "piece"  # the kind of a worker's message that asks the trusted side for a lent function's result
MISSING = object()  # a borrowed name that the student's namespace did not define
ERRORS = {"TypeError": TypeError, "ValueError": ValueError, "IndexError": IndexError, "RuntimeError": RuntimeError}
# Lent functions whose result is what they write into their arguments (serving's reshape_and_cache returns None): the
# trusted side answers with those arguments after the reference's call, the stand-in copies them into the caller's
# tensors in place. {name: ((position, keyword), ...)}
WRITES = {"reshape_and_cache": ((2, "key_cache"), (3, "value_cache"))}


def written(name: str, args, kwargs) -> list:
    """The arguments that the lent function `name` writes into (WRITES), from a call's args and kwargs."""
    return [args[i] if i < len(args) else kwargs[key] for i, key in WRITES[name]]


def asker(sock) -> Callable:
    """ask(name, args, kwargs[, own]): the trusted side's answer for the lent function `name` on these arguments;
    `own`, what the student's own piece returned on them (a witness, `standin`), is sent along to be compared."""

    def ask(name: str, args: tuple, kwargs: dict, own=MISSING):
        codec = wire.WorkerCodec()  # (its own: nothing of the request's handles or results)
        message = {"kind": PIECE, "name": name, "args": codec.encode(list(args)), "kwargs": codec.encode(dict(kwargs))}
        if own is not MISSING:
            try:
                message["own"] = codec.encode(own)
            except Exception:  # noqa: BLE001 - what the student's piece returned cannot travel: it differs
                message["own"] = {wire.TENSOR: None, "layout": "unsendable"}
        protocol.send(sock, message)
        answer = protocol.recv(sock, capped=False)
        if not isinstance(answer, dict) or not answer.get("ok"):
            error = answer.get("error", "") if isinstance(answer, dict) else ""
            kind = answer.get("type") if isinstance(answer, dict) else None
            raise ERRORS.get(kind, RuntimeError)(f"the grader's {name}: {error}")
        return codec.decode(answer.get("value"))

    return ask


def standin(name: str, ask: Callable, own: Callable | None = None) -> Callable:
    """A function named `name` whose every call is answered by the trusted side. With `own` (the student's piece),
    a witness: each call runs the student's piece first and sends what it returned along, so that the trusted side
    learns which pieces differ on a check's own inputs; the answer is still the reference's."""

    def piece(*args, **kwargs):
        if name in WRITES:  # the reference's result written into the caller's own tensors (never witnessed:
            for target, value in zip(written(name, args, kwargs), ask(name, args, kwargs)):  # the student's piece
                target.copy_(value)  # would write into the same tensors first)
            return None
        if own is None:
            return ask(name, args, kwargs)
        try:
            mine = own(*args, **kwargs)
        except Exception:  # noqa: BLE001 - the student's piece raised on these inputs: it differs
            mine = None
        return ask(name, args, kwargs, mine)

    piece.__name__ = piece.__qualname__ = name
    piece.__doc__ = f"The grader's {name}: computed outside this process."
    return piece


def lend(namespace: dict, own: dict, names, standins) -> list[str]:
    """Each of `names` in `namespace` as a stand-in (those in `standins`) or the student's own again (kept in
    `own` the first time, MISSING if never defined); the stand-ins that replaced a function of the student."""
    for name in names:
        own.setdefault(name, namespace.get(name, MISSING))
    for name in names:
        if name in standins:
            namespace[name] = standins[name]
        elif own[name] is MISSING:
            namespace.pop(name, None)
        else:
            namespace[name] = own[name]
    return [name for name in names if name in standins and own[name] is not MISSING]
