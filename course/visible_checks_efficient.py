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
from torch.utils._python_dispatch import TorchDispatchMode
from check_harness import DOMAIN, LOCALES, Harness, NotReady, close, ok, plain  # noqa: F401 - DOMAIN, LOCALES: for the tests
from memory_meter import LiveMemoryMeter  # next to this file in the assignment's folder
from visible_checks_flash import flash_checks  # notebook 01's checks, built on this harness
from visible_checks_flash_backward import flash_backward_checks  # notebook 05's checks, built on this harness
from visible_checks_flex import flex_checks  # notebook 04's checks, likewise

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
                              for name in ("visible_checks_flash.py", "visible_checks_flash_backward.py",
                                           "visible_checks_flex.py")))
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


class _Squares(TorchDispatchMode):
    """Notes the dtype of the first [..., n, n] tensor an operator returns while it is on (None: there was none)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.seen = n, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(item, torch.Tensor) and item.dim() >= 2 and tuple(item.shape[-2:]) == (self.n, self.n):
                self.seen = self.seen or item.dtype
        return out


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
        if not close(out, _dense(q, k, v, band)[0], 1e-4):
            _blame_the_mask(sliding_window_attention, q, k, v, chunk, _dense(q, k, v, band)[0])
        assert close(out, _dense(q, k, v, band)[0], 1e-4), _(
            "window=3, chunk_size={chunk}: the result differs from full attention masked with the window "
            "(does a chunk read the window - 1 keys before its first query? is the last, shorter chunk handled?)"
        ).format(chunk=chunk)
    small = q, k, v  # the float16 case, after the memory's
    S, window, chunk = 1024, 16, 64
    q, k, v = _qkv(1, 2, S, S, 8, 8)
    with _Squares(S) as squares:
        peak = _peak(attend, q, k, v, window, chunk_size=chunk)
    if squares.seen is torch.bool:
        raise AssertionError(_(
            "sliding_window_attention(S={S}, window={window}, chunk_size={chunk}) built a [{S}, {S}] boolean mask: the "
            "whole band (sliding_window_mask(S, window)?), S^2 memory again, and rebuilt for every chunk when it is "
            "made inside the loop; build only the chunk's own [chunk, keys read] mask, from its query and key "
            "positions").format(S=S, window=window, chunk=chunk))
    if squares.seen is not None:
        raise AssertionError(_(
            "sliding_window_attention(S={S}, window={window}, chunk_size={chunk}) built a [{S}, {S}] tensor: the whole "
            "score matrix, S^2 memory; each chunk of queries scores only the keys it can see").format(
            S=S, window=window, chunk=chunk))
    rectangle, every = 2 * chunk * (chunk + window - 1) * 4, 2 * chunk * S * 4  # one chunk's scores, H = 2, float32
    room = 4 * q.numel() * 4 + 4 * rectangle  # q, k, v and the output, and a few chunks of scores
    assert peak < room, _(
        "sliding_window_attention(S={S}, window={window}, chunk_size={chunk}) peaked at {peak:.2f} MiB: one chunk's "
        "scores against the keys it can see are {rectangle:.2f} MiB, against every key {every:.2f} MiB; read only the "
        "keys [max(0, i0 - window + 1), i1) for the queries [i0, i1)").format(
        S=S, window=window, chunk=chunk, peak=peak / MiB, rectangle=rectangle / MiB, every=every / MiB)
    half = attend(*(t.half() for t in small), 3, chunk_size=4)
    assert half.dtype == torch.float16, _("with float16 inputs the output should be float16 (q's dtype), got {dtype}").format(
        dtype=half.dtype)
    ok(_("sliding_window_attention: equals masked full attention for chunk sizes 1, 3, 4, 16; peak {peak:.2f} MiB "
         "at S = {S} (the score matrix would be {full:.2f} MiB)").format(peak=peak / MiB, S=S, full=2 * S * S * 4 / MiB))


def _window_mask(S, window):
    """The right sliding_window_mask (the check's own), lent to the student's attention by _blame_the_mask."""
    query, key = torch.arange(S)[:, None], torch.arange(S)[None, :]  # [S, 1] queries, [1, S] keys
    behind = query - key  # [S, S]: how far back each key lies
    return (behind >= 0) & (behind < window)


def _blame_the_mask(sliding_window_attention, q, k, v, chunk, want) -> None:
    """As the grader does (Part.borrows): when the student's attention calls their own sliding_window_mask and that
    mask is wrong, run the attention once more with the right mask in its place; right then, the mask is the cause."""
    scope = getattr(sliding_window_attention, "__globals__", None)
    theirs = scope.get("sliding_window_mask") if isinstance(scope, dict) else None
    if not callable(theirs) or theirs is _window_mask:
        return
    try:
        mask = theirs(10, 3)
        row = mask[4].nonzero().flatten().tolist()
    except Exception:  # noqa: BLE001 - their mask raises: its own check says so
        return
    if row == [2, 3, 4] and torch.equal(mask.bool(), _window_mask(10, 3)):
        return
    scope["sliding_window_mask"] = _window_mask
    try:
        out = sliding_window_attention(q, k, v, 3, chunk_size=chunk)
    except Exception:  # noqa: BLE001 - the ordinary message follows
        return
    finally:
        scope["sliding_window_mask"] = theirs
    if close(out, want, 1e-4):
        raise AssertionError(_(
            "window=3, chunk_size={chunk}: your sliding_window_attention is right with a right sliding_window_mask, "
            "but it calls yours, which is wrong (with window=3 query 4 sees keys {row}, not [2, 3, 4]): fix "
            "sliding_window_mask (its check above says how); the grader charges the mistake there only").format(
            chunk=chunk, row=row))


# --------------------------------------------------------------------------- #
# 03 linear
# --------------------------------------------------------------------------- #


def _phi(x):
    return torch.where(x > 0, x + 1, torch.exp(x))  # elu(x) + 1, written out


def _linear_dense(q, k, v, causal, eps=1e-6, diagonal=True):
    """The formula through the [S, S] weights phi(q_i) . phi(k_j) in float64 (fine in a check); diagonal False:
    causal without the key j = i."""
    weights = _phi(q.double()) @ _phi(k.double()).transpose(-2, -1)  # [B, H, S, S]
    if causal:
        weights = weights.tril(0 if diagonal else -1)
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
    q, k, v = _qkv(2, 3, 6, 6, 4, 5)  # D = 4: a 1/sqrt(D) shows as a factor 2
    for causal in (False, True):
        out = harness.expect_shape(attend(q, k, v, causal=causal), [2, 3, 6, 5], f"linear_attention(causal={causal})")
        want = _linear_dense(q, k, v, causal)
        unnormalised = _phi(q.double()) @ _phi(k.double()).transpose(-2, -1)  # [B, H, S, S]
        if close(out, (unnormalised.tril() if causal else unnormalised) @ v.double(), 1e-4):
            raise AssertionError(_("the output is not normalised: divide by phi(q_i) . sum_j phi(k_j) (plus eps)"))
        root = math.sqrt(2)  # sqrt(D) = 2 on q, on k, on both, or split as D^(1/4) on each
        scaled = ((q / 2, k), (q, k / 2), (q / 2, k / 2), (q / root, k / root))
        if any(close(out, _linear_dense(q_s, k_s, v, causal), 1e-4) for q_s, k_s in scaled):
            raise AssertionError(_("your output is linear attention with q or k divided by sqrt(D) before phi: "
                                   "linear attention has no 1 / sqrt(D), phi(q) . phi(k) takes the place of "
                                   "exp(q . k / sqrt(D))"))
        if causal and close(out, _linear_dense(q, k, v, True, diagonal=False), 1e-4):
            raise AssertionError(_("causal: query i also sees its own key, j <= i; your sums stop at j < i"))
        assert close(out, want, 1e-4), _(
            "linear_attention(causal={causal}) differs from phi(q_i) . sum_j phi(k_j) v_j / (phi(q_i) . sum_j phi(k_j) + eps) "
            "by up to {gap:.2g}{extra}").format(causal=causal, gap=(out.double() - want).abs().max().item(),
                                               extra=_(": when causal, query i sums over keys j <= i only") if causal else "")
    _check_eps(attend(q, k, v, causal=True, eps=0.5), _linear_dense(q, k, v, True, eps=0.5), "linear_attention")
    S = 2048
    q, k, v = _qkv(1, 1, S, S, 4, 4)
    square, peaks = S * S * 4, []
    for causal in (False, True):
        with LiveMemoryMeter() as meter:
            out = attend(q, k, v, causal=causal)
        peaks.append(meter.peak_bytes)
        assert meter.peak_bytes < square, _(
            "linear_attention(S={S}, causal={causal}) peaked at {peak:.2f} MiB, as much as an [S, S] matrix ({full:.2f} "
            "MiB): sum phi(k_j) v_j^T first, then multiply by phi(q)").format(
            S=S, causal=causal, peak=meter.peak_bytes / MiB, full=square / MiB)
        want = _linear_dense(q, k, v, causal)
        if causal and not close(out, want, 1e-4):
            _explain_restarting_chunks(out, q, k, v)
        assert close(out, want, 1e-4), _(
            "linear_attention(S={S}, causal={causal}) differs from the formula by up to {gap:.2g}, though it is right at "
            "S = 6: over a long sequence, does each chunk start from the running sums of every chunk before it, and "
            "add its own keys to them afterwards?").format(S=S, causal=causal, gap=(out.double() - want).abs().max().item())
    ok(_("linear_attention: equals the formula, causal and not, peak {peak:.2f} MiB at S = {S} (an [S, S] matrix "
         "is {full:.2f} MiB)").format(peak=max(peaks) / MiB, S=S, full=square / MiB))


def _check_eps(got, want, name: str) -> None:
    """An eps far from its default (0.5) must show in the output: it is added to the denominator."""
    assert close(got, want, 1e-4), _(
        "{name}(..., eps=0.5) differs from the formula with 0.5 added to the denominator by up to {gap:.2g}: use the "
        "eps given, added: phi(q_i) . sum_j phi(k_j) + eps").format(
        name=name, gap=(got.double() - want).abs().max().item())


def _explain_restarting_chunks(out, q, k, v) -> None:
    """Name the chunk size of a causal linear attention whose chunks each start from zero sums, if it is one."""
    S = q.shape[-2]
    weights = (_phi(q.double()) @ _phi(k.double()).transpose(-2, -1)).tril()  # [B, H, S, S]
    position = torch.arange(S)
    for chunk in (8, 16, 32, 50, 64, 100, 128, 256, 512, 1024):
        alone = weights * (position[:, None] // chunk == position[None, :] // chunk)  # [B, H, S, S]: own chunk only
        if close(out, (alone @ v.double()) / (alone.sum(-1, keepdim=True) + 1e-6), 1e-4):
            raise AssertionError(_(
                "linear_attention(S={S}, causal=True): your chunks of {chunk} positions each start from zero sums, so a "
                "query sees only the keys of its own chunk (right up to S = {chunk}). Carry the running sums sum_j "
                "phi(k_j) v_j^T and sum_j phi(k_j) from chunk to chunk: each chunk starts from the running sums of "
                "every chunk before it and adds its own keys after").format(S=S, chunk=chunk))


@harness.check("linear_attention_step")
def check_linear_attention_step(linear_attention_step) -> None:
    step = harness.watch(linear_attention_step, "linear_attention_step")
    q, k, v = _qkv(2, 3, 7, 7, 4, 5)
    want, stale = _linear_dense(q, k, v, causal=True), _linear_dense(q, k, v, causal=True, diagonal=False)
    state, sizes = None, []
    for t in range(7):
        got = step(state, q[:, :, t], k[:, :, t], v[:, :, t])
        assert isinstance(got, tuple) and len(got) == 2, _("linear_attention_step should return the pair (out_t, state)")
        out_t, state = got
        harness.expect_shape(out_t, [2, 3, 5], f"out_t (step {t})")
        if not close(out_t, want[:, :, t], 1e-4) and close(out_t, stale[:, :, t], 1e-4):
            raise AssertionError(_(
                "step {t}: your out_t reads the state before this step's key is added (query t sees keys before t "
                "only): first add phi(k_t) v_t^T and phi(k_t) to the state, then read it with phi(q_t)").format(t=t))
        assert close(out_t, want[:, :, t], 1e-4), _(
            "step {t} differs from causal linear attention by up to {gap:.2g}: add phi(k_t) v_t^T and phi(k_t) to the "
            "state you were given, and return the new state").format(t=t, gap=(out_t.double() - want[:, :, t]).abs().max().item())
        tensors = state if isinstance(state, (tuple, list)) else (state,)
        sizes.append(sum(s.numel() for s in tensors if isinstance(s, torch.Tensor)))
    first = step(None, q[:, :, 0], k[:, :, 0], v[:, :, 0], eps=0.5)[0]
    _check_eps(first, _linear_dense(q[:, :, :1], k[:, :, :1], v[:, :, :1], True, eps=0.5)[:, :, 0], "linear_attention_step")
    assert sizes[0] == sizes[-1], _(
        "the state grew from {first} to {last} numbers over 7 steps: keep the running sums, not the keys").format(
        first=sizes[0], last=sizes[-1])
    ok(_("linear_attention_step: 7 steps equal causal linear attention, with a state of {size} numbers at every step"
         ).format(size=sizes[-1]))


# --------------------------------------------------------------------------- #
# 04 flex (visible_checks_flex.py)
# --------------------------------------------------------------------------- #


(check_document_causal_mask_mod, check_prefix_lm_mask_mod, check_sliding_window_mask_mod, check_alibi_score_mod,
 check_softcap_score_mod) = flex_checks(harness, close, ok, NotReady, plain)


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
