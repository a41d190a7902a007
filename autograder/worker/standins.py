"""Modules the grader builds inside the worker for the parts that take a module as input.

`to_official` and `parity_error` receive a `SelfAttention`. Their score must not depend
on the student's own `SelfAttention` (that is the `module` part), so the grader hands
them this stand-in: the same submodules (W_q, W_k, W_v, W_o, dropout), a correct
forward, and deliberately broken variants that a parity check must catch.
Nothing here is secret: it is ordinary attention, written with torch's fused kernel.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

_sdpa = None


def use_originals(original) -> None:
    """Take the unwatched fused kernel, so stand-ins never count as the student's calls."""
    global _sdpa
    _sdpa = original(torch.nn.functional, "scaled_dot_product_attention")


class StandInSelfAttention(nn.Module):
    VARIANTS = ("correct", "no_scale", "softmax_over_queries", "ignores_mask", "no_output_projection")

    def __init__(self, d_model: int, variant: str = "correct", dropout: float = 0.0):
        super().__init__()
        if variant not in self.VARIANTS:
            raise ValueError(f"unknown variant {variant}")
        self.variant = variant
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None, causal=False):
        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)  # [B, S, d]
        if self.variant == "correct" and not self.training:
            allowed = None if mask is None else mask[:, None, :]  # [B, 1, S]
            out = _sdpa(Q, K, V, attn_mask=allowed, is_causal=causal and mask is None)
            if causal and mask is not None:
                S = x.shape[1]
                allowed = allowed & torch.ones(S, S, dtype=torch.bool, device=x.device).tril()
                out = _sdpa(Q, K, V, attn_mask=allowed)
            return self.W_o(out)
        scale = 1.0 if self.variant == "no_scale" else 1 / math.sqrt(Q.shape[-1])
        scores = Q @ K.transpose(-2, -1) * scale  # [B, S, S]
        if mask is not None and self.variant != "ignores_mask":
            scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        if causal:
            S = x.shape[1]
            scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        dim = -2 if self.variant == "softmax_over_queries" else -1
        out = self.dropout(torch.softmax(scores, dim=dim)) @ V
        return out if self.variant == "no_output_projection" else self.W_o(out)


def attention_standin(d_model: int, variant: str = "correct", dropout: float = 0.0) -> StandInSelfAttention:
    return StandInSelfAttention(d_model, variant, dropout)


def linear(d_in: int, d_out: int, bias: bool = False) -> nn.Linear:
    """A plain nn.Linear for checks that need a layer which is not the student's (its weights are set after)."""
    return nn.Linear(d_in, d_out, bias=bias)


class RecordingCache:
    """A KV cache that keeps a copy of everything appended to it, so that a check can see what a decoder caches
    (rotated or not, how many heads). It may start with cached keys and values (a prompt the check computed)."""

    def __init__(self, k=None, v=None):
        self.k, self.v = k, v
        self.appended = []

    def append(self, k, v):
        self.appended.append((k.detach().clone(), v.detach().clone()))
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], dim=-2), torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def record(self):
        """Every (k, v) appended so far, in order."""
        return list(self.appended)


def recording_cache(k=None, v=None) -> RecordingCache:
    return RecordingCache(k, v)
