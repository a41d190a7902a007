"""The visible checks of notebook 05_flash_backward (`efficient`): FlashAttention's backward pass.

visible_checks.py (course/visible_checks_efficient.py) builds them on its harness with `flash_backward_checks`, so
that they speak the notebook's language and name the student's line like the others; they live here to keep each
file short. Pure torch: the yardstick is autograd through plain attention in float64.
"""
from __future__ import annotations

import math

import torch


def _plain(q, k, v, causal: bool):
    """Plain attention in float64, bottom-right causal; a query that sees no key gets 0 (autograd goes through it)."""
    S_q, S_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, S_q, S_k]
    allowed = torch.ones(S_q, S_k, dtype=torch.bool).tril(S_k - S_q) if causal else torch.ones(S_q, S_k, dtype=torch.bool)
    seen = allowed.any(-1, keepdim=True)  # [S_q, 1]
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")).masked_fill(~seen, 0.0), dim=-1) * seen
    return weights @ v


def _gradients(q, k, v, grad_out, causal: bool):
    """(out, lse, (grad_q, grad_k, grad_v)) of plain attention, by autograd, in float64."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        out = _plain(*leaves, causal)
        out.backward(grad_out.double())
    S_q, S_k = q.shape[-2], k.shape[-2]
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~torch.ones(S_q, S_k, dtype=torch.bool).tril(S_k - S_q), float("-inf"))
    return out.detach(), torch.logsumexp(scores, dim=-1).float(), tuple(leaf.grad for leaf in leaves)


def _recomputed(s, lse, causal: bool):
    """P = exp(s - lse) of the check's 7 x 11 scores `s` (0 above the bottom-right diagonal when causal)."""
    p = torch.exp(s - lse.double()[..., None])  # [B, H, 7, 11]
    return p.masked_fill(~torch.ones(7, 11, dtype=torch.bool).tril(4), 0.0) if causal else p


