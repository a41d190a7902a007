"""The trusted re-computation of part decoder (DecoderAttention), with the joint mistakes as keywords.

`decoder_variant` feeds x [B, S, d_model] to a Llama-style attention layer in chunks (a prompt, then
new tokens) through a cache, exactly as the reference does, and returns the outputs joined. Each
keyword reproduces a mistake that lives where the pieces meet (the new token rotated at position 0,
the cached keys rotated again, top-left causal alignment, the key mask ignored, ...), so that a
check can name the mistake whose output the student's matches. Without keywords it equals
solutions.generation.DecoderAttention (tests/test_generation_checks_helpers.py).
"""
from __future__ import annotations

import math

import torch

from autograder.checks.generation.common import BASE, rope_variant, split

def repeat(t: torch.Tensor, n_rep: int, tiled: bool = False) -> torch.Tensor:
    """[B, H_kv, S, d] -> [B, H_kv * n_rep, S, d]: each head in place (kv0, kv0, kv1, ...), or tiled (kv0, kv1, kv0, ...)."""
    return t.repeat(1, n_rep, 1, 1) if tiled else t.repeat_interleave(n_rep, dim=1)


def project(w: dict, x: torch.Tensor, heads: int, kv_heads: int):
    """q [B, H, S, hd], k and v [B, H_kv, S, hd] of x, in float64."""
    x = x.double()
    q = split(x @ w["W_q.weight"].double().T, heads)
    k = split(x @ w["W_k.weight"].double().T, kv_heads)
    v = split(x @ w["W_v.weight"].double().T, kv_heads)
    return q, k, v


def causal(n: int, S_k: int, align: str) -> torch.Tensor:
    """[n, S_k] True = may attend: the n queries are the last n positions (bottom_right), or tril() (top_left)."""
    shift = {"bottom_right": S_k - n, "top_left": 0}.get(align, S_k)
    return torch.ones(n, S_k, dtype=torch.bool).tril(shift)


def chunk_positions(start: int, n: int, positions, B: int, offset: str, use_positions: bool) -> torch.Tensor:
    """The positions a chunk's tokens are rotated at: the given ones, else len(cache) + arange (offset "zero": 0, 1, ...)."""
    if positions is not None and use_positions:
        return positions[..., start:start + n]
    first = start if offset == "cache" else 0
    pos = torch.arange(first, first + n)
    return pos if positions is None else pos.expand(B, n)


def decoder_variant(w: dict, x: torch.Tensor, chunks, heads: int, kv_heads: int, *, base: float = BASE,
                    positions: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                    offset: str = "cache", rotate_again: bool = False, align: str = "bottom_right",
                    use_key_mask: bool = True, rope_on: str = "both", base_used: float | None = None,
                    pairs: str = "interleaved", tiled: bool = False, use_positions: bool = True,
                    use_cache: bool | str = True, scale: float | None = None, mask_by: str = "order",
                    empty_rows: str = "nan", keys_at: str = "positions") -> torch.Tensor:
    """x [B, S, d_model] fed in `chunks` through a cache; the outputs joined [B, S, d_model], in x's dtype.

    positions [B, S] / key_mask [B, S]: over the whole sequence (each call gets its slice of positions and the
    key mask up to its last token). Mistakes: offset "zero": each call's tokens rotated from position 0;
    rotate_again: the keys the cache returns rotated once more at 0 .. S_k - 1; align "top_left" / "none";
    use_key_mask False; rope_on "keys" / "queries" / "none"; base_used: the base actually used; pairs
    "halves"; tiled: kv heads tiled; use_positions False: the positions argument ignored (len(cache) + arange);
    use_cache False: each call attends to its own tokens only; "chunks": a call of several tokens does (a prefill
    branch), a single token reads the cache; mask_by "positions": query i sees the keys j <= its position, j counted
    in the cache's order (gpt-fast's mask[positions]); empty_rows "zero": a query that sees no key gets 0, as
    F.scaled_dot_product_attention gives it (not NaN); keys_at "places": the keys cached before RoPE and everything
    the cache returns rotated at its place 0 .. S_k - 1 (blog code: right only while the positions are 0, 1, 2, ...)."""
    B, S, d_model = x.shape
    head_dim = d_model // heads
    base = base if base_used is None else base_used
    q_all, k_all, v_all = project(w, x, heads, kv_heads)
    scale = 1 / math.sqrt(head_dim) if scale is None else scale
    cached_k, cached_v, outs, start = [], [], [], 0
    for n in chunks:
        stop = start + n
        pos = chunk_positions(start, n, positions, B, offset, use_positions)
        q, k, v = q_all[:, :, start:stop], k_all[:, :, start:stop], v_all[:, :, start:stop]
        if rope_on in ("both", "queries"):
            q = rope_variant(q, pos, base=base, pairs=pairs)
        if rope_on in ("both", "keys") and keys_at == "positions":
            k = rope_variant(k, pos, base=base, pairs=pairs)
        own = use_cache is False or (use_cache == "chunks" and n > 1)  # attends to this call's tokens only
        cached_k, cached_v = cached_k + [k], cached_v + [v]
        K, V = (k, v) if own else (torch.cat(cached_k, dim=-2), torch.cat(cached_v, dim=-2))  # [B, H_kv, S_k, hd]
        S_k = K.shape[-2]
        if rotate_again or keys_at == "places":
            K = rope_variant(K, torch.arange(S_k), base=base, pairs=pairs)
        K, V = repeat(K, heads // kv_heads, tiled), repeat(V, heads // kv_heads, tiled)
        allowed = causal(n, S_k, align)  # [n, S_k]
        if mask_by == "positions":
            allowed = torch.arange(S_k) <= pos[..., None]  # [n, S_k] or [B, n, S_k]
            allowed = allowed if allowed.dim() == 2 else allowed[:, None]
        if key_mask is not None and use_key_mask:
            keys = key_mask[:, start:stop] if own else key_mask[:, :stop]
            allowed = allowed & keys[:, None, None, :]  # [B, 1, n, S_k]
        scores = (q @ K.transpose(-2, -1) * scale).masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights.nan_to_num(0.0) if empty_rows == "zero" else weights) @ V  # [B, H, n, hd]
        outs.append(out.transpose(1, 2).reshape(B, n, d_model) @ w["W_o.weight"].double().T)
        start = stop
    return torch.cat(outs, dim=1).to(x.dtype)


def rotated_keys(w: dict, x: torch.Tensor, heads: int, kv_heads: int, positions: torch.Tensor,
                 base: float = BASE, rotate: bool = True, repeated: bool = False, pairs: str = "interleaved",
                 **_other) -> torch.Tensor:
    """The keys a decoder appends for the tokens x at `positions`: [B, H_kv, S, hd] rotated (rotate False: not
    rotated; repeated: already repeated to H heads; pairs "halves": the half-split pairing), in x's dtype. Other
    keywords of decoder_variant (a convention's) are ignored."""
    _, k, _ = project(w, x, heads, kv_heads)
    k = rope_variant(k, positions, base=base, pairs=pairs) if rotate else k
    return (repeat(k, heads // kv_heads) if repeated else k).to(x.dtype)


def left_padded(lengths, S: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The key mask [B, S] of left-padded sequences of `lengths` (True = real token) and their positions
    cumsum - 1 (0 at the first real token; padding at 0)."""
    mask = torch.arange(S)[None, :] >= (S - torch.tensor(lengths))[:, None]  # [B, S]
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, S]
    return mask, positions
