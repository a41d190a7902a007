"""Reference implementation of the course API (see ../shared/course-spec.md).

This file is the single ground truth: the solution cells of the instructor
notebooks are generated from it, and the hidden autograder compares every
submission against it. Names follow the maths: B batch, S sequence length,
H heads, d_model model width, d_k / d_v query-key / value width, head_dim = d_model // H.

Mask convention of the whole course: a boolean padding mask is [B, S] with
True = real token (keep). Masked scores become -inf before the softmax.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------- #
# Part qkv_projection
# --------------------------------------------------------------------------- #


def make_projections(d_model: int, d_k: int, d_v: int) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
    """Three independent, bias-free projections: W_q, W_k: d_model -> d_k, W_v: d_model -> d_v."""
    W_q = nn.Linear(d_model, d_k, bias=False)
    W_k = nn.Linear(d_model, d_k, bias=False)
    W_v = nn.Linear(d_model, d_v, bias=False)
    return W_q, W_k, W_v


def project_qkv(
    x: torch.Tensor, W_q: nn.Module, W_k: nn.Module, W_v: nn.Module
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [B, S, d_model] -> Q [B, S, d_k], K [B, S, d_k], V [B, S, d_v]."""
    return W_q(x), W_k(x), W_v(x)


# --------------------------------------------------------------------------- #
# Part scaled_scores
# --------------------------------------------------------------------------- #


