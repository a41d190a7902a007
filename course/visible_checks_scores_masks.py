"""The self-attention assignment's visible checks, part one: its harness (the mistakes the course teaches,
named from the student's line; torch's `.T` warning folded into the failure) and the checks of the notebooks
01_scores and 02_masks. visible_checks.py imports it and holds the rest; the machinery is check_harness.py's.
"""
from __future__ import annotations

import math
import os
import re

import torch
import torch.nn as nn
from check_harness import Harness, close, ok, shape_of

__all__ = [
    "check_make_projections", "check_project_qkv",
    "check_scaled_scores", "check_attention_weights", "check_attend",
    "check_padding_mask", "check_causal_mask", "check_apply_padding_mask", "check_apply_causal_mask",
]

_DOT_T = re.compile(r"\.T\b")
_SWAP_1_2 = re.compile(r"transpose\(\s*(1\s*,\s*2|2\s*,\s*1)\s*\)|permute\(\s*0\s*,\s*2\s*,\s*1\s*\)")
_MASK_3D_VIEW = re.compile(r"\[\s*:\s*,\s*None\s*,\s*:\s*\]")
# The start of torch's UserWarning for `.T` on a tensor of more than two dimensions.
DOT_T_WARNING = "The use of `x.T` on tensors of dimension other than 2"


def _dot_t_advice() -> str:
    return _("`.T` reverses every axis of a tensor with more than two (keys [B, S_k, d_k] become "
             "[d_k, S_k, B]), and PyTorch deprecates it there: transpose only the last two axes, "
             "`K.transpose(-2, -1)` or `K.mT`.")


def known_mistake(error: BaseException) -> str:
    """A sentence naming a mistake the course teaches, read from the student's line (or else the
    function it is in) and the error; or ''."""
    error_line = harness.student_line(error)
    code = error_line
    if not any(pattern.search(code) for pattern in (_DOT_T, _SWAP_1_2, _MASK_3D_VIEW)):
        code = harness.student_function_source(error) or code
    if _DOT_T.search(code):
        return _dot_t_advice()
    if _SWAP_1_2.search(code):
        return _("Swapping axes 1 and 2 transposes 3-D keys [B, S_k, d_k] but, on 4-D keys [B, H, S_k, d_k], "
                 "swaps heads and positions: transpose the last two axes, `K.transpose(-2, -1)`.")
    if _MASK_3D_VIEW.search(code):
        return _("A mask viewed as [B, 1, S_k] lines up with 3-D scores [B, S_q, S_k] only; 4-D scores "
                 "[B, H, S_q, S_k] need [B, 1, 1, S_k].")
    if "copy_" in error_line and "leaf Variable" in str(error):
        return _("Change parameters in place inside `with torch.no_grad():`; outside it, autograd refuses.")
    if "copy_" in error_line:
        return _("`copy_` needs a source whose shape broadcasts to its destination's shape: print both shapes.")
    return ""


def dot_t_note(sentence: str) -> str:
    """What follows a failed check's sentence when torch warned about `.T` meanwhile (once per process):
    that it is deprecated, unless the sentence already says so."""
    if _dot_t_advice() in sentence:
        return ""
    return _("(PyTorch also warned that `.T` on a tensor of more than two dimensions is deprecated.)")


# visible_checks_module.py (the checks of notebooks 03 and 04) is shipped code too: its frames are never the student's
harness = Harness(__file__, os.path.join(os.path.dirname(os.path.abspath(__file__)), "visible_checks_module.py"),
                  explain=known_mistake, folded_warning=DOT_T_WARNING, warning_note=dot_t_note)
_ = harness.gettext


# --------------------------------------------------------------------------- #
# 01 scores: qkv_projection and scaled_scores
# --------------------------------------------------------------------------- #


@harness.check("make_projections")
def check_make_projections(make_projections) -> None:
    result = harness.watch(make_projections, "make_projections")(12, 8, 6)
    assert isinstance(result, tuple) and len(result) == 3, _("make_projections should return a tuple (W_q, W_k, W_v)")
    expected = {"W_q": (12, 8), "W_k": (12, 8), "W_v": (12, 6)}
    for (name, (fan_in, fan_out)), layer in zip(expected.items(), result):
        assert isinstance(layer, nn.Linear), _("{name} should be an nn.Linear, got {type}").format(
            name=name, type=type(layer).__name__)
        assert layer.bias is None, _("{name} has a bias: create it with bias=False").format(name=name)
        assert (layer.in_features, layer.out_features) == (fan_in, fan_out), _(
            "{name} maps {fan_in} -> {fan_out}, expected {want_in} -> {want_out}"
        ).format(name=name, fan_in=layer.in_features, fan_out=layer.out_features, want_in=fan_in, want_out=fan_out)
    W_q, W_k, W_v = result
    assert W_q is not W_k and W_q.weight is not W_k.weight, _("W_q and W_k are the same layer: each projection needs its own weights")
    assert not torch.equal(W_q.weight, W_k.weight), _("W_q and W_k start with identical weights: create three independent layers")
    ok(_("make_projections: three independent bias-free layers, 12 -> 8, 12 -> 8, 12 -> 6"))


