"""The visible checks of `positions` and `decoder` catch what the hidden grader catches, fairly.

Each wrong DecoderAttention or apply_rope below passed the visible checks before they compared with reference
values (the layer was compared only with itself): each must now fail with one sentence naming the mistake in the
student's terms, and the correct ones written differently must pass. The layers here are written from scratch, in
this module's namespace, as a student's notebook holds them: they call this module's apply_rope, repeat_kv and
decode_causal_mask, which the decoder's check replaces by its own while it runs (as the grader does), so that a
wrong piece costs once, in its own notebook, and is named in a note.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course.build import REPO
from tests import release_import


@pytest.fixture(scope="module")
def vc():
    return release_import.load(REPO / "course", "visible_checks_generation_under_test", "visible_checks_generation.py")


# --------------------------------------------------------------------------- #
# apply_rope, right and wrong
# --------------------------------------------------------------------------- #


def _rope(x, positions, base=10000.0, *, exponent=2.0, direction=1.0, use_base=True, rows=True):
    d = x.shape[-1]
    theta = (base if use_base else 10000.0) ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)
    if not rows:  # written for positions [S] only
        angle = direction * torch.outer(positions.double(), theta)  # [S, d/2]
    else:
        angle = direction * positions.double()[..., None] * theta  # [S, d/2] or [B, S, d/2]
    if positions.dim() == 2 and x.dim() == 4:
        angle = angle[:, None]
    a, b = x[..., 0::2].double(), x[..., 1::2].double()
    return torch.stack([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], -1).flatten(-2).to(x.dtype)


def rope_complex(x, positions, base=10000.0):
    """Right, written with complex numbers (Meta's form)."""
    d = x.shape[-1]
    angle = positions.float()[..., None] * base ** (-torch.arange(0, d, 2).float() / d)
    if angle.dim() == 3 and x.dim() == 4:
        angle = angle.unsqueeze(1)
    z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angle), angle)).flatten(-2).to(x.dtype)


