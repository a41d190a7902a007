"""The real_models checks' trusted side against the transformers library itself: the re-computations that name
mistakes equal the library's attention when no mistake is asked for, and the adapter that puts a layer into a
library model (StudentAttention, teacher_forced) reproduces the library's own generation when that layer is the
reference's. Run on the pinned 5.x; the same held on 4.57.6 (the 3.10 pin) when this was written, with the library
put first on PYTHONPATH. No sandbox here: the layers run in this process.
"""
from __future__ import annotations

import copy
import importlib

import pytest
import torch

from solutions import real_models as ref


@pytest.fixture(scope="module")
def library():
    """The checks' trusted side, imported here, not at collection: importing it imports the library (seconds), which
    every pytest-xdist worker would otherwise pay while it collects."""
    return importlib.import_module("autograder.checks.real_models.library")


@pytest.fixture(scope="module")
def common(library):
    return importlib.import_module("autograder.checks.real_models.common")


def test_the_gpt2_re_computation_equals_the_library(library, common):
    g = torch.Generator().manual_seed(1)
    attn = library.gpt2_attention(16, 2, g)
    x, key_mask = torch.randn(3, 5, 16, generator=g), common.left_padded((5, 2, 3), 5)
    got = common.gpt2_variant(library.gpt2_state(attn), x, key_mask, 2)
    assert torch.allclose(got[key_mask], library.gpt2_reference(attn, x, key_mask)[key_mask], atol=1e-5)


def test_the_bert_re_computation_equals_the_library_even_on_a_sample_of_padding_only(library, common):
    g = torch.Generator().manual_seed(2)
    attn = library.bert_self_attention(16, 4, g)
    x, mask = torch.randn(3, 4, 16, generator=g), torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])
    expected = library.bert_reference(attn, x, mask)
    assert torch.isfinite(expected).all()
    assert torch.allclose(common.bert_variant(library.bert_state(attn), x, mask, 4), expected, atol=1e-5)


def test_the_llama_re_computation_equals_the_library_at_positions_with_gaps(library, common):
    g = torch.Generator().manual_seed(3)
    attn = library.llama_attention(32, 4, 2, 500.0, g)
    key_mask = common.left_padded((6, 3), 6)
    x, positions = torch.randn(2, 6, 32, generator=g), torch.tensor([[0, 2, 3, 9, 10, 40], [0, 0, 0, 5, 6, 9]])
    got = common.llama_variant(library.llama_state(attn), x, positions, key_mask, 4, 2, 500.0)
    expected = library.llama_reference(attn, x, positions, key_mask)
    assert torch.allclose(got[key_mask], expected[key_mask], atol=1e-5)


def test_the_half_split_rotation_is_the_librarys(common):
    from transformers.models.llama.modeling_llama import rotate_half

    x, positions = torch.randn(2, 5, 8, dtype=torch.float64), torch.tensor([0, 1, 7, 100, 2000])
    angle = positions.double()[:, None] * 500.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    emb = torch.cat([angle, angle], dim=-1)
    assert torch.allclose(common.half_split_rope(x, positions, 500.0), x * emb.cos() + rotate_half(x) * emb.sin())


def test_the_reference_layer_in_the_adapter_generates_the_librarys_greedy_tokens(library, common):
    """a Llama whose attention modules are the reference's DecoderAttention (from_hf_llama) behind StudentAttention,
    fed one token at a time with a cache per layer, chooses the tokens the library's generate chooses"""
    g = torch.Generator().manual_seed(4)
    model = library.llama_model(32, 4, 2, 500.0, g)
    mask = common.left_padded((5, 3, 7), 7)
    ids = torch.randint(1, library.VOCAB, mask.shape, generator=g) * mask
    tokens = library.generate(copy.deepcopy(model), ids, mask, 8)
    layers = [ref.from_hf_llama(decoder.self_attn, 500.0) for decoder in model.model.layers]
    caches = [_Cache() for _ in layers]

    def layer(index, hidden, step, positions, key_mask):
        with torch.no_grad():
            out = layers[index](hidden, positions=positions, cache=caches[index], key_mask=key_mask)
        real = key_mask[:, -hidden.shape[1]:, None]
        return torch.where(real, out, torch.zeros_like(out))

    assert torch.equal(library.teacher_forced(model, ids, mask, tokens, layer), tokens)


class _Cache:
    def __init__(self):
        self.k = self.v = None

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]
