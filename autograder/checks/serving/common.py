"""Shapes, seeded inputs and trusted re-computations of the `serving` checks.

Every oracle here is dense attention in float64 over one sequence at a time, written independently of
solutions/serving.py; each `*_variant` recomputes a result with one classic mistake (top-left causal, heads tiled
instead of grouped, attention over the whole packed batch, keys sliced with the query offsets, NaN rows where a
query sees no key, a whole last block read), so that a check can name the mistake whose output the student's
matches. Without keywords each variant equals the oracle.
"""
from __future__ import annotations

import math

import torch

from autograder.checks import expect
from autograder.foundation import i18n

_ = i18n.message

NEG_INF = float("-inf")
BLOCK_SIZE = 4


def randn(g: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64).float()


def cu_of(lengths) -> torch.Tensor:
    """cu_seqlens computed here (int32 [B + 1]), never the student's."""
    out = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    out[1:] = torch.tensor(list(lengths), dtype=torch.int64).cumsum(0)
    return out


def visible(S_q: int, S_k: int, causal: bool, align: str = "bottom_right") -> torch.Tensor:
    """May query i see key j: bottom-right j <= i + S_k - S_q, top-left j <= i."""
    allowed = torch.ones(S_q, S_k, dtype=torch.bool)
    if causal:
        allowed = allowed.tril(S_k - S_q if align == "bottom_right" else 0)
    return allowed


def attend(q, k, v, allowed, tiled: bool = False, nan_rows: bool = False) -> torch.Tensor:
    """One sequence in float64: q [S_q, H, D], k [S_k, H_kv, D], v [S_k, H_kv, D_v] -> [S_q, H, D_v] in float32."""
    H, H_kv = q.shape[1], k.shape[1]
    qd, kd, vd = (t.double().transpose(0, 1) for t in (q, k, v))  # [H, S, D]
    if tiled:  # (what .repeat gives: query head h reads key/value head h % H_kv)
        kd, vd = kd.repeat(H // H_kv, 1, 1), vd.repeat(H // H_kv, 1, 1)
    else:
        kd, vd = kd.repeat_interleave(H // H_kv, 0), vd.repeat_interleave(H // H_kv, 0)
    scores = (qd @ kd.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    if not nan_rows:
        weights = torch.where(allowed.any(-1)[:, None], weights, 0.0)
    return (weights @ vd).transpose(0, 1).float()


def varlen_variant(q, k, v, cu_q, cu_k, causal: bool, *, align: str = "bottom_right", tiled: bool = False,
                   whole: bool = False, query_offsets: bool = False, nan_rows: bool = False) -> torch.Tensor:
    """varlen attention, or one of its mistakes: `whole` attends over the whole packed batch (causal on packed
    positions), `query_offsets` slices the keys with cu_q instead of cu_k."""
    cu_q, cu_k = [int(c) for c in cu_q], [int(c) for c in cu_k]
    if whole:
        return attend(q, k, v, visible(q.shape[0], k.shape[0], causal, align), tiled, nan_rows)
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2])
    for b in range(len(cu_q) - 1):
        q0, q1 = cu_q[b], cu_q[b + 1]
        k0, k1 = (cu_q[b], cu_q[b + 1]) if query_offsets else (cu_k[b], cu_k[b + 1])
        if q1 > q0:
            out[q0:q1] = attend(q[q0:q1], k[k0:k1], v[k0:k1], visible(q1 - q0, k1 - k0, causal, align), tiled,
                                nan_rows)
    return out


def gathered(cache: torch.Tensor, table, n: int, whole_block: bool = False, contiguous: bool = False) -> torch.Tensor:
    """A sequence's first n slots of `cache` [num_blocks, block_size, ...] read through its table; `whole_block`
    reads its last block to the end (and the table's padding), `contiguous` assumes its blocks follow its first."""
    bs = cache.shape[1]
    used = -(-n // bs)
    blocks = [int(table[0]) + i for i in range(used)] if contiguous else [int(b) for b in table[:used]]
    if whole_block:
        blocks = [int(b) for b in table]
    blocks = [b % cache.shape[0] for b in blocks]
    flat = cache[blocks].reshape(-1, *cache.shape[2:])
    return flat if whole_block else flat[:n]


def paged_variant(q, k_cache, v_cache, tables, seq_lens, cu_q=None, *, align: str = "bottom_right",
                  tiled: bool = False, whole_block: bool = False, contiguous: bool = False) -> torch.Tensor:
    """paged attention, or one of its mistakes, through `gathered` and `attend`."""
    lens = [int(n) for n in seq_lens]
    cu_q = list(range(len(lens) + 1)) if cu_q is None else [int(c) for c in cu_q]
    out = torch.zeros(q.shape[0], q.shape[1], v_cache.shape[-1])
    for b, n in enumerate(lens):
        q0, q1 = cu_q[b], cu_q[b + 1]
        if q1 == q0:
            continue
        k = gathered(k_cache, tables[b], n, whole_block, contiguous)
        v = gathered(v_cache, tables[b], n, whole_block, contiguous)
        out[q0:q1] = attend(q[q0:q1], k, v, visible(q1 - q0, k.shape[0], True, align), tiled)
    return out


def int_list(value, what: str) -> list[int]:
    """A student's integer tensor or list as Python ints, or a failure that says what came back."""
    if isinstance(value, torch.Tensor) and not value.is_floating_point() and value.dim() == 1:
        return [int(x) for x in value]
    if isinstance(value, (list, tuple)) and all(isinstance(x, int) for x in value):
        return list(value)
    raise expect.CheckFailure(_("{what} should return a 1-D integer tensor, got {kind}").format(
        what=what, kind=type(value).__name__))


# --------------------------------------------------------------------------- #
# driving a student's PagedKVCache inside a job
# --------------------------------------------------------------------------- #


def attribute(job, target, name: str):
    """The step reading `target.name` (an attribute or a property) in the worker."""
    return job.method(target, "__getattribute__", name)


def write(job, cache, slots, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
    """Write k, v [n, H_kv, D] at the student's `slots` of `layer` with plain torch (slot = block * block_size + offset
    on the pool seen flat), never with the student's reshape_and_cache: a mistake there costs its own checks only."""
    for name, values in (("k_cache", k), ("v_cache", v)):
        flat = job.method(job.method(attribute(job, cache, name), "select", 0, layer), "flatten", 0, 1)
        job.method(flat, "index_copy_", 0, job.method(slots, "long"), values)


def slots_of(table: list[int], start: int, n: int, block_size: int = BLOCK_SIZE) -> list[int]:
    """The slots of positions start .. start + n - 1 through a block table."""
    return [table[p // block_size] * block_size + p % block_size for p in range(start, start + n)]
