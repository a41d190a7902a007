"""What a reader finds on the library's attention modules and their configs, for tests/test_hflike.py.

`listing(attn)` names every public attribute of the library's module (its instance attributes, its submodules, its
class's non-callable attributes) and every field of its config (`to_dict()`, the aliases of `attribute_map`, the
public non-callable properties), each with its value as plain data (or NOT_PLAIN: an object that cannot travel).
It does not use the grader's `describe`: it is what the look-alike is measured against.

CI has one pin (5.x); the other (4.57.6, Python 3.10's) is recorded by running this file with that library first
on the path:

    PYTHONPATH=/work/tf457:. .venv/bin/python tests/hflike_listing.py

which writes tests/data/hflike-<version>.json: for each module, the listing and the description the grader would
send (autograder/checks/real_models/lookalike.py), both as the wire encodes them.
"""
from __future__ import annotations

import json
import pathlib
import sys

import torch
import torch.nn as nn

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
NOT_PLAIN = "<not plain data>"


def modules() -> dict:
    """The library's three modules the look-alikes copy; Llama's with head_dim other than hidden_size / heads."""
    from autograder.checks.real_models import library

    g = torch.Generator().manual_seed(0)
    lib = library.transformers()
    from transformers.models.llama.modeling_llama import LlamaAttention

    config = lib.LlamaConfig(hidden_size=24, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                             intermediate_size=48, num_hidden_layers=1, vocab_size=61, max_position_embeddings=256,
                             rope_theta=500.0, attn_implementation="eager")
    return {"GPT2Attention": library.gpt2_attention(24, 4, g), "BertSelfAttention": library.bert_self_attention(24, 4, g),
            "LlamaAttention": library.llama_attention(24, 4, 2, 500.0, g),
            "LlamaAttention head_dim 8": LlamaAttention(config, layer_idx=0)}


def _value(value):
    from autograder.checks.real_models import lookalike

    done = lookalike.plain(value)
    return NOT_PLAIN if done is lookalike.NOT_PLAIN else done


def _config_listing(config) -> dict:
    names = set(config.to_dict()) | set(getattr(config, "attribute_map", {}))
    for name in dir(config):
        if name.startswith("_"):
            continue
        try:
            value = getattr(config, name)
        except AttributeError:
            continue
        if not callable(value):
            names.add(name)
    return {name: _value(getattr(config, name)) for name in sorted(names)}


def listing(attn: nn.Module) -> dict:
    """{"attrs": {name: value}, "children": [names], "methods": [names], "config": {field: value} or None}."""
    attrs = {k: _value(v) for k, v in vars(attn).items() if not k.startswith("_") and k not in ("training", "config")}
    module_names = set(dir(nn.Module))
    methods = []
    for name in sorted(set(dir(type(attn))) - module_names):
        if name.startswith("__"):
            continue
        if callable(getattr(type(attn), name)):
            methods.append(name)
        elif not name.startswith("_"):
            attrs[name] = _value(getattr(attn, name))
    config = getattr(attn, "config", None)
    return {"attrs": attrs, "children": [name for name, _m in attn.named_children()], "methods": methods,
            "config": None if config is None else _config_listing(config)}


def record() -> pathlib.Path:
    from autograder.checks.real_models import library, lookalike
    from autograder.worker import wire

    found = {name: {"listing": listing(attn), "description": lookalike.describe(attn)} for name, attn in modules().items()}
    path = DATA / f"hflike-{library.version()}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"version": library.version(), "modules": wire.encode(found)}, indent=1,
                               sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(record())
