"""The visible checks of `real_models`' second edition (course/visible_checks_real_models_interface.py): the
reference passes them, and each classic mistake of issue 55 fails with one sentence naming it (the library's tiny
models built in-process, as the checks build them: no notebook runs here, and nothing is downloaded)."""
from __future__ import annotations

import pytest
import torch

from course.build import REPO
from solutions import real_models as R
from tests import release_import


@pytest.fixture(scope="module")
def vc():
    return release_import.load(REPO / "course", "visible_checks_real_models_interface_under_test",
                               "visible_checks_real_models.py")


def _failure(check, *args) -> str:
    with pytest.raises(AssertionError) as failure:
        check(*args)
    return str(failure.value)


def heads_first(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    out, weights = R.course_attention(module, query, key, value, attention_mask, scaling, dropout)
    return out.transpose(1, 2), weights  # left as [B, H, S_q, D]


def scaling_ignored(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    return R.course_attention(module, query, key, value, attention_mask, None, dropout)


def heads_tiled(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    n = query.shape[1] // key.shape[1]
    return R.course_attention(module, query, key.repeat(1, n, 1, 1), value.repeat(1, n, 1, 1), attention_mask, scaling,
                              dropout)


def mask_ignored(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    return R.course_attention(module, query, key, value, None, scaling, dropout)


def no_dropout(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    return R.course_attention(module, query, key, value, attention_mask, scaling, 0.0)


ATTENTION_MISTAKES = {
    "output left as [B, H, S_q, D]": (heads_first, "[B, S_q, H, D]"),
    "scaling ignored": (scaling_ignored, "scaling=0.3"),
    "grouped heads tiled": (heads_tiled, "tiled them with repeat"),
    "mask ignored": (mask_ignored, "ignored the bool attention_mask"),
    "no dropout in training": (no_dropout, "no attention weight was dropped"),
}


def test_the_reference_passes_the_second_editions_visible_checks(vc, capsys):
    vc.check_course_attention(R.course_attention)
    vc.check_register_course_attention(R.register_course_attention)
    vc.check_rope_inv_freq(R.rope_inv_freq)
    vc.check_from_hf_llama_current(R.from_hf_llama)
    assert capsys.readouterr().out.count("✓") == 4


@pytest.mark.parametrize("mistake", list(ATTENTION_MISTAKES))
def test_check_course_attention_names_each_classic_mistake(vc, mistake):
    fn, says = ATTENTION_MISTAKES[mistake]
    assert says in _failure(vc.check_course_attention, fn)


@pytest.mark.parametrize("mask_function", [None, "sdpa"])
def test_check_register_course_attention_names_a_registration_without_the_eager_mask_function(vc, mask_function):
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    def register(name="course"):
        AttentionInterface.register(name, R.course_attention)
        if mask_function == "sdpa":
            AttentionMaskInterface.register(name, sdpa_mask)
        return name

    assert "received attention_mask=None on a causal batch" in _failure(vc.check_register_course_attention, register)


def test_check_register_course_attention_names_flex_attention_mask_before_any_model_runs(vc):
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import flex_attention_mask

    def register(name="course"):
        AttentionInterface.register(name, R.course_attention)
        AttentionMaskInterface.register(name, flex_attention_mask)
        return name

    assert "you registered flex_attention_mask" in _failure(vc.check_register_course_attention, register)


def test_check_rope_inv_freq_names_the_plain_frequencies_given_for_llama3(vc):
    def plain(config):
        params = dict(getattr(config, "rope_parameters", None) or {})
        base = params.get("rope_theta", getattr(config, "rope_theta", None))
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)

    assert "plain frequencies for a llama3 configuration" in _failure(vc.check_rope_inv_freq, plain)


def test_check_rope_inv_freq_catches_head_dim_taken_as_hidden_size_over_heads(vc):
    def derived(config):
        config = type(config)(**{**config.to_dict(), "head_dim": config.hidden_size // config.num_attention_heads})
        return R.rope_inv_freq(config)

    assert "rope_inv_freq" in _failure(vc.check_rope_inv_freq, derived)


def test_check_from_hf_llama_current_names_inv_freq_ignored(vc):
    def with_a_base(attn, rope_base=None, inv_freq=None):
        return R.from_hf_llama(attn, rope_base=500000.0)

    assert "rotate with the inv_freq given" in _failure(vc.check_from_hf_llama_current, with_a_base)


def test_check_from_hf_llama_current_stops_a_layer_that_derives_head_dim(vc):
    def derived(attn, rope_base=None, inv_freq=None):
        config = attn.config
        return R.DecoderAttention(config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                                  inv_freq=inv_freq)  # head_dim = 24 // 3 = 8, not the module's 12

    assert "head_dim" in _failure(vc.check_from_hf_llama_current, derived)
