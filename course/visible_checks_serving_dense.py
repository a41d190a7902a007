"""The yardsticks of `serving`'s visible checks, in float64: dense attention over one sequence (grouped heads,
bottom-right causal), RoPE on neighbour pairs, and DecoderAttention's computation written out from a layer's weights.
Pure torch, never a reference implementation (visible_checks.py, visible_checks_serving_batching.py and
visible_checks_serving_sinks.py measure against them).
"""
from __future__ import annotations

import math

import torch


def attend64(q, k, v, causal=True, tiled=False, top_left=False):
    """One sequence in float64: q [S_q, H, D], k [S_k, H_kv, D], v [S_k, H_kv, D_v] -> [S_q, H, D_v]; bottom-right
    causal, grouped heads, zeros for a query that sees no key (`tiled`, `top_left`: the two classic mistakes)."""
    S_q, H, D = q.shape
    S_k, H_kv = k.shape[:2]
    n_rep = H // H_kv
    k, v = ((t.double().repeat(1, n_rep, 1) if tiled else t.double().repeat_interleave(n_rep, dim=1)) for t in (k, v))
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) / math.sqrt(D)
    if causal:
        allowed = torch.ones(S_q, S_k, dtype=torch.bool).tril(diagonal=0 if top_left else S_k - S_q)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", weights, v)


def rope64(x, positions, base=10000.0):
    """x [..., S, D] rotated in float64, pair (2i, 2i + 1) by positions * base^(-2i / D)."""
    D = x.shape[-1]
    angle = positions.double()[:, None] * base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    a, b = x.double()[..., 0::2], x.double()[..., 1::2]
    return torch.stack((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), dim=-1).flatten(-2)


def dense_layer(layer, x, positions, H):
    """One sequence x [S, d_model] through the layer's weights in float64 (H query heads), keys and queries rotated
    at `positions`: DecoderAttention's computation, written out."""
    head_dim = layer.W_q.out_features // H
    H_kv = layer.W_k.out_features // head_dim
    x = x.double()
    q = (x @ layer.W_q.weight.double().T).view(-1, H, head_dim)
    k = (x @ layer.W_k.weight.double().T).view(-1, H_kv, head_dim)
    v = (x @ layer.W_v.weight.double().T).view(-1, H_kv, head_dim)
    q, k = rope64(q.transpose(0, 1), positions).transpose(0, 1), rope64(k.transpose(0, 1), positions).transpose(0, 1)
    return attend64(q, k, v).flatten(1) @ layer.W_o.weight.double().T


def cu_lengths(lengths):
    """[0, l0, l0 + l1, ...]: where each sequence starts in a packed batch."""
    return [0] + torch.tensor(lengths).cumsum(0).tolist()


def varlen64(q, k, v, q_lens, k_lens, causal, **mistake):
    """Packed sequences (cumulative lengths of q_lens, k_lens) attended one at a time with attend64."""
    cq, ck = cu_lengths(q_lens), cu_lengths(k_lens)
    return torch.cat([attend64(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], causal, **mistake)
                      for b in range(len(q_lens))])


def gap(got, want) -> float:
    """The largest absolute difference, in float64."""
    return (got.double() - want).abs().max().item()
