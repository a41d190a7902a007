"""Shapes, seeded inputs and trusted re-computations shared by the hidden checks.

Shapes are chosen to expose bugs: B, H and S all different and above 1, S >= 3, so that
a transposed axis or a mask on the wrong axis cannot pass by accident; every sample of a
batch has its own length, so a mask broadcast over the wrong axis shows.

`attention(...)` recomputes attention in this trusted process, and its keyword arguments
reproduce the classic mistakes (no scale, softmax over queries, a mask on queries, ...):
a check compares the student's output with those to name the likely mistake.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from autograder.foundation import i18n

_ = i18n.message

B, H, S, D_MODEL = 2, 3, 5, 12
HEAD_DIM = D_MODEL // H  # 4
D_K, D_V = 8, 6  # d_k != d_v != d_model, so a width mix-up changes a shape or a scale
LENGTHS = (5, 3)  # one full sample, one padded one (right-padded, every length >= 1)
NEG_INF = float("-inf")


def randn(gen: torch.Generator, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


def lengths_mask(lengths=LENGTHS, seq_len: int = S) -> torch.Tensor:
    """[B, seq_len] bool, True = real token (the course's convention)."""
    return torch.arange(seq_len)[None, :] < torch.tensor(lengths)[:, None]


def key_mask(mask: torch.Tensor, dims: int, on: str = "keys") -> torch.Tensor:
    """A [B, S] mask shaped to broadcast against [B, S_q, S_k] (dims=3) or [B, H, S_q, S_k] (dims=4) scores."""
    Bm, Sm = mask.shape
    lead = [1] * (dims - 3)
    return mask.reshape(Bm, *lead, 1, Sm) if on == "keys" else mask.reshape(Bm, *lead, Sm, 1)


def future(S_q: int, S_k: int, diagonal: int = 1, transposed: bool = False) -> torch.Tensor:
    """True where a key must be hidden from a query (key j > query i for the correct mask)."""
    hide = torch.ones(S_q, S_k, dtype=torch.bool).triu(diagonal)
    return hide.T.contiguous() if transposed else hide


def mask_scores(scores, mask=None, causal=False, *, on="keys", invert=False, causal_diagonal=1,
                causal_transposed=False, fill=NEG_INF):
    if mask is not None:
        keep = key_mask(~mask if invert else mask, scores.dim(), on)
        scores = scores.masked_fill(~keep, fill)
    if causal:
        S_q, S_k = scores.shape[-2:]
        scores = scores.masked_fill(future(S_q, S_k, causal_diagonal, causal_transposed), fill)
    return scores


def attention(Q, K, V, mask=None, causal=False, *, scale=None, dim=-1, **mistakes):
    """softmax(Q K^T * scale + masks, dim) V; `mistakes` go to mask_scores."""
    scale = 1 / math.sqrt(Q.shape[-1]) if scale is None else scale
    scores = Q @ K.transpose(-2, -1) * scale
    scores = mask_scores(scores, mask, causal, **mistakes)
    return torch.softmax(scores, dim=dim) @ V


# timm's Attention (and other code built on F.scaled_dot_product_attention(..., is_causal=True)) drops the mask
IGNORED_WITH_CAUSAL = _("with causal=True your code ignores the padding mask (as timm's Attention does when is_causal "
                        "is set): padded keys were attended; hide them as well, both masks apply together")


def attention_mistakes(Q, K, V, mask=None, causal=False, d_model: int | None = None, what: str = "scores"):
    """{hint: () -> output} for the usual mistakes of an attention computation on these inputs (computed lazily)."""
    d = Q.shape[-1]

    def variant(m=mask, c=causal, **kw):
        return lambda: attention(Q, K, V, m, c, **kw)

    out = {
        _("you did not scale the {what}: divide by sqrt(d_k)").format(what=what): variant(scale=1.0),
        _("you divided the {what} by d_k instead of sqrt(d_k)").format(what=what): variant(scale=1 / d),
        _("the softmax runs over the query dimension: it must run over the keys, dim=-1"): variant(dim=-2),
    }
    if d_model is not None and d_model != d:
        out[_("you scaled by sqrt({d_model}) (d_model); scale by sqrt of the width of Q and K ({d}, the "
              "head_dim or d_k)").format(d_model=d_model, d=d)] = variant(scale=d_model ** -0.5)
    if mask is not None:
        out[_("your padding mask hides queries, not keys: padded positions must be masked along the last axis "
              "of the scores (mask[:, None, :] for [B, S, S], mask[:, None, None, :] for [B, H, S, S])")] = variant(on="queries")
        out[_("your padding mask is inverted: True marks a real token, so fill -inf where the mask is False "
              "(masked_fill(~mask, ...))")] = variant(invert=True)
        out[IGNORED_WITH_CAUSAL if causal else _("the padding mask is ignored: padded keys were attended")] = \
            variant(m=None)
    if causal:
        out[_("your causal mask hides the diagonal: a token may attend to itself (key j <= query i)")] = \
            variant(causal_diagonal=0)
        out[_("your causal mask is transposed: hide the keys after the query (the upper triangle, triu(1)), "
              "not the ones before it")] = variant(causal_transposed=True)
        out[_("the causal mask is ignored")] = variant(c=False)
    return out


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x @ weight.T


def module_forward(state: dict, x, mask=None, causal=False, **mistakes):
    """The reference SelfAttention forward from its state_dict, optionally with a mistake."""
    Q, K, V = (linear(x, state[f"W_{n}.weight"]) for n in "qkv")
    out = attention(Q, K, V, mask, causal, **mistakes)
    return linear(out, state["W_o.weight"])


def module_mistakes(state: dict, x, mask=None, causal=False, d_model: int | None = None):
    Q, K, V = (linear(x, state[f"W_{n}.weight"]) for n in "qkv")
    found = {hint: (lambda f=f: linear(f(), state["W_o.weight"]))
             for hint, f in attention_mistakes(Q, K, V, mask, causal, d_model).items()}
    found[_("you left out the output projection W_o")] = lambda: attention(Q, K, V, mask, causal)
    return found


def reference_module(cls, *args, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    module = cls(*args, **kwargs)
    module.eval()
    return module


def official_output(w_qkv, w_o, x, mask, causal):
    """nn.MultiheadAttention's output; mh_variant() without mistakes equals it (tests/test_checks_helpers.py), and
    is what the checks use, since nn.MultiheadAttention's first call costs seconds of imports."""
    mha = nn.MultiheadAttention(D_MODEL, H, dropout=0.0, bias=False, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(w_qkv)
        mha.out_proj.weight.copy_(w_o)
        attn_mask = torch.ones(S, S, dtype=torch.bool).triu(1) if causal else None  # True = may NOT attend
        return mha.eval()(x, x, x, key_padding_mask=None if mask is None else ~mask, attn_mask=attn_mask,
                          need_weights=False)[0]


def mh_variant(w_qkv, w_o, x, mask, causal, order=(0, 1, 2), split="ok", merge="ok", **mistakes):
    chunks = (x @ w_qkv.T).chunk(3, dim=-1)
    Q, K, V = (chunks[i] for i in order)
    if split == "ok":
        Q, K, V = (t.reshape(B, S, H, HEAD_DIM).transpose(1, 2) for t in (Q, K, V))
    else:
        Q, K, V = (t.reshape(B, H, S, HEAD_DIM) for t in (Q, K, V))
    out = attention(Q, K, V, mask, causal, **mistakes)  # [B, H, S, head_dim]
    out = out.transpose(1, 2).reshape(B, S, D_MODEL) if merge == "ok" else out.reshape(B, S, D_MODEL)
    return out @ w_o.T


def _pieces_inputs():
    """Each piece at every shape a borrowing part calls it with: [B, S, d] (SelfAttention), per head [B, H, S, d]
    (MultiHeadSelfAttention, chunked_attention: S_q != S_k), in float32 and float64 (B, H, S, d all different)."""
    g = torch.Generator().manual_seed(77)
    scores = torch.randn(2, 3, 5, generator=g)
    per_head = torch.randn(2, 3, 4, 6, generator=g, dtype=torch.float64)  # [B, H, S_q, S_k]
    return {
        "scaled_scores": [((torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)), {}),
                          ((torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 3, 6, 5, generator=g)), {}),
                          ((torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64),
                            torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64)), {})],
        "attention_weights": [((scores,), {}), ((per_head,), {})],
        "attend": [((torch.softmax(scores, -1), torch.randn(2, 5, 6, generator=g)), {}),
                   ((torch.softmax(per_head, -1), torch.randn(2, 3, 6, 5, generator=g, dtype=torch.float64)), {})],
        "padding_mask": [((torch.tensor([3, 5]), 5), {})],
        "causal_mask": [((4,), {})],
        "apply_padding_mask": [((scores, torch.tensor([[True] * 3 + [False] * 2, [True] * 5])), {}),
                               ((torch.randn(2, 2, 3, 5, generator=g), torch.tensor([[True] * 4 + [False], [True] * 5])),
                                {})],
        "apply_causal_mask": [((torch.randn(2, 4, 4, generator=g),), {}), ((torch.randn(2, 3, 4, 4, generator=g),), {})],
    }


# the student's own pieces next to a module, run before the grader's are lent (checks/lent.py): the part's note
PIECE_PROBES = _pieces_inputs()
