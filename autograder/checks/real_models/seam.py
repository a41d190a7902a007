"""The library's own seam on the trusted side: a registered proxy that records, then replays, the calls of an
attention function, so that the student's registered function answers every call of the library's models.

The library runs here only. A model built with `attn_implementation=PROXY` calls `Proxy.attention` in every layer,
and the mask function registered under PROXY is the one the student registered (the library's `eager_mask` or
`sdpa_mask`, or none), so the proxy receives exactly the masks the student's function would receive. While
recording, the proxy answers with the reference's result on the eager mask of the same forward (eager_mask is
called next to the student's choice), so the model runs as eager does and every call's inputs are those the
student's function gets when it is right; the calls go to the worker in one batch. While replaying, the proxy
answers each call, in order, with the student's answer: the library's logits and its own `generate()` then run on
the student's attention. Each model gets its own config copy: `_from_config(cfg, attn_implementation=...)` writes
into `cfg`, and a reference built from the same object would run the last model's attention.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from autograder.checks.real_models import library
from solutions import real_models as ref

PROXY = "grader_course_proxy"  # the trusted side's registered name (the student's name is theirs, in the worker)
MAX_CALLS = 256  # of one recording: bounded calls, bounded tensors


@dataclass(frozen=True)
class Recorded:
    """One call of the registered function: the module's layer, what it received, and the reference's answer."""

    layer: int
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    mask: torch.Tensor | None  # as the student's mask function gives it (None, bool or float)
    eager_mask: torch.Tensor  # what eager_mask gives on the same forward
    scaling: float | None
    dropout: float
    expected: torch.Tensor  # [B, S_q, H, D]


class Proxy:
    """The function registered as PROXY, and its mask function: records (`answers` None) or replays `answers`."""

    def __init__(self, mask: str | None):
        lib = library.transformers()
        from transformers.masking_utils import eager_mask, sdpa_mask  # noqa: PLC0415 - lazy (library.transformers())

        self.lib, self.eager_mask, self.chosen = lib, eager_mask, {"eager": eager_mask, "sdpa": sdpa_mask}.get(mask)
        self.calls: list[Recorded] = []
        self.answers: list[torch.Tensor] | None = None
        self.now: torch.Tensor | None = None  # the eager mask of the forward running

    def register(self) -> None:
        self.lib.AttentionInterface.register(PROXY, self.attention)
        self.lib.AttentionMaskInterface.register(PROXY, self.mask)

    def mask(self, *args, **kwargs):
        self.now = self.eager_mask(*args, **kwargs)
        return None if self.chosen is None else self.chosen(*args, **kwargs)

    def attention(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        if self.answers is not None:
            index = len(self.calls)
            self.calls.append(None)
            answer = self.answers[index] if index < len(self.answers) else None
            if answer is None:
                raise Replayed(index)
            return answer.to(query.dtype), None
        if len(self.calls) >= MAX_CALLS:
            raise RuntimeError(f"more than {MAX_CALLS} attention calls in one recording")
        expected, _ = ref.course_attention(module, query, key, value, self.now, scaling=scaling, dropout=dropout)
        self.calls.append(Recorded(module.layer_idx, *(t.detach().clone() for t in (query, key, value)),
                                   None if attention_mask is None else attention_mask.detach().clone(),
                                   self.now.detach().clone(), scaling, dropout, expected.detach().clone()))
        return expected, None

    def replaying(self, answers: list[torch.Tensor | None]) -> None:
        self.calls, self.answers = [], answers


class Replayed(Exception):
    """The replayed model asked for a call the student's function did not answer (it failed there)."""

    def __init__(self, index: int):
        super().__init__(index)
        self.index = index


def build(kind: str, config, g: torch.Generator) -> tuple[nn.Module, nn.Module]:
    """(eager reference, the same weights under PROXY), each from its own copy of `config`."""
    name = {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}[kind]
    eager = library.model_from_config(name, config, g, "eager")
    proxied = library.model_from_config(name, config, None, PROXY)
    proxied.load_state_dict(eager.state_dict())
    return eager.eval(), proxied.eval()


def logits(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=None if mask is None else mask.long()).logits
