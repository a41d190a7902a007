"""Quick visible checks for the `efficient` notebooks (pure torch, no solutions inside).

Each `check_*` function takes your function, runs it on small seeded inputs and prints one "✓"
line when the basic properties hold; when something is off it stops with one AssertionError
sentence that says what is wrong; while your function is a stub it prints "<name>: not
implemented yet". Passing them is necessary, not sufficient: the hidden autograder runs many
more cases. The machinery (one sentence per failure, your own line, the language) is
check_harness.py's; `say` prints a demo's text in the notebook's language.
"""
from __future__ import annotations

import math
import os

import torch
from check_harness import DOMAIN, LOCALES, Harness, NotReady, close, ok  # noqa: F401 - DOMAIN, LOCALES: for the tests
from memory_meter import LiveMemoryMeter  # next to this file in the assignment's folder
from visible_checks_flash import flash_checks  # notebook 01's checks, built on this harness
from visible_checks_flash_backward import flash_backward_checks  # notebook 05's checks, built on this harness

__all__ = [
    "check_flash_attention", "check_merge_attention",
    "check_flash_attention_backward", "check_flash_attention_function",
    "check_sliding_window_mask", "check_sliding_window_attention",
    "check_elu_feature_map", "check_linear_attention", "check_linear_attention_step",
    "check_document_causal_mask_mod", "check_prefix_lm_mask_mod", "check_sliding_window_mask_mod",
    "check_alibi_score_mod", "check_softcap_score_mod",
    "graded_part", "uses_your_code", "use_language", "say", "LiveMemoryMeter",
]

harness = Harness(__file__, *(os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
                              for name in ("visible_checks_flash.py", "visible_checks_flash_backward.py")))
_ = harness.gettext
use_language, uses_your_code, say = harness.use_language, harness.uses_your_code, harness.say
MiB = 2**20


