"""The visible check of `flash_attention` (course/visible_checks_flash.py, as released) catches the mistakes the
hidden grader catches, each with a sentence that names it, in both languages, and passes correct functions written
differently from the reference."""
from __future__ import annotations

import math

import pytest
import torch

from course.build import REPO
from tests.test_efficient_notebooks import CHINESE, EDITIONS, _load


@pytest.fixture(scope="module")
def vc():
    return {lang: _load(REPO / target.release, lang) for lang, target in EDITIONS.items()}


def _visible(i0, i1, j0, j1, offset):
    """BoolTensor [i1 - i0, j1 - j0]: may query i see key j (bottom-right causal)."""
    return torch.arange(j0, j1)[None, :] <= torch.arange(i0, i1)[:, None] + offset


def _flash(q, k, v, causal=False, block_q=64, block_k=64, *, guard=True, acc16=False, stop=0, scale_width="q",
           rescale=True, rows=False, lse_in_acc=False):
    """A tiled flash_attention; each keyword other than the defaults makes one classic mistake."""
    B, H, S_q, D = q.shape
    S_k, D_v = k.shape[-2], v.shape[-1]
    acc = q.dtype if acc16 else (torch.float64 if q.dtype == torch.float64 else torch.float32)
    scale = 1 / math.sqrt(D if scale_width == "q" else D_v)
    offset = S_k - S_q
    out, lse = torch.zeros(B, H, S_q, D_v, dtype=q.dtype), torch.zeros(B, H, S_q, dtype=acc if lse_in_acc else None)
    for i0 in range(0, S_q, block_q):
        i1 = min(i0 + block_q, S_q)
        q_blk = q[:, :, i0:i1].to(acc)  # [B, H, bq, D]
        if rows:  # not tiled: the block of queries against every key at once
            s = (q_blk @ k.to(acc).transpose(-2, -1) * scale).masked_fill(
                ~_visible(i0, i1, 0, S_k, offset if causal else S_k), float("-inf"))  # [B, H, bq, S_k]
            row_lse = torch.logsumexp(s, -1)
            weights = torch.exp(s - row_lse.nan_to_num(neginf=0.0)[..., None])
            out[:, :, i0:i1], lse[:, :, i0:i1] = (weights @ v.to(acc)).to(q.dtype), row_lse.float()
            continue
        m = torch.full((B, H, i1 - i0), float("-inf"), dtype=acc)
        row_sum, o = torch.zeros(B, H, i1 - i0, dtype=acc), torch.zeros(B, H, i1 - i0, D_v, dtype=acc)
        kv_stop = min(S_k, i1 + offset + stop) if causal else S_k
        for j0 in range(0, max(kv_stop, 0), block_k):
            j1 = min(j0 + block_k, S_k)
            s = q_blk @ k[:, :, j0:j1].to(acc).transpose(-2, -1) * scale  # [B, H, bq, bk]
            if causal:
                s = s.masked_fill(~_visible(i0, i1, j0, j1, offset), float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0) if guard else m_new
            p = torch.exp(s - m_safe[..., None])
            alpha = torch.exp(m - m_safe) if rescale else torch.ones_like(m)
            row_sum, o, m = alpha * row_sum + p.sum(-1), alpha[..., None] * o + p @ v[:, :, j0:j1].to(acc), m_new
        if guard:  # a row that saw no key: out 0
            o = torch.where((row_sum > 0)[..., None], o / row_sum.clamp_min(1e-30)[..., None], 0.0)
        else:
            o = o / row_sum[..., None]
        out[:, :, i0:i1], lse[:, :, i0:i1] = o.to(q.dtype), (m + torch.log(row_sum)).to(lse.dtype)
    return out, lse


def _logaddexp_tiles(q, k, v, causal=False, block_q=64, block_k=64):
    """Correct, written differently: each tile's log-sum-exp merged into the row's with torch.logaddexp."""
    S_q, S_k, D = q.shape[-2], k.shape[-2], q.shape[-1]
    offset, outs, lses = S_k - S_q, [], []
    for i0 in range(0, S_q, block_q):
        i1 = min(i0 + block_q, S_q)
        row_lse = torch.full(q.shape[:2] + (i1 - i0,), float("-inf"))
        o = torch.zeros(q.shape[:2] + (i1 - i0, v.shape[-1]))
        for j0 in range(0, S_k, block_k):
            j1 = min(j0 + block_k, S_k)
            s = q[:, :, i0:i1].float() @ k[:, :, j0:j1].float().transpose(-2, -1) / math.sqrt(D)  # [B, H, bq, bk]
            if causal:
                s = s.masked_fill(~_visible(i0, i1, j0, j1, offset), float("-inf"))
            new = torch.logaddexp(row_lse, torch.logsumexp(s, -1))
            safe = new.nan_to_num(neginf=0.0)
            o = o * torch.exp(row_lse - safe)[..., None] + torch.exp(s - safe[..., None]) @ v[:, :, j0:j1].float()
            row_lse = new
        outs.append(o.to(q.dtype))
        lses.append(row_lse)
    return torch.cat(outs, -2), torch.cat(lses, -1)


