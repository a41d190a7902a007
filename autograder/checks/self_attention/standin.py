"""The trusted side of the grader's stand-in SelfAttention (autograder/worker/standins.py): its forward.

`to_official` and `parity_error` receive a stand-in module, never the student's own class, so that their score does
not depend on the student's `SelfAttention` (part `module`). The stand-in in the worker holds the submodules and the
weights only; each call of its forward sends the variant, the weights and the inputs here (a "piece" message,
rules.STANDIN_FORWARD) and returns what this side computed: the correct attention, or one deliberately broken as a
parity check must catch. This side answers only in the part whose checks registered `answer` (official_parity,
session.Session.grader_objects): a student's `SelfAttention.forward` that runs a stand-in gets a refusal, so nothing
of the grader's computes a student's graded attention.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.sandbox import lender
from autograder.worker import wire

VARIANTS = ("correct", "no_scale", "softmax_over_queries", "ignores_mask", "no_output_projection")
MAX_SCORES = 2**22  # B * S * S: far more than a check hands the stand-in (the scores are computed here)
DROPOUT_SEED = 52


def forward(variant: str, training: bool, p: float, W_q, W_k, W_v, W_o, x, mask=None, causal=False) -> torch.Tensor:
    """The stand-in's output for x [B, S, d] (mask [B, S], True = a real key), from its weights [d, d]."""
    if variant not in VARIANTS or not isinstance(training, bool) or not isinstance(causal, bool):
        raise TypeError("the stand-in's forward(x, mask=None, causal=False) was called with other arguments")
    if not all(isinstance(w, torch.Tensor) and w.is_floating_point() and w.dim() == 2 and w.shape == W_q.shape
               and w.shape[0] == w.shape[1] for w in (W_q, W_k, W_v, W_o)):
        raise TypeError("the stand-in's weights are not four [d_model, d_model] matrices")
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or not x.is_floating_point() or x.shape[-1] != W_q.shape[1]:
        raise TypeError(f"x must be a float tensor [B, S, {W_q.shape[1]}]")
    B, S, _ = x.shape
    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != (B, S)):
        raise TypeError(f"mask must be a bool tensor [B, S] = [{B}, {S}]")
    if B * S * S > MAX_SCORES:
        raise ValueError(f"refused {B} x {S} x {S} scores, far more than a check here needs")
    Q, K, V = (x @ w.to(x.dtype).T for w in (W_q, W_k, W_v))
    out = attention(variant, training, float(p), Q, K, V, mask, causal)
    return out if variant == "no_output_projection" else out @ W_o.to(x.dtype).T


def attention(variant: str, training: bool, p: float, Q, K, V, mask, causal: bool) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d)) V with the padding mask and the causal mask, as the variant breaks it; in training,
    dropout p on the weights (seeded: the same call gives the same output)."""
    if variant == "correct" and not training:
        allowed = None if mask is None else mask[:, None, :]  # [B, 1, S]
        if causal:
            S = Q.shape[1]
            future = torch.ones(S, S, dtype=torch.bool).tril()
            allowed = future if allowed is None else allowed & future
        return F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed)
    scale = 1.0 if variant == "no_scale" else 1 / math.sqrt(Q.shape[-1])
    scores = Q @ K.transpose(-2, -1) * scale  # [B, S, S]
    if mask is not None and variant != "ignores_mask":
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    if causal:
        S = Q.shape[1]
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    weights = torch.softmax(scores, dim=-2 if variant == "softmax_over_queries" else -1)
    if training and p > 0:
        keep = torch.rand(weights.shape, generator=torch.Generator().manual_seed(DROPOUT_SEED)) >= p
        weights = weights * keep / (1 - p)
    return weights @ V


def answer(message: dict) -> dict:
    """The trusted side's answer to one call of the stand-in's forward: {"ok": True, "value": ...} or a refusal."""
    try:
        args, kwargs = lender.arguments(message)
        with torch.no_grad():
            return {"ok": True, "value": wire.encode(forward(*args, **kwargs))}
    except wire.Refused as exc:
        return lender.refusal("TypeError", "refused its arguments: " + str(exc).replace("returned", "passed"))
    except (TypeError, ValueError, RuntimeError, IndexError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return lender.refusal(type(exc).__name__, wire.clean_text(first, 300))


def serve(session, part_id: str) -> None:
    """From now on, the stand-in's forward is answered while `part_id` is graded (and only then)."""
    session.grader_objects[part_id] = answer
