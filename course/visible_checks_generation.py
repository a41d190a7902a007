"""Quick visible checks for the `generation` notebooks (pure torch, no solutions inside).

Each `check_*` function takes your function or class, runs it on small seeded inputs and
prints one "✓" line when the basic properties hold. When something is off it stops with one
AssertionError sentence that says what is wrong (when your own code raised, which line and
why); when you have not written the code yet it prints "<name>: not implemented yet".
Passing these checks is necessary, not sufficient: the hidden autograder runs many more cases.

`with uses_your_code():` wraps a demo cell that calls your functions: while one of them is
still a stub, the cell prints one line saying which, instead of stopping Run All.

`use_language("zh")` prints every message in Simplified Chinese (the Chinese edition's first
cell calls it); `use_language("en")` switches back. The machinery (one sentence per failure, your
own line, the language) is check_harness.py's.
"""
from __future__ import annotations

import math
import os

import torch
import torch.nn as nn
from check_harness import DOMAIN, LOCALES, Harness, NotReady, close, ok  # noqa: F401 - DOMAIN, LOCALES: for the tests
from visible_checks_decoder import cross_attention_checks, decoder_checks  # notebooks 03, 04: on this harness

__all__ = ["check_sinusoidal_positions", "check_apply_rope", "check_decode_causal_mask", "check_kv_cache",
           "check_cached_self_attention", "check_kv_cache_bytes", "check_repeat_kv", "check_cross_attention",
           "check_decoder_attention", "graded_part", "uses_your_code", "use_language"]

harness = Harness(__file__, os.path.join(os.path.dirname(os.path.abspath(__file__)), "visible_checks_decoder.py"))
_ = harness.gettext
use_language, uses_your_code = harness.use_language, harness.uses_your_code


def _linear(module, name: str, d_in: int, d_out: int, owner: str) -> None:
    layer = getattr(module, name, None)
    assert isinstance(layer, nn.Linear), _("{owner} needs a submodule {name} (an nn.Linear)").format(owner=owner, name=name)
    assert layer.bias is None, _("{owner}.{name} should have no bias (bias=False)").format(owner=owner, name=name)
    assert (layer.in_features, layer.out_features) == (d_in, d_out), _(
        "{owner}.{name} maps {fan_in} -> {fan_out} features, expected {want_in} -> {want_out}").format(
        owner=owner, name=name, fan_in=layer.in_features, fan_out=layer.out_features, want_in=d_in, want_out=d_out)


# --------------------------------------------------------------------------- #
# 01 positions
# --------------------------------------------------------------------------- #


@harness.check("sinusoidal_positions")
def check_sinusoidal_positions(sinusoidal_positions) -> None:
    pe = harness.expect_shape(sinusoidal_positions(6, 8), [6, 8], "sinusoidal_positions(6, 8)")
    assert pe.dtype == torch.float32, _("sinusoidal_positions should return float32, got {dtype}").format(dtype=pe.dtype)
    start = torch.tensor([0.0, 1.0] * 4)
    assert close(pe[0], start), _(
        "PE[0] is {row}: at position 0 every angle is 0, so the even features "
        "(sin) are 0 and the odd ones (cos) are 1").format(row=[round(v, 3) for v in pe[0].tolist()])
    assert close(pe[:, 0], torch.sin(torch.arange(6.0))), _(
        "feature 0 should be sin(p): pair i = 0 has the angle p / 10000^0 = p")
    assert close(pe[:, 1], torch.cos(torch.arange(6.0))), _("feature 1 should be cos(p), the same angle as feature 0")
    slowest = 5 / 10000 ** (6 / 8)
    assert math.isclose(pe[5, 6].item(), math.sin(slowest), abs_tol=1e-5), _(
        "PE[5, 6] should be sin(5 / 10000^(6 / 8)): pair i = 3 turns 10000^(6/8) = 1000 times slower than pair 0")
    far = sinusoidal_positions(4000, 8).double()  # a near-miss constant shows only at far positions
    angle = torch.arange(4000, dtype=torch.float64)[:, None] / 10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    gap = (far - torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(-2)).abs().max().item()
    assert gap < 5e-4, _(
        "sinusoidal_positions(4000, 8) differs from sin and cos of p / 10000^(2i / d_model) by up to {gap:.2g}: the "
        "base is exactly 10000 (a constant a little off shows at far positions)").format(gap=gap)
    ok(_("sinusoidal_positions: [6, 8] float32, sin on even and cos on odd features, slower pairs to the right"))


