"""Trusted re-computations of the `flash_backward` checks (assignment efficient).

`exact_gradients` is the ground truth: autograd through dense attention in float64, written independently of
solutions/efficient.py. `backward_variant` is flash_attention_backward written out in float64 on the inputs the
student received, with switches for its classic mistakes (delta omitted, the scale missing on one gradient, P
recomputed without the lse, with the scale twice or not at all, top-left causal, key blocks skipped after the first query of a block, float16
accumulation), so that a check can name the mistake whose output the student's matches. Without keywords the
variant equals the truth (tests/test_efficient_checks_helpers.py).
"""
from __future__ import annotations

import functools
import math

import torch

from autograder.checks import expect
from autograder.checks.efficient.common import NEG_INF, visible
from autograder.foundation import i18n
from solutions import efficient as ref

_ = i18n.message

GRADIENTS = ("grad_q", "grad_k", "grad_v")
HALF_ROOM = 3  # times the reference's own float16 error that a float32 accumulation may be off by


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
    sum, not with the lse), "exp": P = exp(s) without subtracting the lse, "scale_twice": P = exp(s * scale - lse)
    where s = q k^T * scale already holds the scale, "unscaled": P = exp(q k^T - lse), the scale left out; align "top_left": the causal mask without
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
            elif p_kind in ("scale_twice", "unscaled"):
                s = s * scale if p_kind == "scale_twice" else s / scale
                p = torch.exp(s - lse_safe[:, :, i0:i1, None])
            else:
                p = torch.exp(s - lse_safe[:, :, i0:i1, None])
            grads[2][:, :, j0:j1] += p.transpose(-2, -1) @ dob
            ds = p * (dob @ vb.transpose(-2, -1) - d_row[:, :, i0:i1, None])
            grads[0][:, :, i0:i1] += ds @ kb * (scale if scale_q else 1.0)
            grads[1][:, :, j0:j1] += ds.transpose(-2, -1) @ qb * (scale if scale_k else 1.0)
    return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v)))


def arguments(call):
    """(q, k, v, out, lse, grad_out, causal, block_q, block_k) of a call."""
    causal, block_q, block_k = (call.kwargs.get(n, d) for n, d in (("causal", False), ("block_q", 64),
                                                                   ("block_k", 64)))
    return (*call.args, causal, block_q, block_k)


def triple(value, what) -> tuple:
    if not (isinstance(value, (tuple, list)) and len(value) == 3):
        kind = type(value).__name__ + (f" of {len(value)}" if isinstance(value, (tuple, list)) else "")
        raise expect.CheckFailure(_("{what} should return a tuple (grad_q, grad_k, grad_v), got {kind}").format(
            what=what, kind=kind))
    return tuple(value)


def backward_mistakes(args, item: int) -> dict:
    """{hint: the student's gradient `item` (0 q, 1 k, 2 v) had they made that mistake}; a mistake that leaves this
    gradient as it is right (the scale missing on grad_k, for grad_q) cannot explain it, and gives None."""
    q, k, v, out, lse, grad_out, causal, block_q, block_k = args
    right = functools.cache(lambda: backward_variant(q, k, v, out, lse, grad_out, causal, block_q, block_k)[item])

    def variant(**kw):
        def produced():
            value = backward_variant(q, k, v, out, lse, grad_out, causal, block_q, block_k, **kw)[item]
            return None if expect.same(value, right(), atol=1e-6, rtol=1e-6) else value
        return produced

    mistakes = {
        _("dS = P * (dP - delta) with delta = rowsum(grad_out * out), one number per query: you left delta out "
          "(the softmax's rows sum to 1, so every weight's gradient moves against the others)"): variant(delta=False),
        _("grad_q = dS k * scale: the scores are q k^T / sqrt(D), so the 1 / sqrt(D) multiplies grad_q too"):
            variant(scale_q=False),
        _("grad_k = dS^T q * scale: the scores are q k^T / sqrt(D), so the 1 / sqrt(D) multiplies grad_k too"):
            variant(scale_k=False),
        _("you normalised each tile's probabilities by the tile's own sum (a softmax of the tile): P = exp(s - lse) "
          "with the lse of the whole row, which the forward returned"): variant(p_kind="tile"),
        _("P = exp(s - lse): you left out the lse, so P is not normalised"): variant(p_kind="exp"),
        _("you scaled the scores twice: with s = q k^T * scale the scale is already in s, so P = exp(s - lse), not "
          "exp(s * scale - lse)"): variant(p_kind="scale_twice"),
        _("you left the scale out of the recomputed scores: P = exp(q k^T * scale - lse), since the lse that "
          "flash_attention returned is that of the scaled scores"): variant(p_kind="unscaled"),
        _("you accumulated in float16: keep P, dS and the three gradients in float32 and cast each gradient back "
          "to its input's dtype at the end"): variant(acc=torch.float16),
    }
    if causal:
        mistakes = {
            _("your causal mask is top-left aligned (key j <= query i): with S_q != S_k query i sees keys j <= i + "
              "S_k - S_q (bottom-right), as in flash_attention"): variant(align="top_left"),
            _("you skipped key blocks that later queries of the block can see: a query block [i0, i1) sees keys up "
              "to i1 - 1 + S_k - S_q; skip only the blocks after that"): variant(skip="first"),
        } | mistakes
    return mistakes


def backward_what(call) -> str:
    q, k, v, out, lse, grad_out = call.args
    return ("flash_attention_backward(q [{q}], k [{k}], v [{v}], out, lse, grad_out, causal={c}, block_q={bq}, "
            "block_k={bk}) on {dtype}").format(
        q=", ".join(map(str, q.shape)), k=", ".join(map(str, k.shape)), v=", ".join(map(str, v.shape)),
        c=call.kwargs.get("causal", False), bq=call.kwargs.get("block_q", 64), bk=call.kwargs.get("block_k", 64),
        dtype=str(q.dtype).removeprefix("torch."))


def within_float16_error(call, got) -> None:
    """Each gradient at most HALF_ROOM times as far from the truth as the reference's (float32 sums, cast once)."""
    q, k, v, out, lse, grad_out, causal, block_q, block_k = arguments(call)
    truths = exact_gradients(q, k, v, grad_out, causal)
    reference = ref.flash_attention_backward(q, k, v, out, lse, grad_out, causal=causal, block_q=block_q,
                                             block_k=block_k)
    what = backward_what(call)
    for name, grad, truth, mine, like in zip(GRADIENTS, got, truths, reference, (q, k, v)):
        label = _("{what}: {name}").format(what=what, name=name)
        grad = expect.tensor(grad, label)
        bound = HALF_ROOM * float((mine.double() - truth).abs().max()) + 1e-7
        if grad.shape != like.shape:
            expect.close(grad, truth.to(like.dtype), label)
        error = float((grad.double() - truth).abs().max())
        if not error <= bound:
            raise expect.CheckFailure(_(
                "{label} is off by up to {error:.2g}, {times:.0f} times what float16 inputs cost a backward that sums "
                "in float32 ({reference:.2g}): you accumulated the gradients in float16 over {blocks} query blocks; "
                "keep grad_q, grad_k and grad_v in float32 and cast each back to its input's dtype at the end").format(
                label=label, error=error, times=error / max(bound / HALF_ROOM, 1e-12),
                reference=bound / HALF_ROOM, blocks=-(-q.shape[-2] // block_q)))
