"""What a `real_models` student's `from_hf` reads in the worker: the library's attention modules, as a reader sees them.

The `transformers` library never runs in the worker (its models, masks and rotary code run on the trusted
side, autograder/checks/real_models/library.py). A student's `GPT2StyleAttention.from_hf(attn)`,
`layer.to_hf(attn)`, `BertStyleSelfAttention.from_hf(attn)` and `from_hf_llama(attn, ...)` get these instead:
modules with the class name, the submodules, every public attribute and the `config` of the library's
`GPT2Attention`, `BertSelfAttention` and `LlamaAttention` of the installed pin, holding the trusted side's weights.

The trusted side describes the library's own module (autograder/checks/real_models/lookalike.py): its submodules
(kind and shape), its plain attributes with their values, its config's fields (`to_dict()`, the aliases of
`attribute_map`, the plain properties), and the names it has that cannot travel as plain data (methods, objects).
The worker builds the look-alike from that description alone. A name the library's module has but the look-alike
could not be given raises `GraderLacks` (an AttributeError), which the trusted side reports as the grader's gap,
never as the student's mistake; a name the library's module lacks raises the library's own AttributeError.
Their forward refuses to run: a student's layer must compute attention itself, not call the library's module.
"""
from __future__ import annotations

import copy
import json

import torch
import torch.nn as nn

PAIRS, SET = "__pairs__", "__set__"  # a dict with keys other than str, a set: how the description carries them


class GraderLacks(AttributeError):
    """A name the library's object has that the grader's copy could not provide (its message: the qualified name).
    The trusted side knows this type by its name (autograder/foundation/failures.py)."""


def revive(value):
    """A described value back as the library holds it (dicts with int keys and sets travel as PAIRS and SET)."""
    if isinstance(value, dict):
        if set(value) == {PAIRS}:
            return {revive(k): revive(v) for k, v in value[PAIRS]}
        if set(value) == {SET}:
            return {revive(v) for v in value[SET]}
        return {k: revive(v) for k, v in value.items()}
    if isinstance(value, list):
        return [revive(v) for v in value]
    if isinstance(value, tuple):
        return tuple(revive(v) for v in value)
    return value


def _lacking(owner: str, name: str):
    return GraderLacks(f"{owner}.{name}")


class LibraryConfig:
    """The library's config of the module, as a reader sees it: every field as an attribute, `to_dict()`, `get`."""

    def __init__(self, description: dict):
        fields = revive(description["fields"])
        self.__dict__.update(fields)
        object.__setattr__(self, "_described", (description["class"], revive(description["dict"]),
                                                frozenset(description.get("lacking", ()))))

    def __getattr__(self, name: str):
        if name.startswith("__") or "_described" not in self.__dict__:  # (copy, pickle: probing a bare instance)
            raise AttributeError(name)
        cls, _dict, lacking = self.__dict__["_described"]
        if name in lacking:
            raise _lacking(cls, name)
        raise AttributeError(f"'{cls}' object has no attribute '{name}'")

    def to_dict(self) -> dict:
        return copy.deepcopy(self._described[1])

    def to_diff_dict(self) -> dict:
        return self.to_dict()

    def get(self, name: str, default=None):
        return getattr(self, name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.__dict__ and name != "_described"

    def __repr__(self) -> str:
        return f"{self._described[0]} {json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)}"


class Conv1D(nn.Module):
    """GPT-2's Conv1D, as the library writes it: weight [nx, nf] (in x out), y = x @ weight + bias."""

    def __init__(self, nf: int, nx: int):
        super().__init__()
        self.nf, self.nx = nf, nx
        self.weight = nn.Parameter(torch.zeros(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], self.nf)


def _linear(d_in: int, d_out: int, bias: bool) -> nn.Linear:
    layer = nn.Linear(d_in, d_out, bias=bias)
    with torch.no_grad():  # zeros until the trusted side's weights are loaded (nothing drawn from the generator)
        for p in layer.parameters():
            p.zero_()
    return layer


CHILDREN = {"Conv1D": Conv1D, "Linear": _linear, "Dropout": nn.Dropout}  # what a described submodule may be


class _LibraryModule(nn.Module):
    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in self.__dict__.get("_lacking", ()):
                raise _lacking(type(self).__name__, name) from None
            raise

    def forward(self, *args, **kwargs):
        raise RuntimeError(f"the grader's {type(self).__name__} holds the library's weights only: your layer must "
                           "compute attention itself, not call the library's module")


class GPT2Attention(_LibraryModule):
    pass


class BertSelfAttention(_LibraryModule):
    pass


class LlamaAttention(_LibraryModule):
    pass


CLASSES = {cls.__name__: cls for cls in (GPT2Attention, BertSelfAttention, LlamaAttention)}


def library_module(description: dict, state: dict | None = None) -> nn.Module:
    """The look-alike of the library's module that `description` describes (lookalike.describe on the trusted
    side), holding `state` (zeros without it), in eval mode as the library's reference is."""
    module = CLASSES[description["class"]]()
    lacking = set(description.get("lacking", ()))
    for name, (kind, *args) in description["children"].items():
        if kind in CHILDREN:
            setattr(module, name, CHILDREN[kind](*args))
        else:
            lacking.add(name)
    if description.get("config") is not None:
        module.config = LibraryConfig(description["config"])
    for name, value in revive(description["attrs"]).items():
        setattr(module, name, value)
    module.__dict__["_lacking"] = frozenset(lacking)
    if state:
        module.load_state_dict(state)
    return module.eval()


def _of(kind: str, description: dict, state: dict | None) -> nn.Module:
    if description.get("class") != kind:
        raise ValueError(f"the grader described a {description.get('class')}, not a {kind}")
    return library_module(description, state)


def hf_gpt2_attention(description: dict, state: dict | None = None) -> GPT2Attention:
    return _of("GPT2Attention", description, state)


def hf_bert_self_attention(description: dict, state: dict | None = None) -> BertSelfAttention:
    return _of("BertSelfAttention", description, state)


def hf_llama_attention(description: dict, state: dict | None = None) -> LlamaAttention:
    return _of("LlamaAttention", description, state)