@harness.check("apply_rope")
def check_apply_rope(apply_rope) -> None:
    x = torch.randn(2, 3, 5, 8)
    out = harness.expect_shape(apply_rope(x, torch.arange(5)), x.shape, _("apply_rope(x [2, 3, 5, 8], positions 0..4)"))
    assert out.dtype == x.dtype, _("apply_rope should keep x's dtype {dtype}, got {got}").format(dtype=x.dtype, got=out.dtype)
    for half in (torch.float16, torch.bfloat16):  # the angles are float32 or float64: cast the result back
        got = apply_rope(x.to(half), torch.arange(5)).dtype
        assert got == half, _("apply_rope should keep x's dtype {dtype}, got {got}").format(dtype=half, got=got)
    assert close(out[:, :, 0], x[:, :, 0]), _("position 0 is a rotation by angle 0: row 0 of x must come out unchanged")
    pair_norms = (x[..., 0::2] ** 2 + x[..., 1::2] ** 2).sqrt()
    out_norms = (out[..., 0::2] ** 2 + out[..., 1::2] ** 2).sqrt()
    assert close(pair_norms, out_norms, 1e-4), _(
        "the length of each pair (x[2i], x[2i+1]) changed: this course pairs neighbouring features "
        "(x[..., 0::2] with x[..., 1::2]), not the half-split pairing (x[i], x[i + head_dim / 2]) of `rotate_half`; "
        "rotate each pair by the angle position * 10000^(-2i / head_dim)")
    row = torch.randn(1, 8)
    alone = apply_rope(row, torch.tensor([4]))
    among = apply_rope(row.expand(5, 8).contiguous(), torch.arange(5))[4:5]
    assert close(alone, among), _("apply_rope(row, positions=[4]) should rotate the row by position 4: use `positions`")
    q, k = torch.randn(1, 8), torch.randn(1, 8)

    def score(m, n):
        return (apply_rope(q, torch.tensor([m])) * apply_rope(k, torch.tensor([n]))).sum().item()

    near, far = score(3, 1), score(23, 21)
    assert math.isclose(near, far, rel_tol=1e-4, abs_tol=1e-4), _(
        "the score of (query at 3, key at 1) is {near:.4f} but of (query at 23, key at 21) is {far:.4f}: with RoPE "
        "it may depend only on the offset m - n").format(near=near, far=far)
    _rope_angles(apply_rope, 10000.0)
    _rope_angles(apply_rope, ROPE_BASE_CHECKED)
    _rope_per_sequence(apply_rope)
    ok(_("apply_rope: shape and dtype kept, pair lengths kept, score(3, 1) = score(23, 21) = {score:.4f}; the angles "
          "of base 10000 and base {base:g} at position {p}; positions [B, S], one row per sequence").format(
        score=near, base=ROPE_BASE_CHECKED, p=ROPE_POSITION))


ROPE_BASE_CHECKED = 50.0  # far from 10000, so that every pair's angle differs from the default's
ROPE_POSITION = 3  # every angle 3 * base^(-2i / 8) stays below pi, so atan2 reads it back without wrapping