def _dense(q, k, v, mask=None):
    """Plain attention in float64, and the log-sum-exp of each row: the yardstick of this file."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, S_q, S_k]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v.double(), torch.logsumexp(scores, dim=-1)


def _bottom_right(S_q, S_k):
    return torch.ones(S_q, S_k, dtype=torch.bool).tril(diagonal=S_k - S_q)


def _qkv(B, H, S_q, S_k, D, D_v, dtype=torch.float32):
    return torch.randn(B, H, S_q, D, dtype=dtype), torch.randn(B, H, S_k, D, dtype=dtype), torch.randn(B, H, S_k, D_v, dtype=dtype)


def _peak(fn, *args, **kwargs) -> int:
    with LiveMemoryMeter() as meter:
        fn(*args, **kwargs)
    return meter.peak_bytes


# --------------------------------------------------------------------------- #
# 01 flash
# --------------------------------------------------------------------------- #


check_flash_attention, check_merge_attention = flash_checks(harness, close, ok)  # 01
check_flash_attention_backward, check_flash_attention_function = flash_backward_checks(harness, close, ok)  # 05


# --------------------------------------------------------------------------- #
# 02 sliding_window
# --------------------------------------------------------------------------- #


@harness.check("sliding_window_mask")
def check_sliding_window_mask(sliding_window_mask) -> None:
    mask = harness.expect_shape(harness.watch(sliding_window_mask, "sliding_window_mask")(6, 3), [6, 6], "sliding_window_mask(6, 3)")
    assert mask.dtype == torch.bool, _("the mask should be torch.bool, got {dtype}").format(dtype=mask.dtype)
    row = mask[4].int().tolist()
    assert row != [0, 1, 1, 1, 1, 0], _(
        "query 4 sees keys 1..4, four keys: with window=3 it sees itself and the 2 keys before it (keys 2, 3, 4)")
    assert row != [0, 0, 0, 1, 1, 0], _(
        "query 4 sees keys 3..4, two keys: with window=3 it sees itself and the 2 keys before it (keys 2, 3, 4)")
    assert row == [0, 0, 1, 1, 1, 0], _("row 4 is {row}, expected [0, 0, 1, 1, 1, 0]: keys 2, 3 and 4").format(row=row)
    assert not mask.triu(1).any(), _("a query may not see keys after it (j <= i)")
    assert mask.sum().item() == 1 + 2 + 3 * 4, _("every query sees min(i + 1, window) keys")
    ok(_("sliding_window_mask: each query sees itself and the window - 1 keys before it"))


@harness.check("sliding_window_attention")
def check_sliding_window_attention(sliding_window_attention) -> None:
    attend = harness.watch(sliding_window_attention, "sliding_window_attention")
    q, k, v = _qkv(2, 3, 10, 10, 4, 5)
    band = torch.tensor([[i - 3 < j <= i for j in range(10)] for i in range(10)])  # window 3
    for chunk in (1, 3, 4, 16):
        out = harness.expect_shape(attend(q, k, v, 3, chunk_size=chunk), [2, 3, 10, 5],
                           f"sliding_window_attention(window=3, chunk_size={chunk})")
        assert close(out, _dense(q, k, v, band)[0], 1e-4), _(
            "window=3, chunk_size={chunk}: the result differs from full attention masked with the window "
            "(does a chunk read the window - 1 keys before its first query? is the last, shorter chunk handled?)"
        ).format(chunk=chunk)
    S, window, chunk = 1024, 16, 64
    q, k, v = _qkv(1, 2, S, S, 8, 8)
    peak, full = _peak(attend, q, k, v, window, chunk_size=chunk), 2 * S * S * 4
    assert peak < full / 4, _(
        "sliding_window_attention(S={S}, window={window}, chunk_size={chunk}) peaked at {peak:.2f} MiB, as much as "
        "the whole score matrix ({full:.2f} MiB): each chunk reads only the keys it can see").format(
        S=S, window=window, chunk=chunk, peak=peak / MiB, full=full / MiB)
    ok(_("sliding_window_attention: equals masked full attention for chunk sizes 1, 3, 4, 16; peak {peak:.2f} MiB "
         "vs {full:.2f} MiB for the score matrix").format(peak=peak / MiB, full=full / MiB))


# --------------------------------------------------------------------------- #
# 03 linear
# --------------------------------------------------------------------------- #


def _phi(x):
    return torch.where(x > 0, x + 1, torch.exp(x))  # elu(x) + 1, written out


def _linear_dense(q, k, v, causal, eps=1e-6):
    weights = _phi(q.double()) @ _phi(k.double()).transpose(-2, -1)  # [B, H, S, S]: fine in a check
    if causal:
        weights = weights.tril()
    return (weights @ v.double()) / (weights.sum(-1, keepdim=True) + eps)


@harness.check("elu_feature_map")
def check_elu_feature_map(elu_feature_map) -> None:
    x = torch.tensor([-5.0, -1.0, 0.0, 0.5, 3.0])
    got = harness.expect_shape(harness.watch(elu_feature_map, "elu_feature_map")(x), [5], "elu_feature_map(x)")
    assert (got > 0).all(), _("phi(x) must be positive everywhere (got {values}): elu(x) + 1, not elu(x)").format(
        values=[round(t, 3) for t in got.tolist()])
    assert close(got, _phi(x), 1e-6), _("phi(x) should be elu(x) + 1: x + 1 for x > 0, exp(x) for x <= 0")
    ok(_("elu_feature_map: elu(x) + 1, positive everywhere"))


@harness.check("linear_attention")
def check_linear_attention(linear_attention) -> None:
    attend = harness.watch(linear_attention, "linear_attention")
    q, k, v = _qkv(2, 3, 6, 6, 4, 5)
    for causal in (False, True):
        out = harness.expect_shape(attend(q, k, v, causal=causal), [2, 3, 6, 5], f"linear_attention(causal={causal})")
        want = _linear_dense(q, k, v, causal)
        unnormalised = _phi(q.double()) @ _phi(k.double()).transpose(-2, -1)  # [B, H, S, S]
        if close(out, (unnormalised.tril() if causal else unnormalised) @ v.double(), 1e-4):
            raise AssertionError(_("the output is not normalised: divide by phi(q_i) . sum_j phi(k_j) (plus eps)"))
        assert close(out, want, 1e-4), _(
            "linear_attention(causal={causal}) differs from phi(q_i) . sum_j phi(k_j) v_j / (phi(q_i) . sum_j phi(k_j) + eps) "
            "by up to {gap:.2g}{extra}").format(causal=causal, gap=(out.double() - want).abs().max().item(),
                                               extra=_(": when causal, query i sums over keys j <= i only") if causal else "")
    S = 2048
    q, k, v = _qkv(1, 1, S, S, 4, 4)
    peak, square = _peak(attend, q, k, v), S * S * 4
    assert peak < square, _("linear_attention(S={S}) peaked at {peak:.2f} MiB, as much as an [S, S] matrix "
                            "({full:.2f} MiB): sum phi(k_j) v_j^T first, then multiply by phi(q)").format(
        S=S, peak=peak / MiB, full=square / MiB)
    ok(_("linear_attention: equals the formula, causal and not, peak {peak:.2f} MiB at S = {S} (an [S, S] matrix "
         "is {full:.2f} MiB)").format(peak=peak / MiB, S=S, full=square / MiB))


@harness.check("linear_attention_step")
def check_linear_attention_step(linear_attention_step) -> None:
    step = harness.watch(linear_attention_step, "linear_attention_step")
    q, k, v = _qkv(2, 3, 7, 7, 4, 5)
    want = _linear_dense(q, k, v, causal=True)
    state, sizes = None, []
    for t in range(7):
        got = step(state, q[:, :, t], k[:, :, t], v[:, :, t])
        assert isinstance(got, tuple) and len(got) == 2, _("linear_attention_step should return the pair (out_t, state)")
        out_t, state = got
        harness.expect_shape(out_t, [2, 3, 5], f"out_t (step {t})")
        assert close(out_t, want[:, :, t], 1e-4), _(
            "step {t} differs from causal linear attention by up to {gap:.2g}: add phi(k_t) v_t^T and phi(k_t) to the "
            "state you were given, and return the new state").format(t=t, gap=(out_t.double() - want[:, :, t]).abs().max().item())
        tensors = state if isinstance(state, (tuple, list)) else (state,)
        sizes.append(sum(s.numel() for s in tensors if isinstance(s, torch.Tensor)))
    assert sizes[0] == sizes[-1], _(
        "the state grew from {first} to {last} numbers over 7 steps: keep the running sums, not the keys").format(
        first=sizes[0], last=sizes[-1])
    ok(_("linear_attention_step: 7 steps equal causal linear attention, with a state of {size} numbers at every step"
         ).format(size=sizes[-1]))


# --------------------------------------------------------------------------- #
# 04 flex
# --------------------------------------------------------------------------- #


def _mask_of(mask_mod, B, S) -> torch.Tensor:
    try:
        from torch.nn.attention.flex_attention import create_mask
    except ImportError:
        raise NotReady(_("this PyTorch has no torch.nn.attention.flex_attention (it needs 2.5 or later)")) from None
    return create_mask(mask_mod, B, None, S, S, device="cpu")[:, 0]  # [B, S, S]


def _same(got, want_row, what):
    """One row of a mask, as 0/1 in the message."""
    assert got.tolist() == want_row, _("{what}: got {got}, expected {want}").format(
        what=what, got=[int(x) for x in got.tolist()], want=[int(x) for x in want_row])


@harness.check("document_causal_mask_mod")
def check_document_causal_mask_mod(document_causal_mask_mod) -> None:
    ids = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 0, 1]])
    mask = _mask_of(harness.watch(document_causal_mask_mod, "document_causal_mask_mod")(ids), 2, 5)
    assert not mask[0, 2, :2].any(), _("token 2 of sample 0 starts document 1: it may not see document 0's tokens 0 and 1")
    assert not mask.triu(1).any(), _("within a document the mask is causal: no key after the query")
    _same(mask[1, 3], [True, True, True, True, False], _("sample 1, query 3 (documents are per sample: document_ids[b])"))
    _same(mask[0, 4], [False, False, True, True, True], _("sample 0, query 4"))
    ok(_("document_causal_mask_mod: causal within each document, nothing across, per sample"))


@harness.check("prefix_lm_mask_mod")
def check_prefix_lm_mask_mod(prefix_lm_mask_mod) -> None:
    mask = _mask_of(harness.watch(prefix_lm_mask_mod, "prefix_lm_mask_mod")(torch.tensor([3, 1])), 2, 5)
    _same(mask[0, 0], [True, True, True, False, False], _("sample 0 (prefix 3), query 0: it sees the whole prefix"))
    _same(mask[0, 4], [True, True, True, True, True], _("sample 0, query 4"))
    _same(mask[1, 1], [True, True, False, False, False], _("sample 1 (prefix 1), query 1: causal after the prefix"))
    ok(_("prefix_lm_mask_mod: the whole prefix for every query, causal after it, per sample"))


@harness.check("sliding_window_mask_mod")
def check_sliding_window_mask_mod(sliding_window_mask_mod) -> None:
    mask = _mask_of(harness.watch(sliding_window_mask_mod, "sliding_window_mask_mod")(3), 1, 6)[0]
    _same(mask[4], [False, False, True, True, True, False], _("window 3, query 4 (itself and the 2 keys before it)"))
    assert not mask.triu(1).any(), _("a query may not see keys after it")
    ok(_("sliding_window_mask_mod: the band of sliding_window_mask, through create_mask"))


@harness.check("alibi_score_mod")
def check_alibi_score_mod(alibi_score_mod) -> None:
    score_mod = harness.watch(alibi_score_mod, "alibi_score_mod")(4)
    zero, b = torch.tensor(0.0), torch.tensor(0)
    bias = [[float(score_mod(zero, b, torch.tensor(h), torch.tensor(5), torch.tensor(2))) for h in range(4)]]
    slopes = [2 ** (-8 * (h + 1) / 4) for h in range(4)]
    if all(math.isclose(x, 3 * s, rel_tol=1e-4) for x, s in zip(bias[0], slopes)):
        raise AssertionError(_("a key 3 positions back got a bonus of +3 x slope: ALiBi penalises distance, "
                               "slope_h * (kv_idx - q_idx) is negative for past keys"))
    if all(math.isclose(x, -3 * s, rel_tol=1e-4) for x, s in zip(bias[0], reversed(slopes))):
        raise AssertionError(_("the slopes come in reverse order: head 0 has the steepest slope, 2^(-8 / num_heads)"))
    want = [-3 * s for s in slopes]
    assert all(math.isclose(x, w, rel_tol=1e-4) for x, w in zip(bias[0], want)), _(
        "query 5, key 2, score 0: heads 0..3 got {got}, expected {want} (slope_h = 2^(-8 (h + 1) / num_heads))").format(
        got=[round(x, 4) for x in bias[0]], want=[round(w, 4) for w in want])
    twelve = harness.watch(alibi_score_mod, "alibi_score_mod")(12)
    got = [-float(twelve(zero, b, torch.tensor(h), torch.tensor(1), torch.tensor(0))) for h in range(12)]
    paper = [2 ** -(h + 1) for h in range(8)] + [2 ** -(h + 0.5) for h in range(4)]  # the paper's get_slopes(12)
    if all(math.isclose(x, 2 ** (-8 * (h + 1) / 12), rel_tol=1e-4) for h, x in enumerate(got)):
        raise AssertionError(_("12 heads: the formula 2^(-8 (h + 1) / H) for every H matches the paper's slopes only "
                               "when H is a power of two: take the 8 slopes of 8 heads, then the first 4 of the slopes "
                               "of 16 heads at even indices (slopes_16[0::2])"))
    assert all(math.isclose(x, w, rel_tol=1e-4) for x, w in zip(got, paper)), _(
        "12 heads: the slopes are {got}, expected the paper's {want}").format(
        got=[round(x, 4) for x in got], want=[round(w, 4) for w in paper])
    ok(_("alibi_score_mod: score + slope_h * (kv_idx - q_idx), the paper's slopes for 4 and 12 heads"))


@harness.check("softcap_score_mod")
def check_softcap_score_mod(softcap_score_mod) -> None:
    score_mod = harness.watch(softcap_score_mod, "softcap_score_mod")(20.0)
    scores = torch.tensor([-100.0, -10.0, 0.0, 1.0, 19.0, 100.0])
    index = torch.tensor(0)
    got = harness.expect_shape(score_mod(scores, index, index, index, index), [6], "softcap_score_mod(20.0)(scores, ...)")
    if close(got, scores.clamp(-20, 20), 1e-5):
        raise AssertionError(_("the scores are clamped to [-cap, cap]: soft-capping is cap * tanh(score / cap), "
                               "smooth, with a gradient everywhere"))
    assert close(got, 20 * torch.tanh(scores / 20), 1e-5), _("softcap should give cap * tanh(score / cap), got {got}").format(
        got=[round(x, 3) for x in got.tolist()])
    ok(_("softcap_score_mod: cap * tanh(score / cap), never beyond +-cap"))


# --------------------------------------------------------------------------- #
# Graded cells
# --------------------------------------------------------------------------- #


# The check cells above each graded cell, which nbgrader's Validate runs again (see graded_cells.py).
PART_CHECKS = {
    "flash": ("check_flash_attention(flash_attention)", "check_merge_attention(merge_attention)"),
    "flash_backward": ("check_flash_attention_backward(flash_attention_backward)",
                       "check_flash_attention_function(FlashAttentionFunction)"),
    "sliding_window": ("check_sliding_window_mask(sliding_window_mask)",
                       "check_sliding_window_attention(sliding_window_attention)"),
    "linear": ("check_elu_feature_map(elu_feature_map)", "check_linear_attention(linear_attention)",
               "check_linear_attention_step(linear_attention_step)"),
    "flex": ("check_document_causal_mask_mod(document_causal_mask_mod)", "check_prefix_lm_mask_mod(prefix_lm_mask_mod)",
             "check_sliding_window_mask_mod(sliding_window_mask_mod)", "check_alibi_score_mod(alibi_score_mod)",
             "check_softcap_score_mod(softcap_score_mod)"),
}


# The notebook of each part (the command that grades one notebook names it).
PART_NOTEBOOKS = {"flash": "01_flash", "sliding_window": "02_sliding_window", "linear": "03_linear", "flex": "04_flex",
                  "flash_backward": "05_flash_backward"}


graded_part = harness.graded_part(
    PART_CHECKS, globals(), ".venv/bin/python -m autograder grade workspace/efficient{suffix}/{notebook}.ipynb",
    PART_NOTEBOOKS)
