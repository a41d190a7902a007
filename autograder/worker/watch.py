"""The worker's watch of forbidden calls: which of the student's functions called which torch attention.

It runs in the sandboxed worker, next to the student's code, and only reports: the trusted side
decides what a call costs (session.py, scoring.py). Three layers, so that no cheap trick hides a call:

1. Wrappers on every public and private torch attribute that names the fused kernel or the official
   module (F.scaled_dot_product_attention, torch._C._nn's, torch._scaled_dot_product_*,
   F.multi_head_attention_forward, nn.MultiheadAttention.forward, ...), in place before the
   student's code is loaded, so that an alias or a getattr with a built name still calls them.
2. A TorchFunctionMode (torch.overrides) pushed while each request runs: torch hands it every call of
   a torch function, whatever object the student reached it through: the unwrapped original
   (`__wrapped__`, a saved reference), `torch.ops.aten._scaled_dot_product_*` (packet or overload),
   the flex_attention operator. Threads the student starts get the mode too.
3. After each request, the worker checks that its wrappers and its mode are still in place; code that
   removed them is reported as a forbidden call of its own ("the grader's watch switched off").

Each call is attributed to the innermost frame of the student's code on the stack (its qualified
name, e.g. "SelfAttention.forward"). No frame is trusted because of the file it lives in: a call that
no student frame made (the grader's own builtin call, code compiled under another file name) is
recorded as made by "code" (the message: "your code called ..."), and costs what it costs in the part
(the grader's helpers call a watched function only in parts that allow it: standins.py).
"""
from __future__ import annotations

import contextlib
import functools
import gc
import sys
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .names import NESTED_SDPA_LABEL, STUDENT_PREFIX, WATCH_OFF, WATCHED_LIBRARIES, is_forbidden_name

UNKNOWN_CALLER = "code"  # ("your code called ...")


def _private_targets() -> tuple:
    """(owner, attribute, label) of every private variant in the torch namespace. torch.ops.aten.X is
    not replaced (torch's own dispatch code looks up X.default there): the mode sees its calls."""
    out = []
    for name in sorted(n for n in dir(torch) if n.startswith("_") and is_forbidden_name(n)):
        for owner in (torch, torch._C._VariableFunctions):
            if hasattr(owner, name):
                out.append((owner, name, f"torch.{name}"))
    return tuple(out)


PRIVATE_TARGETS = _private_targets()  # at import, in the zygote: each forked worker finds it done
TARGETS = (
    (F, "scaled_dot_product_attention", "F.scaled_dot_product_attention"),
    (torch._C._nn, "scaled_dot_product_attention", "F.scaled_dot_product_attention"),
    (F, "multi_head_attention_forward", "F.multi_head_attention_forward"),
    (nn.MultiheadAttention, "forward", "nn.MultiheadAttention"),
)
PUBLIC_LABELS = {"scaled_dot_product_attention": "F.scaled_dot_product_attention",
                 "multi_head_attention_forward": "F.multi_head_attention_forward"}


def torch_label(func) -> str | None:
    """The torch name of a function torch's function mode was handed, when it is a watched one."""
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or not is_forbidden_name(name):
        return None
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"torch.ops.aten.{name.split('.')[0]}"
    if "flex_attention" in name:
        return "torch.nn.attention.flex_attention"
    if "varlen_attn" in name:
        return "torch.nn.attention.varlen.varlen_attn"
    return PUBLIC_LABELS.get(name, f"torch.{name}")


def library_label(frame) -> str | None:
    """"transformers.<module>.<function>" when the frame that made a torch call is a watched library's code
    (names.TRANSFORMERS, names.SERVING_LIBRARIES), else None."""
    module = frame.f_globals.get("__name__")
    if isinstance(module, str) and module.split(".")[0] in WATCHED_LIBRARIES and "." in module:
        return f"{module}.{frame.f_code.co_name}"
    return None


def nested_label(label: str | None, args) -> str | None:
    """SDPA's label, told apart when it is handed nested tensors (names.NESTED_SDPA: forbidden in `serving`)."""
    if label == "F.scaled_dot_product_attention" and any(getattr(a, "is_nested", False) for a in args[:3]):
        return NESTED_SDPA_LABEL
    return label


def owner_qualname(code) -> str:
    """code.co_qualname where Python has it (3.11+), else (3.10) `qualname_by_referrers`."""
    name = getattr(code, "co_qualname", None)
    return name if isinstance(name, str) else qualname_by_referrers(code)