def _rope_angles(apply_rope, base: float) -> None:
    """A vector (1, 0) in every pair, at position 3: pair i must come out as (cos t_i, sin t_i), t_i = 3 base^(-2i/8);
    the angles read back name a wrong exponent, a base ignored or the other direction."""
    unit = torch.zeros(1, 1, 1, 8)  # [B, H, S, head_dim]
    unit[..., 0::2] = 1.0
    where = torch.tensor([ROPE_POSITION])
    call = harness.watch(apply_rope, "apply_rope", lambda error, args: _(
        "apply_rope takes the base as its third argument: apply_rope(x, positions, base=10000.0)")
        if isinstance(error, TypeError) else "")
    out = call(unit, where) if base == 10000.0 else call(unit, where, base=base)
    out = harness.expect_shape(out, unit.shape, _("apply_rope(x [1, 1, 1, 8], positions=[3], base={base:g})").format(
        base=base)).double()[0, 0, 0]
    i = torch.arange(4, dtype=torch.float64)
    got = torch.atan2(out[1::2], out[0::2])  # [4]: the angle each pair turned by

    def angles(b, exponent):
        return ROPE_POSITION * b ** (-exponent * i / 8)

    want = angles(base, 2)
    if torch.allclose(got, want, atol=1e-4):
        return
    said = [round(a, 4) for a in got.tolist()]
    if torch.allclose(got, angles(base, 1), atol=1e-4):
        raise AssertionError(_("at position 3 with base {base:g} your pairs turned by {got} rad: that is base^(-i / "
                               "head_dim); pair i turns by position * base^(-2i / head_dim), i counting pairs").format(
            base=base, got=said))
    if base != 10000.0 and torch.allclose(got, angles(10000.0, 2), atol=1e-4):
        raise AssertionError(_("apply_rope(x, positions, base={base:g}) turned the pairs by the angles of base 10000: "
                               "use the `base` argument, not the number 10000").format(base=base))
    if torch.allclose(got, -want, atol=1e-4):
        raise AssertionError(_("your pairs turned the other way: (a, b) -> (a cos t - b sin t, a sin t + b cos t)"))
    raise AssertionError(_("at position 3 with base {base:g} the four pairs of (1, 0) turned by {got} rad, expected "
                           "{want} (t_i = position * base^(-2i / head_dim))").format(
        base=base, got=said, want=[round(a, 4) for a in want.tolist()]))


def _rope_per_sequence(apply_rope) -> None:
    """positions [B, S] with x [B, H, S, head_dim]: sequence b rotated at its own row of positions."""
    x = torch.randn(2, 3, 4, 8)  # [B, H, S, head_dim]
    per_row = torch.tensor([[0, 1, 2, 3], [5, 3, 9, 2]])  # [B, S]: neither a shift of the other nor sorted
    call = harness.watch(apply_rope, "apply_rope", lambda error, args: _(
        "positions may be [B, S], one row per sequence: the angles are then [B, S, head_dim / 2], and for x [B, H, "
        "S, head_dim] they need a head axis, angle[:, None]"))
    out = harness.expect_shape(call(x, per_row), x.shape, _("apply_rope(x [2, 3, 4, 8], positions [2, 4])"))
    for b in range(2):
        alone = apply_rope(x[b:b + 1], per_row[b])
        assert close(out[b:b + 1], alone, 1e-5), _(
            "with positions [B, S] = {rows}, sequence {b} is not rotated as apply_rope(x[{b}:{b1}], {row}) rotates it: "
            "row b of the positions belongs to sequence b, for every head").format(
            rows=per_row.tolist(), b=b, b1=b + 1, row=per_row[b].tolist())


# --------------------------------------------------------------------------- #
# 02 kv_cache
# --------------------------------------------------------------------------- #


@harness.check("decode_causal_mask")
def check_decode_causal_mask(decode_causal_mask) -> None:
    mask = harness.expect_shape(decode_causal_mask(2, 5), [2, 5], "decode_causal_mask(2, 5)")
    assert mask.dtype == torch.bool, _("the mask should be torch.bool, got {dtype}").format(dtype=mask.dtype)
    if mask.tolist() == torch.ones(2, 5, dtype=torch.bool).tril().tolist():
        raise AssertionError(_("query 0 sees only key 0 and query 1 keys 0 and 1: that is top-left alignment; the 2 "
                               "queries are the last positions (3 and 4 of 5), so query 0 sees keys 0..3"))
    assert mask[-1].all(), _("the last query is the newest position: it may see every key, so its row is all True")
    assert mask[0].tolist() == [True, True, True, True, False], _(
        "row 0 is {row}: query 0 is position 3 of 5, it sees keys 0..3 and not key 4").format(row=mask[0].int().tolist())
    square = harness.expect_shape(decode_causal_mask(4, 4), [4, 4], "decode_causal_mask(4, 4)")
    assert torch.equal(square, torch.ones(4, 4, dtype=torch.bool).tril()), _(
        "with S_q == S_k the mask should be the usual causal mask (lower triangle, diagonal included)")
    ok(_("decode_causal_mask: [S_q, S_k] bool, bottom-right aligned: the last query sees every key"))