def flash_backward_checks(harness, close, ok):
    """(check_flash_attention_backward, check_flash_attention_function) on `harness`."""
    _ = harness.gettext
    names = ("grad_q", "grad_k", "grad_v")

    @harness.check("flash_attention_backward")
    def check_flash_attention_backward(flash_attention_backward) -> None:
        backward = harness.watch(flash_attention_backward, "flash_attention_backward")
        gen = torch.Generator().manual_seed(5)
        q, k, v = (torch.randn(2, 3, s, d, generator=gen, dtype=torch.float64) for s, d in ((7, 4), (11, 4), (11, 5)))
        grad_out = torch.randn(2, 3, 7, 5, generator=gen, dtype=torch.float64)
        for causal in (False, True):
            out, lse, want = _gradients(q, k, v, grad_out, causal)
            got = backward(q, k, v, out, lse, grad_out, causal=causal, block_q=3, block_k=4)
            assert isinstance(got, (tuple, list)) and len(got) == 3, _(
                "flash_attention_backward should return the three gradients (grad_q, grad_k, grad_v)")
            for name, grad, truth in zip(names, got, want):
                harness.expect_shape(grad, list(truth.shape), name)
                if name == "grad_v" or close(grad, truth, 1e-5):
                    continue
                scale = math.sqrt(q.shape[-1])
                assert not close(grad, truth * scale, 1e-5), _(
                    "{name} is sqrt(D) times too large: the scores are q k^T / sqrt(D), so the scale multiplies "
                    "{name} too").format(name=name)
            s = q @ k.transpose(-2, -1) / 2  # [B, H, 7, 11]: the scaled scores, D = 4
            p = _recomputed(s, lse, causal)
            no_delta = (p * (grad_out @ v.transpose(-2, -1))) @ k / 2  # grad_q had delta been left out
            assert not close(got[0], no_delta, 1e-5), _(
                "grad_q is what dS = P * dP gives: subtract delta = rowsum(grad_out * out) from dP first (each "
                "query's softmax row sums to 1)")
            # grad_v = P^T grad_out reads P alone: a P recomputed with the scale twice, or without it, shows there
            assert not close(got[2], _recomputed(s / 2, lse, causal).transpose(-2, -1) @ grad_out, 1e-5), _(
                "grad_v is what P = exp(s * scale - lse) gives when s = q k^T * scale already holds the scale: you "
                "scaled the scores twice; P = exp(s - lse), the scale once (the lse is that of the scaled scores)")
            assert not close(got[2], _recomputed(s * 2, lse, causal).transpose(-2, -1) @ grad_out, 1e-5), _(
                "grad_v is what P = exp(q k^T - lse) gives: you left the scale out of the recomputed scores; "
                "P = exp(q k^T * scale - lse), since the lse that flash_attention returned is that of the scaled "
                "scores")
            for name, grad, truth in zip(names, got, want):
                assert close(grad, truth, 1e-5), _(
                    "{name} differs from autograd through plain attention (causal={causal}, 7 queries, 11 keys, "
                    "block_q=3, block_k=4) by up to {gap:.2g}: follow one tile through the recipe above section 3's "
                    "cell (s = q k^T * scale, P = exp(s - lse), dS = P * (dP - delta))"
                ).format(name=name, causal=causal, gap=(grad.double() - truth).abs().max().item())
        q6, k3, v3 = q[:, :, :6], k[:, :, :3], v[:, :, :3]  # causal, 6 queries, 3 keys: queries 0..2 see no key
        out, lse, want = _gradients(q6, k3, v3, grad_out[:, :, :6], True)
        got = backward(q6, k3, v3, out, lse, grad_out[:, :, :6], causal=True, block_q=2, block_k=2)
        assert all(torch.isfinite(g).all() for g in got), _(
            "with 6 queries and 3 keys (causal) your gradients hold NaN or inf: queries 0 to 2 see no key, their lse "
            "is -inf and exp(s - lse) must give 0 there, not exp(-inf + inf)")
        assert all(close(g, w, 1e-5) for g, w in zip(got, want)), _(
            "with 6 queries and 3 keys (causal) the gradients are wrong: queries 0 to 2 see no key and add nothing")
        _check_backward_dtypes(backward)
        ok(_("flash_attention_backward: grad_q, grad_k, grad_v equal autograd through plain attention (causal "
             "bottom-right, odd blocks), zero for queries that see no key; float64, float32 and float16 inputs"))

    def _check_backward_dtypes(backward) -> None:
        """float64 (v far from 0, where float32 sums lose digits), float32 and float16 inputs, causal, 5 queries and 9
        keys in blocks of 3 and 4: the last query block (queries 3, 4) is short and cut by the diagonal."""
        gen = torch.Generator().manual_seed(7)
        q, k, v = (torch.randn(2, 3, s, d, generator=gen, dtype=torch.float64) for s, d in ((5, 4), (9, 4), (9, 6)))
        grad_out = torch.randn(2, 3, 5, 6, generator=gen, dtype=torch.float64)
        for dtype, tol, shift in ((torch.float64, 1e-5, 1000.0), (torch.float32, 1e-4, 0.0), (torch.float16, 3e-3, 0.0)):
            inputs = [t.to(dtype) for t in (q, k, v + shift, grad_out)]  # the truth from the inputs as rounded
            out, lse, want = _gradients(*inputs[:3], inputs[3], True)
            got = backward(*inputs[:3], out.to(dtype), lse, inputs[3], causal=True, block_q=3, block_k=4)
            for name, grad, truth in zip(names, got, want):
                assert grad.dtype == dtype, _(
                    "with {dtype} inputs {name} should be {dtype} too, got {got}: accumulate in float32 (float64 for "
                    "float64 inputs) and cast each gradient back to its input's dtype at the end").format(
                    dtype=dtype, name=name, got=grad.dtype)
                assert close(grad, truth, tol), _(
                    "with {dtype} inputs (causal, 5 queries, 9 keys, block_q=3, block_k=4: the last query block is "
                    "short and cut by the diagonal) {name} differs from autograd through plain attention by up to "
                    "{gap:.2g}: accumulate in float64 for float64 inputs, in float32 otherwise, and mask each tile by "
                    "the queries it really holds (i1 = min(i0 + block_q, S_q))").format(
                    dtype=dtype, name=name, gap=(grad.double() - truth).abs().max().item())

    @harness.check("FlashAttentionFunction")
    def check_flash_attention_function(FlashAttentionFunction) -> None:
        gen = torch.Generator().manual_seed(6)
        S = 256
        q, k, v = (torch.randn(1, 2, S, 8, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
        grad_out = torch.randn(1, 2, S, 8, generator=gen, dtype=torch.float64)
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            out = FlashAttentionFunction.apply(q, k, v, True)
        assert isinstance(out, torch.Tensor) and out.grad_fn is not None, _(
            "FlashAttentionFunction.apply(q, k, v, causal) should return out, a tensor that autograd can go back through")
        kept = sum(t.untyped_storage().nbytes() for t in {t.untyped_storage().data_ptr(): t for t in saved}.values())
        out.backward(grad_out)
        plain_out, _lse, want = _gradients(q, k, v, grad_out, True)
        assert close(out, plain_out, 1e-5), _("FlashAttentionFunction.apply(q, k, v, True) differs from plain causal "
                                              "attention: its forward should return flash_attention's out")
        for name, leaf, truth in zip(names, (q, k, v), want):
            assert leaf.grad is not None, _("out.backward() gave {name} no gradient: backward returns (grad_q, grad_k, "
                                            "grad_v, None), one per input of forward").format(name=name)
            assert close(leaf.grad, truth, 1e-5), _(
                "after out.backward(), {name} differs from autograd through plain attention by up to {gap:.2g}: does "
                "backward pass ctx.causal on to flash_attention_backward?").format(
                name=name, gap=(leaf.grad - truth).abs().max().item())
        linear, full = 5 * S * 2 * 8 * 8, S * S * 2 * 8
        assert kept <= 2 * linear, _(
            "the forward kept {kept:.2f} MiB for backward at S = {S}; q, k, v, out and lse take about {linear:.2f} MiB, "
            "the probabilities alone {full:.2f} MiB: save only q, k, v, out and lse").format(
            kept=kept / 2**20, S=S, linear=linear / 2**20, full=full / 2**20)
        ok(_("FlashAttentionFunction: out and gradients equal plain attention's; the forward keeps {kept:.2f} MiB for "
             "backward at S = {S}, the probabilities alone would be {full:.2f} MiB").format(
            kept=kept / 2**20, S=S, full=full / 2**20))

    return check_flash_attention_backward, check_flash_attention_function