@harness.check("project_qkv")
def check_project_qkv(project_qkv) -> None:
    project_qkv = harness.watch(project_qkv, "project_qkv")
    B, S, d_model, d_k, d_v = 2, 5, 12, 8, 6
    W_q, W_k, W_v = nn.Linear(d_model, d_k, bias=False), nn.Linear(d_model, d_k, bias=False), nn.Linear(d_model, d_v, bias=False)
    x = torch.randn(B, S, d_model)
    result = project_qkv(x, W_q, W_k, W_v)
    assert isinstance(result, tuple) and len(result) == 3, _("project_qkv should return a tuple (Q, K, V)")
    Q, K, V = result
    harness.expect_shape(Q, [B, S, d_k], "Q")
    harness.expect_shape(K, [B, S, d_k], "K")
    harness.expect_shape(V, [B, S, d_v], "V")
    for name, got, layer in (("Q", Q, W_q), ("K", K, W_k), ("V", V, W_v)):
        assert close(got, layer(x)), _("{name} is not {layer} applied to x (did you swap the layers?)").format(
            name=name, layer="W_" + name.lower())
    ok(_("project_qkv: x {x} -> Q {Q}, K {K}, V {V}").format(x=list(x.shape), Q=list(Q.shape), K=list(K.shape), V=list(V.shape)))


@harness.check("scaled_scores")
def check_scaled_scores(scaled_scores) -> None:
    scaled_scores = harness.watch(scaled_scores, "scaled_scores")
    # 3-D: B=2, S_q=3, S_k=5, d_k=4
    Q, K = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    scores = harness.expect_shape(scaled_scores(Q, K), [2, 3, 5], _("scores for Q [2, 3, 4], K [2, 5, 4]"))
    one = (Q[1, 2] * K[1, 4]).sum() / 2.0  # query 2 against key 4 in sample 1, sqrt(4) = 2
    got = scores[1, 2, 4].item()
    if not math.isclose(got, one.item(), rel_tol=1e-4, abs_tol=1e-5):
        raw = (Q[1, 2] * K[1, 4]).sum().item()
        if math.isclose(got, raw, rel_tol=1e-4, abs_tol=1e-5):
            raise AssertionError(_("scores are not scaled: divide the dot products by sqrt(d_k)"))
        if math.isclose(got, raw / 4, rel_tol=1e-4, abs_tol=1e-5):
            raise AssertionError(_("scores are divided by d_k; divide by sqrt(d_k) instead"))
        raise AssertionError(_(
            "scores[1, 2, 4] = {got:.4f}, expected the dot product of query 2 and key 4 divided by sqrt(d_k) = {want:.4f}"
        ).format(got=got, want=one.item()))
    # 4-D: B=2, H=3, S_q=4, S_k=6, d_k=16
    Q4, K4 = torch.randn(2, 3, 4, 16), torch.randn(2, 3, 6, 16)
    scores4 = harness.expect_shape(scaled_scores(Q4, K4), [2, 3, 4, 6], _("scores for 4-D Q [2, 3, 4, 16], K [2, 3, 6, 16]"))
    want = (Q4[1, 2, 3] * K4[1, 2, 5]).sum().item() / 4.0
    assert math.isclose(scores4[1, 2, 3, 5].item(), want, rel_tol=1e-4, abs_tol=1e-5), _(
        "4-D scores are wrong: transpose only the last two axes of K (a plain .T also swaps batch and heads)"
    )
    ok(_("scaled_scores: [2,3,4]x[2,5,4] -> [2,3,5] and [2,3,4,16]x[2,3,6,16] -> [2,3,4,6], scaled by 1/sqrt(d_k)"))


