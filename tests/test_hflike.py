"""The worker's look-alikes of the library's attention modules (autograder/worker/hflike.py) are, to a reader, the
library's own: every public attribute, submodule and config field that GPT2Attention, BertSelfAttention and
LlamaAttention and their configs have, with the library's values, in the installed pin (listed live) and in the
other pin (4.57.6, recorded by tests/hflike_listing.py into tests/data). Built from what the trusted side sends
(lookalike.describe) after the wire's round trip, as in the worker. A name the grader could not provide is said to
be the grader's gap; a name the library lacks too fails as the library's module would.
"""
from __future__ import annotations

import copy
import importlib
import json

import pytest
import torch

from autograder.foundation import failures
from autograder.worker import hflike, wire
from tests import hflike_listing

RECORDED = sorted(hflike_listing.DATA.glob("hflike-*.json"))


@pytest.fixture(scope="module")
def lookalike():
    """Imported here, not at collection: it imports the library (seconds)."""
    return importlib.import_module("autograder.checks.real_models.lookalike")


def _travelled(value):
    """`value` as the worker decodes it after the wire (JSON frames)."""
    return wire.WorkerCodec().decode(json.loads(json.dumps(wire.encode(value))))


def _plain(value, lookalike):
    return _travelled(lookalike.plain(value))


def _lacks(where: str, owner, found: dict, lookalike) -> list[str]:
    """The names of `found` (a listing's {name: value}) that `owner` lacks or holds with another value."""
    wrong = []
    for name, value in found.items():
        if value == hflike_listing.NOT_PLAIN:
            try:
                getattr(owner, name)
            except hflike.GraderLacks:
                continue
            except AttributeError:
                pass
            else:
                continue
            wrong.append(f"{where}.{name}: neither there nor named as the grader's gap")
        elif not hasattr(owner, name):
            wrong.append(f"{where}.{name}: missing")
        elif _plain(getattr(owner, name), lookalike) != _travelled(value):
            wrong.append(f"{where}.{name}: {getattr(owner, name)!r}, the library's is {value!r}")
    return wrong


def _missing(listing: dict, module, lookalike) -> list[str]:
    wrong = _lacks("module", module, listing["attrs"], lookalike)
    wrong += [f"module.{n}: submodule missing" for n in listing["children"] if n not in dict(module.named_children())]
    for name in listing["methods"]:
        with pytest.raises(hflike.GraderLacks):
            getattr(module, name)
    if listing["config"] is not None:
        if not hasattr(module, "config"):
            return wrong + ["module.config: missing"]
        wrong += _lacks("config", module.config, listing["config"], lookalike)
    return wrong


def test_the_look_alikes_have_every_attribute_and_config_field_of_the_installed_librarys(lookalike):
    for name, attn in hflike_listing.modules().items():
        module = hflike.library_module(_travelled(lookalike.describe(attn)), attn.state_dict())
        assert _missing(hflike_listing.listing(attn), module, lookalike) == [], name
        assert type(module).__name__ == type(attn).__name__
        assert {k: v.shape for k, v in module.state_dict().items()} == {k: v.shape for k, v in attn.state_dict().items()}
        if getattr(attn, "config", None) is not None:
            assert module.config.to_dict() == attn.config.to_dict(), name


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_the_look_alikes_have_every_attribute_and_config_field_of_the_recorded_pin(lookalike, path):
    recorded = json.loads(path.read_text())
    assert recorded["modules"], path
    for name, found in wire.WorkerCodec().decode(recorded["modules"]).items():
        module = hflike.library_module(found["description"])
        assert _missing(found["listing"], module, lookalike) == [], (recorded["version"], name)


def test_the_other_pin_is_recorded():
    assert [p.stem for p in RECORDED] == ["hflike-4.57.6"]


def test_a_llama_look_alike_takes_a_head_dim_other_than_hidden_size_over_heads(lookalike):
    attn = hflike_listing.modules()["LlamaAttention head_dim 8"]
    module = hflike.hf_llama_attention(_travelled(lookalike.describe(attn)), attn.state_dict())
    assert module.q_proj.weight.shape == (4 * 8, 24) and module.o_proj.weight.shape == (24, 4 * 8)
    assert module.head_dim == module.config.head_dim == 8
    assert torch.equal(module.k_proj.weight, attn.k_proj.weight)


def test_gpt2s_look_alike_carries_the_librarys_scaling_flags_on_the_module_and_its_config(lookalike):
    attn = hflike_listing.modules()["GPT2Attention"]
    module = hflike.hf_gpt2_attention(_travelled(lookalike.describe(attn)))
    assert (module.scale_attn_weights, module.scale_attn_by_inverse_layer_idx, module.reorder_and_upcast_attn) == \
        (True, False, False)
    assert module.config.max_position_embeddings == module.config.n_positions == attn.config.n_positions
    assert module.config.get("attn_pdrop") == attn.config.attn_pdrop
    assert torch.count_nonzero(module.c_attn.weight.detach()) == 0  # no weights sent: zeros, nothing drawn
    copy.deepcopy(module)


def test_a_name_the_library_lacks_too_fails_as_the_librarys_module_would(lookalike):
    attn = hflike_listing.modules()["LlamaAttention"]
    module = hflike.hf_llama_attention(_travelled(lookalike.describe(attn)))
    for owner, name in ((module, "no_such_field"), (module.config, "no_such_field")):
        with pytest.raises(AttributeError) as raised:
            getattr(owner, name)
        assert type(raised.value) is AttributeError
        assert f"object has no attribute '{name}'" in str(raised.value)


def test_a_name_the_grader_could_not_provide_is_the_graders_gap_in_the_message(lookalike):
    attn = hflike_listing.modules()["GPT2Attention"]
    description = _travelled(lookalike.describe(attn))
    description["config"]["lacking"].append("some_object")
    module = hflike.hf_gpt2_attention(description)
    with pytest.raises(hflike.GraderLacks) as raised:
        _ = module.config.some_object
    assert type(raised.value).__name__ == failures.GRADER_LACKS
    err = {"type": failures.GRADER_LACKS, "message": str(raised.value), "where": "cell 3, line 4: attn.config.x"}
    text = str(failures.student_error("GPT2StyleAttention.from_hf(attn)", err))
    assert "GPT2Config.some_object" in text and "the grader could not provide" in text
    assert "line 4" not in text and "SimpleNamespace" not in text


def test_a_look_alike_refuses_to_compute_attention(lookalike):
    attn = hflike_listing.modules()["BertSelfAttention"]
    module = hflike.hf_bert_self_attention(_travelled(lookalike.describe(attn)))
    with pytest.raises(RuntimeError, match="compute attention itself"):
        module(torch.zeros(1, 2, 24))