def _per_query(q, k, v, causal=False, block_q=64, block_k=64):
    """Correct, written differently: one query at a time, its keys in blocks."""
    S_q, S_k, D = q.shape[-2], k.shape[-2], q.shape[-1]
    out, lse = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype), torch.zeros(q.shape[:-1])
    for i in range(S_q):
        last = min(S_k, i + S_k - S_q + 1) if causal else S_k
        m = torch.full(q.shape[:2], float("-inf"))
        row_sum, o = torch.zeros(q.shape[:2]), torch.zeros(q.shape[:2] + (v.shape[-1],))
        for j0 in range(0, max(last, 0), block_k):
            j1 = min(j0 + block_k, last)
            s = torch.einsum("bhd,bhkd->bhk", q[:, :, i].float(), k[:, :, j0:j1].float()) / math.sqrt(D)
            m_new = torch.maximum(m, s.amax(-1))
            p, alpha = torch.exp(s - m_new[..., None]), torch.exp(m - m_new)
            row_sum = alpha * row_sum + p.sum(-1)
            o = alpha[..., None] * o + torch.einsum("bhk,bhkd->bhd", p, v[:, :, j0:j1].float())
            m = m_new
        out[:, :, i] = torch.where((row_sum > 0)[..., None], o / row_sum.clamp_min(1e-30)[..., None], 0.0).to(q.dtype)
        lse[:, :, i] = m + torch.log(row_sum)
    return out, lse


def _rows_in_place(q, k, v, causal=False, block_q=64, block_k=64):
    """Not tiled, but frugal: one block of queries against every key, its scores turned into weights in place (the
    least memory such a function can hold: one [B, H, block_q, S_k] matrix)."""
    S_q, S_k, D = q.shape[-2], k.shape[-2], q.shape[-1]
    out, lse = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype), torch.empty(q.shape[:-1])
    for i0 in range(0, S_q, block_q):
        i1 = min(i0 + block_q, S_q)
        s = q[:, :, i0:i1].float() @ k.float().transpose(-2, -1)  # [B, H, bq, S_k]
        s.mul_(1 / math.sqrt(D))
        if causal:
            s.masked_fill_(~_visible(i0, i1, 0, S_k, S_k - S_q), float("-inf"))
        m = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
        s.sub_(m).exp_()
        total = s.sum(-1, keepdim=True)
        out[:, :, i0:i1] = ((s @ v.float()) / total.clamp_min(1e-30)).to(q.dtype)
        lse[:, :, i0:i1] = (m + total.log()).squeeze(-1)
    return out, lse


def _mistake(**kwargs):
    return lambda q, k, v, causal=False, block_q=64, block_k=64: _flash(q, k, v, causal, block_q, block_k, **kwargs)


MISTAKES = {
    "no_inf_guard": (_mistake(guard=False), "subtract 0 instead"),
    "float16_statistics": (_mistake(acc16=True), "overflows to inf"),
    "query_block_against_every_key": (_mistake(rows=True), "a block of queries against every key"),
    "query_block_against_every_key_in_place": (_rows_in_place, "a block of queries against every key"),
    "skip_without_the_offset": (_mistake(stop=-4), "which key blocks you skip"),
    "skip_one_key_early": (_mistake(stop=-1), "which key blocks you skip"),
    "scale_by_sqrt_d_v": (_mistake(scale_width="v"), "1/sqrt(D_v)"),
    "no_rescaling": (_mistake(rescale=False), "exp(old max - new max)"),
    # the notebook's table keeps m and l in float64 for float64 inputs; lse is float32 all the same (issue 47)
    "lse_in_float64_for_float64_inputs": (_mistake(lse_in_acc=True), "lse should still be float32"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_the_flash_check_names_each_mistake_in_one_sentence_in_both_languages(vc, mistake):
    wrong, needle = MISTAKES[mistake]
    for lang in EDITIONS:
        with pytest.raises(AssertionError) as info:
            vc[lang].check_flash_attention(wrong)
        message = str(info.value)
        assert "\n" not in message and info.value._render_traceback_() == [f"AssertionError: {message}"]
        assert (needle in message) if lang == "en" else bool(CHINESE.search(message)), message


@pytest.mark.parametrize("correct", [_flash, _logaddexp_tiles, _per_query], ids=["reference", "logaddexp", "per_query"])
def test_the_flash_check_passes_correct_functions_written_differently(vc, correct, capsys):
    vc["en"].check_flash_attention(correct)
    assert capsys.readouterr().out.startswith("✓ flash_attention:")
