"""Hidden checks for part scaled_scores: scaled_scores, attention_weights, attend."""
import math

import pytest
import torch

import solutions as ref
from autograder.foundation import i18n
from autograder.sandbox.batch import Call
from autograder.checks import expect
from autograder.checks.cases import Cases
from autograder.checks.self_attention.common import B, H, S, randn
from autograder.foundation.failures import StudentRaised

_ = i18n.message

TRANSPOSE_HINT = (_("transpose K with K.transpose(-2, -1) (or K.mT): K.transpose(1, 2) or K.permute(0, 2, 1) only "
                    "swap the right axes of a 3-D tensor"))
BMM_HINT = _("torch.bmm (d2l's DotProductAttention) takes 3-D tensors only; per-head inputs are 4-D "
             "[B, H, S, d]: use @ (torch.matmul), which works for any number of leading axes")


def value_4d(outcome, hint):
    """A 4-D call's value; when it raised from torch.bmm, the hint says so (else `hint`)."""
    try:
        return outcome.value
    except StudentRaised as exc:
        text = str(exc)
        return expect.value(outcome, hint=BMM_HINT if "bmm" in text or "3D tensor" in text else hint)


def _masked(scores):
    scores[:, :, -2:] = float("-inf")
    return scores


def _weights_and_values(g, lead):
    w = torch.softmax(randn(g, *lead, S, S + 1), -1)
    return Call("attend", w, randn(g, *lead, S + 1, 6))


# Every call of this part, in the order of the checks below: one round trip for all of them.
CALLS = Cases("scaled_scores", {
    "scores 3-D": lambda g: Call("scaled_scores", randn(g, B, S, 8), randn(g, B, S + 2, 8)),
    "scores 4-D": lambda g: Call("scaled_scores", randn(g, B, H, S, 4), randn(g, B, H, S + 1, 4)),
    "scores float64": lambda g: Call("scaled_scores", randn(g, B, S, 6, dtype=torch.float64),
                                     randn(g, B, S, 6, dtype=torch.float64)),
    "weights 3-D": lambda g: Call("attention_weights", randn(g, B, S, S + 2)),
    "weights 4-D": lambda g: Call("attention_weights", randn(g, B, H, S, S + 2)),
    "weights -inf": lambda g: Call("attention_weights", _masked(randn(g, B, S, S))),
    "weights large": lambda g: Call("attention_weights", randn(g, B, S, S) * 30 + 100),
    "attend 3-D": lambda g: _weights_and_values(g, (B,)),
    "attend 4-D": lambda g: _weights_and_values(g, (B, H)),
})


def score_mistakes(Q, K):
    d_k = Q.shape[-1]
    raw = Q @ K.transpose(-2, -1)
    return {
        _("you forgot to divide by sqrt(d_k)"): raw,
        _("you divided by d_k instead of sqrt(d_k)"): raw / d_k,
        _("you multiplied by sqrt(d_k) instead of dividing"): raw * math.sqrt(d_k),
        _("you scaled by sqrt(S), the sequence length; the scale is sqrt(d_k), the last dimension of Q "
          "and K"):
            raw / math.sqrt(K.shape[-2]),
    }


@pytest.mark.points(3)
def test_scores_match_reference_for_3d_inputs(student):
    """scaled_scores is Q K^T / sqrt(d_k) on [B, S, d_k] inputs"""
    call, outcome = CALLS.get(student, "scores 3-D")
    (Q, K), got = call.args, outcome.value
    expect.close(got, ref.scaled_scores(Q, K), "scaled_scores(Q, K)", mistakes=score_mistakes(Q, K),
                 shapes={(B, S + 2, S): _("the result must be [B, S_q, S_k]: Q @ K^T, not K @ Q^T")})


@pytest.mark.points(3)
def test_scores_match_reference_for_4d_inputs(student):
    """scaled_scores works on per-head [B, H, S, d_k] inputs"""
    call, outcome = CALLS.get(student, "scores 4-D")
    (Q, K), got = call.args, value_4d(outcome, TRANSPOSE_HINT)
    expect.close(got, ref.scaled_scores(Q, K), _("scaled_scores on 4-D inputs"), hint=TRANSPOSE_HINT,
                 mistakes=score_mistakes(Q, K))


@pytest.mark.points(1)
def test_scores_keep_float64(student):
    """scaled_scores keeps float64 inputs in float64"""
    call, outcome = CALLS.get(student, "scores float64")
    Q, K = call.args
    expect.close(outcome.value, ref.scaled_scores(Q, K), _("scaled_scores on float64 inputs"),
                 mistakes={**float32_scale_mistake(Q, K), **score_mistakes(Q, K)}, atol=1e-10, rtol=1e-8)


