"""The reference implementation (solutions/attention.py) agrees with PyTorch's own attention."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import solutions as S

# B, H, S all different and > 1; lengths differ per sample, every length >= 1.
B, H, SEQ, D_MODEL = 3, 4, 7, 16
LENGTHS = [7, 2, 5]


def lengths_mask(lengths, seq_len):
    return torch.arange(seq_len)[None, :] < torch.tensor(lengths)[:, None]


def plain_attention(q, k, v, mask=None, causal=False):
    """Attention written out in full, independently of the functions under test."""
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask[:, None, None, :], scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    if causal:
        n = q.shape[-2]
        allowed = torch.arange(n)[None, :] <= torch.arange(n)[:, None]
        scores = torch.where(allowed, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    return torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v)


@pytest.fixture(params=[torch.float32, torch.float64], ids=["float32", "float64"])
def dtype(request):
    return request.param


def tol(dtype):
    return {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-12, "rtol": 1e-10}


MASK_CASES = [(False, False), (True, False), (False, True), (True, True)]
MASK_IDS = ["plain", "padding", "causal", "padding+causal"]


@pytest.mark.parametrize("use_mask,causal", MASK_CASES, ids=MASK_IDS)
def test_self_attention_matches_nn_multihead_attention_via_to_official(dtype, use_mask, causal):
    torch.manual_seed(0)
    custom = S.SelfAttention(D_MODEL, dropout=0.0).to(dtype).eval()
    official = S.to_official(custom).to(dtype).eval()
    x = torch.randn(B, SEQ, D_MODEL, dtype=dtype)
    mask = lengths_mask(LENGTHS, SEQ) if use_mask else None
    attn_mask = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1) if causal else None  # official: True = forbidden
    with torch.no_grad():
        ours = custom(x, mask, causal=causal)
        theirs, _ = official(x, x, x, key_padding_mask=None if mask is None else ~mask, attn_mask=attn_mask, need_weights=False)
    torch.testing.assert_close(ours, theirs, **tol(dtype))


def test_parity_error_is_small_for_the_reference_and_large_for_a_broken_module():
    torch.manual_seed(1)
    custom = S.SelfAttention(D_MODEL, dropout=0.3)
    x = torch.randn(B, SEQ, D_MODEL)
    mask = lengths_mask(LENGTHS, SEQ)
    assert S.parity_error(custom, x) < 1e-5
    assert S.parity_error(custom, x, mask) < 1e-5
    assert custom.training, "parity_error must restore the training flag"

    class NoScale(S.SelfAttention):
        def forward(self, x, mask=None, causal=False):
            return super().forward(x * 3.0, mask, causal) / 3.0  # not the same function any more

    broken = NoScale(D_MODEL, dropout=0.0)
    broken.load_state_dict(custom.state_dict())
    assert S.parity_error(broken, x, mask) > 1e-2


def test_to_official_copies_weights_in_q_k_v_order_with_zero_biases():
    custom = S.SelfAttention(8, dropout=0.0)
    official = S.to_official(custom)
    assert official.batch_first and official.num_heads == 1
    torch.testing.assert_close(official.in_proj_weight[:8], custom.W_q.weight)
    torch.testing.assert_close(official.in_proj_weight[8:16], custom.W_k.weight)
    torch.testing.assert_close(official.in_proj_weight[16:], custom.W_v.weight)
    torch.testing.assert_close(official.out_proj.weight, custom.W_o.weight)
    assert not official.in_proj_bias.any() and not official.out_proj.bias.any()


@pytest.mark.parametrize("use_mask,causal", MASK_CASES, ids=MASK_IDS)
def test_multihead_matches_nn_multihead_attention_with_in_proj_weight_equal_to_W_qkv(dtype, use_mask, causal):
    torch.manual_seed(2)
    ours = S.MultiHeadSelfAttention(D_MODEL, H).to(dtype).eval()
    official = nn.MultiheadAttention(D_MODEL, H, bias=False, batch_first=True).to(dtype).eval()
    with torch.no_grad():
        official.in_proj_weight.copy_(ours.W_qkv.weight)
        official.out_proj.weight.copy_(ours.W_o.weight)
    x = torch.randn(B, SEQ, D_MODEL, dtype=dtype)
    mask = lengths_mask(LENGTHS, SEQ) if use_mask else None
    attn_mask = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1) if causal else None
    with torch.no_grad():
        mine = ours(x, mask, causal=causal)
        theirs, _ = official(x, x, x, key_padding_mask=None if mask is None else ~mask, attn_mask=attn_mask, need_weights=False)
    torch.testing.assert_close(mine, theirs, **tol(dtype))


def test_multihead_rejects_a_width_not_divisible_by_the_heads():
    with pytest.raises(ValueError):
        S.MultiHeadSelfAttention(10, 4)


@pytest.mark.parametrize("use_mask,causal", MASK_CASES, ids=MASK_IDS)
@pytest.mark.parametrize("chunk_size", [1, 3, 7, 1024])
def test_chunked_and_sdpa_equal_plain_attention(dtype, use_mask, causal, chunk_size):
    torch.manual_seed(3)
    q, k, v = (torch.randn(B, H, SEQ, 8, dtype=dtype) for _ in range(3))
    mask = lengths_mask(LENGTHS, SEQ) if use_mask else None
    expected = plain_attention(q, k, v, mask, causal)
    torch.testing.assert_close(S.chunked_attention(q, k, v, mask, causal, chunk_size=chunk_size), expected, **tol(dtype))
    torch.testing.assert_close(S.sdpa_attention(q, k, v, mask, causal), expected, **tol(dtype))


@pytest.mark.parametrize("use_mask,causal", MASK_CASES, ids=MASK_IDS)
def test_sdpa_attention_equals_f_sdpa_with_the_converted_mask(use_mask, causal):
    torch.manual_seed(4)
    q, k, v = (torch.randn(B, H, SEQ, 8) for _ in range(3))
    mask = lengths_mask(LENGTHS, SEQ) if use_mask else None
    allowed = torch.ones(B, 1, SEQ, SEQ, dtype=torch.bool)
    if use_mask:
        allowed = allowed & mask[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(SEQ, SEQ, dtype=torch.bool).tril()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(S.sdpa_attention(q, k, v, mask, causal), expected)


def test_single_head_functions_compose_to_plain_attention_with_masks():
    torch.manual_seed(5)
    x = torch.randn(B, SEQ, D_MODEL, dtype=torch.float64)
    W_q, W_k, W_v = (w.double() for w in S.make_projections(D_MODEL, 8, 8))
    Q, K, V = S.project_qkv(x, W_q, W_k, W_v)
    mask = S.padding_mask(torch.tensor(LENGTHS), SEQ)
    scores = S.apply_causal_mask(S.apply_padding_mask(S.scaled_scores(Q, K), mask))
    out = S.attend(S.attention_weights(scores), V)
    expected = plain_attention(Q[:, None], K[:, None], V[:, None], mask, causal=True)[:, 0]
    torch.testing.assert_close(out, expected)


def test_masks_follow_the_course_convention():
    assert torch.equal(S.padding_mask(torch.tensor([2, 3]), 3), torch.tensor([[True, True, False], [True, True, True]]))
    assert torch.equal(S.causal_mask(3), torch.tensor([[True, False, False], [True, True, False], [True, True, True]]))
    scores = torch.zeros(2, H, 3, 3)
    out = S.apply_padding_mask(scores, S.padding_mask(torch.tensor([2, 3]), 3))
    assert out.shape == scores.shape
    assert torch.isneginf(out[0, :, :, 2]).all() and not torch.isinf(out[1]).any()


def test_attention_matrix_bytes_is_b_h_s2_element_size():
    assert S.attention_matrix_bytes(1, 16, 4096, torch.float16) == 512 * 2**20
    assert S.attention_matrix_bytes(1, 16, 32768, torch.float16) == 32 * 2**30
    assert S.attention_matrix_bytes(2, 3, 5) == 2 * 3 * 25 * 4


def test_chunked_attention_peak_memory_is_a_fraction_of_plain():
    from autograder.worker.meter import LiveMemoryMeter

    q, k, v = (torch.randn(1, 2, 1024, 16) for _ in range(3))
    with LiveMemoryMeter() as plain_meter:
        plain_attention(q, k, v)
    with LiveMemoryMeter() as chunk_meter:
        S.chunked_attention(q, k, v, chunk_size=64)
    assert chunk_meter.peak_bytes * 4 < plain_meter.peak_bytes


# --------------------------------------------------------------------------- #
# Properties over random shapes
# --------------------------------------------------------------------------- #

dims = st.integers(min_value=1, max_value=5)


@settings(max_examples=40, deadline=None)
@given(b=dims, h=dims, s_q=dims, s_k=dims, d=dims, four_d=st.booleans(), seed=st.integers(0, 2**16))
def test_rows_of_attention_weights_sum_to_one_for_any_shape(b, h, s_q, s_k, d, four_d, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (b, h) if four_d else (b,)
    Q, K = torch.randn(*shape, s_q, d, generator=g), torch.randn(*shape, s_k, d, generator=g)
    scores = S.scaled_scores(Q, K)
    assert scores.shape == (*shape, s_q, s_k)
    w = S.attention_weights(scores)
    torch.testing.assert_close(w.sum(-1), torch.ones(*shape, s_q))


@settings(max_examples=40, deadline=None)
@given(b=dims, h=dims, s=dims, head_dim=dims, seed=st.integers(0, 2**16))
def test_split_then_merge_heads_is_the_identity(b, h, s, head_dim, seed):
    x = torch.randn(b, s, h * head_dim, generator=torch.Generator().manual_seed(seed))
    heads = S.split_heads(x, h)
    assert heads.shape == (b, h, s, head_dim)
    torch.testing.assert_close(heads[:, -1, :, :], x[:, :, -head_dim:])
    assert torch.equal(S.merge_heads(heads), x)


@settings(max_examples=40, deadline=None)
@given(
    s=st.integers(2, 12),
    chunk=st.integers(1, 16),
    causal=st.booleans(),
    lengths=st.lists(st.integers(1, 12), min_size=2, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_chunked_attention_equals_plain_for_any_chunk_size(s, chunk, causal, lengths, seed):
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    q, k, v = (torch.randn(b, 2, s, 3, generator=g, dtype=torch.float64) for _ in range(3))
    mask = lengths_mask([min(n, s) for n in lengths], s)
    expected = plain_attention(q, k, v, mask, causal)
    torch.testing.assert_close(S.chunked_attention(q, k, v, mask, causal, chunk_size=chunk), expected)
