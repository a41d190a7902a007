"""What the attention_interface checks read in the worker (autograder/worker/hfseam.py) and build on the trusted side
(autograder/checks/real_models/seam.py)."""
from __future__ import annotations

import sys

import pytest
import torch

from autograder.worker import hfseam, hfshell


@pytest.fixture
def shell(monkeypatch):
    """The worker's `transformers` shell in this process's sys.modules for one test (restored after)."""
    for name, module in hfshell.shell().items():
        monkeypatch.setitem(sys.modules, name, module)
    return sys.modules["transformers"]


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    return query.transpose(1, 2), None


@pytest.mark.parametrize("mask", ["eager", "sdpa", None, "custom"])
def test_the_registration_is_read_as_the_student_left_it(shell, mask):
    shell.AttentionInterface.register("mine", _attention)
    masks = {"eager": shell.masking_utils.eager_mask, "sdpa": shell.masking_utils.sdpa_mask,
             "custom": lambda *a, **k: None}
    if mask is not None:
        shell.AttentionMaskInterface.register("mine", masks[mask])
    assert hfseam.hf_registration("mine") == {"name": "mine", "attention": True, "mask": mask}
    assert hfseam.hf_registered_attention("mine") is _attention
    if mask == "custom":
        assert hfseam.hf_registered_mask("mine") is masks["custom"]
    else:
        with pytest.raises(LookupError):
            hfseam.hf_registered_mask("mine")


def test_the_causal_mask_function_is_the_library_one():
    from transformers.masking_utils import causal_mask_function

    q, kv = torch.arange(5)[:, None], torch.arange(7)[None, :]
    assert torch.equal(hfseam.hf_causal_mask_function()(0, 0, q, kv), causal_mask_function(0, 0, q, kv))


def test_a_name_without_a_function_reads_as_unregistered(shell):
    assert hfseam.hf_registration("nothing") == {"name": "nothing", "attention": False, "mask": None}
    assert hfseam.hf_registration(None) == {"name": None, "attention": False, "mask": None}
    with pytest.raises(LookupError):
        hfseam.hf_registered_attention("nothing")


def test_the_module_argument_carries_the_library_attributes_and_its_mode():
    module = hfseam.hf_attention_module(6, 2, 8, 1, True, 0.25, "mine")
    assert module.training and module.num_key_value_groups == 3 and module.head_dim == 8
    assert module.scaling == pytest.approx(8 ** -0.5) and module.is_causal and module.layer_idx == 1
    assert module.config.num_key_value_heads == 2 and module.config._attn_implementation == "mine"
    assert not hfseam.hf_attention_module(4, 4, 8).training
    with pytest.raises(RuntimeError):
        module(torch.zeros(1))


def test_each_model_gets_its_own_config_copy():
    """_from_config(cfg, attn_implementation=...) writes into cfg: the eager reference must keep running eager"""
    from autograder.checks.real_models import library, seam

    proxy = seam.Proxy("eager")
    proxy.register()
    config = library.llama_config(16, 2, 1, 500.0, layers=1)
    eager, proxied = seam.build("llama", config, torch.Generator().manual_seed(0))
    assert eager.config._attn_implementation == "eager"
    assert proxied.config._attn_implementation == seam.PROXY
    ids = torch.randint(1, library.VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))
    expected = seam.logits(eager, ids, None)
    assert torch.allclose(seam.logits(proxied, ids, None), expected, atol=1e-6)
    assert len(proxy.calls) == 1 and proxy.calls[0].mask is not None and proxy.calls[0].mask.dtype == torch.float32
