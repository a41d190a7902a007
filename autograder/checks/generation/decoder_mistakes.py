"""The mistakes and conventions the checks of part decoder name (DecoderAttention).

Each mistake is a keyword set of decoder_variant (decoder_variants.py): a check whose output differs from the
reference compares it with each and names the one it matches. A *convention* is a difference the contract does
not share but public code follows (the half-split RoPE pairing of rotate_half code, another default base):
the part finds it once, on the full pass, grades every other check under it, and charges it in that one
check only, named (`convention_of`).
"""
from __future__ import annotations

import torch

from autograder.checks import expect
from autograder.checks.generation.common import BASE, ONLY_THEMSELVES, ROPE_HALF_SPLIT, TOP_LEFT, rope_differs
from autograder.checks.generation.decoder_variants import decoder_variant
from autograder.foundation import i18n

_ = i18n.message

PREFILL_ONLY_THEMSELVES = _("a chunk of several new tokens attends only to itself while single tokens read the cache "
                            "(a prefill branch taken whenever S_new > 1, also after a prompt): every call attends over "
                            "everything the cache returns, whatever S_new")


KEYS_AT_PLACES = _("the keys were rotated at their places in the cache, 0 .. S_k - 1, not at their positions (the "
                   "queries were): caching the keys before RoPE and rotating everything the cache returns with "
                   "arange(S_k) agrees only while the positions are 0, 1, 2, ..., not with positions given or a "
                   "left-padded batch: rotate the new keys at their own positions, as the queries, then append them "
                   "rotated (a cached key is never rotated again)")


def rope_base_default(base: float) -> i18n.Message:
    return _("rope_base defaults to {base:g} in your layer (Llama 3 uses 500000), where the contract's default is "
             "rope_base=10000.0").format(base=base)


# (what is said, decoder_variant's keywords), the first that the full pass matches is the layer's convention
CONVENTIONS = ((rope_differs(ROPE_HALF_SPLIT), {"pairs": "halves"}),
               *((rope_base_default(b), {"base": b}) for b in (500000.0, 100000.0, 1000000.0)),
               *((rope_differs(ROPE_HALF_SPLIT, rope_base_default(b)), {"pairs": "halves", "base": b})
                 for b in (500000.0, 100000.0, 1000000.0)))


def convention_of(got, w, x, chunks, heads: int, kv_heads: int):
    """(what is said, keywords) of the convention whose full pass `got` equals; None for the contract's or none."""
    if not isinstance(got, torch.Tensor) or got.shape != x.shape or got.dtype != x.dtype:
        return None
    if expect.same(got, decoder_variant(w, x, chunks, heads, kv_heads)):
        return None
    for said, keywords in CONVENTIONS:
        if expect.same(got, decoder_variant(w, x, chunks, heads, kv_heads, **keywords)):
            return said, keywords
    return None


def under(convention, variant: dict) -> dict:
    """The keywords of the expected output: the layer's convention, then what the check passes (rope_base)."""
    return {**(convention[1] if convention else {}), **variant}


def common_mistakes(v, d_model: int, head_dim: int):
    """The mistakes of the layer itself, any cache or none: v(**keywords) is the variant's output."""
    return {
        _("you rotated the keys only: RoPE rotates the queries AND the keys (apply_rope on both, at the same "
          "positions), so that their score depends on the distance between them"): v(rope_on="keys"),
        _("you rotated the queries only: RoPE rotates the queries AND the keys"): v(rope_on="queries"),
        _("no RoPE at all: rotate q and k with apply_rope(..., positions, base=self.rope_base) before the scores"):
            v(rope_on="none"),
        rope_differs(ROPE_HALF_SPLIT): v(pairs="halves"),
        _("you tiled the key/value heads (kv0, kv1, kv0, kv1, ...): repeat each one in place, as repeat_kv does, "
          "so that query heads h * n_rep ... (h + 1) * n_rep - 1 share kv head h"): v(tiled=True),
        _("the attention is not causal: a token must not see the tokens after it"): v(align="none"),
        _("you scaled by sqrt(d_model) = sqrt({d_model}); scale each head by sqrt(head_dim) = sqrt({head_dim})").format(
            d_model=d_model, head_dim=head_dim): v(scale=d_model ** -0.5),
        _("you did not scale the scores: divide by sqrt(head_dim)"): v(scale=1.0),
    }


def cached_mistakes(v):
    """The joint mistakes that show once a cache holds positions."""
    return {
        _("the new tokens were rotated from position 0: after a cache of n positions they are at positions n, n + 1, "
          "... (by default positions = len(cache) + arange(S_new), with len(cache) read BEFORE appending)"):
            v(offset="zero"),
        _("the keys returned by the cache were rotated again: the cache already holds rotated keys, so rotate only "
          "the new keys, once, before appending them"): v(rotate_again=True),
        TOP_LEFT: v(align="top_left"),
        ONLY_THEMSELVES: v(use_cache=False),
        PREFILL_ONLY_THEMSELVES: v(use_cache="chunks"),
    }


def mask_follows_positions(positions: torch.Tensor) -> i18n.Message:
    """gpt-fast's mask[positions] (a cache of one slot per position) in a cache that keeps keys in order, said with
    the first token whose position is not its place in the cache."""
    rows = [positions] if positions.dim() == 1 else list(positions)
    row = next((r for r in rows if r.tolist() != list(range(len(r)))), rows[0])
    i = max((i for i, p in enumerate(row.tolist()) if p != i), default=0)  # the last: a real token, when left-padded
    return _("your causal mask follows the positions (mask[positions], as gpt-fast's cache of one slot per position "
             "does), but the cache holds the keys in the order they came: with positions {positions}, token {i} "
             "(at position {p}) sees the keys j <= {p}, where it must see the keys 0 .. {i}: mask by the order in "
             "the cache, decode_causal_mask(S_new, S_k), whatever the positions").format(
        positions=row.tolist(), i=i, p=int(row[i]))


def variant_mistakes(variant: dict) -> dict:
    """The mistakes about the keywords a check passes: rope_base, positions, key_mask."""
    out = {}
    if "base" in variant:
        out[_("rope_base was ignored: rotate with apply_rope(..., base=self.rope_base), not the default 10000 "
              "(Llama 3 uses 500000)")] = {"base_used": BASE}
    if "positions" in variant:
        out[_("the positions argument was ignored: when it is given, rotate the new tokens at exactly those "
              "positions ([S_new], or [B, S_new] with one row per sequence)")] = {"use_positions": False}
        said = mask_follows_positions(variant["positions"])
        out[said] = {"mask_by": "positions"}
        out[KEYS_AT_PLACES] = {"keys_at": "places"}
        out[_("{mistake} (a query that sees no key then gets 0 from F.scaled_dot_product_attention)").format(
            mistake=said)] = {"mask_by": "positions", "empty_rows": "zero"}
    if "key_mask" in variant:
        out[_("key_mask was ignored: hide the padded keys, key_mask [B, S_k] (True = real token) over every cached "
              "and new position, as key_mask[:, None, None, :]")] = {"use_key_mask": False}
    return out
