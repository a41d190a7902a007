"""Quick visible checks for the `generation` notebooks (pure torch, no solutions inside).

Each `check_*` function takes your function or class, runs it on small seeded inputs and
prints one "✓" line when the basic properties hold. When something is off it stops with one
AssertionError sentence that says what is wrong (when your own code raised, which line and
why); when you have not written the code yet it prints "<name>: not implemented yet".
Passing these checks is necessary, not sufficient: the hidden autograder runs many more cases.

`with uses_your_code():` wraps a demo cell that calls your functions: while one of them is
still a stub, the cell prints one line saying which, instead of stopping Run All.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sysconfig
import traceback

import torch
import torch.nn as nn
from graded_cells import graded_part_function  # next to this file in the assignment's folder

__all__ = [
    "check_sinusoidal_positions", "check_apply_rope",
    "check_decode_causal_mask", "check_kv_cache", "check_cached_self_attention", "check_kv_cache_bytes",
    "check_repeat_kv",
    "check_cross_attention",
    "graded_part", "uses_your_code", "use_language",
]


_LANGUAGES = ("en", "zh")


def use_language(lang: str) -> None:
    """Choose the language of the checks' messages; the Chinese edition's setup cell calls use_language("zh").
    (A placeholder that only validates the choice: the messages' catalogs come with the translated checks.)"""
    if lang not in _LANGUAGES:
        raise ValueError(f"use_language: unknown language {lang!r}; choose one of {', '.join(_LANGUAGES)}")


_HERE = os.path.abspath(__file__)
_LIBRARIES = tuple({os.path.join(os.path.abspath(sysconfig.get_paths()[key]), "")
                    for key in ("stdlib", "platstdlib", "purelib", "platlib")}
                   | {os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__))), "")})


class _NotReady(Exception):
    """Something the check needs (another of your functions) is not written yet."""


def _yours(filename: str) -> bool:
    """A notebook cell or a file of yours: not this file, not torch, not the standard library."""
    path = os.path.abspath(filename)
    return not filename.startswith("<frozen") and path != _HERE and not path.startswith(_LIBRARIES)


def _your_frames(error: BaseException) -> list:
    return [f for f in traceback.extract_tb(error.__traceback__) if _yours(f.filename)]


def _stub_name(error: NotImplementedError) -> str:
    """The function or class of yours that raised ('KVCache' for its __init__), or ''."""
    tb, name = error.__traceback__, ""
    while tb is not None:
        code = tb.tb_frame.f_code
        if _yours(code.co_filename):
            name = getattr(code, "co_qualname", code.co_name).removesuffix(".__init__")
        tb = tb.tb_next
    return name


