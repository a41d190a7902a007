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

from autograder.checks.real_models import library, lookalike
from autograder.checks.real_models.common import left_padded
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
        self.custom = mask == "custom"
        self.calls: list[Recorded] = []
        self.answers: list[torch.Tensor] | None = None
        self.now: torch.Tensor | None = None  # the eager mask of the forward running
        self.mask_calls: list[dict] = []  # a mask function of the student's: each call's arguments, as plain data
        self.mask_answers: list | None = None  # ... and what it answered in the worker, in the same order

    def start(self, masks: list | None = None) -> None:
        """Before each run: the calls of both functions counted from 0 again; `masks`: the student's mask function's
        answers for this run (a mask function of their own), None while they are collected."""
        self.calls, self.mask_calls, self.mask_answers = [], [], masks

    def register(self) -> None:
        self.lib.AttentionInterface.register(PROXY, self.attention)
        self.lib.AttentionMaskInterface.register(PROXY, self.mask)

    def mask(self, *args, **kwargs):
        self.now = self.eager_mask(*args, **kwargs)
        if self.custom:  # collected first (answered as eager's), then answered by the student's function in the worker
            index = len(self.mask_calls)
            self.mask_calls.append(plain_mask_arguments(kwargs))
            return self.now if self.mask_answers is None else self.mask_answers[index]
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

    def replaying(self, answers: list[torch.Tensor | None], masks: list | None = None) -> None:
        self.start(masks)
        self.answers = answers


def plain_mask_arguments(kwargs: dict) -> dict:
    """A mask function's keyword arguments as they can travel to the worker: tensors, numbers, dtypes; the config
    described (lookalike.describe_config); the library's causal mask function as "causal" (the worker has its own)."""
    from transformers.masking_utils import causal_mask_function  # noqa: PLC0415 - lazy (library.transformers())

    out = {}
    for key, value in kwargs.items():
        if key == "mask_function":
            out[key] = "causal" if value is causal_mask_function else None
        elif key == "config":
            out[key] = lookalike.describe_config(value)
        elif key == "device":
            out[key] = str(value)
        elif isinstance(value, torch.Tensor):
            out[key] = value.detach().clone()
        elif value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
            out[key] = value
    return out


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


def record(kind: str, config, mask_kind: str | None, g: torch.Generator, prompts: tuple, gen_prompts: tuple | None,
           new_tokens: int) -> dict:
    """`kind`'s eager model and its proxied copy, the batches the checks run (left-padded `prompts`, the same ids
    without padding; `gen_prompts` for generate()), and a first recording of every call (`rerun`)."""
    proxy = Proxy(mask_kind)
    proxy.register()  # before the model is built: the library checks the name then
    eager, proxied = build(kind, config, g)
    rec = {"proxy": proxy, "eager": eager, "model": proxied, "padded": left_padded(prompts, max(prompts)),
           "ids": torch.randint(1, library.VOCAB, (len(prompts), max(prompts)), generator=g), "generate": None}
    if gen_prompts is not None:
        mask = left_padded(gen_prompts, max(gen_prompts))
        rec["generate"] = (torch.randint(1, library.VOCAB, mask.shape, generator=g) * mask, mask, new_tokens)
    rerun(rec)
    return rec


def rerun(rec: dict) -> None:
    """Every run recorded again (rec["runs"]: {run: (calls, eager's answer, its masks)}, rec["mask_calls"]: {run: the
    mask function's arguments}): a left-padded batch, the same without padding and no attention_mask, with an
    all-ones one, and generate() when asked for; a mask function of the student's answers with rec["mask_answers"]."""
    proxy, padded = rec["proxy"], rec["padded"]
    proxy.register()
    answers = rec.get("mask_answers", {})
    runs, mask_calls = {}, {}
    for run, mask in (("padded", padded), ("no mask", None), ("all ones", torch.ones_like(padded))):
        ids = rec["ids"] * (padded if run == "padded" else 1)
        proxy.start(answers.get(run))
        logits(rec["model"], ids, mask)
        runs[run], mask_calls[run] = (proxy.calls, logits(rec["eager"], ids, mask), mask), proxy.mask_calls
    if rec["generate"] is not None:
        ids, mask, new_tokens = rec["generate"]
        proxy.start(answers.get("generate"))
        library.generate(rec["model"], ids, mask, new_tokens)
        runs["generate"] = (proxy.calls, library.generate(rec["eager"], ids, mask, new_tokens), (ids, mask))
        mask_calls["generate"] = proxy.mask_calls
    rec["runs"], rec["mask_calls"] = runs, mask_calls
