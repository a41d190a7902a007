"""What the `attention_interface` checks read and build in the worker: the student's registration, and the module
their registered attention function is called with.

The library never runs here. A student's `register_course_attention()` registers with the grader's `transformers`
shell (hfshell.py, installed in every worker); the trusted side asks which attention function and which mask
function the name holds (`hf_registration`), runs the library's models itself, and sends every call of the
registered function here to be answered by the student's function (`hf_registered_attention`), with a module that
carries what the library's attention modules carry (`hf_attention_module`). Nothing here computes attention.
"""
from __future__ import annotations

import sys
from types import SimpleNamespace

import torch.nn as nn

from .hflike import LibraryConfig

LIBRARY = "transformers"


def _shell():
    """The reading functions of the worker's shell (hfshell.py), or None where the worker has none."""
    try:
        from . import hfshell  # noqa: PLC0415 - the shell's module, where there is one
    except ImportError:
        return None
    return hfshell


def _registry(attr: str) -> dict:
    mapping = getattr(getattr(sys.modules.get(LIBRARY), attr, None), "_global_mapping", None)
    return mapping if isinstance(mapping, dict) else {}


def _mask_kind(name: str) -> str | None:
    """Without the shell: the mask registered under `name`, "eager"/"sdpa"/"flex" by identity, else "custom"."""
    fn = _registry("AttentionMaskInterface").get(name)
    if fn is None:
        return None
    masking = sys.modules.get(LIBRARY + ".masking_utils")
    kinds = {"eager": "eager_mask", "sdpa": "sdpa_mask", "flex": "flex_attention_mask"}
    return next((kind for kind, attr in kinds.items() if fn is getattr(masking, attr, None)), "custom")


def _attention(name: str):
    shell = _shell()
    if shell is not None:
        return shell.registered_attention(name)
    fn = _registry("AttentionInterface").get(name)
    return fn if callable(fn) else None


def hf_registration(name) -> dict:
    """{"name": the name as a string or None, "attention": a function is registered under it, "mask": "eager",
    "sdpa", "flex", "custom" or None}: what the student's register_course_attention() left in the registries."""
    if not isinstance(name, str):
        return {"name": None, "attention": False, "mask": None}
    shell = _shell()
    mask = shell.registered_mask(name) if shell is not None else _mask_kind(name)
    return {"name": name, "attention": _attention(name) is not None, "mask": mask}


def hf_registered_attention(name: str):
    """The function the student registered under `name` (it stays here; each call is the student's code)."""
    fn = _attention(name)
    if fn is None:
        raise LookupError(f"no attention function is registered under {name!r}")
    return fn


def hf_registered_mask(name: str):
    """The mask function of the student's own registered under `name` (it stays here; each call is their code)."""
    shell = _shell()
    fn = shell.registered_mask_function(name) if shell is not None else None
    if fn is None:
        raise LookupError(f"no mask function of your own is registered under {name!r}")
    return fn


def causal_mask_function(batch_idx, head_idx, q_idx, kv_idx):
    """The library's causal mask_function, as a mask function receives it: key kv_idx seen by query q_idx."""
    return kv_idx <= q_idx


def hf_causal_mask_function():
    return causal_mask_function


class AttentionModule(nn.Module):
    """The `module` argument of a registered attention function: the attributes the library's LlamaAttention and
    GPT2Attention carry for it (heads, head_dim, scaling, dropout, is_causal, layer_idx, config); no weights."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int, layer_idx: int, dropout: float, name: str):
        super().__init__()
        self.config = SimpleNamespace(num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                                      hidden_size=heads * head_dim, attention_dropout=dropout,
                                      _attn_implementation=name)
        self.head_dim, self.num_heads, self.num_key_value_groups = head_dim, heads, heads // kv_heads
        self.scaling = head_dim ** -0.5
        self.attention_dropout, self.is_causal, self.layer_idx = dropout, True, layer_idx

    def forward(self, *args, **kwargs):
        raise RuntimeError("the grader's attention module holds no weights: it is the `module` argument of your "
                           "attention function only")


def hf_attention_module(heads: int, kv_heads: int, head_dim: int, layer_idx: int = 0, training: bool = False,
                        dropout: float = 0.0, name: str = "course") -> AttentionModule:
    return AttentionModule(heads, kv_heads, head_dim, layer_idx, dropout, name).train(training)


def hf_config(description: dict) -> LibraryConfig:
    """The library's config as a reader sees it (lookalike.describe_config on the trusted side): rope_inv_freq's input."""
    return LibraryConfig(description)