@functools.lru_cache(maxsize=1024)
def qualname_by_referrers(code) -> str:
    """The __qualname__ of the function whose code `code` is, found once among the objects that refer to it
    (else its co_name)."""
    owners = [f for f in gc.get_referrers(code) if getattr(f, "__code__", None) is code]
    return owners[0].__qualname__ if owners else code.co_name


def student_caller(frame) -> str:
    """The qualified name of the innermost student function on the stack from `frame` outwards (UNKNOWN_CALLER
    when there is none)."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(STUDENT_PREFIX):
            return owner_qualname(frame.f_code)
        frame = frame.f_back
    return UNKNOWN_CALLER


class _Mode(TorchFunctionMode):
    def __init__(self, watch: ForbiddenCallWatch):
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        labels = self.watch.labels
        try:
            label = labels[func]
        except (KeyError, TypeError):  # (first sight of func, or an unhashable one)
            label = torch_label(func)
            with contextlib.suppress(TypeError):
                labels[func] = label
        # (not while torch.compile traces, as flex_attention does even in eager mode: dynamo cannot trace the
        # frame walk. A forbidden call inside student code run through torch.compile(backend="eager") was
        # still seen in a test, once the compiled function ran.)
        if label is None and not sys.modules.keys().isdisjoint(WATCHED_LIBRARIES):  # (once one was imported)
            label = library_label(sys._getframe(1))
        if label is not None:
            label = nested_label(label, args)
        if label is not None and not torch.compiler.is_compiling():
            self.watch.record(label, sys._getframe(1))
        return func(*args, **(kwargs or {}))


class ForbiddenCallWatch:
    """Records (student function, torch function) for every watched call while student code runs."""

    def __init__(self) -> None:
        self.calls: set[tuple[str, str]] = set()
        self.labels: dict = {}  # torch function -> its label or None (torch_label, cached: the mode sees every call)
        self.wrapped = {}
        self.inside = threading.local()  # depth of watched wrappers: what they call is theirs, not recorded twice
        # One wrapper per function: F.scaled_dot_product_attention and torch._C._nn's are the same builtin,
        # and torch's CausalBias (causal_lower_right) recognises SDPA by identity with the public name.
        wrappers = {}
        for owner, attr, label in TARGETS + PRIVATE_TARGETS:
            try:
                original = getattr(owner, attr)
                wrapped = wrappers.setdefault((id(original), label), self._wrap(original, label))
                setattr(owner, attr, wrapped)
            except (AttributeError, TypeError, RuntimeError):
                continue  # not in this build of torch, or not replaceable
            self.wrapped[(owner, attr)] = wrapped
        self._cover_threads()

    @property
    def used(self) -> set[str]:
        """The torch functions called (labels), whoever called them."""
        return {label for _, label in self.calls}

    def clear(self) -> None:
        self.calls.clear()

    def record(self, label: str, frame) -> None:
        if getattr(self.inside, "depth", 0):
            return
        self.calls.add((student_caller(frame), label))

    def _wrap(self, original, label):
        watch = self

        def watched(*args, **kwargs):
            watch.record(nested_label(label, args), sys._getframe(1))
            watch.inside.depth = getattr(watch.inside, "depth", 0) + 1
            try:
                return original(*args, **kwargs)
            finally:
                watch.inside.depth -= 1

        watched.__wrapped__ = original
        watched.__name__ = getattr(original, "__name__", label)
        return watched

    def intact(self) -> bool:
        """Are the wrappers still where they were put?"""
        return all(getattr(owner, attr, None) is wrapped for (owner, attr), wrapped in self.wrapped.items())

    @contextlib.contextmanager
    def watching(self):
        """Torch's function mode on while the block runs; a block that switched the watch off is recorded."""
        mode = _Mode(self)
        depth = torch._C._len_torch_function_stack()
        torch._C._push_on_torch_function_stack(mode)
        try:
            yield
        finally:
            # (a mode the student pushed on top of ours is harmless: calls still pass through ours)
            top = torch._C._len_torch_function_stack()
            if top <= depth or torch._C._get_function_stack_at(depth) is not mode or not self.intact():
                self.calls.add((UNKNOWN_CALLER, WATCH_OFF))
            while torch._C._len_torch_function_stack() > depth:
                torch._C._pop_torch_function_stack()

    def _cover_threads(self) -> None:
        """Threads started by student code run under the mode as well."""
        watch, run = self, threading.Thread.run

        def watched_run(thread):
            with watch.watching():
                run(thread)

        threading.Thread.run = watched_run