def scaled_scores(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """Q [..., S_q, d_k], K [..., S_k, d_k] -> scores [..., S_q, S_k] = Q K^T / sqrt(d_k)."""
    d_k = Q.shape[-1]
    return Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # [..., S_q, S_k]


def attention_weights(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the key dimension (the last one): every row sums to 1."""
    return torch.softmax(scores, dim=-1)


def attend(weights: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """weights [..., S_q, S_k] x V [..., S_k, d_v] -> out [..., S_q, d_v]."""
    return weights @ V


# --------------------------------------------------------------------------- #
# Part masks
# --------------------------------------------------------------------------- #


def padding_mask(lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """lengths [B] -> BoolTensor [B, seq_len], True where position < length (a real token)."""
    positions = torch.arange(seq_len, device=lengths.device)  # [S]
    return positions[None, :] < lengths[:, None]  # [B, S]


def causal_mask(seq_len: int) -> torch.Tensor:
    """BoolTensor [S, S], True where key j <= query i (the past and the present)."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()


def apply_padding_mask(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """scores [B, S_q, S_k] or [B, H, S_q, S_k], mask [B, S_k] -> same shape, -inf at padded keys."""
    B, S_k = mask.shape
    # Insert singleton axes after the batch so the mask lines up with the key axis:
    # [B, 1, S_k] for 3-D scores, [B, 1, 1, S_k] for 4-D scores.
    keep = mask.reshape(B, *([1] * (scores.dim() - 2)), S_k)
    return scores.masked_fill(~keep, float("-inf"))


def apply_causal_mask(scores: torch.Tensor) -> torch.Tensor:
    """-inf wherever key j > query i; works for any leading dimensions."""
    S_q, S_k = scores.shape[-2:]
    future = torch.ones(S_q, S_k, dtype=torch.bool, device=scores.device).triu(diagonal=1)  # [S_q, S_k]
    return scores.masked_fill(future, float("-inf"))


# --------------------------------------------------------------------------- #
# Part module
# --------------------------------------------------------------------------- #


class SelfAttention(nn.Module):
    """Single-head self-attention with an output projection."""

    def __init__(self, d_model: int, d_k: int | None = None, d_v: int | None = None, dropout: float = 0.1):
        super().__init__()
        d_k = d_k or d_model
        d_v = d_v or d_model
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_v, bias=False)
        self.W_o = nn.Linear(d_v, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """x [B, S, d_model], mask [B, S] (True = real token) -> [B, S, d_model]."""
        # 1. project: Q, K [B, S, d_k], V [B, S, d_v]
        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)
        # 2. scores [B, S, S], scaled by sqrt(d_k)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        # 3. masks: padded keys ([B, S] -> [B, 1, S]) and, for a decoder, future keys
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        if causal:
            S = x.shape[1]
            future = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(diagonal=1)  # [S, S]
            scores = scores.masked_fill(future, float("-inf"))
        # 4. softmax over keys, then dropout on the weights [B, S, S]
        weights = self.dropout(torch.softmax(scores, dim=-1))
        # 5. weighted sum of values [B, S, d_v], then back to d_model
        return self.W_o(weights @ V)


# --------------------------------------------------------------------------- #
# Part official_parity
# --------------------------------------------------------------------------- #


def to_official(custom: SelfAttention) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention (one head, batch_first) carrying the weights of `custom`."""
    d_model = custom.W_q.weight.shape[1]
    official = nn.MultiheadAttention(d_model, num_heads=1, dropout=0.0, bias=True, batch_first=True)
    with torch.no_grad():
        # in_proj_weight is [3 * d_model, d_model]: rows q, then k, then v.
        official.in_proj_weight.copy_(torch.cat([custom.W_q.weight, custom.W_k.weight, custom.W_v.weight], dim=0))
        official.in_proj_bias.zero_()
        official.out_proj.weight.copy_(custom.W_o.weight)
        official.out_proj.bias.zero_()
    return official


def parity_error(custom: SelfAttention, x: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Largest |custom(x, mask) - official(x)| with the mask converted to key_padding_mask."""
    official = to_official(custom)
    was_training = custom.training
    custom.eval()
    official.eval()
    try:
        with torch.no_grad():
            ours = custom(x, mask)
            # nn.MultiheadAttention's key_padding_mask: True = ignore, the opposite of ours.
            key_padding_mask = None if mask is None else ~mask
            theirs, _ = official(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
    finally:
        custom.train(was_training)
    return (ours - theirs).abs().max().item()


# --------------------------------------------------------------------------- #
# Part multihead
# --------------------------------------------------------------------------- #


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, S, d_model] -> [B, H, S, head_dim]: view first, then move the head axis forward."""
    B, S, d_model = x.shape
    head_dim = d_model // num_heads
    x = x.view(B, S, num_heads, head_dim)  # [B, S, H, head_dim]: each token's features cut into H blocks
    return x.transpose(1, 2)  # [B, H, S, head_dim]


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, S, head_dim] -> [B, S, H * head_dim]: the inverse of split_heads."""
    B, H, S, head_dim = x.shape
    x = x.transpose(1, 2)  # [B, S, H, head_dim]
    return x.reshape(B, S, H * head_dim)  # [B, S, d_model]


class MultiHeadSelfAttention(nn.Module):
    """H heads of width head_dim = d_model // H, computed in parallel."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)  # rows: q, k, v
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """x [B, S, d_model], mask [B, S] (True = real token) -> [B, S, d_model]."""
        # 1. one projection for all three: [B, S, 3 * d_model] -> three [B, S, d_model]
        Q, K, V = self.W_qkv(x).chunk(3, dim=-1)
        # 2. split into heads: [B, H, S, head_dim]
        Q, K, V = (split_heads(t, self.num_heads) for t in (Q, K, V))
        # 3. scores per head [B, H, S, S], scaled by sqrt(head_dim), not sqrt(d_model)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        # 4. masks broadcast over heads: padding [B, S] -> [B, 1, 1, S], causal [S, S]
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        if causal:
            S = x.shape[1]
            future = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(diagonal=1)  # [S, S]
            scores = scores.masked_fill(future, float("-inf"))
        # 5. softmax over keys, dropout on the weights, weighted sum [B, H, S, head_dim]
        out = self.dropout(torch.softmax(scores, dim=-1)) @ V
        # 6. merge heads [B, S, d_model] and mix them with W_o
        return self.W_o(merge_heads(out))


# --------------------------------------------------------------------------- #
# Part long_sequence
# --------------------------------------------------------------------------- #


def attention_matrix_bytes(batch: int, heads: int, seq_len: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of one [B, H, S, S] score matrix: B * H * S^2 * element size."""
    element_size = torch.empty((), dtype=dtype).element_size()
    return batch * heads * seq_len * seq_len * element_size


def sdpa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False
) -> torch.Tensor:
    """q, k, v [B, H, S, head_dim] -> [B, H, S, head_dim] through the fused kernel."""
    if mask is None:
        # is_causal lets the flash kernel run; an explicit boolean mask would forbid it.
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    # SDPA's boolean attn_mask means "may attend": the same sense as ours.
    allowed = mask[:, None, None, :]  # [B, 1, 1, S_k], broadcast over heads and queries
    if causal:
        S_q, S_k = q.shape[-2], k.shape[-2]
        past = torch.ones(S_q, S_k, dtype=torch.bool, device=q.device).tril()  # [S_q, S_k]
        allowed = allowed & past  # [B, 1, S_q, S_k]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def chunked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """Exact attention, one block of chunk_size queries at a time: at most [B, H, chunk, S] scores live."""
    B, H, S, head_dim = q.shape
    out = torch.empty_like(q)  # [B, H, S, head_dim]
    for start in range(0, S, chunk_size):
        stop = min(start + chunk_size, S)
        scores = q[:, :, start:stop] @ k.transpose(-2, -1) / math.sqrt(head_dim)  # [B, H, chunk, S]
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        if causal:
            query_pos = torch.arange(start, stop, device=q.device)[:, None]  # [chunk, 1]
            key_pos = torch.arange(S, device=q.device)[None, :]  # [1, S]
            scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
        out[:, :, start:stop] = torch.softmax(scores, dim=-1) @ v  # [B, H, chunk, head_dim]
    return out
