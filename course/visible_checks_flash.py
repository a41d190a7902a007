"""The visible checks of notebook 01_flash (`efficient`): flash_attention and merge_attention.

visible_checks.py (course/visible_checks_efficient.py) builds them on its harness with `flash_checks`, so that they
speak the notebook's language and name the student's line like the others; they live here to keep each file short.
Pure torch: the yardstick is plain attention in float64. Each wrong result is explained from the function's own
behaviour (a single key block, causal or not, a scale of 1/sqrt(D_v)), never from a reference implementation.
"""
from __future__ import annotations

import math

import torch
from memory_meter import LiveMemoryMeter  # next to this file in the assignment's folder

MiB = 2**20
FLASH_ROOM = 8  # the memory check allows this many (block_q x block_k) tiles besides out, lse and a copy of q, k, v


def _dense(q, k, v, mask=None):
    """Plain attention in float64, and the log-sum-exp of each row."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, S_q, S_k]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v.double(), torch.logsumexp(scores, dim=-1)


def _bottom_right(S_q, S_k):
    return torch.ones(S_q, S_k, dtype=torch.bool).tril(diagonal=S_k - S_q)


def _qkv(B, H, S_q, S_k, D, D_v, dtype=torch.float32):
    return torch.randn(B, H, S_q, D, dtype=dtype), torch.randn(B, H, S_k, D, dtype=dtype), torch.randn(B, H, S_k, D_v, dtype=dtype)


def _peak(fn, *args, **kwargs) -> int:
    """The new tensor memory of one call: the meter counts neither the inputs nor views of them."""
    with LiveMemoryMeter() as meter:
        fn(*args, **kwargs)
    return meter.peak_bytes


def flash_checks(harness, close, ok):
    """(check_flash_attention, check_merge_attention) on `harness`."""
    _ = harness.gettext

    @harness.check("flash_attention")
    def check_flash_attention(flash_attention) -> None:
        flash = harness.watch(flash_attention, "flash_attention")
        q, k, v = _qkv(2, 3, 7, 11, 4, 5)  # D = 4, D_v = 5: the scale is 1/sqrt(D) = 1/2
        for causal, blocks in ((False, (3, 4)), (True, (3, 4)), (True, (3, 3))):
            got = flash(q, k, v, causal=causal, block_q=blocks[0], block_k=blocks[1])
            assert isinstance(got, tuple) and len(got) == 2, _("flash_attention should return the pair (out, lse)")
            out, lse = harness.expect_shape(got[0], [2, 3, 7, 5], "out"), harness.expect_shape(got[1], [2, 3, 7], "lse")
            want, want_lse = _dense(q, k, v, _bottom_right(7, 11) if causal else None)
            where = _("7 queries, 11 keys, block_q={bq}, block_k={bk}").format(bq=blocks[0], bk=blocks[1])
            if not close(out, want, 1e-4):
                _explain_flash_out(flash, q, k, v, out, want, causal, blocks, where)
            scores = q.double() @ k.double().transpose(-2, -1) / 2  # [B, H, 7, 11], D = 4
            row_max = (scores.masked_fill(~_bottom_right(7, 11), float("-inf")) if causal else scores).amax(-1)
            if close(lse, want_lse - row_max, 1e-4):
                raise AssertionError(_("lse is log(running sum) without the running max: the sum was taken after "
                                       "subtracting the max, so lse = max + log(sum)"))
            assert lse.dtype == torch.float32, _("lse should be float32, got {dtype}").format(dtype=lse.dtype)
            assert close(lse, want_lse, 1e-4), _(
                "lse differs from log(sum(exp(scores))) by up to {gap:.2g} (causal={causal}, {where}): lse = running max + "
                "log(running sum) (the sum alone is taken after subtracting the max)").format(
                gap=(lse.double() - want_lse).abs().max().item(), causal=causal, where=where)
        _check_flash_unseen(flash)
        _check_flash_rows_apart(flash)
        _check_flash_double(flash)
        _check_flash_half(flash)
        _check_flash_memory(flash)

    def _explain_flash_out(flash, q, k, v, out, want, causal, blocks, where) -> None:
        """Name the mistake behind a wrong out from the function's own behaviour (no reference tiles here)."""
        gap = (out.double() - want).abs().max().item()
        mask = _bottom_right(7, 11) if causal else None
        if close(out, _dense(q * math.sqrt(4 / 5), k, v, mask)[0], 1e-4):  # scores q k^T / sqrt(5)
            raise AssertionError(_(
                "out equals attention with scores scaled by 1/sqrt(D_v): scale by 1/sqrt(D), the width of q and k "
                "(here D = 4, D_v = 5)"))
        if causal:
            if close(out, _dense(q, k, v, torch.ones(7, 11, dtype=torch.bool).tril())[0], 1e-4):
                raise AssertionError(_("with causal=True query 0 sees only key 0: that is top-left alignment; with 7 "
                                       "queries and 11 keys the queries are the last 7 positions, so query i sees keys "
                                       "j <= i + 4"))
            rows = ((out.double() - want).abs() > 1e-4).any(-1).flatten(0, 1).any(0).nonzero().flatten().tolist()
            raise AssertionError(_(
                "with causal=False out is right, with causal=True ({where}) queries {rows} differ by up to {gap:.2g}: "
                "check which key blocks you skip and the mask of the tile the diagonal cuts. Query i sees keys "
                "j <= i + 4 (bottom-right); a query block [i0, i1) needs every key block that starts at or before "
                "i1 - 1 + 4").format(where=where, rows=rows, gap=gap))
        one_block = flash(q, k, v, block_q=blocks[0], block_k=11)  # every key in one block: nothing to rescale
        if isinstance(one_block, tuple) and len(one_block) == 2 and close(one_block[0], want, 1e-4):
            raise AssertionError(_(
                "out is right with a single key block (block_k=11) but differs by up to {gap:.2g} with block_k={bk}: "
                "the key blocks are combined wrongly. When the running maximum grows, multiply the running sum and the "
                "output by exp(old max - new max) before adding the new block").format(gap=gap, bk=blocks[1]))
        raise AssertionError(_(
            "out differs from plain attention (causal=False, {where}) by up to {gap:.2g}, even with a single key block: "
            "check one tile (scores q k^T / sqrt(D), weights exp(score - max)) and the division by the sum at the end").format(
            where=where, gap=gap))

    def _check_flash_unseen(flash) -> None:
        """Causal with more queries than keys: the first queries see no key at all; query 3 shares its block (3..5) with
        queries that see keys, so a row whose max is still -inf is computed beside the others."""
        q, k, v = _qkv(2, 3, 9, 5, 4, 5)
        out, lse = flash(q, k, v, causal=True, block_q=3, block_k=3)
        want, want_lse = _dense(q[:, :, 4:], k, v, _bottom_right(5, 5))  # queries 4..8 see keys 0..i - 4
        assert not torch.isnan(out).any() and not torch.isnan(lse).any(), _(
            "causal with 9 queries and 5 keys: queries 0..3 see no key, and your out or lse holds NaN. While a row's "
            "running max is still -inf, subtract 0 instead (exp(-inf - (-inf)) is NaN); such a query's out is 0 and "
            "its lse -inf")
        assert (out[:, :, :4] == 0).all() and (lse[:, :, :4] == float("-inf")).all(), _(
            "causal with 9 queries and 5 keys: queries 0..3 see no key; their out should be 0 and their lse -inf, got "
            "out up to {out:.2g} and lse {lse}").format(out=out[:, :, :4].abs().max().item(),
                                                          lse=sorted(set(lse[:, :, :4].flatten().tolist()))[:3])
        assert close(out[:, :, 4:], want, 1e-4) and close(lse[:, :, 4:], want_lse, 1e-4), _(
            "causal with 9 queries and 5 keys: queries 4..8 (query i sees keys j <= i - 4) differ from plain attention")

    def _check_flash_rows_apart(flash) -> None:
        """Queries of one block whose scores lie far apart (query 0's 120, the others' near 0): one max per tile
        instead of one per query leaves exp(score - max) of the others at 0 in float32."""
        q, k, v = _qkv(1, 2, 3, 6, 4, 5)
        k[:, :, 0], q[:, :, 0] = 1.0, 60.0  # q0 . k0 / sqrt(4) = 60 * 4 / 2 = 120
        out, lse = flash(q, k, v, block_q=3, block_k=3)
        want, want_lse = _dense(q, k, v)
        assert close(out, want, 1e-4) and close(lse, want_lse, 1e-4), _(
            "queries whose scores lie far apart (query 0's near {high:.0f}, the others' near 0, in one block) differ "
            "from plain attention by up to {gap:.2g}: keep one running max per query (amax over the keys, dim=-1), not "
            "one per tile").format(high=want_lse[..., 0].max().item(), gap=(out.double() - want).abs().max().item())

    def _check_flash_double(flash) -> None:
        """float64 inputs: the running m, l and o are float64 (the notebook's table), the returned lse float32."""
        q, k, v = _qkv(2, 3, 7, 11, 4, 5, torch.float64)
        out, lse = flash(q, k, v, causal=True, block_q=3, block_k=4)
        assert out.dtype == torch.float64, _("with float64 inputs out should be float64 (q's dtype), got {dtype}").format(
            dtype=out.dtype)
        assert lse.dtype == torch.float32, _(
            "with float64 inputs lse should still be float32, got {dtype}: the running max and sum are float64 there, "
            "but the lse you return is float32 whatever the inputs (as FlashAttention kernels store it); convert it "
            "with .float() when you write it").format(dtype=lse.dtype)
        want, want_lse = _dense(q, k, v, _bottom_right(7, 11))
        assert close(out, want, 1e-5) and close(lse, want_lse, 1e-4), _(
            "with float64 inputs (causal, 7 queries, 11 keys, block_q=3, block_k=4) out or lse differs from plain "
            "attention: keep the running max, sum and output in float64 there")

    def _check_flash_half(flash) -> None:
        q, k, v = _qkv(2, 3, 7, 11, 4, 5, torch.float16)
        out, lse = flash(q, k, v, block_q=4, block_k=4)
        assert out.dtype == torch.float16 and lse.dtype == torch.float32, _(
            "with float16 inputs out should be float16 and lse float32, got {out} and {lse}").format(
            out=out.dtype, lse=lse.dtype)
        # One query that weighs 70,000 keys evenly (q = 0): float16 tops out at 65504, so a running sum kept in
        # float16 overflows; out should be the mean of v and lse log(70000).
        n = 70_000
        q, k, v = torch.zeros(1, 1, 1, 8, dtype=torch.float16), *_qkv(1, 1, 1, n, 8, 4, torch.float16)[1:]
        out, lse = flash(q, k, v, block_q=64, block_k=4096)
        want = v.double().mean(dim=-2, keepdim=True)  # [1, 1, 1, 4]
        assert torch.isfinite(lse).all() and close(lse, torch.full_like(lse, math.log(n)), 1e-3), _(
            "float16 inputs, one query that weighs {n} keys evenly: lse should be log({n}) = {want:.2f}, got {got}. The "
            "largest float16 number is 65504: a running sum kept in float16 overflows to inf. Keep the running max, sum "
            "and output in float32 and convert out to float16 once, at the end").format(
            n=n, want=math.log(n), got=lse.flatten()[0].item())
        assert close(out, want, 2e-3), _(
            "float16 inputs, one query that weighs {n} keys evenly: out should be the mean of v, but differs from it by "
            "up to {gap:.2g}: keep the running max, sum and output in float32").format(
            n=n, gap=(out.double() - want).abs().max().item())

    def _check_flash_memory(flash) -> None:
        """The new memory of one call (the meter counts neither the inputs nor views of them) against what an online
        softmax needs: the output and lse, room for a copy of q, k and v, and a few tiles of scores. One block of queries
        against every key is above that bound."""
        B, H, S_q, S_k, D, bq, bk = 1, 2, 64, 1024, 8, 64, 32
        q, k, v = _qkv(B, H, S_q, S_k, D, D)
        peak = _peak(flash, q, k, v, block_q=bq, block_k=bk)
        tile, rows = B * H * bq * bk * 4, B * H * bq * S_k * 4
        bound = q.nbytes * 2 + k.nbytes + v.nbytes + B * H * S_q * 4 + FLASH_ROOM * tile  # out as q (D_v = D), lse
        assert peak <= bound, _(
            "flash_attention(S_q={S_q}, S_k={S_k}, block_q={bq}, block_k={bk}) held {peak:.2f} MiB of new tensors at "
            "once; a block of queries against every key [B, H, block_q, S_k] is {rows:.2f} MiB, one tile [B, H, "
            "block_q, block_k] {tile:.3f} MiB, and the bound {bound:.2f} MiB (out, lse, a copy of q, k and v, and "
            "{room} tiles): loop over key blocks inside each query block, and keep only a running max, sum and output "
            "per query").format(S_q=S_q, S_k=S_k, bq=bq, bk=bk, peak=peak / MiB, rows=rows / MiB, tile=tile / MiB,
                                bound=bound / MiB, room=FLASH_ROOM)
        ok(_("flash_attention: equals plain attention and its lse (causal bottom-right, odd blocks, queries that see no "
             "key), float16 in with float32 sums; {peak:.2f} MiB of new tensors at S_q={S_q}, S_k={S_k}, where one block "
             "of queries against every key is {rows:.2f} MiB").format(peak=peak / MiB, S_q=S_q, S_k=S_k, rows=rows / MiB))

    @harness.check("merge_attention")
    def check_merge_attention(merge_attention) -> None:
        merge = harness.watch(merge_attention, "merge_attention")
        q, k, v = _qkv(2, 3, 5, 9, 4, 6)
        q = q * 40  # scores near 100: exp() alone would overflow
        whole, whole_lse = _dense(q, k, v)
        a, b = _dense(q, k[:, :, :4], v[:, :, :4]), _dense(q, k[:, :, 4:], v[:, :, 4:])
        got = merge(a[0].float(), a[1].float(), b[0].float(), b[1].float())
        assert isinstance(got, tuple) and len(got) == 2, _("merge_attention should return the pair (out, lse)")
        out, lse = harness.expect_shape(got[0], [2, 3, 5, 6], "out"), harness.expect_shape(got[1], [2, 3, 5], "lse")
        assert torch.isfinite(out).all(), _(
            "scores near 100 gave inf or NaN: weigh each side by exp(lse - max(lse_a, lse_b)), never exp(lse) alone")
        assert close(out, whole, 1e-4), _(
            "merging keys 0..3 and 4..8 differs from attention over all 9 keys by up to {gap:.2g}: weigh each side's out "
            "by exp(its lse - the merged lse)").format(gap=(out.double() - whole).abs().max().item())
        assert close(lse, whole_lse, 1e-4), _("the merged lse should be log(exp(lse_a) + exp(lse_b)), computed stably")
        empty = torch.full_like(a[1].float(), float("-inf"))
        got = merge(a[0].float(), a[1].float(), torch.full_like(a[0].float(), float("nan")), empty)
        assert torch.isfinite(got[0]).all() and close(got[0], a[0], 1e-5), _(
            "a side whose lse is -inf (it saw no key) must add nothing, whatever its out holds (here NaN)")
        got = merge(torch.full_like(a[0].float(), float("nan")), empty, b[0].float(), b[1].float())
        assert torch.isfinite(got[0]).all() and close(got[0], b[0], 1e-5), _(
            "a side whose lse is -inf (it saw no key) must add nothing, whatever its out holds (here NaN)")
        _check_merge_both_empty(merge, a)
        ok(_("merge_attention: two halves of the keys merge into attention over all of them, at scores near 100, "
             "and an empty side adds nothing"))

    def _check_merge_both_empty(merge, a) -> None:
        """Queries 1 and 3 see no key on either side (both lse -inf): the merged lse is -inf, the log of an empty sum
        (their out is not graded, as in the hidden checks)."""
        lse_a, lse_b = a[1].float().clone(), torch.zeros_like(a[1].float())
        lse_a[:, :, [1, 3]], lse_b[:, :, [1, 3]] = float("-inf"), float("-inf")
        out, lse = merge(a[0].float(), lse_a, torch.zeros_like(a[0].float()), lse_b)
        both = lse[:, :, [1, 3]]
        assert (both == float("-inf")).all(), _(
            "queries 1 and 3 see no key on either side (lse_a = lse_b = -inf): the merged lse should be -inf (the log "
            "of an empty sum), got {got}. With both sides -inf the larger lse is -inf too, and -inf - (-inf) is NaN: "
            "subtract 0 where both are -inf, as flash_attention does for a row that has seen no key").format(
            got=", ".join(sorted({str(x) for x in both.flatten().tolist()})))
        rest = [0, 2, 4]
        assert close(lse[:, :, rest], torch.logaddexp(lse_a, lse_b)[:, :, rest], 1e-5), _(
            "the merged lse of the queries that see keys differs from log(exp(lse_a) + exp(lse_b)) when other queries "
            "see no key on either side")

    return check_flash_attention, check_merge_attention