def _sentence(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else "(no message)"


def _plain(message: str) -> AssertionError:
    """One AssertionError whose notebook rendering is that sentence alone (IPython calls
    `_render_traceback_` when an exception has it; elsewhere the attribute is ignored)."""
    failure = AssertionError(message)
    failure._render_traceback_ = lambda: [f"AssertionError: {message}"]
    return failure


def _friendly(label: str):
    """Run a check: a stub gives one line; any failure ends in one plain AssertionError sentence."""

    def wrap(check):
        @functools.wraps(check)
        def run(*args, **kwargs):
            __tracebackhide__ = True  # pytest and IPython leave this frame out
            try:
                with torch.random.fork_rng():
                    torch.manual_seed(1234)
                    check(*args, **kwargs)
            except NotImplementedError as error:
                if not _your_frames(error):
                    raise _plain(f"the check of `{label}` stopped: {_sentence(error)}.") from None
                print(f"{label}: not implemented yet (replace the `raise NotImplementedError` with your code)")
            except _NotReady as why:
                print(f"{label}: {why}")
            except Exception as error:  # noqa: BLE001 - every failure becomes one sentence
                frames = _your_frames(error)
                if isinstance(error, AssertionError) and not frames:
                    raise _plain(str(error)) from None
                if frames:
                    line = (frames[-1].line or "").strip()
                    where = f" in the line `{line}`" if line else ""
                    advice = f" {error.check_advice}" if hasattr(error, "check_advice") else ""
                    raise _plain(f"your `{label}` raised {type(error).__name__}{where}: {_sentence(error)}.{advice}"
                                 ) from None
                raise _plain(f"the check of `{label}` could not use what your code returned "
                             f"({type(error).__name__}: {_sentence(error)}).") from None

        return run

    return wrap


@contextlib.contextmanager
def _advice(sentence: str):
    """An error your code raises inside this block is reported with this sentence after it."""
    try:
        yield
    except (NotImplementedError, _NotReady, AssertionError):
        raise
    except Exception as error:  # annotated, then passed on to _friendly
        error.check_advice = sentence
        raise


@contextlib.contextmanager
def uses_your_code():
    """`with uses_your_code():` around a demo: while a function it calls is a stub, print one line instead of an error."""
    try:
        yield
    except NotImplementedError as error:
        name = _stub_name(error)
        if not name:
            raise
        print(f"This demo needs your `{name}`, which is not implemented yet: fill it in above, then run this cell "
              "again.")


def _ok(message: str) -> None:
    print(f"✓ {message}")


def _shape(t) -> str:
    return str(list(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _tensor(value, shape, what: str) -> torch.Tensor:
    assert isinstance(value, torch.Tensor), f"{what} should be a torch.Tensor, got {type(value).__name__}"
    assert list(value.shape) == list(shape), f"{what} has shape {_shape(value)}, expected {list(shape)}"
    return value


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=tol, rtol=tol)


def _linear(module, name: str, d_in: int, d_out: int, owner: str) -> None:
    layer = getattr(module, name, None)
    assert isinstance(layer, nn.Linear), f"{owner} needs a submodule {name} (an nn.Linear)"
    assert layer.bias is None, f"{owner}.{name} should have no bias (bias=False)"
    assert (layer.in_features, layer.out_features) == (d_in, d_out), (
        f"{owner}.{name} maps {layer.in_features} -> {layer.out_features} features, expected {d_in} -> {d_out}")


# --------------------------------------------------------------------------- #
# 01 positions
# --------------------------------------------------------------------------- #


@_friendly("sinusoidal_positions")
def check_sinusoidal_positions(sinusoidal_positions) -> None:
    pe = _tensor(sinusoidal_positions(6, 8), [6, 8], "sinusoidal_positions(6, 8)")
    assert pe.dtype == torch.float32, f"sinusoidal_positions should return float32, got {pe.dtype}"
    start = torch.tensor([0.0, 1.0] * 4)
    assert _close(pe[0], start), (
        f"PE[0] is {[round(v, 3) for v in pe[0].tolist()]}: at position 0 every angle is 0, so the even features "
        "(sin) are 0 and the odd ones (cos) are 1")
    assert _close(pe[:, 0], torch.sin(torch.arange(6.0))), (
        "feature 0 should be sin(p): pair i = 0 has the angle p / 10000^0 = p")
    assert _close(pe[:, 1], torch.cos(torch.arange(6.0))), "feature 1 should be cos(p), the same angle as feature 0"
    slowest = 5 / 10000 ** (6 / 8)
    assert math.isclose(pe[5, 6].item(), math.sin(slowest), abs_tol=1e-5), (
        "PE[5, 6] should be sin(5 / 10000^(6 / 8)): pair i = 3 turns 10000^(6/8) = 1000 times slower than pair 0")
    _ok("sinusoidal_positions: [6, 8] float32, sin on even and cos on odd features, slower pairs to the right")


@_friendly("apply_rope")
def check_apply_rope(apply_rope) -> None:
    x = torch.randn(2, 3, 5, 8)
    out = _tensor(apply_rope(x, torch.arange(5)), x.shape, "apply_rope(x [2, 3, 5, 8], positions 0..4)")
    assert out.dtype == x.dtype, f"apply_rope should keep x's dtype {x.dtype}, got {out.dtype}"
    assert _close(out[:, :, 0], x[:, :, 0]), "position 0 is a rotation by angle 0: row 0 of x must come out unchanged"
    pair_norms = (x[..., 0::2] ** 2 + x[..., 1::2] ** 2).sqrt()
    out_norms = (out[..., 0::2] ** 2 + out[..., 1::2] ** 2).sqrt()
    assert _close(pair_norms, out_norms, 1e-4), (
        "the length of each pair (x[2i], x[2i+1]) changed: rotate neighbouring features together "
        "(x[..., 0::2] with x[..., 1::2]), by the angle position * 10000^(-2i / head_dim)")
    row = torch.randn(1, 8)
    alone = apply_rope(row, torch.tensor([4]))
    among = apply_rope(row.expand(5, 8).contiguous(), torch.arange(5))[4:5]
    assert _close(alone, among), "apply_rope(row, positions=[4]) should rotate the row by position 4: use `positions`"
    q, k = torch.randn(1, 8), torch.randn(1, 8)

    def score(m, n):
        return (apply_rope(q, torch.tensor([m])) * apply_rope(k, torch.tensor([n]))).sum().item()

    near, far = score(3, 1), score(23, 21)
    assert math.isclose(near, far, rel_tol=1e-4, abs_tol=1e-4), (
        f"the score of (query at 3, key at 1) is {near:.4f} but of (query at 23, key at 21) is {far:.4f}: with RoPE "
        "it may depend only on the offset m - n")
    _ok(f"apply_rope: shape and dtype kept, pair lengths kept, score(3, 1) = score(23, 21) = {near:.4f}")


# --------------------------------------------------------------------------- #
# 02 kv_cache
# --------------------------------------------------------------------------- #


@_friendly("decode_causal_mask")
def check_decode_causal_mask(decode_causal_mask) -> None:
    mask = _tensor(decode_causal_mask(2, 5), [2, 5], "decode_causal_mask(2, 5)")
    assert mask.dtype == torch.bool, f"the mask should be torch.bool, got {mask.dtype}"
    if mask.tolist() == torch.ones(2, 5, dtype=torch.bool).tril().tolist():
        raise AssertionError("query 0 sees only key 0 and query 1 keys 0 and 1: that is top-left alignment; the 2 "
                             "queries are the last positions (3 and 4 of 5), so query 0 sees keys 0..3")
    assert mask[-1].all(), "the last query is the newest position: it may see every key, so its row is all True"
    assert mask[0].tolist() == [True, True, True, True, False], (
        f"row 0 is {mask[0].int().tolist()}: query 0 is position 3 of 5, it sees keys 0..3 and not key 4")
    square = _tensor(decode_causal_mask(4, 4), [4, 4], "decode_causal_mask(4, 4)")
    assert torch.equal(square, torch.ones(4, 4, dtype=torch.bool).tril()), (
        "with S_q == S_k the mask should be the usual causal mask (lower triangle, diagonal included)")
    _ok("decode_causal_mask: [S_q, S_k] bool, bottom-right aligned: the last query sees every key")


@_friendly("KVCache")
def check_kv_cache(KVCache) -> None:
    cache = KVCache()
    assert len(cache) == 0, f"a new KVCache should hold 0 positions, len() gave {len(cache)}"
    k1, v1 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)  # [B, H, S_new, head_dim]
    got = cache.append(k1, v1)
    assert isinstance(got, tuple) and len(got) == 2, "append should return the tuple (k_all, v_all)"
    assert _close(got[0], k1) and _close(got[1], v1), "the first append should return exactly the k and v it got"
    k2, v2 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 5)
    with _advice("The cache grows along the positions: append along dim=2 of [B, H, S, head_dim]."):
        k_all, v_all = cache.append(k2, v2)
    _tensor(k_all, [2, 3, 5, 5], "the keys after appending 4 positions, then 1 (append along dim=2, the positions)")
    assert _close(k_all, torch.cat([k1, k2], 2)) and _close(v_all, torch.cat([v1, v2], 2)), (
        "append should return the cached keys/values followed by the new ones (old first)")
    assert len(cache) == 5, f"after 4 + 1 positions len(cache) should be 5, got {len(cache)}"
    _ok("KVCache: append concatenates along the positions and returns everything; len() counts positions")


