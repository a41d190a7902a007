"""Reference implementation of the second assignment, `generation` (see ../shared/course-spec.md).

Attention at generation time: how a model knows positions (sinusoidal encodings, RoPE), how
it generates one token at a time (the KV cache, grouped-query attention), how it attends to
another sequence (cross-attention), and how a Llama-style decoder layer puts these pieces
together. Like solutions/attention.py, this file is the single ground truth: the solution cells of the `generation` notebooks are generated from it, and
the hidden checks compare every submission against it.

Names follow the maths: B batch, H (query) heads, H_kv key/value heads, S_q queries,
S_k keys, head_dim = d_model // H. Masks are boolean with True = real token / may attend.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

# --------------------------------------------------------------------------- #
# Part positions
# --------------------------------------------------------------------------- #


def sinusoidal_positions(seq_len: int, d_model: int) -> torch.Tensor:
    """[seq_len, d_model] float32: PE[p, 2i] = sin(p / 10000^(2i / d_model)), PE[p, 2i + 1] = cos(same angle)."""
    position = torch.arange(seq_len, dtype=torch.float64)[:, None]  # [S, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # [d_model / 2]: 0, 2, 4, ...
    angle = position / 10000.0 ** (two_i / d_model)  # [S, d_model / 2]
    pe = torch.empty(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)  # even features
    pe[:, 1::2] = torch.cos(angle)  # odd features
    return pe.float()


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """x [..., S, head_dim], positions [S] or [B, S] -> same shape and dtype: pair (2i, 2i + 1) rotated by positions * base^(-2i / head_dim)."""
    head_dim = x.shape[-1]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32  # angles need more than fp16
    two_i = torch.arange(0, head_dim, 2, dtype=work, device=x.device)  # [head_dim / 2]
    angle = positions.to(work)[..., None] * base ** (-two_i / head_dim)  # [S, head_dim / 2] or [B, S, head_dim / 2]
    if positions.dim() == 2 and x.dim() == 4:
        angle = angle[:, None]  # [B, 1, S, head_dim / 2]: one row of positions per sequence, the same for every head
    cos, sin = torch.cos(angle), torch.sin(angle)
    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)  # [..., S, head_dim / 2]: the two halves of each pair
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # [..., S, head_dim / 2, 2]
    return rotated.flatten(-2).to(x.dtype)  # [..., S, head_dim]: pairs back in place


# --------------------------------------------------------------------------- #
# Part kv_cache
# --------------------------------------------------------------------------- #


def decode_causal_mask(S_q: int, S_k: int) -> torch.Tensor:
    """BoolTensor [S_q, S_k]: the queries are the last S_q of S_k positions; True where key j <= i + (S_k - S_q)."""
    offset = S_k - S_q  # how many positions came before the first query
    return torch.ones(S_q, S_k, dtype=torch.bool).tril(diagonal=offset)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, H_kv, S, head_dim] -> [B, H_kv * n_rep, S, head_dim]: kv head h serves query heads h * n_rep ... (h + 1) * n_rep - 1."""
    B, H_kv, S, head_dim = x.shape
    x = x[:, :, None].expand(B, H_kv, n_rep, S, head_dim)  # [B, H_kv, n_rep, S, head_dim], no copy yet
    return x.reshape(B, H_kv * n_rep, S, head_dim)  # copies of one head end up next to each other


class KVCache:
    """The keys and values of every position seen so far, [B, H, S_cached, head_dim] each."""

    def __init__(self):
        """An empty cache."""
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add k, v [B, H, S_new, head_dim] after the cached positions; return all of them."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)  # [B, H, S_cached + S_new, head_dim]: the sequence axis
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def __len__(self) -> int:
        """The number of cached positions (the sequence axis of the cached keys)."""
        return 0 if self.k is None else self.k.shape[-2]


