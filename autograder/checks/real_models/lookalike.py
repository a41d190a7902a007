"""What the worker is told of the library's attention module, so that its copy reads as the library's own.

The library never runs in the worker (library.py). `describe(attn)` turns the library's module into plain data that
the worker builds its look-alike from (autograder/worker/hflike.py): the submodules (kind and shape), every public
attribute whose value is plain data (numbers, strings, None, lists, tuples, dicts and sets of them, dtypes), the
config's fields (`to_dict()`, the aliases of its `attribute_map`, its plain properties, `_attn_implementation`),
and the names that exist but cannot travel (methods, objects): reading one of those in the worker is reported as the
grader's gap, not the student's mistake. The weights travel apart (library.*_state).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from autograder.worker.hflike import PAIRS, SET

NOT_PLAIN = object()
_MODULE_NAMES = frozenset(dir(nn.Module))


def plain(value, depth: int = 0):
    """`value` as plain data for the wire (dicts with keys other than str, and sets, marked), or NOT_PLAIN."""
    if depth > 8:
        return NOT_PLAIN
    if value is None or type(value) in (bool, int, float, str) or isinstance(value, torch.dtype):
        return value
    if isinstance(value, dict):
        pairs = [(plain(k, depth + 1), plain(v, depth + 1)) for k, v in value.items()]
        if any(x is NOT_PLAIN for pair in pairs for x in pair):
            return NOT_PLAIN
        return dict(pairs) if all(type(k) is str for k, _v in pairs) else {PAIRS: [list(p) for p in pairs]}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [plain(v, depth + 1) for v in value]
        if any(x is NOT_PLAIN for x in items):
            return NOT_PLAIN
        if isinstance(value, (set, frozenset)):
            return {SET: items}
        return tuple(items) if isinstance(value, tuple) else items
    return NOT_PLAIN


def _child(module: nn.Module) -> list:
    kind = type(module).__name__
    if isinstance(module, nn.Linear):
        return ["Linear", module.in_features, module.out_features, module.bias is not None]
    if isinstance(module, nn.Dropout):
        return ["Dropout", module.p]
    if kind == "Conv1D":
        nx, nf = module.weight.shape
        return ["Conv1D", nf, nx]
    return [kind]


def _public(name: str) -> bool:
    return not name.startswith("__")


def describe_config(config) -> dict:
    """The config's class name, its fields as attributes read them (plain values), its `to_dict()`, and the names
    it has whose values cannot travel."""
    as_dict = {k: plain(v) for k, v in config.to_dict().items()}
    fields = {}
    for name in sorted(set(dir(config)) | set(getattr(config, "attribute_map", {})) | set(as_dict)):
        if not _public(name):
            continue
        try:
            value = getattr(config, name)
        except AttributeError:  # (a property the library defines but this config does not answer, e.g. 5.x rope_scaling)
            continue
        if not callable(value):
            fields[name] = plain(value)
    lacking = sorted(k for k, v in fields.items() if v is NOT_PLAIN)
    return {"class": type(config).__name__, "fields": {k: v for k, v in fields.items() if v is not NOT_PLAIN},
            "dict": {k: v for k, v in as_dict.items() if v is not NOT_PLAIN}, "lacking": lacking}


def describe(attn: nn.Module) -> dict:
    """The library's module `attn` as plain data (see the module's docstring)."""
    children = {name: _child(child) for name, child in attn.named_children()}
    attrs = {k: plain(v) for k, v in vars(attn).items() if not k.startswith("_") and k not in ("training", "config")}
    methods = {n for n in set(dir(type(attn))) - _MODULE_NAMES if _public(n)}
    lacking = sorted(methods | {k for k, v in attrs.items() if v is NOT_PLAIN}
                     | {k for k in vars(attn) if k.startswith("_") and _public(k) and k not in _MODULE_NAMES
                        and k not in vars(nn.Module())})
    config = getattr(attn, "config", None)
    return {"class": type(attn).__name__, "children": children, "lacking": lacking,
            "attrs": {k: v for k, v in attrs.items() if v is not NOT_PLAIN},
            "config": None if config is None else describe_config(config)}