@_friendly("CachedSelfAttention")
def check_cached_self_attention(CachedSelfAttention, KVCache) -> None:
    module = CachedSelfAttention(16, 4)
    _linear(module, "W_qkv", 16, 48, "CachedSelfAttention")
    _linear(module, "W_o", 16, 16, "CachedSelfAttention")
    module.eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        full = _tensor(module(x), [2, 5, 16], "CachedSelfAttention(16, 4)(x [2, 5, 16])")
        changed = x.clone()
        changed[:, 3:] = 7.0
        assert _close(module(changed)[:, :3], full[:, :3], 1e-5), (
            "without a cache, forward must be causal: outputs 0..2 changed when only tokens 3 and 4 did")
        try:
            cache = KVCache()
            len(cache)
        except NotImplementedError:
            raise _NotReady("write KVCache first: this check decodes through a cache") from None
        steps = [module(x[:, :3], cache), module(x[:, 3:4], cache), module(x[:, 4:5], cache)]
    decoded = torch.cat([_tensor(s, [2, n, 16], f"the output for {n} new token{'s' if n > 1 else ''}")
                         for s, n in zip(steps, (3, 1, 1))], dim=1)
    gap = (decoded - full).abs().max().item()
    assert gap < 1e-5, (
        f"a prompt of 3 tokens, then 2 tokens one at a time, differs from the full pass by up to {gap:.3g}: append "
        "the new keys and values first, then let the new queries (the last positions) attend over everything cached")
    assert len(cache) == 5, f"after 3 + 1 + 1 tokens the cache should hold 5 positions, it holds {len(cache)}"
    _ok(f"CachedSelfAttention: causal, and a prompt of 3 then 2 tokens one at a time equals the full pass "
        f"(largest difference {gap:.1e})")


