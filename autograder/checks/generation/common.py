"""Shapes, seeded inputs and trusted re-computations of the `generation` checks.

Shapes are chosen to expose bugs: B, H, S all different and above 1; S_q != S_k and
d_context != d_model in cross-attention; H_kv != H for grouped-query attention; positions
that are neither 0, 1, 2, ... nor sorted for RoPE. Each `*_variant` function recomputes a
result in this trusted process, and its keyword arguments reproduce a classic mistake
(half-split RoPE pairs, top-left causal alignment, keys from the queries' sequence, ...):
a check compares the student's output with those to name the likely mistake. Without
keywords each one equals the reference (tests/test_generation_checks_helpers.py).
"""
from __future__ import annotations

import math

import torch

from autograder.foundation import i18n

_ = i18n.message

B, H, S, D_MODEL = 2, 4, 6, 16
HEAD_DIM = D_MODEL // H  # 4
ROPE_DIM = 8  # four pairs, four different frequencies
S_Q, S_K, D_CONTEXT = 5, 7, 10  # cross-attention: queries, context tokens, context width
CONTEXT_LENGTHS = (7, 3)  # one full context, one padded one
BASE = 10000.0


def split(t: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, S, heads * hd] -> [B, heads, S, hd]"""
    Bt, St, width = t.shape
    return t.reshape(Bt, St, heads, width // heads).transpose(1, 2)


def merge(t: torch.Tensor) -> torch.Tensor:
    """[B, H, S, hd] -> [B, S, H * hd]"""
    Bt, Ht, St, hd = t.shape
    return t.transpose(1, 2).reshape(Bt, St, Ht * hd)


def lengths_mask(lengths=CONTEXT_LENGTHS, seq_len: int = S_K) -> torch.Tensor:
    """[B, seq_len] bool, True = real token."""
    return torch.arange(seq_len)[None, :] < torch.tensor(lengths)[:, None]


# --------------------------------------------------------------------------- #
# positions
# --------------------------------------------------------------------------- #


def sinusoidal_variant(seq_len: int, d_model: int, *, layout: str = "interleaved", swap: bool = False,
                       exponent: str = "2i", base: float = BASE) -> torch.Tensor:
    """PE [seq_len, d_model] float32. layout "halves": all sines, then all cosines; swap: cos on the even
    features; exponent "j": feature j uses 10000^(j / d) (odd features get their own angle); "i": the pair
    index without the factor 2."""
    p = torch.arange(seq_len, dtype=torch.float64)[:, None]  # [S, 1]
    i = torch.arange(d_model // 2, dtype=torch.float64)
    power = {"2i": 2 * i / d_model, "i": i / d_model}.get(exponent, 2 * i / d_model)
    even_angle = p / base ** power  # [S, d / 2]
    odd_angle = p / base ** ((2 * i + 1) / d_model) if exponent == "j" else even_angle
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    if layout == "halves":
        pe = torch.cat([first(even_angle), second(odd_angle)], dim=-1)
    else:
        pe = torch.stack([first(even_angle), second(odd_angle)], dim=-1).flatten(-2)
    return pe.float()


def rope_variant(x: torch.Tensor, positions: torch.Tensor, *, pairs: str = "interleaved", base: float = BASE,
                 direction: int = 1, exponent: str = "2i", use_positions: bool = True) -> torch.Tensor:
    """RoPE of x [..., S, d] at positions [S] or [B, S] (x [B, S, d] or [B, H, S, d]), in x's dtype. pairs "halves":
    (x[i], x[i + d/2]) as in rotate_half code; direction -1: rotated the other way; exponent "i": 10000^(-i / d)
    for pair i (the factor 2 forgotten); use_positions False: positions 0, 1, 2, ... whatever was passed."""
    d = x.shape[-1]
    work = x.double()
    pos = positions.double() if use_positions else torch.arange(x.shape[-2], dtype=torch.float64)
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = base ** (-(i if exponent == "i" else 2 * i) / d)
    angle = direction * pos[..., None] * theta  # [S, d / 2] or [B, S, d / 2]
    if pos.dim() == 2 and x.dim() == 4:
        angle = angle[:, None]  # [B, 1, S, d / 2]
    cos, sin = angle.cos(), angle.sin()
    if pairs == "halves":
        a, b = work[..., : d // 2], work[..., d // 2:]
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        a, b = work[..., 0::2], work[..., 1::2]
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return out.to(x.dtype)


# The ways a public RoPE may differ from the contract's, each named in a check's message by rope_differs.
ROPE_HALF_SPLIT = _("the half-split pairing (x[i], x[i + head_dim/2]) of rotate_half code, where the contract pairs "
                    "neighbours (x[2i], x[2i + 1]), as in x[..., 0::2] with x[..., 1::2]")
ROPE_DIRECTION = _("the other rotation direction: the contract rotates (a, b) -> (a cos t - b sin t, a sin t + b cos t)")
ROPE_BASE = _("base {base:g} (Llama 3 uses 500000, nanochat 100000), where the contract's default is base=10000.0: "
              "use the `base` argument")


def rope_differs(*differences: str) -> str:
    """"your RoPE differs from the contract's: a; b; c", in the student's language."""
    said = differences[0]
    for more in differences[1:]:
        said = _("{first}; {second}").format(first=said, second=more)
    return _("your RoPE differs from the contract's: {differences}").format(differences=said)


# --------------------------------------------------------------------------- #
# kv_cache
# --------------------------------------------------------------------------- #

