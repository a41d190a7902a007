"""Hidden checks for part scaled_scores: scaled_scores, attention_weights, attend."""
import math

import pytest
import torch

import solutions as ref
from autograder.checks.common import B, H, S, randn
from autograder.checks import expect


@pytest.mark.points(2)
def test_scores_match_reference_for_3d_inputs(student, gen):
    """scaled_scores is Q K^T / sqrt(d_k) on [B, S, d_k] inputs"""
    Q, K = randn(gen, B, S, 8), randn(gen, B, S + 1, 8)
    got = student.call("scaled_scores", Q, K)
    want = ref.scaled_scores(Q, K)
    hint = ""
    if isinstance(got, torch.Tensor) and got.shape == want.shape:
        if torch.allclose(got, want * math.sqrt(8), atol=1e-4):
            hint = "you forgot to divide by sqrt(d_k)"
        elif torch.allclose(got, want / math.sqrt(8), atol=1e-4):
            hint = "you divided by d_k instead of sqrt(d_k)"
    expect.close(got, want, "scaled_scores(Q, K)", hint)


@pytest.mark.points(2)
def test_scores_match_reference_for_4d_inputs(student, gen):
    """scaled_scores works on per-head [B, H, S, d_k] inputs"""
    Q, K = randn(gen, B, H, S, 4), randn(gen, B, H, S, 4)
    got = student.call("scaled_scores", Q, K)
    hint = "use K.transpose(-2, -1): K.transpose(1, 2) swaps the wrong axes of a 4-D tensor"
    expect.close(got, ref.scaled_scores(Q, K), "scaled_scores on 4-D inputs", hint)


def test_weights_rows_sum_to_one(student, gen):
    """rows of the attention weights sum to 1 (softmax over the key dimension)"""
    scores = randn(gen, B, S, S + 2)
    got = expect.shape(student.call("attention_weights", scores), scores.shape, "attention_weights")
    sums = got.sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
        worst = sums[(sums - 1).abs().argmax() // sums.shape[-1] if sums.dim() > 1 else 0].max().item()
        raise expect.CheckFailure(f"rows of your weights sum to {worst:.3g}: softmax must run over the key "
                                  "dimension, dim=-1")
    expect.close(got, ref.attention_weights(scores), "attention_weights")


def test_attend_is_weighted_sum_of_values(student, gen):
    """attend returns weights @ V"""
    w = torch.softmax(randn(gen, B, H, S, S + 1), -1)
    V = randn(gen, B, H, S + 1, 6)
    expect.close(student.call("attend", w, V), ref.attend(w, V), "attend(weights, V)")
