"""Trusted re-computations of the `flash_backward` checks (assignment efficient).

`exact_gradients` is the ground truth: autograd through dense attention in float64, written independently of
solutions/efficient.py. `backward_variant` is flash_attention_backward written out in float64 on the inputs the
student received, with switches for its classic mistakes (delta omitted, the scale missing on one gradient, P
recomputed without the lse, top-left causal, key blocks skipped after the first query of a block, float16
accumulation), so that a check can name the mistake whose output the student's matches. Without keywords the
variant equals the truth (tests/test_efficient_checks_helpers.py).
"""
from __future__ import annotations

import math

import torch

from autograder.checks.efficient.common import NEG_INF, visible

GRADIENTS = ("grad_q", "grad_k", "grad_v")


def exact_gradients(q, k, v, grad_out, causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad_q, grad_k, grad_v) in float64 of exact attention's out (bottom-right causal), by autograd; a query that
    sees no key has out 0 and adds nothing to any gradient."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    q64, k64, v64 = leaves
    with torch.enable_grad():
        s = q64 @ k64.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, S_q, S_k]
        allowed = visible(q.shape[-2], k.shape[-2], causal)
        s = s.masked_fill(~allowed, NEG_INF)
        seen = allowed.any(dim=-1)[:, None]  # [S_q, 1]
        weights = torch.softmax(s.masked_fill(~seen, 0.0), dim=-1) * seen  # 0 on a row without keys
        out = weights @ v64
        out.backward(grad_out.double())
    return tuple(leaf.grad for leaf in leaves)


def backward_variant(q, k, v, out, lse, grad_out, causal: bool, block_q: int, block_k: int, *, delta: bool = True,
                     scale_q: bool = True, scale_k: bool = True, p_kind: str = "lse", align: str = "bottom_right",
                     skip: str = "last", acc: torch.dtype | None = None):
    """flash_attention_backward with switches for its mistakes, in `acc` (float64 unless given).

    delta False: dS = P * dP (the rowsum(dO * O) term omitted); scale_q / scale_k False: that gradient is not
    multiplied by 1 / sqrt(D); p_kind "tile": each tile's P is the softmax of the tile alone (normalised by its own
    sum, not with the lse), "exp": P = exp(s) without subtracting the lse; align "top_left": the causal mask without
    the S_k - S_q offset; skip "first": key blocks skipped after the last key the block's FIRST query sees; acc
    float16: no float32 accumulation."""
    acc = acc or torch.float64
    S_q, S_k, D = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(D)
    offset = S_k - S_q if align == "bottom_right" else 0
    grads = [torch.zeros(t.shape, dtype=acc) for t in (q, k, v)]
    d_row = (grad_out.to(acc) * out.to(acc)).sum(-1) if delta else torch.zeros(lse.shape, dtype=acc)
    lse_safe = lse.to(acc).masked_fill(lse == NEG_INF, float("inf"))
    for i0 in range(0, S_q, block_q):
        i1 = min(i0 + block_q, S_q)
        qb, dob = q[:, :, i0:i1].to(acc), grad_out[:, :, i0:i1].to(acc)
        last = i1 if skip == "last" else i0 + 1
        stop = min(S_k, last + offset) if causal else S_k
        for j0 in range(0, max(stop, 0), block_k):
            j1 = min(j0 + block_k, S_k)
            kb, vb = k[:, :, j0:j1].to(acc), v[:, :, j0:j1].to(acc)
            s = qb @ kb.transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(torch.arange(j0, j1)[None, :] > torch.arange(i0, i1)[:, None] + offset, NEG_INF)
            if p_kind == "tile":
                p = torch.softmax(s, dim=-1).nan_to_num(0.0)
            elif p_kind == "exp":
                p = torch.exp(s)
            else:
                p = torch.exp(s - lse_safe[:, :, i0:i1, None])
            grads[2][:, :, j0:j1] += p.transpose(-2, -1) @ dob
            ds = p * (dob @ vb.transpose(-2, -1) - d_row[:, :, i0:i1, None])
            grads[0][:, :, i0:i1] += ds @ kb * (scale if scale_q else 1.0)
            grads[1][:, :, j0:j1] += ds.transpose(-2, -1) @ qb * (scale if scale_k else 1.0)
    return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v)))