@_friendly("kv_cache_bytes")
def check_kv_cache_bytes(kv_cache_bytes) -> None:
    got = kv_cache_bytes(1, 1, 1, 1, 1)
    assert got == 4, (f"one key and one value of one float16 number take 2 x 2 = 4 bytes, got {got!r}"
                      + (": count the values too" if got == 2 else ""))
    got = kv_cache_bytes(2, 3, 4, 8, 10, torch.float32)
    assert got == 2 * 2 * 3 * 4 * 8 * 10 * 4, (
        f"kv_cache_bytes(2, 3, 4, 8, 10, torch.float32) should be 2 x 2 x 3 x 4 x 8 x 10 x 4 bytes = 15360, got {got!r}")
    assert isinstance(got, int), f"return a Python int (a number of bytes), got {type(got).__name__}"
    _ok("kv_cache_bytes: 2 (keys and values) x batch x layers x kv_heads x head_dim x seq_len x bytes per element")


@_friendly("repeat_kv")
def check_repeat_kv(repeat_kv) -> None:
    x = torch.arange(3.0).reshape(1, 3, 1, 1).expand(1, 3, 2, 4).contiguous()  # head h is filled with h
    out = _tensor(repeat_kv(x, 2), [1, 6, 2, 4], "repeat_kv(x [1, 3, 2, 4], n_rep=2)")
    heads = [int(out[0, h, 0, 0].item()) for h in range(6)]
    if heads == [0, 1, 2, 0, 1, 2]:
        raise AssertionError("the heads come out as kv 0, 1, 2, 0, 1, 2 (tiled): repeat each head in place, "
                             "0, 0, 1, 1, 2, 2, so that query heads 0 and 1 share kv head 0")
    assert heads == [0, 0, 1, 1, 2, 2], f"query heads 0..5 got kv heads {heads}, expected [0, 0, 1, 1, 2, 2]"
    assert torch.equal(repeat_kv(x, 1), x), "with n_rep=1 repeat_kv should return the heads unchanged"
    _ok("repeat_kv: [1, 3, 2, 4] -> [1, 6, 2, 4], query heads 2h and 2h+1 share kv head h")


# --------------------------------------------------------------------------- #
# 03 cross_attention
# --------------------------------------------------------------------------- #


@_friendly("CrossAttention")
def check_cross_attention(CrossAttention) -> None:
    module = CrossAttention(16, 4, d_context=6)
    for name, d_in in (("W_q", 16), ("W_k", 6), ("W_v", 6), ("W_o", 16)):
        _linear(module, name, d_in, 16, "CrossAttention(16, 4, d_context=6)")
    default = CrossAttention(16, 4)
    _linear(default, "W_k", 16, 16, "CrossAttention(16, 4) (d_context defaults to d_model)")
    module.eval()
    x, context = torch.randn(2, 3, 16), torch.randn(2, 5, 6)
    keep = torch.tensor([[True] * 5, [True, True, False, False, False]])  # True = real context token
    with torch.no_grad():
        out = _tensor(module(x, context, keep), [2, 3, 16], "forward(x [2, 3, 16], context [2, 5, 6], context_mask)")
        assert torch.isfinite(out).all(), "the output contains NaN or inf (is the context mask inverted?)"
        padded = context.clone()
        padded[1, 2:] = 50.0  # only the padding of sample 1 changes
        assert _close(module(x, padded, keep), out), (
            "the output changed when only padded context tokens did: -inf where context_mask is False, "
            "as context_mask[:, None, None, :] against [B, H, S_q, S_k] scores")
        last = context.clone()
        last[0, 4] = 3.0  # the last real context token of sample 0
        assert not _close(module(x, last, keep)[0, 0], out[0, 0]), (
            "query 0 did not react to the last context token: cross-attention has no causal mask, every query "
            "sees the whole context")
    _ok("CrossAttention: W_q 16->16, W_k and W_v 6->16, W_o 16->16; [2, 3, 16] x context [2, 5, 6] -> [2, 3, 16]; "
        "padding ignored")


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
}


graded_part = graded_part_function(
    PART_CHECKS, globals(), ".venv/bin/python -m autograder grade <this notebook>.ipynb --assignment generation"
)
