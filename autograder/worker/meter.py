"""A live-memory meter for CPU tensors: how many bytes of tensor storage are alive at once.

`torch.cuda.max_memory_allocated` only exists on a GPU. On a CPU we watch every operator
through a TorchDispatchMode: each output's storage is recorded while it is alive (a weak
reference tells us when it is freed), and the peak of the running total is the figure
that matters for attention: plain attention holds a whole [B, H, S, S] matrix at once,
chunked attention only [B, H, chunk, S].

Only storages created inside the `with` block count: the inputs you pass in are not
measured, and neither is a view of them (a slice, a transpose, a reshape that needs no
copy) nor an operator that writes into them in place (but see `resize_` below), since none
of these allocates. The
figure is the *new* memory a function needs: its intermediate tensors and its output.

What it cannot see: a buffer that one operator allocates and frees inside itself (its
intermediate values never leave the operator: `torch.logsumexp` of a 64 MiB tensor makes a
64 MiB temporary and shows only its 0.06 MiB result; a fused kernel's work buffer likewise);
use `torch.profiler` for those. And `resize_` on an input that grows its storage is new
memory that outlives the block: the meter counts it, and `live_bytes` still holds it after
the block (5 MiB after growing an empty input to 5 MiB), since the input keeps it.

This file is shipped several times from one source: the grader's worker imports it, and the
course build copies it as `memory_meter.py` next to the notebooks that measure memory, those
of `self_attention` (05_long_sequence) and `efficient` (01_flash, 02_sliding_window, 03_linear).
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class LiveMemoryMeter(TorchDispatchMode):
    """with LiveMemoryMeter() as meter: f(...);  meter.peak_bytes, meter.live_bytes"""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in torch._disable_dynamo, whose first call
        # imports torch._dynamo: about 6 s in every freshly forked worker that measures.
        return False

    def __init__(self) -> None:
        super().__init__()
        self.live_bytes = 0
        self.peak_bytes = 0
        self._seen: dict[int, weakref.ref] = {}

    def _forget(self, key: int, nbytes: int) -> None:
        if self._seen.pop(key, None) is not None:
            self.live_bytes -= nbytes

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key == 0 or key in self._seen:
            return  # an empty tensor, or a view of storage we already count
        nbytes = storage.nbytes()
        self._seen[key] = weakref.ref(storage, lambda _ref, k=key, n=nbytes: self._forget(k, n))
        self.live_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # The storages the operator was given: an output on one of them is a view of an input or the input written
        # in place, not new memory. If we do not count that storage already, it was alive before the `with` block.
        kwargs = kwargs or {}
        given = {item.untyped_storage().data_ptr() for item in _cpu_tensors((*args, *kwargs.values()))}
        out = func(*args, **kwargs)
        fresh = func is torch.ops.aten.lift_fresh.default  # torch.tensor(...): data made inside the block
        for item in _cpu_tensors(out if isinstance(out, (list, tuple)) else (out,)):
            if fresh or item.untyped_storage().data_ptr() not in given:
                self._track(item)
        return out


def _cpu_tensors(values):
    """The CPU tensors among an operator's arguments or outputs, inside lists and tuples at any depth (aten's
    operators nest them one deep, Tensor[]; a higher-order operator such as flex_attention's, deeper)."""
    for value in values:
        if isinstance(value, (list, tuple)):
            yield from _cpu_tensors(value)
        elif isinstance(value, torch.Tensor) and value.device.type == "cpu":
            yield value