class CachedSelfAttention(nn.Module):
    """Causal multi-head self-attention that can generate one token at a time with a KVCache."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)  # rows: q, k, v
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """x [B, S_new, d_model] (the new tokens) -> [B, S_new, d_model]; keys and values go through `cache`."""
        B, S_new, d_model = x.shape
        H = self.num_heads
        # 1. project the new tokens and split heads: three [B, H, S_new, head_dim]
        q, k, v = (t.view(B, S_new, H, d_model // H).transpose(1, 2) for t in self.W_qkv(x).chunk(3, dim=-1))
        # 2. append first, so the new queries see the cached positions and themselves: [B, H, S_k, head_dim]
        if cache is not None:
            k, v = cache.append(k, v)
        S_k = k.shape[-2]
        # 3. scores [B, H, S_new, S_k]; the new queries are the last S_new positions (bottom-right aligned)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~decode_causal_mask(S_new, S_k).to(x.device), float("-inf"))
        # 4. softmax over keys, weighted sum, merge heads [B, S_new, d_model], then W_o
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S_new, head_dim]
        return self.W_o(out.transpose(1, 2).reshape(B, S_new, d_model))


def kv_cache_bytes(batch: int, layers: int, kv_heads: int, head_dim: int, seq_len: int,
                   dtype: torch.dtype = torch.float16) -> int:
    """Bytes of the cached keys and values of all layers: 2 (K and V) * B * layers * H_kv * S * head_dim * element size."""
    element_size = torch.empty((), dtype=dtype).element_size()
    return 2 * batch * layers * kv_heads * seq_len * head_dim * element_size


# --------------------------------------------------------------------------- #
# Part cross_attention
# --------------------------------------------------------------------------- #


class CrossAttention(nn.Module):
    """Multi-head attention from a sequence x (queries) to another sequence, the context (keys and values)."""

    def __init__(self, d_model: int, num_heads: int, d_context: int | None = None):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        d_context = d_context or d_model
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_context, d_model, bias=False)
        self.W_v = nn.Linear(d_context, d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, context: torch.Tensor, context_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S_q, d_model], context [B, S_k, d_context], context_mask [B, S_k] (True = real token) -> [B, S_q, d_model]."""
        B, S_q, d_model = x.shape
        S_k = context.shape[1]
        H = self.num_heads
        head_dim = d_model // H
        # 1. queries from x, keys and values from the context, split into heads
        q = self.W_q(x).view(B, S_q, H, head_dim).transpose(1, 2)  # [B, H, S_q, head_dim]
        k = self.W_k(context).view(B, S_k, H, head_dim).transpose(1, 2)  # [B, H, S_k, head_dim]
        v = self.W_v(context).view(B, S_k, H, head_dim).transpose(1, 2)  # [B, H, S_k, head_dim]
        # 2. scores [B, H, S_q, S_k]; padded context tokens are hidden from every query (no causal mask)
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        if context_mask is not None:
            scores = scores.masked_fill(~context_mask[:, None, None, :], float("-inf"))  # [B, 1, 1, S_k]
        # 3. softmax over the context, weighted sum, merge heads, W_o
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S_q, head_dim]
        return self.W_o(out.transpose(1, 2).reshape(B, S_q, d_model))


# --------------------------------------------------------------------------- #
# Part decoder
# --------------------------------------------------------------------------- #


class DecoderAttention(nn.Module):
    """A Llama-style decoder's attention at generation time: RoPE at each token's position, a grouped-query KV cache."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, rope_base: float = 10000.0):
        super().__init__()
        num_kv_heads = num_kv_heads or num_heads
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must divide d_model={d_model}, num_kv_heads={num_kv_heads} "
                             "must divide num_heads")
        self.num_heads, self.num_kv_heads, self.rope_base = num_heads, num_kv_heads, rope_base
        head_dim = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)  # fewer key/value heads than query heads
        self.W_v = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, positions: torch.Tensor | None = None,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S_new, d_model] -> [B, S_new, d_model]; positions [S_new] or [B, S_new] (default: after the cache); key_mask [B, S_k]."""
        B, S_new, d_model = x.shape
        H, H_kv = self.num_heads, self.num_kv_heads
        head_dim = d_model // H
        # 1. project the new tokens and split heads
        q = self.W_q(x).view(B, S_new, H, head_dim).transpose(1, 2)  # [B, H, S_new, head_dim]
        k = self.W_k(x).view(B, S_new, H_kv, head_dim).transpose(1, 2)  # [B, H_kv, S_new, head_dim]
        v = self.W_v(x).view(B, S_new, H_kv, head_dim).transpose(1, 2)  # [B, H_kv, S_new, head_dim]
        # 2. the new tokens come after everything cached: positions len(cache), len(cache) + 1, ...
        if positions is None:
            start = 0 if cache is None else len(cache)
            positions = torch.arange(start, start + S_new, device=x.device)  # [S_new]
        q = apply_rope(q, positions, self.rope_base)
        k = apply_rope(k, positions, self.rope_base)
        # 3. cache the ROTATED keys (each rotated once, at its own position) and the values: [B, H_kv, S_k, head_dim]
        if cache is not None:
            k, v = cache.append(k, v)
        S_k = k.shape[-2]
        # 4. each key/value head serves H // H_kv query heads: [B, H, S_k, head_dim]
        k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)
        # 5. scores [B, H, S_new, S_k]: causal, bottom-right aligned; padded keys hidden
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        allowed = decode_causal_mask(S_new, S_k).to(x.device)  # [S_new, S_k]
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]  # [B, 1, S_new, S_k]
        scores = scores.masked_fill(~allowed, float("-inf"))
        # 6. softmax over keys, weighted sum, merge heads, W_o
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S_new, head_dim]
        return self.W_o(out.transpose(1, 2).reshape(B, S_new, d_model))
