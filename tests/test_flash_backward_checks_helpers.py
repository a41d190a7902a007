"""The trusted side of part flash_backward (assignment efficient): the ground truth, the mistake variants, the memory
bounds and the worker's autograd runner agree with the reference, and each mistake changes the result."""
from __future__ import annotations

import pytest
import torch

from autograder.checks.efficient import common as C
from autograder.checks.efficient import test_flash_backward as T
from autograder.checks.efficient.backward import backward_variant, exact_gradients
from autograder.worker import standins
from solutions import efficient as E

MISTAKES = ({"delta": False}, {"scale_q": False}, {"scale_k": False}, {"p_kind": "tile"}, {"p_kind": "exp"},
            {"p_kind": "scale_twice"}, {"p_kind": "unscaled"}, {"align": "top_left"}, {"skip": "first"})


def inputs(causal: bool, S_q: int = C.S_Q, S_k: int = C.S_K):
    g = torch.Generator().manual_seed(3)
    q, k, v = C.qkv(g, S_q, S_k, dtype=torch.float64)
    out, lse = C.dense_attention(q, k, v, causal)
    return q, k, v, out, lse, C.randn(g, *out.shape, dtype=torch.float64)


@pytest.mark.parametrize("S_q, S_k", [(C.S_Q, C.S_K), (C.S_K, C.S_Q)])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_variant_is_autograd_and_the_reference_and_each_mistake_differs(causal, S_q, S_k):
    q, k, v, out, lse, grad_out = inputs(causal, S_q, S_k)
    truth = exact_gradients(q, k, v, grad_out, causal)
    plain = backward_variant(q, k, v, out, lse, grad_out, causal, C.BLOCK_Q, C.BLOCK_K)
    ref = E.flash_attention_backward(q, k, v, out, lse, grad_out, causal, C.BLOCK_Q, C.BLOCK_K)
    for want, got, mine in zip(truth, plain, ref):
        assert torch.isfinite(got).all()
        assert torch.allclose(got, want, atol=1e-5) and torch.allclose(mine, want, atol=1e-5)
    for kw in MISTAKES:
        if not causal and set(kw) & {"align", "skip"}:
            continue
        wrong = backward_variant(q, k, v, out, lse, grad_out, causal, C.BLOCK_Q, C.BLOCK_K, **kw)
        assert any(not torch.allclose(w, t, atol=1e-3) for w, t in zip(wrong, truth)), kw


def test_backward_memory_bound_is_below_a_block_of_queries_against_every_key():
    tile = T.MEM_B * T.MEM_H * T.MEM_BLOCK_Q * T.MEM_BLOCK_K * 4
    rows = T.MEM_B * T.MEM_H * T.MEM_BLOCK_Q * T.MEM_S_K * 4
    assert T.reference_peak() + T.ROOM * tile < T.reference_peak() + rows


class SavesProbabilities(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        p = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
        ctx.p = p  # kept as an attribute of ctx, not through save_for_backward
        ctx.save_for_backward(v)
        return p @ v

    @staticmethod
    def backward(ctx, grad_out):
        (v,) = ctx.saved_tensors
        return None, None, ctx.p.transpose(-2, -1) @ grad_out, None


def test_autograd_runner_counts_what_the_forward_keeps_and_the_reference_keeps_q_k_v_out_lse():
    g = torch.Generator().manual_seed(0)
    q, k, v = C.qkv(g, T.FN_S, T.FN_S, b=T.FN_B, h=T.FN_H, d=T.FN_D, d_v=T.FN_D)
    grad_out = torch.randn(*q.shape[:-1], T.FN_D, generator=g)
    with torch.no_grad():  # as the worker calls it
        out, gq, gk, gv, saved = standins.autograd_function_gradients(E.FlashAttentionFunction, q, k, v, True, grad_out)
        *_, saved_p = standins.autograd_function_gradients(SavesProbabilities, q, k, v, False, grad_out)
    linear = 4 * (q.numel() * 4) + T.FN_B * T.FN_H * T.FN_S * 4
    assert saved == linear  # q, k, v, out, lse: nothing else
    want = exact_gradients(q, k, v, grad_out, True)
    assert all(torch.allclose(a.double(), b, atol=1e-4) for a, b in zip((gq, gk, gv), want))
    assert saved_p > T.FN_B * T.FN_H * T.FN_S * T.FN_S * 4  # the probabilities, seen through ctx's attributes