def float32_scale_mistake(Q, K):
    """The scale made in float32 (a blog idiom: torch.sqrt(torch.tensor(d_k, dtype=torch.float32))): the output is
    float64, but the constant carries float32's rounding, about 1e-7 of every score."""
    scale = torch.sqrt(torch.tensor(Q.shape[-1], dtype=torch.float32))
    return {_("the scale was made in float32 (such as torch.sqrt(torch.tensor(d_k, dtype=torch.float32))): the "
              "output is float64, but every score carries float32's rounding of sqrt(d_k), about 1e-7; divide by "
              "math.sqrt(d_k), a Python float, or make the constant in the inputs' dtype"):
            Q @ K.transpose(-2, -1) / scale}


def softmax_mistakes(scores):
    out = {}
    for dim in range(scores.dim() - 1):
        axis = _("query") if dim == scores.dim() - 2 else _("batch") if dim == 0 else _("head")
        out[_("your softmax runs over dim={dim} (the {axis} axis): it must run over the key dimension, dim=-1").format(dim=dim, axis=axis)] = \
            torch.softmax(scores, dim=dim)
    out[_("you did not normalise: softmax is exp(s) / sum over keys of exp(s)")] = scores.exp()
    return out


@pytest.mark.points(2)
@pytest.mark.parametrize("dims", [3, 4], ids=["3-D", "4-D"])
def test_weights_rows_sum_to_one(student, dims):
    """rows of the attention weights sum to 1 (softmax over the key dimension)"""
    call, outcome = CALLS.get(student, f"weights {dims}-D")
    [scores] = call.args
    got = expect.shape(outcome.value, scores.shape, "attention_weights")
    mistakes = softmax_mistakes(scores)
    sums = got.double().sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
        worst = sums.flatten()[(sums - 1).abs().flatten().nan_to_num(float("inf")).argmax()].item()
        hint = expect.diagnose(got, mistakes) or _("softmax must run over the key dimension, dim=-1")
        raise expect.CheckFailure(_("rows of your weights sum to {worst:.3g}, not 1: {hint}").format(worst=worst, hint=hint))
    expect.close(got, ref.attention_weights(scores), "attention_weights", mistakes=mistakes)


@pytest.mark.points(1)
def test_masked_scores_get_zero_weight(student):
    """a -inf score gets weight exactly 0, the others still sum to 1"""
    call, outcome = CALLS.get(student, "weights -inf")
    [scores] = call.args
    got = expect.shape(outcome.value, scores.shape, "attention_weights")
    if torch.isnan(got).any():
        raise expect.CheckFailure(_("your weights contain NaN where some scores are -inf: exp(-inf) is 0, so use torch.softmax (or "
                                    "subtract each row's max before exp)"))
    if (got[:, :, -2:] != 0).any():
        raise expect.CheckFailure(_("keys whose score is -inf got a weight that is not exactly 0"))
    expect.close(got, ref.attention_weights(scores), _("attention_weights with -inf scores"))


@pytest.mark.points(1)
def test_weights_stable_for_large_scores(student):
    """the softmax stays finite for large scores (e.g. 100)"""
    call, outcome = CALLS.get(student, "weights large")
    [scores] = call.args
    got = expect.shape(outcome.value, scores.shape, "attention_weights")
    if not torch.isfinite(got).all():
        raise expect.CheckFailure(_("your weights contain NaN or inf for scores around 100: exp overflows; use torch.softmax, or "
                                    "subtract each row's max before exp"))
    expect.close(got, ref.attention_weights(scores), _("attention_weights on large scores"))


@pytest.mark.points(2)
@pytest.mark.parametrize("dims", [3, 4], ids=["3-D", "4-D"])
def test_attend_is_weighted_sum_of_values(student, dims):
    """attend returns weights @ V: [..., S_q, S_k] x [..., S_k, d_v] -> [..., S_q, d_v]"""
    call, outcome = CALLS.get(student, f"attend {dims}-D")
    w, V = call.args
    got = value_4d(outcome, _("the weights [..., S_q, S_k] multiply V [..., S_k, d_v]: weights @ V"))
    expect.close(got, ref.attend(w, V), "attend(weights, V)",
                 mistakes={_("you normalised over the wrong axis: the weights are already a softmax, just take weights @ V"):
                           torch.softmax(w, -1) @ V})
