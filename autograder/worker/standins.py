"""What the grader builds inside the worker for its checks: modules for the parts that take a module as input,
FlexAttention run on the student's mask_mod and score_mod functions, caches, the real_models look-alikes.

Nothing here does a student's graded work, and no frame is trusted because of the file it lives in (the watch
records every call, whoever's code made it):

* the stand-in SelfAttention (`to_official` and `parity_error` receive it, so that their score does not depend on
  the student's own `SelfAttention`) holds the submodules and weights only: its forward is computed by the
  trusted side (autograder/checks/self_attention/standin.py) over the worker's socket, which answers only in the
  part whose checks hand it out. A student's `SelfAttention.forward` that runs it gets a refusal;
* `flex_attend` (built per worker in `builtins`, no module-level function) calls torch's flex_attention through
  the watch, and only while the grader's own call of a builtin runs (`GraderCalls`, marked by runtime.Worker
  around that call): for a student's function it refuses.

The builtins a request may name are built per worker (`builtins`): the trusted side's `job.builtin(name, ...)`.
"""
from __future__ import annotations

import contextlib
import warnings

import torch
import torch.nn as nn
from torch.nn.attention import flex_attention as flex

from .hflike import hf_bert_self_attention, hf_gpt2_attention, hf_llama_attention
from .hfseam import (hf_attention_module, hf_causal_mask_function, hf_config, hf_registered_attention,
                     hf_registered_mask, hf_registration)
from .hfshell import registered_attention, registered_mask, registered_mask_function
from .rules import NOT_THE_GRADERS_CALL, STANDIN_FORWARD
from . import serving_standins



class GraderCalls:
    """Whether the worker is answering the grader's own call of a builtin (runtime.Worker.handle_call), not a call
    of the student's code: what a grader's helper that computes attention checks before it runs."""

    def __init__(self) -> None:
        self.depth = 0

    @contextlib.contextmanager
    def mark(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1


class StandInSelfAttention(nn.Module):
    """A SelfAttention's submodules (W_q, W_k, W_v, W_o, dropout) with a `variant`: correct, or deliberately
    broken as a parity check must catch. Its forward sends the weights and inputs to the trusted side."""

    VARIANTS = ("correct", "no_scale", "softmax_over_queries", "ignores_mask", "no_output_projection")

    def __init__(self, d_model: int, variant: str, dropout: float, ask):
        super().__init__()
        if variant not in self.VARIANTS:
            raise ValueError(f"unknown variant {variant}")
        self.variant = variant
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.ask = ask

    def forward(self, x, mask=None, causal=False):
        weights = [layer.weight.detach() for layer in (self.W_q, self.W_k, self.W_v, self.W_o)]
        return self.ask(STANDIN_FORWARD, (self.variant, bool(self.training), float(self.dropout.p), *weights, x,
                                          mask, bool(causal)), {})


def attention_standin(ask, d_model: int, variant: str = "correct", dropout: float = 0.0) -> StandInSelfAttention:
    return StandInSelfAttention(d_model, variant, dropout, ask)


def linear(d_in: int, d_out: int, bias: bool = False) -> nn.Linear:
    """A plain nn.Linear for checks that need a layer which is not the student's (its weights are set after)."""
    return nn.Linear(d_in, d_out, bias=bias)


class RecordingCache:
    """A KV cache that keeps a copy of everything appended to it, so that a check can see what a decoder caches
    (rotated or not, how many heads). It may start with cached keys and values (a prompt the check computed)."""

    def __init__(self, k=None, v=None):
        self.k, self.v = k, v
        self.appended = []

    def append(self, k, v):
        self.appended.append((k.detach().clone(), v.detach().clone()))
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], dim=-2), torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def record(self):
        """Every (k, v) appended so far, in order."""
        return list(self.appended)


def recording_cache(k=None, v=None) -> RecordingCache:
    return RecordingCache(k, v)