@harness.check("KVCache")
def check_kv_cache(KVCache) -> None:
    cache = KVCache()
    assert len(cache) == 0, _("a new KVCache should hold 0 positions, len() gave {length}").format(length=len(cache))
    k1, v1 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)  # [B, H, S_new, head_dim]
    got = cache.append(k1, v1)
    assert isinstance(got, tuple) and len(got) == 2, _("append should return the tuple (k_all, v_all)")
    assert close(got[0], k1) and close(got[1], v1), _("the first append should return exactly the k and v it got")
    k2, v2 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 5)
    with harness.advice(_("The cache grows along the positions: append along dim=2 of [B, H, S, head_dim].")):
        k_all, v_all = cache.append(k2, v2)
    harness.expect_shape(k_all, [2, 3, 5, 5], _("the keys after appending 4 positions, then 1 (append along dim=2, the positions)"))
    assert close(k_all, torch.cat([k1, k2], 2)) and close(v_all, torch.cat([v1, v2], 2)), _(
        "append should return the cached keys/values followed by the new ones (old first)")
    assert len(cache) == 5, _("after 4 + 1 positions len(cache) should be 5, got {length}").format(length=len(cache))
    ok(_("KVCache: append concatenates along the positions and returns everything; len() counts positions"))


@harness.check("CachedSelfAttention")
def check_cached_self_attention(CachedSelfAttention, KVCache) -> None:
    module = CachedSelfAttention(16, 4)
    _linear(module, "W_qkv", 16, 48, "CachedSelfAttention")
    _linear(module, "W_o", 16, 16, "CachedSelfAttention")
    module.eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        full = harness.expect_shape(module(x), [2, 5, 16], "CachedSelfAttention(16, 4)(x [2, 5, 16])")
        changed = x.clone()
        changed[:, 3:] = 7.0
        assert close(module(changed)[:, :3], full[:, :3], 1e-5), _(
            "without a cache, forward must be causal: outputs 0..2 changed when only tokens 3 and 4 did")
    _scaled_by_head_dim(CachedSelfAttention)
    with torch.no_grad():
        try:
            cache = KVCache()
            len(cache)
        except NotImplementedError:
            raise NotReady(_("write KVCache first: this check decodes through a cache")) from None
        steps = [module(x[:, :3], cache), module(x[:, 3:4], cache), module(x[:, 4:5], cache)]
    decoded = torch.cat([harness.expect_shape(s, [2, n, 16], harness.ngettext(
                            "the output for {count} new token", "the output for {count} new tokens", n).format(count=n))
                         for s, n in zip(steps, (3, 1, 1))], dim=1)
    gap = (decoded - full).abs().max().item()
    if gap >= 1e-5 and close(decoded.double(), _cached_outputs(module, x, (3, 1, 1), 4, "top_left"), 1e-4):
        raise AssertionError(_(
            "a prompt of 3 tokens, then 2 tokens one at a time, differs from the full pass: your causal mask is top-left "
            "aligned (is_causal=True, or tril() of [S_new, S_k]), so one new token after 3 cached positions sees only "
            "key 0; the new queries are the last positions: attn_mask=decode_causal_mask(S_new, S_k)"))
    assert gap < 1e-5, _(
        "a prompt of 3 tokens, then 2 tokens one at a time, differs from the full pass by up to {gap:.3g}: append "
        "the new keys and values first, then let the new queries (the last positions) attend over everything cached"
    ).format(gap=gap)
    assert len(cache) == 5, _("after 3 + 1 + 1 tokens the cache should hold 5 positions, it holds {length}").format(
        length=len(cache))
    with torch.no_grad():
        cache = KVCache()
        chunked = [module(x[:, :2], cache), module(x[:, 2:5], cache)]
    chunked = torch.cat([harness.expect_shape(s, [2, n, 16], harness.ngettext(
                             "the output for {count} new token", "the output for {count} new tokens", n).format(count=n))
                         for s, n in zip(chunked, (2, 3))], dim=1)
    _chunk_equals_full_pass(module, x, chunked, full)
    ok(_("CachedSelfAttention: causal; a prompt of 3 then 2 tokens one at a time, and a prompt of 2 then 3 tokens at "
          "once, equal the full pass (largest difference {gap:.1e})").format(gap=max(gap, (chunked - full).abs().max().item())))


