"""The generation checks' trusted re-computations (autograder/checks/generation/common.py) equal the reference
and torch's own modules without mistakes, and differ from them with each mistake."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from autograder.checks.generation import common as C
from solutions import generation as G


def test_sinusoidal_variant_is_the_reference_and_each_mistake_differs():
    want = G.sinusoidal_positions(20, 8)
    assert torch.allclose(C.sinusoidal_variant(20, 8), want, atol=1e-6)
    for kw in ({"swap": True}, {"layout": "halves"}, {"exponent": "j"}, {"exponent": "i"}, {"base": 1000.0}):
        assert not torch.allclose(C.sinusoidal_variant(20, 8, **kw), want, atol=1e-3), kw


def test_rope_variant_is_the_reference_and_each_mistake_differs():
    x, positions = torch.randn(2, 3, 5, 8), torch.tensor([4, 1, 9, 0, 2])
    want = G.apply_rope(x, positions)
    assert torch.allclose(C.rope_variant(x, positions), want, atol=1e-6)
    for kw in ({"pairs": "halves"}, {"direction": -1}, {"exponent": "i"}, {"base": 1000.0}, {"use_positions": False}):
        assert not torch.allclose(C.rope_variant(x, positions, **kw), want, atol=1e-3), kw


@pytest.mark.parametrize("chunks", [(6,), (1, 1, 1, 1, 1, 1), (2, 3, 1), (4, 2)])
def test_decode_variant_equals_the_reference_module_through_a_cache(chunks):
    torch.manual_seed(0)
    module = G.CachedSelfAttention(C.D_MODEL, C.H).eval()
    x = torch.randn(C.B, sum(chunks), C.D_MODEL)
    w_qkv, w_o = module.W_qkv.weight.detach(), module.W_o.weight.detach()
    cache, outs, start = G.KVCache(), [], 0
    with torch.no_grad():
        for n in chunks:
            outs.append(module(x[:, start : start + n], cache if len(chunks) > 1 else None))
            start += n
    assert torch.allclose(C.decode_variant(w_qkv, w_o, x, chunks), torch.cat(outs, 1), atol=1e-5)
    if len(chunks) > 1:
        assert not torch.allclose(C.decode_variant(w_qkv, w_o, x, chunks, align="top_left"), torch.cat(outs, 1),
                                  atol=1e-3)


@pytest.mark.parametrize("use_mask", [False, True])
def test_cross_variant_equals_nn_multihead_attention_with_kdim_vdim(use_mask):
    torch.manual_seed(1)
    official = nn.MultiheadAttention(C.D_MODEL, C.H, kdim=C.D_CONTEXT, vdim=C.D_CONTEXT, bias=False,
                                     batch_first=True).eval()
    state = {"W_q.weight": official.q_proj_weight.detach(), "W_k.weight": official.k_proj_weight.detach(),
             "W_v.weight": official.v_proj_weight.detach(), "W_o.weight": official.out_proj.weight.detach()}
    x, context = torch.randn(C.B, C.S_Q, C.D_MODEL), torch.randn(C.B, C.S_K, C.D_CONTEXT)
    mask = C.lengths_mask() if use_mask else None
    with torch.no_grad():
        want = official(x, context, context, key_padding_mask=None if mask is None else ~mask, need_weights=False)[0]
    assert torch.allclose(C.cross_variant(state, x, context, mask), want, atol=1e-5)
    assert not torch.allclose(C.cross_variant(state, x, context, mask, swap_kv=True), want, atol=1e-3)


@pytest.mark.parametrize("kv_heads", [C.H, 2, 1])
@pytest.mark.parametrize("chunks", [(5,), (2, 1, 1, 1), (2, 3)])
def test_decoder_variant_equals_the_reference_layer_and_each_joint_mistake_differs(kv_heads, chunks):
    from autograder.checks.generation.decoder_variants import decoder_variant

    torch.manual_seed(2)
    module = G.DecoderAttention(C.D_MODEL, C.H, kv_heads, rope_base=50.0).eval()
    w = {k: t.detach() for k, t in module.state_dict().items()}
    x = torch.randn(C.B, sum(chunks), C.D_MODEL)
    cache, outs, start = G.KVCache(), [], 0
    with torch.no_grad():
        for n in chunks:
            outs.append(module(x[:, start:start + n], cache if len(chunks) > 1 else None))
            start += n
    got = torch.cat(outs, 1)
    assert torch.allclose(decoder_variant(w, x, chunks, C.H, kv_heads, base=50.0), got, atol=1e-5)
    mistakes = [{"rope_on": "keys"}, {"pairs": "halves"}, {"base_used": 10000.0}, {"rotate_again": True}]
    if len(chunks) > 1:
        mistakes += [{"offset": "zero"}, {"align": "top_left"}, {"use_cache": False}]
    if kv_heads == 2:
        mistakes.append({"tiled": True})
    for kw in mistakes:
        assert not torch.allclose(decoder_variant(w, x, chunks, C.H, kv_heads, base=50.0, **kw), got, atol=1e-3), kw


def test_left_padded_batch_of_the_reference_equals_each_sequence_alone():
    from autograder.checks.generation.decoder_variants import left_padded

    torch.manual_seed(3)
    module = G.DecoderAttention(C.D_MODEL, C.H, 2).eval()
    lengths, S = (4, 1, 3), 4
    mask, positions = left_padded(lengths, S)
    x = torch.randn(len(lengths), S, C.D_MODEL)
    with torch.no_grad():
        batched = module(x, G.KVCache(), positions, mask)
        for b, length in enumerate(lengths):
            alone = module(x[b:b + 1, S - length:])
            assert torch.allclose(batched[b, S - length:], alone[0], atol=1e-5)


def test_the_prefill_branch_and_the_mask_by_positions_differ_only_where_they_should():
    """use_cache="chunks" equals the reference for a prompt then single tokens and differs for a chunk after a prompt;
    mask_by="positions" equals it at the default positions and differs at explicit ones (also with zeroed empty rows)"""
    from autograder.checks.generation.decoder_variants import decoder_variant

    torch.manual_seed(4)
    module = G.DecoderAttention(C.D_MODEL, C.H, 2).eval()
    w = {k: t.detach() for k, t in module.state_dict().items()}
    x = torch.randn(C.B, 6, C.D_MODEL)
    ref = decoder_variant(w, x[:, :4], (2, 1, 1), C.H, 2)
    assert torch.allclose(decoder_variant(w, x[:, :4], (2, 1, 1), C.H, 2, use_cache="chunks"), ref)
    assert not torch.allclose(decoder_variant(w, x, (2, 3, 1), C.H, 2, use_cache="chunks"),
                              decoder_variant(w, x, (2, 3, 1), C.H, 2), atol=1e-3)
    assert torch.allclose(decoder_variant(w, x[:, :4], (2, 1, 1), C.H, 2, mask_by="positions"), ref)
    positions = torch.tensor([0, 1, 2, 6, 7, 11])
    want = decoder_variant(w, x, (6,), C.H, 2, positions=positions)
    for empty in ("nan", "zero"):
        got = decoder_variant(w, x, (6,), C.H, 2, positions=positions, mask_by="positions", empty_rows=empty)
        assert not torch.allclose(got, want, atol=1e-3)