@harness.check("attention_weights")
def check_attention_weights(attention_weights) -> None:
    attention_weights = harness.watch(attention_weights, "attention_weights")
    scores = torch.randn(2, 3, 4, 5) * 3  # [B, H, S_q, S_k], S_q != S_k
    w = harness.expect_shape(attention_weights(scores), [2, 3, 4, 5], _("weights"))
    harness.no_nan(w, _("weights"))
    assert (w >= 0).all(), _("weights must not be negative: use a softmax")
    row_sums = w.sum(dim=-1)
    if not torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-5):
        worst = row_sums.flatten()[(row_sums.flatten() - 1).abs().argmax()].item()
        raise AssertionError(_(
            "rows of your weights sum to {total:.2f}: softmax must run over the key dimension, dim=-1"
        ).format(total=worst))
    uniform = harness.expect_shape(attention_weights(torch.zeros(2, 4, 6)), [2, 4, 6], _("weights of 3-D scores [2, 4, 6]"))
    assert close(uniform, torch.full((2, 4, 6), 1 / 6)), _("equal scores should give uniform weights 1/S_k")
    masked = torch.randn(1, 2, 3)
    masked[0, :, 0] = float("-inf")
    wm = harness.expect_shape(attention_weights(masked), [1, 2, 3], _("weights of 3-D scores [1, 2, 3]"))
    assert (wm[0, :, 0] == 0).all() and not torch.isnan(wm).any(), _("a -inf score must get weight exactly 0")
    ok(_("attention_weights: every row sums to 1 over the keys, -inf gets weight 0"))


@harness.check("attend")
def check_attend(attend) -> None:
    attend = harness.watch(attend, "attend")
    V = torch.randn(2, 5, 3)  # [B, S_k, d_v]
    weights = torch.softmax(torch.randn(2, 4, 5), dim=-1)  # [B, S_q, S_k]
    harness.expect_shape(attend(weights, V), [2, 4, 3], _("attend(weights [2, 4, 5], V [2, 5, 3])"))
    one_hot = torch.zeros(2, 4, 5)
    one_hot[:, :, 2] = 1.0  # every query looks only at key 2
    picked = attend(one_hot, V)
    assert close(picked, V[:, 2:3].expand(2, 4, 3)), _("a query with all its weight on key 2 should output exactly V[key 2]")
    out4 = attend(torch.softmax(torch.randn(2, 3, 4, 5), -1), torch.randn(2, 3, 5, 7))
    harness.expect_shape(out4, [2, 3, 4, 7], _("attend with 4-D inputs"))
    ok(_("attend: [2,4,5] x [2,5,3] -> [2,4,3], and each output is a weighted mix of value rows"))


# --------------------------------------------------------------------------- #
# 02 masks
# --------------------------------------------------------------------------- #


@harness.check("padding_mask")
def check_padding_mask(padding_mask) -> None:
    lengths = torch.tensor([3, 1, 5])
    mask = harness.expect_shape(harness.watch(padding_mask, "padding_mask")(lengths, 5), [3, 5], _("padding_mask(lengths=[3, 1, 5], seq_len=5)"))
    assert mask.dtype == torch.bool, _("the mask should be torch.bool, got {dtype}").format(dtype=mask.dtype)
    expected = torch.tensor(
        [[True, True, True, False, False], [True, False, False, False, False], [True, True, True, True, True]]
    )
    assert torch.equal(mask, expected), _(
        "padding_mask(lengths=[3, 1, 5], 5) gave\n{got}\nexpected True (1) for the first `length` positions:\n{expected}"
    ).format(got=mask.int(), expected=expected.int())
    ok(_("padding_mask: [B, seq_len] bool, True on real tokens"))


@harness.check("causal_mask")
def check_causal_mask(causal_mask) -> None:
    mask = harness.expect_shape(harness.watch(causal_mask, "causal_mask")(4), [4, 4], "causal_mask(4)")
    assert mask.dtype == torch.bool, _("the mask should be torch.bool, got {dtype}").format(dtype=mask.dtype)
    assert mask.diagonal().all(), _("a query must be allowed to see its own position (the diagonal should be True)")
    assert not mask[0, 1:].any(), _("query 0 can see future keys: True must mean key j <= query i")
    assert mask[3].all(), _("the last query should see every key")
    assert mask.sum().item() == 10, _("causal_mask(4) should have 10 True entries, has {count}").format(count=mask.sum().item())
    ok(_("causal_mask: [S, S] bool, lower triangle (past and present) True"))


def _padding_advice(error: BaseException, args) -> str:
    """apply_padding_mask raised: on 4-D scores (the 3-D case ran first and passed), name the 3-D-only view."""
    scores = args[0] if args else None
    if isinstance(scores, torch.Tensor) and scores.dim() == 4:
        return _("It handles 3-D scores but not 4-D ones: a mask viewed as [B, 1, S_k] lines up with "
                 "[B, S_q, S_k] only; 4-D scores [B, H, S_q, S_k] need [B, 1, 1, S_k] "
                 "(insert scores.dim() - 2 singleton axes after the batch axis).")
    return ""


