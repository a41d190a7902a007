"""What the grader builds inside the worker for the `serving` checks: drivers of the student's stateful pieces, the
model that records each step, and caches whose bookkeeping is answered by the trusted side. Nothing here computes
what a check grades; like every builtin (standins.builtins), these are the student's to reach and never trusted.
"""
from __future__ import annotations

import types

import torch
import torch.nn as nn

def attempt(function, *args, **kwargs) -> str | None:
    """The type name of what a student's call raised (None if it returned), so that a job goes on after a call that
    must raise (an exhausted pool, a reserve that does not fit, a double free)."""
    try:
        function(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - which exception it was is what the check reads
        return type(exc).__name__
    return None


def written_by(function, *args) -> tuple:
    """A student's in-place function (reshape_and_cache) called on `args`; the arguments afterwards (it returns
    None: what it wrote is its result)."""
    function(*args)
    return tuple(args)


class PagedPool:
    """The one thing a paged layer may read from its cache: k_cache and v_cache [num_layers, num_blocks, block_size,
    H_kv, D] (the serving contract's rule 6), nothing else."""

    def __init__(self, k_cache: torch.Tensor, v_cache: torch.Tensor):
        self.k_cache, self.v_cache = k_cache, v_cache

    def tensors(self) -> tuple:
        return self.k_cache, self.v_cache


def paged_pool(k_cache: torch.Tensor, v_cache: torch.Tensor) -> PagedPool:
    return PagedPool(k_cache, v_cache)


def step_meta(cu_seqlens_q, slot_mapping, block_tables, seq_lens):
    """The `meta` of one step of a paged layer: an object with the four attributes the contract names."""
    return types.SimpleNamespace(cu_seqlens_q=cu_seqlens_q, slot_mapping=slot_mapping, block_tables=block_tables,
                                 seq_lens=seq_lens)


class ServingModel(nn.Module):
    """The serving checks' model around the student's paged layers: an embedding, each layer with a residual, a
    head; every call is recorded (tokens, positions, cu_seqlens_q, the blocks its tables use), so that the grader
    counts steps, tokens and blocks itself."""

    def __init__(self, embedding: torch.Tensor, head: torch.Tensor, layers):
        super().__init__()
        self.embedding, self.head = embedding, head
        self.layers = nn.ModuleList(layers)
        self.calls = []

    def forward(self, tokens, positions, meta, cache):
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"model(tokens, positions, meta, cache): tokens is a tensor [T] of token ids, not a "
                            f"{type(tokens).__name__}")
        tokens = tokens.long()
        block_size = cache.k_cache.shape[2]
        blocks = set()
        for row, n in enumerate(torch.as_tensor(meta.seq_lens).tolist()):
            blocks.update(torch.as_tensor(meta.block_tables)[row, :-(-int(n) // block_size)].tolist())
        self.calls.append({"tokens": tokens.clone(), "positions": torch.as_tensor(positions).long().clone(),
                           "cu": torch.as_tensor(meta.cu_seqlens_q).long().clone(), "blocks": len(blocks)})
        x = self.embedding[tokens]  # [T, d_model]
        for layer in self.layers:
            x = x + layer(x, positions, meta, cache)
        return x @ self.head.T  # [T, vocab]

    def record(self) -> list:
        return list(self.calls)


def serving_model(embedding: torch.Tensor, head: torch.Tensor, layers) -> ServingModel:
    return ServingModel(embedding, head, layers)


class ScheduledCache:
    """A cache that keeps, after its i-th append, the rows `keep[i]` of what it held plus the new keys (positions
    the checks computed beforehand): `append` and `len`, nothing else. The attention_sinks checks hand it to the
    student's SinkDecoderAttention, so that the layer is graded apart from the student's SinkKVCache."""

    def __init__(self, keep):
        self.keep, self.k, self.v, self.appends = [list(map(int, rows)) for rows in keep], None, None, 0

    def append(self, k, v):
        k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        rows = torch.tensor(self.keep[min(self.appends, len(self.keep) - 1)], dtype=torch.long)
        self.appends += 1
        self.k, self.v = k.index_select(-2, rows), v.index_select(-2, rows)
        return self.k, self.v

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]


def scheduled_cache(keep) -> ScheduledCache:
    return ScheduledCache(keep)


class _RemoteAllocator:
    def __init__(self, cache):
        self._cache = cache

    @property
    def num_free(self) -> int:
        return self._cache._call("num_free")


class RemoteCache:
    """The serving checks' paged KV cache: its tensors k_cache and v_cache [num_layers, num_blocks, block_size, H_kv, D]
    live here, its bookkeeping (tables, lengths, the allocator, prefix hits) is answered by the trusted side, which
    keeps the contract's cache for it (checks/serving/caches.py). A copy-on-write comes back as (old, new) block pairs
    copied here. The scheduler may use what the contract lists, nothing else."""

    def __init__(self, ask, cache_id: str, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 num_layers: int = 1):
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        self.k_cache, self.v_cache = torch.zeros(shape), torch.zeros(shape)
        self.block_size, self.cache_id, self.ask = block_size, cache_id, ask
        self.allocator = _RemoteAllocator(self)

    def _call(self, method: str, *args):
        value, copies = self.ask("cache", (self.cache_id, method, list(args)), {})
        for old, new in copies:
            self.k_cache[:, new] = self.k_cache[:, old]
            self.v_cache[:, new] = self.v_cache[:, old]
        return value

    def add_sequence(self, seq_id, token_ids=None):
        return self._call("add_sequence", seq_id, token_ids)

    def reserve(self, seq_id, num_new, token_ids=None):
        return self._call("reserve", seq_id, num_new, token_ids)

    def free_sequence(self, seq_id):
        return self._call("free_sequence", seq_id)

    def block_table(self, seq_id):
        return self._call("block_table", seq_id)

    def seq_len(self, seq_id):
        return self._call("seq_len", seq_id)

    def block_tables_tensor(self, seq_ids):
        return self._call("block_tables_tensor", list(seq_ids))

    def seq_lens_tensor(self, seq_ids):
        return self._call("seq_lens_tensor", list(seq_ids))

    def blocks_used(self):
        return self._call("blocks_used")


def builtins(ask) -> dict:
    """The serving checks' builtins for one worker (standins.builtins adds them); `ask` answers the remote cache's
    bookkeeping from the trusted side."""

    def remote_cache(cache_id: str, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                     num_layers: int = 1) -> RemoteCache:
        return RemoteCache(ask, cache_id, num_blocks, block_size, num_kv_heads, head_dim, num_layers)

    return {"attempt": attempt, "written_by": written_by, "paged_pool": paged_pool, "step_meta": step_meta,
            "serving_model": serving_model, "scheduled_cache": scheduled_cache, "remote_cache": remote_cache}
