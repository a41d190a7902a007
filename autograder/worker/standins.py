"""What the grader builds inside the worker: modules for the parts that take a module as input, and
FlexAttention run on the student's mask_mod and score_mod functions.

`to_official` and `parity_error` receive a `SelfAttention`. Their score must not depend
on the student's own `SelfAttention` (that is the `module` part), so the grader hands
them this stand-in: the same submodules (W_q, W_k, W_v, W_o, dropout), a correct
forward, and deliberately broken variants that a parity check must catch.
Nothing here is secret: it is ordinary attention, written with torch's fused kernel.

The `flex` part's functions return functions (FlexAttention's mods), which cannot leave the
worker: the checks hand them back to `flex_mask` (create_mask) and `flex_attend`
(flex_attention), which run here and return tensors.
"""
from __future__ import annotations

import math
import types
import warnings

import torch
import torch.nn as nn
from torch.nn.attention import flex_attention as flex

from .hflike import hf_bert_self_attention, hf_gpt2_attention, hf_llama_attention  # noqa: F401 (builtins, real_models)

_sdpa = None
_flex_attention = flex.flex_attention


def use_originals(original) -> None:
    """Take the unwatched fused kernel and flex_attention, so stand-ins never count as the student's calls."""
    global _sdpa, _flex_attention
    _sdpa = original(torch.nn.functional, "scaled_dot_product_attention")
    _flex_attention = original(flex, "flex_attention")


class StandInSelfAttention(nn.Module):
    VARIANTS = ("correct", "no_scale", "softmax_over_queries", "ignores_mask", "no_output_projection")

    def __init__(self, d_model: int, variant: str = "correct", dropout: float = 0.0):
        super().__init__()
        if variant not in self.VARIANTS:
            raise ValueError(f"unknown variant {variant}")
        self.variant = variant
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None, causal=False):
        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)  # [B, S, d]
        if self.variant == "correct" and not self.training:
            allowed = None if mask is None else mask[:, None, :]  # [B, 1, S]
            out = _sdpa(Q, K, V, attn_mask=allowed, is_causal=causal and mask is None)
            if causal and mask is not None:
                S = x.shape[1]
                allowed = allowed & torch.ones(S, S, dtype=torch.bool, device=x.device).tril()
                out = _sdpa(Q, K, V, attn_mask=allowed)
            return self.W_o(out)
        scale = 1.0 if self.variant == "no_scale" else 1 / math.sqrt(Q.shape[-1])
        scores = Q @ K.transpose(-2, -1) * scale  # [B, S, S]
        if mask is not None and self.variant != "ignores_mask":
            scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        if causal:
            S = x.shape[1]
            scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        dim = -2 if self.variant == "softmax_over_queries" else -1
        out = self.dropout(torch.softmax(scores, dim=dim)) @ V
        return out if self.variant == "no_output_projection" else self.W_o(out)


def attention_standin(d_model: int, variant: str = "correct", dropout: float = 0.0) -> StandInSelfAttention:
    return StandInSelfAttention(d_model, variant, dropout)


def linear(d_in: int, d_out: int, bias: bool = False) -> nn.Linear:
    """A plain nn.Linear for checks that need a layer which is not the student's (its weights are set after)."""
    return nn.Linear(d_in, d_out, bias=bias)


class RecordingCache:
    """A KV cache that keeps a copy of everything appended to it, so that a check can see what a decoder caches
    (rotated or not, how many heads). It may start with cached keys and values (a prompt the check computed)."""

    def __init__(self, k=None, v=None):
        self.k, self.v = k, v
        self.appended = []

    def append(self, k, v):
        self.appended.append((k.detach().clone(), v.detach().clone()))
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], dim=-2), torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def record(self):
        """Every (k, v) appended so far, in order."""
        return list(self.appended)


def recording_cache(k=None, v=None) -> RecordingCache:
    return RecordingCache(k, v)


def flex_mask(mask_mod, B: int | None, H: int | None, S_q: int, S_k: int) -> torch.Tensor:
    """FlexAttention's create_mask of a student's mask_mod: BoolTensor [B or 1, H or 1, S_q, S_k]."""
    return flex.create_mask(mask_mod, B, H, S_q, S_k, device="cpu")


def flex_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score_mod=None, mask_mod=None,
                traced: bool = False) -> torch.Tensor:
    """flex_attention(q, k, v) with a student's score_mod and/or mask_mod (through a BlockMask), eager on the CPU.

    Untraced unless `traced` (the worker's setting, runtime.Worker): the mods run under vmap as flex_attention's
    debugging mode runs them, in a tenth of a second; traced, as the notebook runs it (dynamo traces the mods
    first, importing the module that defines them), each new mod costs seconds."""
    B, H, S_q, S_k = q.shape[0], q.shape[1], q.shape[-2], k.shape[-2]
    block_mask = None if mask_mod is None else flex.create_block_mask(mask_mod, B, H, S_q, S_k, device="cpu")
    untraced = flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
    flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = untraced and not traced
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "called without torch.compile()": eager is what the course runs
            return _flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    finally:
        flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = untraced


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a view of a counted storage adds nothing)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def autograd_function_gradients(function, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                                grad_out: torch.Tensor):
    """A student's torch.autograd.Function run as training runs it: `out = function.apply(q, k, v, causal)`, then
    `out.backward(grad_out)`. Returns (out, grad_q, grad_k, grad_v, saved): `saved` the bytes the forward kept for
    backward (every tensor that went through save_for_backward, seen by saved_tensors_hooks, and every tensor kept
    as an attribute of ctx), None for a gradient that did not arrive."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    packed = []

    def pack(tensor):
        packed.append(tensor)
        return tensor

    with torch.enable_grad():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = function.apply(*leaves, causal)
        if not isinstance(out, torch.Tensor) or out.grad_fn is None:
            raise TypeError(f"{getattr(function, '__name__', 'the function')}.apply(q, k, v, causal) returned "
                            f"{type(out).__name__} without a gradient function: it should return out, a tensor")
        kept = [value for value in vars(out.grad_fn).values() if isinstance(value, torch.Tensor)]
        saved = storage_bytes(packed + kept)
        packed.clear()
        out.backward(grad_out)
    return out.detach(), *(leaf.grad for leaf in leaves), saved


# --------------------------------------------------------------------------- #
# serving: driving the student's stateful pieces (nothing here computes what a check grades)
# --------------------------------------------------------------------------- #


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
        tokens = torch.as_tensor(tokens).long()
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


_ask = None  # the worker's way to ask the trusted side (borrowed.asker), set by the runtime


def use_asker(ask) -> None:
    global _ask
    _ask = ask


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

    def __init__(self, cache_id: str, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 num_layers: int = 1):
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        self.k_cache, self.v_cache = torch.zeros(shape), torch.zeros(shape)
        self.block_size, self.cache_id = block_size, cache_id
        self.allocator = _RemoteAllocator(self)

    def _call(self, method: str, *args):
        value, copies = _ask("cache", (self.cache_id, method, list(args)), {})
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


def remote_cache(cache_id: str, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 num_layers: int = 1) -> RemoteCache:
    return RemoteCache(cache_id, num_blocks, block_size, num_kv_heads, head_dim, num_layers)
