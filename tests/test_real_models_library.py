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


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


@pytest.mark.parametrize("extra", [{}, {"rope_scaling": LLAMA3}, {"head_dim": 16}], ids=["default", "llama3", "head_dim"])
def test_the_llama_re_computation_equals_the_library_at_positions_with_gaps(library, common, extra):
    g = torch.Generator().manual_seed(3)
    attn = library.llama_attention(32, 4, 2, 500.0, g, **extra)
    key_mask = common.left_padded((6, 3), 6)
    x, positions = torch.randn(2, 6, 32, generator=g), torch.tensor([[0, 2, 3, 9, 10, 40], [0, 0, 0, 5, 6, 9]])
    inv_freq = library.inv_freq(attn.config)
    got = common.llama_variant(library.llama_state(attn), x, positions, key_mask, 4, 2, inv_freq)
    expected = library.llama_reference(attn, x, positions, key_mask)
    assert torch.allclose(got[key_mask], expected[key_mask], atol=1e-5)
    assert torch.allclose(ref.from_hf_llama(attn, inv_freq=inv_freq)(x, positions, key_mask=key_mask)[key_mask],
                          expected[key_mask], atol=1e-5)


@pytest.mark.parametrize("base, head_dim, llama3", [(500000.0, 16, LLAMA3), (10000.0, 32, {**LLAMA3, "factor": 4.0}),
                                                    (500.0, 8, None)])
def test_the_frequency_re_computation_and_the_reference_equal_the_library(library, common, base, head_dim, llama3):
    extra = {"head_dim": head_dim} if llama3 is None else {"head_dim": head_dim, "rope_scaling": llama3}
    config = library.llama_config(32, 4, 4, base, **extra)
    expected = library.inv_freq(config)
    params = {"rope_theta": base, **(llama3 or {})}
    assert torch.allclose(common.inv_freq_variant(params, head_dim), expected, rtol=1e-6, atol=0)
    assert torch.allclose(ref.rope_inv_freq(config), expected, rtol=1e-6, atol=0)


def test_the_step_by_step_re_computation_equals_the_library_while_it_generates(library, common):
    """llama_steps without keywords gives, at every step of generate(), what the library's attention module gave"""
    g = torch.Generator().manual_seed(5)
    model = library.llama_model(32, 4, 2, 500.0, g)
    mask = common.left_padded((5, 3, 7), 7)
    ids = torch.randint(1, library.VOCAB, mask.shape, generator=g) * mask
    reference = copy.deepcopy(model)
    inputs, outputs = library.recording(reference)
    library.generate(reference, ids, mask, 4)
    schedule = library.schedule(mask, 4)
    attn = model.model.layers[0].self_attn
    got = common.llama_steps(library.llama_state(attn), inputs[0::2], schedule, 4, 2, library.inv_freq(attn.config))
    for out, want, (_positions, key_mask) in zip(got, outputs[0::2], schedule):
        real = key_mask[:, -want.shape[1]:]
        assert torch.allclose(out[real], want[real], atol=1e-5)


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
    layers = [ref.from_hf_llama(decoder.self_attn, 500.0) for decoder in model.model.layers]  # by its base, still
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


def test_the_registered_reference_and_the_swapped_reference_layers_both_give_the_librarys_eager_run(library, common):
    """issue 55's 'both ways earn full marks where they do the same thing', on whichever pin is installed: the
    practitioner's way (the reference's course_attention registered with the eager mask function, attn_implementation
    set to its name) gives eager's logits at real tokens of a left-padded batch and generate()'s greedy tokens, and so
    does the module swap (every attention module the reference's from_hf_llama layer behind the adapter)"""
    g = torch.Generator().manual_seed(6)
    model = library.llama_model(32, 4, 2, 500.0, g)
    mask = common.left_padded((5, 3, 7), 7)
    ids = torch.randint(1, library.VOCAB, mask.shape, generator=g) * mask
    tokens = library.generate(copy.deepcopy(model), ids, mask, 6)
    name = ref.register_course_attention("course_both_ways")
    registered = library.model_from_config("LlamaForCausalLM", model.config, None, name)
    registered.load_state_dict(model.state_dict())
    registered.eval()
    assert model.config._attn_implementation == "eager"  # _from_config wrote into a copy, not into model.config
    with torch.no_grad():
        want, got = (m(input_ids=ids, attention_mask=mask.long()).logits for m in (model, registered))
    assert torch.allclose(got[mask], want[mask], atol=1e-5)
    assert torch.equal(library.generate(registered, ids, mask, 6), tokens)
    layers = [ref.from_hf_llama(decoder.self_attn, inv_freq=library.inv_freq(model.config))
              for decoder in model.model.layers]
    caches = [_Cache() for _ in layers]

    def layer(index, hidden, step, positions, key_mask):
        with torch.no_grad():
            out = layers[index](hidden, positions=positions, cache=caches[index], key_mask=key_mask)
        return torch.where(key_mask[:, -hidden.shape[1]:, None], out, torch.zeros_like(out))  # padded rows: not graded

    assert torch.equal(library.teacher_forced(model, ids, mask, tokens, layer), tokens)