def flex_mask(mask_mod, B: int | None, H: int | None, S_q: int, S_k: int) -> torch.Tensor:
    """FlexAttention's create_mask of a student's mask_mod: BoolTensor [B or 1, H or 1, S_q, S_k]."""
    return flex.create_mask(mask_mod, B, H, S_q, S_k, device="cpu")


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a view of a counted storage adds nothing)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def autograd_function_gradients(function, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                                grad_out: torch.Tensor):
    """A student's torch.autograd.Function run as training runs it: `out = function.apply(q, k, v, causal)`, then
    `out.backward(grad_out)`. Returns (out, grad_q, grad_k, grad_v, saved): `saved` the bytes the forward kept for
    backward (every tensor that went through save_for_backward, seen by saved_tensors_hooks, and every tensor kept
    as an attribute of ctx), None for a gradient that did not arrive."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    packed = []

    def pack(tensor):
        packed.append(tensor)
        return tensor

    with torch.enable_grad():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = function.apply(*leaves, causal)
        if not isinstance(out, torch.Tensor) or out.grad_fn is None:
            raise TypeError(f"{getattr(function, '__name__', 'the function')}.apply(q, k, v, causal) returned "
                            f"{type(out).__name__} without a gradient function: it should return out, a tensor")
        kept = [value for value in vars(out.grad_fn).values() if isinstance(value, torch.Tensor)]
        saved = storage_bytes(packed + kept)
        packed.clear()
        out.backward(grad_out)
    return out.detach(), *(leaf.grad for leaf in leaves), saved


def builtins(ask, calls: GraderCalls) -> dict:
    """What a request may name as the grader's builtin (runtime.Worker.handle_call), for one worker: `ask` answers
    the stand-in's forward from the trusted side, `calls` says whether the grader's own call runs now. flex_attend
    exists only here (no module-level function computes attention for whoever calls it)."""

    def standin(*args, **kwargs):
        return attention_standin(ask, *args, **kwargs)

    def flex_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score_mod=None, mask_mod=None,
                    traced: bool = False) -> torch.Tensor:
        """flex_attention(q, k, v) with a student's score_mod and/or mask_mod (through a BlockMask), eager on the
        CPU, through the watch (torch's own function: what it sees is recorded); only inside the grader's call.

        Untraced unless `traced` (the worker's setting, runtime.Worker): the mods run under vmap as flex_attention's
        debugging mode runs them, in a tenth of a second; traced, as the notebook runs it (dynamo traces the mods
        first, importing the module that defines them), each new mod costs seconds."""
        if not calls.depth:
            raise RuntimeError(NOT_THE_GRADERS_CALL.format(name="flex_attend"))
        B, H, S_q, S_k = q.shape[0], q.shape[1], q.shape[-2], k.shape[-2]
        block_mask = None if mask_mod is None else flex.create_block_mask(mask_mod, B, H, S_q, S_k, device="cpu")
        untraced = flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
        flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = untraced and not traced
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "called without torch.compile()": eager is what the course runs
                return flex.flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
        finally:
            flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = untraced

    return {"attention_standin": standin, "flex_attend": flex_attend, "flex_mask": flex_mask, "linear": linear,
            "recording_cache": recording_cache, "autograd_function_gradients": autograd_function_gradients,
            "hf_gpt2_attention": hf_gpt2_attention, "hf_bert_self_attention": hf_bert_self_attention,
            "hf_llama_attention": hf_llama_attention, "registered_attention": registered_attention,
            "registered_mask": registered_mask, "registered_mask_function": registered_mask_function,
            "hf_registration": hf_registration, "hf_registered_attention": hf_registered_attention,
            "hf_registered_mask": hf_registered_mask, "hf_attention_module": hf_attention_module,
            "hf_causal_mask_function": hf_causal_mask_function, "hf_config": hf_config,
            **serving_standins.builtins(ask)}
