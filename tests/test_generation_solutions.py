"""The reference of the second assignment (solutions/generation.py) agrees with PyTorch and with its spec.

Positions against independent formulas (RoPE as complex multiplication, as in Meta's LLaMA code),
the decoding mask against absolute positions (and, in the executed 02_kv_cache notebook, against
torch.nn.attention.bias.causal_lower_right, whose import costs seconds: tests/test_generation_notebooks.py),
repeat_kv against SDPA's own grouped-query attention, the cached module and cross-attention against
nn.MultiheadAttention; properties (relative positions, decoding = the full pass) with hypothesis.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from solutions import generation as G

B, H, D_MODEL = 3, 4, 16
HEAD_DIM = D_MODEL // H


def lengths_mask(lengths, seq_len):
    return torch.arange(seq_len)[None, :] < torch.tensor(lengths)[:, None]


# --------------------------------------------------------------------------- #
# positions
# --------------------------------------------------------------------------- #


def test_sinusoidal_positions_follow_the_formula_in_float32():
    pe = G.sinusoidal_positions(50, 12)
    assert pe.shape == (50, 12) and pe.dtype == torch.float32
    for p in (0, 1, 7, 49):
        for i in range(6):
            angle = p / 10000 ** (2 * i / 12)
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def rope_complex(x, positions):
    """RoPE as complex multiplication of interleaved pairs (x[2i] + i x[2i+1]) * e^(i t)."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.double()[:, None] * theta  # [S, d / 2]
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angle), angle)).flatten(-2).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_apply_rope_equals_complex_multiplication_of_interleaved_pairs(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 8, dtype=dtype)
    positions = torch.tensor([0, 3, 4, 10, 99])
    out = G.apply_rope(x, positions)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out, rope_complex(x, positions))


def test_apply_rope_keeps_float16_and_three_dimensional_input():
    x = torch.randn(2, 5, 8).half()
    out = G.apply_rope(x, torch.arange(5))
    assert out.dtype == torch.float16 and out.shape == x.shape
    torch.testing.assert_close(out.float(), rope_complex(x.float(), torch.arange(5)), atol=2e-3, rtol=2e-3)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(-300, 300), half_d=st.integers(1, 8),
       seed=st.integers(0, 2**16))
def test_rope_scores_depend_only_on_the_offset_of_the_positions(m, n, shift, half_d, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, 2 * half_d, generator=g, dtype=torch.float64), torch.randn(1, 2 * half_d, generator=g,
                                                                                      dtype=torch.float64)
    def score(a, b):
        return (G.apply_rope(q, torch.tensor([a])) * G.apply_rope(k, torch.tensor([b]))).sum().item()

    m2, n2 = m + abs(shift), n + abs(shift)
    assert score(m, n) == pytest.approx(score(m2, n2), abs=1e-8)


def test_rope_preserves_norms_and_leaves_position_zero_alone():
    x = torch.randn(4, 6, 10)
    out = G.apply_rope(x, torch.arange(6))
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(out[:, 0], x[:, 0])


def test_half_split_rope_with_permuted_weights_gives_the_same_scores():
    """the notebook's claim: a half-split checkpoint works with interleaved RoPE once its q/k features are permuted"""
    d = 8
    q, k = torch.randn(5, d, dtype=torch.float64), torch.randn(5, d, dtype=torch.float64)
    pos = torch.arange(5)

    def rope_half(x):
        theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angle = pos.double()[:, None] * theta
        cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
        rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
        return x * cos + rotated * sin

    perm = torch.stack([torch.arange(d // 2), torch.arange(d // 2) + d // 2], -1).flatten()  # 0, 4, 1, 5, ...
    half_scores = rope_half(q) @ rope_half(k).T
    torch.testing.assert_close(G.apply_rope(q[:, perm], pos) @ G.apply_rope(k[:, perm], pos).T, half_scores)
    assert not torch.allclose(G.apply_rope(q, pos) @ G.apply_rope(k, pos).T, half_scores, atol=1e-3)


# --------------------------------------------------------------------------- #
# kv_cache
# --------------------------------------------------------------------------- #


def bottom_right(S_q, S_k):
    """key position <= query position, the queries being the last S_q of S_k positions"""
    return torch.arange(S_k)[None, :] <= torch.arange(S_k - S_q, S_k)[:, None]


@pytest.mark.parametrize("S_q,S_k", [(1, 1), (1, 6), (3, 7), (5, 5), (2, 9)])
def test_decode_causal_mask_lets_each_query_see_the_keys_up_to_its_absolute_position(S_q, S_k):
    mask = G.decode_causal_mask(S_q, S_k)
    assert mask.dtype == torch.bool and mask.shape == (S_q, S_k)
    assert torch.equal(mask, bottom_right(S_q, S_k))
    assert mask[-1].all()


def test_decode_causal_mask_with_equal_lengths_is_the_usual_causal_mask():
    assert torch.equal(G.decode_causal_mask(6, 6), torch.ones(6, 6, dtype=torch.bool).tril())


def test_is_causal_in_sdpa_is_top_left_aligned_and_differs_when_queries_are_fewer():
    q, k, v = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=G.decode_causal_mask(2, 5))
    torch.testing.assert_close(top_left, F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(2, 5).tril().bool()))
    assert not torch.allclose(top_left, ours)


@pytest.mark.parametrize("n_rep", [1, 2, 4])
def test_repeat_kv_equals_repeat_interleave_and_sdpas_grouped_query_attention(n_rep):
    torch.manual_seed(1)
    H_kv = H // n_rep
    q = torch.randn(B, H, 5, HEAD_DIM)
    k, v = torch.randn(B, H_kv, 7, HEAD_DIM), torch.randn(B, H_kv, 7, HEAD_DIM)
    assert torch.equal(G.repeat_kv(k, n_rep), k.repeat_interleave(n_rep, dim=1))
    ours = F.scaled_dot_product_attention(q, G.repeat_kv(k, n_rep), G.repeat_kv(v, n_rep))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, enable_gqa=True))