def _scaled_by_head_dim(CachedSelfAttention) -> None:
    """A layer of 24 = 4 heads x 6 (so that sqrt(head_dim), sqrt(num_heads) and sqrt(d_model) all differ), without a
    cache, against attention computed from its own W_qkv and W_o: a scale other than sqrt(head_dim) is named."""
    module, x = CachedSelfAttention(24, 4), torch.randn(2, 5, 24)
    _linear(module, "W_qkv", 24, 72, "CachedSelfAttention")
    _linear(module, "W_o", 24, 24, "CachedSelfAttention")
    with torch.no_grad():
        got = harness.expect_shape(module.eval()(x), [2, 5, 24], "CachedSelfAttention(24, 4)(x [2, 5, 24])").double()
    for scale, mistake in ((math.sqrt(24), _("you scaled by sqrt(d_model) = sqrt(24)")),
                           (math.sqrt(4), _("you scaled by sqrt(num_heads) = sqrt(4)")),
                           (1.0, _("you did not scale the scores"))):
        assert not close(got, _cached_outputs(module, x, (5,), 4, "bottom_right", scale=scale), 1e-4), _(
            "CachedSelfAttention(24, 4): {mistake}: scale each head's scores q k^T by 1 / sqrt(head_dim) = 1 / sqrt(6)"
        ).format(mistake=mistake)
    gap = (got - _cached_outputs(module, x, (5,), 4, "bottom_right")).abs().max().item()
    assert gap < 1e-4, _(
        "CachedSelfAttention(24, 4) without a cache differs by up to {gap:.3g} from causal attention computed from its "
        "own W_qkv (rows: q, then k, then v; each split into heads of head_dim = 6) and W_o").format(gap=gap)