def _check_padding_case(apply_padding_mask, scores: torch.Tensor, mask: torch.Tensor, label: str) -> None:
    original = scores.clone()
    out = apply_padding_mask(scores, mask)
    out = harness.expect_tensor(out, label)
    if out.dim() == scores.dim() + 1 and out.shape[1] == mask.shape[0]:
        raise AssertionError(_(
            "{case}: the output grew from {before} to {after}: your mask broadcast against "
            "the batch axis. Reshape [B, S_k] so that only the key axis lines up: [B, 1, S_k] for 3-D "
            "scores, [B, 1, 1, S_k] for 4-D scores"
        ).format(case=label, before=shape_of(scores), after=shape_of(out)))
    harness.expect_shape(out, scores.shape, label)
    # What the function returns is judged; filling the scores in place (masked_fill_) is fine here: the caller's
    # scores are a temporary the mask is meant to change, so they are compared with a copy taken before the call.
    scores = original
    keep = mask.reshape(mask.shape[0], *([1] * (scores.dim() - 2)), mask.shape[1]).expand_as(scores)
    if torch.isneginf(out[keep]).all() and not torch.isneginf(out[~keep]).any():
        raise AssertionError(_(
            "{case}: your function hides the real tokens and keeps the padding: the mask is inverted. "
            "In this course True means a real token (keep), so -inf goes where the mask is False"
        ).format(case=label))
    assert torch.isneginf(out[~keep]).all(), _("{case}: padded keys (mask False) must become -inf in every row").format(
        case=label)
    assert torch.equal(out[keep], scores[keep]), _(
        "{case}: scores of real tokens (mask True) changed: True means keep (did you invert the mask?)"
    ).format(case=label)


@harness.check("apply_padding_mask")
def check_apply_padding_mask(apply_padding_mask) -> None:
    apply_padding_mask = harness.watch(apply_padding_mask, "apply_padding_mask", _padding_advice)
    mask = torch.tensor([[True, True, True, False, False], [True, True, True, True, True], [True, False, False, False, False]])
    _check_padding_case(apply_padding_mask, torch.randn(3, 4, 5), mask, _("3-D scores [B=3, S_q=4, S_k=5]"))
    _check_padding_case(apply_padding_mask, torch.randn(3, 2, 4, 5), mask, _("4-D scores [B=3, H=2, S_q=4, S_k=5]"))
    ok(_("apply_padding_mask: -inf at padded keys for [B, S_q, S_k] and [B, H, S_q, S_k], shape unchanged"))


def _causal_advice(error: BaseException, args) -> str:
    """apply_causal_mask raised on non-square scores (the square ones ran first and passed): name the square mask."""
    scores = args[0] if args else None
    if isinstance(scores, torch.Tensor) and scores.dim() >= 2 and scores.shape[-2] != scores.shape[-1]:
        return _square_mask_advice()
    return ""


def _square_mask_advice() -> str:
    return _("Your mask is square, but scores [..., S_q, S_k] need not be: build it from both scores.shape[-2] "
             "(the S_q queries) and scores.shape[-1] (the S_k keys), e.g. torch.ones(S_q, S_k, dtype=torch.bool).triu(1).")


@harness.check("apply_causal_mask")
def check_apply_causal_mask(apply_causal_mask) -> None:
    apply_causal_mask = harness.watch(apply_causal_mask, "apply_causal_mask", _causal_advice)
    for shape in ([2, 5, 5], [2, 3, 5, 5], [2, 3, 5], [2, 5, 3]):  # square, then S_q != S_k
        scores = torch.randn(*shape)
        S_q, S_k = shape[-2:]
        out = harness.expect_shape(apply_causal_mask(scores), shape, _("apply_causal_mask on {shape}").format(shape=shape))
        future = torch.ones(S_q, S_k, dtype=torch.bool).triu(1).expand(*shape)
        if S_q != S_k and torch.equal(torch.isneginf(out), torch.ones(S_q, S_k, dtype=torch.bool).triu(S_k - S_q + 1).expand(*shape)):
            raise AssertionError(_(
                "{shape}: your mask is bottom-right aligned (query i sees keys j <= i + S_k - S_q, as in decoding with "
                "a cache): apply_causal_mask is top-left aligned, query i sees keys j <= i"
            ).format(shape=shape))
        assert torch.isneginf(out[future]).all(), _(
            "{shape}: some query still sees a future key (key j > query i must be -inf)"
        ).format(shape=shape)
        assert not torch.isneginf(out.diagonal(dim1=-2, dim2=-1)).any(), _(
            "{shape}: the diagonal is -inf, so no query sees its own position: mask only key j > query i, "
            "the strict upper triangle (triu with diagonal=1)"
        ).format(shape=shape)
        assert torch.equal(out[~future], scores[~future]), _("{shape}: scores of past and present keys must stay unchanged").format(
            shape=shape)
    ok(_("apply_causal_mask: no query sees a future key, for 3-D and 4-D scores, square or not (top-left aligned)"))