def rope_matrix(x, positions, base=10000.0):
    """Right, written as one 2 x 2 rotation matrix per pair and position."""
    d = x.shape[-1]
    angle = positions.double()[..., None] * base ** (-torch.arange(0, d, 2).double() / d)
    c, s = angle.cos(), angle.sin()
    rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # [..., S, d/2, 2, 2]
    if rot.dim() == 5 and x.dim() == 4:
        rot = rot[:, None]
    pairs = x.double().unflatten(-1, (d // 2, 2))  # [..., S, d/2, 2]
    return (rot @ pairs[..., None]).squeeze(-1).flatten(-2).to(x.dtype)


ROPE_MISTAKES = {
    "ignores base": (lambda x, p, base=10000.0: _rope(x, p, base, use_base=False), "not the number 10000"),
    "positions [S] only": (lambda x, p, base=10000.0: _rope(x, p, base, rows=False), "one row per sequence"),
    "base^(-i/d)": (lambda x, p, base=10000.0: _rope(x, p, base, exponent=1.0), "that is base^(-i / head_dim)"),
    "other direction": (lambda x, p, base=10000.0: _rope(x, p, base, direction=-1.0), "turned the other way"),
    "no base argument": (lambda x, p: _rope(x, p), "takes the base as its third argument"),
}


@pytest.mark.parametrize("mistake", sorted(ROPE_MISTAKES))
def test_check_apply_rope_names_a_wrong_rope(vc, mistake):
    fn, needle = ROPE_MISTAKES[mistake]
    with pytest.raises(AssertionError) as info:
        vc.check_apply_rope(fn)
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("fn", [rope_complex, rope_matrix, _rope], ids=["complex", "matrix", "pairs"])
def test_check_apply_rope_passes_a_right_rope_written_differently(vc, capsys, fn):
    vc.check_apply_rope(fn)
    assert capsys.readouterr().out.startswith("✓")


# --------------------------------------------------------------------------- #
# DecoderAttention, right and wrong: the pieces it calls are this module's globals
# --------------------------------------------------------------------------- #


def apply_rope(x, positions, base=10000.0):
    return _rope(x, positions, base)


def decode_causal_mask(S_q, S_k):
    return torch.ones(S_q, S_k, dtype=torch.bool).tril(S_k - S_q)


def repeat_kv(x, n_rep):
    return x.repeat_interleave(n_rep, dim=1)


class Decoder(nn.Module):
    """A from-scratch DecoderAttention; each class attribute switched on is one mistake."""

    rope = "qk"  # "none", "qkv"
    scale = "head_dim"  # "none", "d_model"
    tiled = use_positions = use_base = True
    tiled = False
    keys_at = "positions"  # "places": keys cached before RoPE, all the cache returns rotated at arange(S_k);
    # "places when cached": so only with a cache (without one, the keys are rotated at the positions)

    def __init__(self, d_model, num_heads, num_kv_heads=None, rope_base=10000.0):
        super().__init__()
        self.H, self.H_kv = num_heads, num_kv_heads or num_heads
        self.hd, self.rope_base = d_model // num_heads, rope_base
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, self.H_kv * self.hd, bias=False)
        self.W_v = nn.Linear(d_model, self.H_kv * self.hd, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def rotate(self, t, positions):
        return apply_rope(t, positions, self.rope_base) if self.use_base else apply_rope(t, positions)

    def forward(self, x, cache=None, positions=None, key_mask=None):
        B, S, d = x.shape
        q = self.W_q(x).view(B, S, self.H, self.hd).transpose(1, 2)  # [B, H, S, hd]
        k = self.W_k(x).view(B, S, self.H_kv, self.hd).transpose(1, 2)  # [B, H_kv, S, hd]
        v = self.W_v(x).view(B, S, self.H_kv, self.hd).transpose(1, 2)
        start = len(cache) if cache is not None else 0
        if positions is None or not self.use_positions:
            positions = torch.arange(start, start + S)
        at_places = self.keys_at == "places" or (self.keys_at == "places when cached" and cache is not None)
        if self.rope != "none":
            q, k = self.rotate(q, positions), (k if at_places else self.rotate(k, positions))
        if self.rope == "qkv":
            v = self.rotate(v, positions)
        if cache is not None:
            k, v = cache.append(k, v)
        if at_places:
            k = self.rotate(k, torch.arange(k.shape[-2]))  # [B, H_kv, S_k, hd]: rotated at 0 .. S_k - 1
        n = self.H // self.H_kv
        k, v = (t.repeat(1, n, 1, 1) if self.tiled else repeat_kv(t, n) for t in (k, v))
        return self.W_o(self.attend(q, k, v, key_mask).transpose(1, 2).reshape(B, S, d))

    def attend(self, q, k, v, key_mask):
        allowed = decode_causal_mask(q.shape[-2], k.shape[-2])
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]
        factor = {"head_dim": self.hd, "none": 1, "d_model": self.H * self.hd}[self.scale] ** -0.5
        scores = (q @ k.transpose(-2, -1) * factor).masked_fill(~allowed, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


def _mistake(**flags):
    return type("Mistake", (Decoder,), flags)


class DecoderSDPA(Decoder):
    """Right, written differently: SDPA with a boolean mask built by comparing positions."""

    def attend(self, q, k, v, key_mask):
        S_q, S_k = q.shape[-2], k.shape[-2]
        allowed = torch.arange(S_k)[None, :] <= torch.arange(S_q)[:, None] + S_k - S_q
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


class DecoderLoop(Decoder):
    """Right, written differently: one query at a time."""

    def attend(self, q, k, v, key_mask):
        S_q, S_k = q.shape[-2], k.shape[-2]
        rows = []
        for i in range(S_q):
            scores = q[:, :, i:i + 1] @ k.transpose(-2, -1) / math.sqrt(self.hd)  # [B, H, 1, S_k]
            seen = torch.arange(S_k) <= i + S_k - S_q
            if key_mask is not None:
                seen = seen & key_mask[:, None, None, :]
            rows.append(torch.softmax(scores.masked_fill(~seen, float("-inf")), -1) @ v)
        return torch.cat(rows, dim=2)


class DecoderGQA(Decoder):
    """Right, written differently: no repeat_kv at all, SDPA groups the heads itself (enable_gqa=True)."""

    def forward(self, x, cache=None, positions=None, key_mask=None):
        B, S, d = x.shape
        q = self.W_q(x).view(B, S, self.H, self.hd).transpose(1, 2)  # [B, H, S, hd]
        k = self.W_k(x).view(B, S, self.H_kv, self.hd).transpose(1, 2)  # [B, H_kv, S, hd]
        v = self.W_v(x).view(B, S, self.H_kv, self.hd).transpose(1, 2)
        start = 0 if cache is None else len(cache)
        positions = torch.arange(start, start + S) if positions is None else positions
        q, k = apply_rope(q, positions, base=self.rope_base), apply_rope(k, positions, base=self.rope_base)
        if cache is not None:
            k, v = cache.append(k, v)
        allowed = decode_causal_mask(S, k.shape[2])
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)  # [B, H, S, hd]
        return self.W_o(out.transpose(1, 2).reshape(B, S, d))


DECODER_MISTAKES = {
    "no RoPE": (_mistake(rope="none"), "no RoPE"),
    "values rotated": (_mistake(rope="qkv"), "you rotated the values too"),
    "no 1/sqrt(head_dim)": (_mistake(scale="none"), "you did not scale the scores"),
    "1/sqrt(d_model)": (_mistake(scale="d_model"), "you scaled by sqrt(d_model)"),
    "kv heads tiled": (_mistake(tiled=True), "you tiled the key/value heads"),
    "positions ignored": (_mistake(use_positions=False), "the positions argument was ignored"),
    "rope_base ignored": (_mistake(use_base=False), "rope_base was ignored"),
    "keys cached unrotated, rotated at arange(S_k)": (_mistake(keys_at="places"),
                                                      "the queries were rotated at the positions given, the keys at "
                                                      "their places"),
    "keys cached unrotated with a cache only": (_mistake(keys_at="places when cached"),
                                                "received the keys before RoPE"),
}


@pytest.mark.parametrize("mistake", sorted(DECODER_MISTAKES))
def test_check_decoder_attention_names_a_wrong_layer(vc, mistake):
    cls, needle = DECODER_MISTAKES[mistake]
    with pytest.raises(AssertionError) as info:
        vc.check_decoder_attention(cls)
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("cls", [Decoder, DecoderSDPA, DecoderLoop, DecoderGQA],
                         ids=["plain", "sdpa", "per-query loop", "sdpa enable_gqa"])
def test_check_decoder_attention_passes_a_right_layer_written_differently(vc, capsys, cls):
    vc.check_decoder_attention(cls)
    out = capsys.readouterr().out
    assert out.startswith("✓") and len(out.splitlines()) == 1, out


def _tiled_repeat_kv(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)


def _stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("piece,wrong,needle", [
    ("repeat_kv", _tiled_repeat_kv, "your pasted repeat_kv gave other results"),
    ("apply_rope", ROPE_MISTAKES["ignores base"][0], "your pasted apply_rope gave other results"),
    ("apply_rope", _stub, "your apply_rope here is still a stub"),
])
def test_a_wrong_pasted_piece_costs_nothing_in_the_decoder_check_and_is_named_in_a_note(vc, capsys, monkeypatch,
                                                                                        piece, wrong, needle):
    """as in the grader (Part.borrows): the layer is judged with the check's pieces; the student's are named"""
    monkeypatch.setitem(globals(), piece, wrong)
    vc.check_decoder_attention(Decoder)
    out = capsys.readouterr().out
    assert out.startswith("✓") and needle in out.splitlines()[1], out
    assert globals()[piece] is wrong  # given back after the check


# --------------------------------------------------------------------------- #
# CachedSelfAttention (02_kv_cache), right and wrong: its causal mask after a cached prompt
# --------------------------------------------------------------------------- #


class KVCache:
    def __init__(self):
        self.k = self.v = None

    def append(self, k, v):
        self.k, self.v = (k, v) if self.k is None else (torch.cat([self.k, k], 2), torch.cat([self.v, v], 2))
        return self.k, self.v

    def __len__(self):
        return 0 if self.k is None else self.k.shape[2]


class Cached(nn.Module):
    """A from-scratch CachedSelfAttention; `mask` names how it masks the new queries (the contract: bottom-right)."""

    mask = "bottom-right"  # "is_causal=True", "is_causal=S_new > 1", "none after the prompt", "by positions"
    divide_by = "head_dim"  # what the scores are scaled by: "head_dim" (the contract), "d_model", "num_heads", "nothing"

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None):
        B, S_new, d = x.shape
        q, k, v = (t.view(B, S_new, self.num_heads, -1).transpose(1, 2) for t in self.W_qkv(x).chunk(3, -1))
        cached = 0 if cache is None else len(cache)
        if cache is not None:
            k, v = cache.append(k, v)  # [B, H, S_k, head_dim]
        S_k = k.shape[-2]
        if self.mask == "is_causal=True":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.mask == "is_causal=S_new > 1":  # Hugging Face's SDPA attention
            out = F.scaled_dot_product_attention(q, k, v, is_causal=S_new > 1)
        elif self.mask == "by positions":  # query at position cached + i sees the keys at positions <= it
            future = torch.arange(S_k)[None, :] > torch.arange(cached, cached + S_new)[:, None]  # [S_new, S_k]
            scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(future, float("-inf"))
            out = torch.softmax(scores, dim=-1) @ v
        else:
            allowed = decode_causal_mask(S_new, S_k)  # [S_new, S_k]
            if self.mask == "none after the prompt" and cached:
                allowed = torch.ones_like(allowed)
            size = {"head_dim": q.shape[-1], "d_model": d, "num_heads": self.num_heads, "nothing": 1}[self.divide_by]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=1 / math.sqrt(size))
        return self.W_o(out.transpose(1, 2).reshape(B, S_new, d))