def _cached_outputs(module, x: torch.Tensor, chunks, heads: int, align: str, scale: float | None = None) -> torch.Tensor:
    """CachedSelfAttention's outputs for x [B, S, d_model] fed in `chunks`, from its own W_qkv (rows q, k, v) and W_o,
    in float64, each chunk's causal mask aligned `align`: "bottom_right" (the contract), "top_left" (is_causal=True:
    tril() of [S_new, S_k]) or "none" once the cache holds positions; scores divided by `scale` (sqrt(head_dim))."""
    B, S, d = x.shape
    qkv = x.double() @ module.W_qkv.weight.double().T  # [B, S, 3 * d_model]
    q, k, v = (t.view(B, S, heads, d // heads).transpose(1, 2) for t in qkv.chunk(3, dim=-1))  # [B, H, S, head_dim]
    outs, start = [], 0
    for n in chunks:
        stop = start + n
        shift = {"bottom_right": start, "top_left": 0, "none": stop if start else 0}[align]
        allowed = torch.ones(n, stop, dtype=torch.bool).tril(shift)  # [S_new, S_k]
        scores = q[:, :, start:stop] @ k[:, :, :stop].transpose(-2, -1) / (scale or math.sqrt(d // heads))
        out = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v[:, :, :stop]  # [B, H, n, hd]
        outs.append(out.transpose(1, 2).reshape(B, n, d))
        start = stop
    return torch.cat(outs, dim=1) @ module.W_o.weight.double().T


def _chunk_equals_full_pass(module, x: torch.Tensor, chunked: torch.Tensor, full: torch.Tensor) -> None:
    """A prompt of 2 tokens, then 3 at once (S_new = 3 < S_k = 5), equals the full pass; if not, the mask is named."""
    if close(chunked, full, 1e-5):
        return
    if close(chunked.double(), _cached_outputs(module, x, (2, 3), 4, "top_left"), 1e-4):
        raise AssertionError(_(
            "a prompt of 2 tokens, then 3 at once, differs from the full pass: with 3 new queries and 5 keys your causal "
            "mask is top-left aligned, as is_causal=True (or is_causal=S_new > 1, Hugging Face's pattern) and tril() "
            "of [S_new, S_k] align it, so the new queries lose keys they may see; they are the last 3 positions: query "
            "i sees the keys j <= i + (S_k - S_new), attn_mask=decode_causal_mask(S_new, S_k)"))
    if close(chunked.double(), _cached_outputs(module, x, (2, 3), 4, "none"), 1e-4):
        raise AssertionError(_(
            "a prompt of 2 tokens, then 3 at once, differs from the full pass: after the prompt the 3 new tokens saw "
            "each other's future (no causal mask once the cache holds positions); one new token needs no mask, "
            "several do: decode_causal_mask(S_new, S_k)"))
    raise AssertionError(_(
        "a prompt of 2 tokens, then 3 at once, differs from the full pass by up to {gap:.3g}: the 3 new queries are the "
        "last positions; each sees the cached keys and the new keys up to itself (decode_causal_mask(S_new, S_k), "
        "bottom-right aligned)").format(gap=(chunked - full).abs().max().item()))


@harness.check("kv_cache_bytes")
def check_kv_cache_bytes(kv_cache_bytes) -> None:
    got = kv_cache_bytes(1, 1, 1, 1, 1)
    assert got == 4, (_("one key and one value of one float16 number take 2 x 2 = 4 bytes, got {got!r}: count the values too")
                      if got == 2 else _("one key and one value of one float16 number take 2 x 2 = 4 bytes, got {got!r}")
                      ).format(got=got)
    got = kv_cache_bytes(2, 3, 4, 8, 10, torch.float32)
    assert got == 2 * 2 * 3 * 4 * 8 * 10 * 4, _(
        "kv_cache_bytes(2, 3, 4, 8, 10, torch.float32) should be 2 x 2 x 3 x 4 x 8 x 10 x 4 bytes = 15360, got {got!r}"
    ).format(got=got)
    assert isinstance(got, int), _("return a Python int (a number of bytes), got {type}").format(type=type(got).__name__)
    ok(_("kv_cache_bytes: 2 (keys and values) x batch x layers x kv_heads x head_dim x seq_len x bytes per element"))


@harness.check("repeat_kv")
def check_repeat_kv(repeat_kv) -> None:
    x = torch.arange(3.0).reshape(1, 3, 1, 1).expand(1, 3, 2, 4).contiguous()  # head h is filled with h
    out = harness.expect_shape(repeat_kv(x, 2), [1, 6, 2, 4], "repeat_kv(x [1, 3, 2, 4], n_rep=2)")
    heads = [int(out[0, h, 0, 0].item()) for h in range(6)]
    if heads == [0, 1, 2, 0, 1, 2]:
        raise AssertionError(_("the heads come out as kv 0, 1, 2, 0, 1, 2 (tiled): repeat each head in place, "
                               "0, 0, 1, 1, 2, 2, so that query heads 0 and 1 share kv head 0"))
    assert heads == [0, 0, 1, 1, 2, 2], _("query heads 0..5 got kv heads {heads}, expected [0, 0, 1, 1, 2, 2]").format(heads=heads)
    assert torch.equal(repeat_kv(x, 1), x), _("with n_rep=1 repeat_kv should return the heads unchanged")
    ok(_("repeat_kv: [1, 3, 2, 4] -> [1, 6, 2, 4], query heads 2h and 2h+1 share kv head h"))


# --------------------------------------------------------------------------- #
# 03 cross_attention
# --------------------------------------------------------------------------- #


# Its check lives in visible_checks_decoder.py, built on this harness (it compares the layer with attention computed
# from its own weights).
check_cross_attention = cross_attention_checks(harness, close, ok, _linear)


# --------------------------------------------------------------------------- #
# 04 decoder (its checks live in visible_checks_decoder.py, built on this harness)
# --------------------------------------------------------------------------- #

check_decoder_attention = decoder_checks(harness, close, ok, _linear)


# --------------------------------------------------------------------------- #
# Graded cells
# --------------------------------------------------------------------------- #


# The check cells above each graded cell, which nbgrader's Validate runs again (see graded_cells.py;
# tests/test_validate.py keeps this table equal to the notebooks' check cells).
PART_CHECKS = {
    "positions": ("check_sinusoidal_positions(sinusoidal_positions)", "check_apply_rope(apply_rope)"),
    "kv_cache": (
        "check_decode_causal_mask(decode_causal_mask)", "check_kv_cache(KVCache)",
        "check_cached_self_attention(CachedSelfAttention, KVCache)", "check_kv_cache_bytes(kv_cache_bytes)",
        "check_repeat_kv(repeat_kv)",
    ),
    "cross_attention": ("check_cross_attention(CrossAttention)",),
    "decoder": ("check_decoder_attention(DecoderAttention)",),
}


# The notebook of each part (the command that grades one notebook names it).
PART_NOTEBOOKS = {"positions": "01_positions", "kv_cache": "02_kv_cache", "cross_attention": "03_cross_attention",
                  "decoder": "04_decoder"}


graded_part = harness.graded_part(
    PART_CHECKS, globals(), ".venv/bin/python -m autograder grade workspace/generation{suffix}/{notebook}.ipynb",
    PART_NOTEBOOKS)
