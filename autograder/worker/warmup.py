"""Work the zygote does once, before it forks workers, for the assignments that ask for it (spec.Assignment.warm).

FlexAttention's create_mask and flex_attention import torch._dynamo and much more on first use:
seconds (more on a busy machine) that every freshly forked worker would pay again, inside the
part's time limit. Run once in the zygote (trusted code, on the grader's own tiny inputs), they
cost each worker nothing: it inherits the imports.
"""
from __future__ import annotations

import functools
import warnings

import torch


def _flex() -> None:
    from torch.nn.attention import flex_attention as flex  # noqa: PLC0415 - only for the assignments that use it

    q = torch.zeros(1, 1, 4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flex.create_mask(lambda b, h, q_idx, kv_idx: kv_idx <= q_idx, 1, 1, 4, 4, device="cpu")
        block_mask = flex.create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx <= q_idx, 1, 1, 4, 4, device="cpu")
        flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True  # untraced, as the checks run it (the builtin flex_attend)
        try:
            flex.flex_attention(q, q, q, score_mod=lambda score, b, h, q_idx, kv_idx: score * 0.5,
                                block_mask=block_mask)
        finally:
            flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = False


def _one_thread(work) -> None:
    """Run `work` on one intra-op thread: a parallel region would leave a thread pool behind, and the zygote
    must hold no thread but its own when it forks."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        work()
    finally:
        torch.set_num_threads(threads)


WARM_UPS = {"flex": _flex}


@functools.cache
def _warm_once(name: str) -> None:
    """The warm-up `name`, the first time this process asks for it (functools.cache remembers it was done). One
    that fails is not tried again and stops nothing: each worker then pays for the imports itself."""
    try:
        _one_thread(WARM_UPS[name])
    except Exception:  # noqa: BLE001 - the zygote must keep serving whatever this torch build does
        pass


def warm(names) -> None:
    """Run each named warm-up once per process; unknown names are ignored (the trusted side names them)."""
    for name in names if isinstance(names, (list, tuple)) else ():
        if isinstance(name, str) and name in WARM_UPS:
            _warm_once(name)