# The mistakes of attention through a cache, named by the checks of kv_cache and of decoder
TOP_LEFT = _("your causal mask is top-left aligned (tril() of [S_q, S_k], or is_causal=True in "
             "F.scaled_dot_product_attention): the S_q new queries are the LAST S_q of the S_k positions, so "
             "query i may see keys j <= i + (S_k - S_q): decode_causal_mask(S_q, S_k), or "
             "torch.nn.attention.bias.causal_lower_right")
ONLY_THEMSELVES = _("the new tokens attend only to themselves: append their keys and values to the cache first and "
                    "attend over everything it returns")


def decode_variant(w_qkv: torch.Tensor, w_o: torch.Tensor, x: torch.Tensor, chunks, *, align: str = "bottom_right",
                   mask_cached: bool = True, use_cache: bool = True, diagonal: bool = True, scale: float | None = None,
                   order=(0, 1, 2), heads: int = H) -> torch.Tensor:
    """x [B, S, d] fed to a cached causal self-attention in chunks of the given sizes; the outputs, joined.

    align "top_left": each chunk's mask is tril() of [S_new, S_k] (is_causal=True in SDPA); "top_left_chunks":
    top-left for a chunk of several tokens only (HF's `is_causal = q_len > 1`); "none": no causal mask at all. mask_cached False: no mask once the cache holds something. use_cache False: each
    chunk attends to its own keys only. diagonal False: a token may not see itself."""
    blocks = (x @ w_qkv.T).chunk(3, dim=-1)
    q_all, k_all, v_all = (split(blocks[i], heads) for i in order)  # [B, H, S, hd]
    scale = 1 / math.sqrt(q_all.shape[-1]) if scale is None else scale
    outs, start = [], 0
    for n in chunks:
        stop = start + n
        lo = 0 if use_cache else start
        q, k, v = q_all[:, :, start:stop], k_all[:, :, lo:stop], v_all[:, :, lo:stop]
        S_k = stop - lo
        shift = {"bottom_right": S_k - n, "top_left": 0, "top_left_chunks": 0 if n > 1 else S_k - n}.get(align, S_k)
        allowed = torch.ones(n, S_k, dtype=torch.bool).tril(shift - (0 if diagonal else 1))
        if lo < start and not mask_cached:
            allowed = torch.ones(n, S_k, dtype=torch.bool)
        scores = (q @ k.transpose(-2, -1) * scale).masked_fill(~allowed, float("-inf"))
        outs.append(merge(torch.softmax(scores, dim=-1) @ v) @ w_o.T)
        start = stop
    return torch.cat(outs, dim=1)


# --------------------------------------------------------------------------- #
# cross_attention
# --------------------------------------------------------------------------- #


def cross_variant(w: dict, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None = None, *,
                  kv_from: str = "context", scale: float | None = None, dim: int = -1, mask_on: str = "keys",
                  invert: bool = False, causal: bool = False, swap_kv: bool = False, heads: int = H) -> torch.Tensor:
    """Cross-attention from x to context with the weights w (a state_dict of W_q, W_k, W_v, W_o).

    kv_from "x": keys and values projected from the queries' sequence; swap_kv: values from W_k and keys
    from W_v; mask_on "queries": the context mask hides query rows; invert: True taken as padding;
    causal: a decoder's causal mask where none belongs."""
    source = context if kv_from == "context" else x
    q = split(x @ w["W_q.weight"].T, heads)  # [B, H, S_q, hd]
    k = split(source @ w["W_k.weight"].T, heads)  # [B, H, S_k, hd]
    v = split(source @ w["W_v.weight"].T, heads)
    if swap_kv:
        k, v = v, k
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # [B, H, S_q, S_k]
    if mask is not None:
        keep = ~mask if invert else mask
        keep = keep[:, None, None, :] if mask_on == "keys" else keep[:, None, :, None]
        scores = scores.masked_fill(~keep, float("-inf"))
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return merge(torch.softmax(scores, dim=dim) @ v) @ w["W_o.weight"].T


# --------------------------------------------------------------------------- #
# heads over widths (kv_cache's module)
# --------------------------------------------------------------------------- #


# CachedSelfAttention's heads over widths, smallest first: (H, d_model); head_dim = d_model // H differs from H from the second on,
# so that heads and their width swapped, or a scale by the number of heads, shows
HEAD_SHAPES = ((1, 4), (2, 6), (3, 6), (2, 8), (4, 8), (3, 12), (2, 16))
HEADS_S = 3  # tokens per sequence in these cases (B sequences)


def heads_label(heads: int, d_model: int) -> str:
    return "H={H}, d_model={d} (head_dim {hd}), B={B}, S={S}".format(H=heads, d=d_model, hd=d_model // heads,
                                                                      B=B, S=HEADS_S)


def head_mistakes(w_qkv, w_o, x, heads: int) -> dict:
    """The mistakes a check of CachedSelfAttention(d_model, heads) names: heads and their width swapped, a scale by H."""
    head_dim = x.shape[-1] // heads
    return {
        _("you made head_dim = {hd} heads of width H = {H}: split each of q, k, v as .view(B, S, H, head_dim)"
          ".transpose(1, 2), the head axis before the width").format(hd=head_dim, H=heads):
            lambda: decode_variant(w_qkv, w_o, x, (HEADS_S,), heads=head_dim),
        _("you scaled by sqrt(H) = sqrt({H}), the number of heads: scale by sqrt(head_dim) = sqrt({hd}), "
          "the last axis of q").format(H=heads, hd=head_dim):
            lambda: decode_variant(w_qkv, w_o, x, (HEADS_S,), heads=heads, scale=heads ** -0.5),
    }