CACHED_MISTAKES = {
    "is_causal=True": "top-left aligned (is_causal=True, or tril() of [S_new, S_k]), so one new token",
    "is_causal=S_new > 1": "is_causal=S_new > 1, Hugging Face's pattern",
    "none after the prompt": "no causal mask once the cache holds positions",
}


@pytest.mark.parametrize("mask", sorted(CACHED_MISTAKES))
def test_check_cached_self_attention_names_a_top_left_or_missing_mask_after_a_prompt(vc, mask):
    with pytest.raises(AssertionError) as info:
        vc.check_cached_self_attention(type("Mistake", (Cached,), {"mask": mask}), KVCache)
    assert CACHED_MISTAKES[mask] in str(info.value) and "\n" not in str(info.value), str(info.value)


WRONG_SCALES = {"d_model": "you scaled by sqrt(d_model) = sqrt(24)", "num_heads": "you scaled by sqrt(num_heads)",
                "nothing": "you did not scale the scores"}


@pytest.mark.parametrize("divide_by", sorted(WRONG_SCALES))
def test_check_cached_self_attention_names_a_scale_other_than_sqrt_head_dim(vc, divide_by):
    with pytest.raises(AssertionError) as info:
        vc.check_cached_self_attention(type("Mistake", (Cached,), {"divide_by": divide_by}), KVCache)
    assert WRONG_SCALES[divide_by] in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("mask", ["bottom-right", "by positions"])
def test_check_cached_self_attention_passes_a_bottom_right_mask_written_differently(vc, capsys, mask):
    vc.check_cached_self_attention(type("Right", (Cached,), {"mask": mask}), KVCache)
    assert capsys.readouterr().out.startswith("✓")