def test_kv_cache_appends_along_the_sequence_axis_and_counts_it():
    cache = G.KVCache()
    assert len(cache) == 0
    k1, v1 = torch.randn(B, H, 3, HEAD_DIM), torch.randn(B, H, 3, HEAD_DIM)
    k_all, v_all = cache.append(k1, v1)
    assert torch.equal(k_all, k1) and len(cache) == 3
    k2, v2 = torch.randn(B, H, 1, HEAD_DIM), torch.randn(B, H, 1, HEAD_DIM)
    k_all, v_all = cache.append(k2, v2)
    assert len(cache) == 4 and torch.equal(k_all, torch.cat([k1, k2], 2)) and torch.equal(v_all, torch.cat([v1, v2], 2))


def official_causal(module, x):
    S = x.shape[1]
    mha = nn.MultiheadAttention(D_MODEL, H, bias=False, batch_first=True).to(x.dtype).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(module.W_qkv.weight)
        mha.out_proj.weight.copy_(module.W_o.weight)
        return mha(x, x, x, attn_mask=torch.ones(S, S, dtype=torch.bool).triu(1), need_weights=False)[0]


def test_cached_self_attention_without_cache_is_causal_nn_multihead_attention():
    torch.manual_seed(2)
    module = G.CachedSelfAttention(D_MODEL, H).double()
    x = torch.randn(B, 7, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(module(x), official_causal(module, x))


@settings(max_examples=25, deadline=None)
@given(chunks=st.lists(st.integers(1, 4), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_decoding_through_a_cache_equals_the_full_causal_pass_for_any_split(chunks, seed):
    torch.manual_seed(seed)
    module = G.CachedSelfAttention(D_MODEL, H).double()
    x = torch.randn(2, sum(chunks), D_MODEL, dtype=torch.float64)
    cache, outs, start = G.KVCache(), [], 0
    with torch.no_grad():
        full = module(x)
        for n in chunks:
            outs.append(module(x[:, start : start + n], cache))
            start += n
    assert len(cache) == sum(chunks)
    torch.testing.assert_close(torch.cat(outs, 1), full)


def test_kv_cache_bytes_for_a_32_layer_32_head_model():
    assert G.kv_cache_bytes(1, 32, 32, 128, 4096) == 2 * 2**30  # 2 GiB at 4k tokens in fp16
    assert G.kv_cache_bytes(1, 32, 32, 128, 131072) == 64 * 2**30  # 64 GiB at 128k
    assert G.kv_cache_bytes(1, 32, 8, 128, 131072) == 16 * 2**30  # grouped-query attention, H_kv = 8
    assert G.kv_cache_bytes(2, 3, 5, 7, 11, torch.float32) == 2 * 2 * 3 * 5 * 7 * 11 * 4


def test_kv_cache_bytes_equals_the_bytes_of_a_real_cache():
    layers, cache_k = 3, torch.zeros(2, 4, 9, 8, dtype=torch.bfloat16)
    real = layers * 2 * cache_k.numel() * cache_k.element_size()
    assert G.kv_cache_bytes(2, layers, 4, 8, 9, torch.bfloat16) == real


# --------------------------------------------------------------------------- #
# cross_attention
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("d_context", [None, 10])
@pytest.mark.parametrize("use_mask", [False, True])
def test_cross_attention_matches_nn_multihead_attention_with_kdim_and_vdim(d_context, use_mask):
    torch.manual_seed(3)
    ours = G.CrossAttention(D_MODEL, H, d_context).double().eval()
    width = d_context or D_MODEL
    official = nn.MultiheadAttention(D_MODEL, H, kdim=width, vdim=width, bias=False, batch_first=True).double().eval()
    with torch.no_grad():
        if official._qkv_same_embed_dim:
            official.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        else:
            official.q_proj_weight.copy_(ours.W_q.weight)
            official.k_proj_weight.copy_(ours.W_k.weight)
            official.v_proj_weight.copy_(ours.W_v.weight)
        official.out_proj.weight.copy_(ours.W_o.weight)
        x, context = torch.randn(B, 5, D_MODEL, dtype=torch.float64), torch.randn(B, 8, width, dtype=torch.float64)
        mask = lengths_mask([8, 3, 6], 8) if use_mask else None
        mine = ours(x, context, mask)
        theirs = official(x, context, context, key_padding_mask=None if mask is None else ~mask, need_weights=False)[0]
    assert mine.shape == (B, 5, D_MODEL)
    torch.testing.assert_close(mine, theirs)


def test_cross_attention_ignores_padded_context_tokens():
    module = G.CrossAttention(D_MODEL, H, 6).eval()
    x, context = torch.randn(2, 3, D_MODEL), torch.randn(2, 5, 6)
    mask = lengths_mask([5, 2], 5)
    changed = context.clone()
    changed[~mask] = 50.0
    with torch.no_grad():
        torch.testing.assert_close(module(x, context, mask), module(x, changed, mask))
