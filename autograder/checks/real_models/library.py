"""The `transformers` library on the trusted side: tiny models from configs, its reference outputs, and the adapters.

The library runs here only, never in the sandboxed worker: its models are built from configs with seeded random
weights (nothing is downloaded: the hub is switched off before the import), with `attn_implementation="eager"`.
It is imported with this module, which only the real_models checks import: once per grading process, when the
checks are collected, so its seconds never count against a part's time limit, and grading any other assignment
never pays for it. A student's layer lives in the worker: `recording` keeps what the library's own attention modules
got and returned while its model ran, the checks send those inputs to the student's layers in one batch, and
`StudentAttention` stands where the library's attention module was and answers with the student's outputs, so that
the library's embeddings, norms, MLPs and head run around the student's attention.

The library's call signatures differ between the pins (requirements.txt: 5.x on Python 3.11+, 4.57 on 3.10): the
attention modules are called with keywords both versions take (`attention_mask`, `position_embeddings`), the
adapter takes whatever the library's layer passes (`hidden_states` positionally or by keyword, `cache=` in 5.x,
`past_key_values=` in 4.x) and answers (output, weights) as both do, and the rotary base is given to the config as
`rope_theta`, which both read. Tested on 5.25.0 (tests/test_real_models_library.py) and, with the library put first
on PYTHONPATH, on 4.57.6: the same scores for the reference and every catalogue case.
"""
from __future__ import annotations

import copy
import os
from collections.abc import Callable

import torch
import torch.nn as nn

VOCAB = 61  # the tiny models' vocabulary (token 0 doubles as bos, eos and pad)


def transformers():
    """The library, imported on first use with the hub switched off (nothing may download at run time)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers as library  # noqa: PLC0415 - seconds to import: only when a real_models check needs it

    return library


def preload() -> None:
    """Import the library and the model code the checks use now (seconds; lazily imported by the library otherwise)."""
    lib = transformers()
    for name in ("GPT2LMHeadModel", "BertModel", "LlamaForCausalLM", "DynamicCache"):
        getattr(lib, name)


def version() -> str:
    return transformers().__version__


def _seeded(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """A module built with torch's global generator seeded, leaving the grader's generator as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build().eval()


def _refill(module: nn.Module, g: torch.Generator, std: float) -> nn.Module:
    """Every weight matrix and bias from `g` (std `std`; norm weights near 1): large enough that mistakes show."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.1 * noise if "ln" in name or "norm" in name else std * noise)
    return module


def _common() -> dict:
    return {"attn_implementation": "eager", "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}


# --------------------------------------------------------------------------- GPT-2


def gpt2_config(d_model: int, heads: int, layers: int = 1):
    lib = transformers()
    return lib.GPT2Config(n_embd=d_model, n_head=heads, n_layer=layers, vocab_size=VOCAB, n_positions=64,
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **_common())


def gpt2_attention(d_model: int, heads: int, g: torch.Generator) -> nn.Module:
    """The library's GPT2Attention, weights from `g`."""
    transformers()
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention  # noqa: PLC0415 - lazy (transformers())

    config = gpt2_config(d_model, heads)
    return _refill(_seeded(lambda: GPT2Attention(config, layer_idx=0), 0), g, 0.3)


def gpt2_model(d_model: int, heads: int, g: torch.Generator) -> nn.Module:
    """A 2-layer GPT2LMHeadModel, weights from `g`."""
    lib = transformers()
    config = gpt2_config(d_model, heads, layers=2)
    return _refill(_seeded(lambda: lib.GPT2LMHeadModel(config), 0), g, 0.3)


def model_from_config(class_name: str, config, g: torch.Generator, implementation: str) -> nn.Module:
    """The library's `class_name` (GPT2LMHeadModel, LlamaForCausalLM) from its own copy of `config` (`_from_config`
    writes the implementation into the config it is given) with `attn_implementation=implementation`, weights from
    `g` (None: torch's seeded initialisation, for weights loaded afterwards)."""
    lib = transformers()
    build = getattr(lib, class_name)._from_config
    model = _seeded(lambda: build(copy.deepcopy(config), attn_implementation=implementation), 0)
    return model if g is None else _refill(model, g, 0.3)


def gpt2_state(attn: nn.Module) -> dict:
    """What the worker's GPT2Attention holds (autograder/worker/hflike.py): the Conv1D weights and biases."""
    return {k: attn.state_dict()[k].clone() for k in ("c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias")}


def additive_mask(allowed: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """[B, 1, S_q, S_k] as the library's eager attention adds it: 0 where allowed, finfo(dtype).min elsewhere."""
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)


def causal_allowed(key_mask: torch.Tensor) -> torch.Tensor:
    """[B, 1, S, S]: key j <= query i and key j real."""
    S = key_mask.shape[-1]
    return torch.ones(S, S, dtype=torch.bool).tril() & key_mask[:, None, None, :]


def gpt2_reference(attn: nn.Module, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """GPT2Attention's output given the library's own causal and padding mask (5.x takes causality from it)."""
    with torch.no_grad():
        return attn(x, attention_mask=additive_mask(causal_allowed(key_mask)))[0]


# --------------------------------------------------------------------------- BERT


def bert_self_attention(d_model: int, heads: int, g: torch.Generator) -> nn.Module:
    """The library's BertSelfAttention, weights from `g`."""
    lib = transformers()
    from transformers.models.bert.modeling_bert import BertSelfAttention  # noqa: PLC0415 - lazy (transformers())

    config = lib.BertConfig(hidden_size=d_model, num_attention_heads=heads, num_hidden_layers=1,
                            intermediate_size=2 * d_model, vocab_size=VOCAB, attention_probs_dropout_prob=0.0,
                            hidden_dropout_prob=0.0, **_common())
    return _refill(_seeded(lambda: BertSelfAttention(config), 0), g, 0.3)


def bert_state(attn: nn.Module) -> dict:
    return {k: v.clone() for k, v in attn.state_dict().items()}


def bert_reference(attn: nn.Module, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """BertSelfAttention's output with the [B, 1, 1, S] mask BertModel adds: 0 for real keys, finfo.min for padding."""
    B, S = attention_mask.shape
    extended = additive_mask(attention_mask.bool().view(B, 1, 1, S))
    with torch.no_grad():
        return attn(x, attention_mask=extended)[0]


# --------------------------------------------------------------------------- Llama


def llama_config(d_model: int, heads: int, kv_heads: int, base: float, layers: int = 1, **extra):
    """A tiny LlamaConfig; `extra`: head_dim of its own, rope_scaling (Llama 3.1's {"rope_type": "llama3", ...}),
    which both pins take (5.x keeps them in rope_parameters, with the base)."""
    lib = transformers()
    return lib.LlamaConfig(hidden_size=d_model, num_attention_heads=heads, num_key_value_heads=kv_heads,
                           intermediate_size=2 * d_model, num_hidden_layers=layers, vocab_size=VOCAB,
                           max_position_embeddings=256, rope_theta=base, **extra, **_common())


def llama_attention(d_model: int, heads: int, kv_heads: int, base: float, g: torch.Generator, **extra) -> nn.Module:
    """The library's LlamaAttention (its config kept for the rotary embedding), weights from `g`."""
    transformers()
    from transformers.models.llama.modeling_llama import LlamaAttention  # noqa: PLC0415 - lazy (transformers())

    config = llama_config(d_model, heads, kv_heads, base, **extra)
    return _refill(_seeded(lambda: LlamaAttention(config, layer_idx=0), 0), g, 0.3)


def inv_freq(config) -> torch.Tensor:
    """The library's rotary frequencies for `config` (LlamaRotaryEmbedding(config).inv_freq, float32)."""
    transformers()
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: PLC0415 - lazy (transformers())

    return LlamaRotaryEmbedding(config).inv_freq.detach().clone().float()


def llama_model(d_model: int, heads: int, kv_heads: int, base: float, g: torch.Generator) -> nn.Module:
    """A 2-layer grouped-query LlamaForCausalLM, weights from `g`."""
    lib = transformers()
    config = llama_config(d_model, heads, kv_heads, base, layers=2)
    return _refill(_seeded(lambda: lib.LlamaForCausalLM(config), 0), g, 0.3)


def llama_state(attn: nn.Module) -> dict:
    return {k: v.clone() for k, v in attn.state_dict().items()}


def rotary(config, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The library's (cos, sin) for `positions` [B, S] (its LlamaRotaryEmbedding: half-split pairs)."""
    transformers()
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: PLC0415 - lazy (transformers())

    with torch.no_grad():
        return LlamaRotaryEmbedding(config)(x, positions)


def llama_reference(attn: nn.Module, x: torch.Tensor, positions: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """LlamaAttention's output at `positions` [B, S], causal, padded keys (key_mask [B, S]) hidden by finfo.min."""
    with torch.no_grad():
        return attn(x, position_embeddings=rotary(attn.config, x, positions),
                    attention_mask=additive_mask(causal_allowed(key_mask)))[0]


# --------------------------------------------------------------------------- the adapters


class StudentAttention(nn.Module):
    """In a library model in place of its attention module: answers (send(layer, hidden_states), None) as the
    library's module answers (output, weights); `send` gives the student's output for this call (checked by the
    check). Whatever else the library's layer passes (masks, rotary embeddings, its cache: the student's layer has its
    own) is left."""

    def __init__(self, layer: int, send: Callable[[int, torch.Tensor], torch.Tensor]):
        super().__init__()
        self.layer, self.send = layer, send

    def forward(self, hidden_states, *args, **kwargs):
        return self.send(self.layer, hidden_states), None


def attention_modules(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """(parent, attribute) of every self-attention module of a GPT-2 or Llama model, layer by layer."""
    if hasattr(model, "transformer"):
        return [(block, "attn") for block in model.transformer.h]
    return [(layer, "self_attn") for layer in model.model.layers]


def with_student_layers(model: nn.Module, send: Callable[[int, torch.Tensor], torch.Tensor]) -> nn.Module:
    """`model` with every attention module replaced by a StudentAttention (the model is changed in place)."""
    for index, (parent, name) in enumerate(attention_modules(model)):
        setattr(parent, name, StudentAttention(index, send))
    return model


def recording(model: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(inputs, outputs): the hidden states every attention module gets and what it returns, in call order, while
    `model` runs (forward hooks; the library passes the hidden states by position or, in Llama, by keyword)."""
    inputs: list[torch.Tensor] = []
    outputs: list[torch.Tensor] = []

    def hook(_module, args, kwargs, out):
        inputs.append((kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]).detach().clone())
        outputs.append(out[0].detach().clone())

    for parent, name in attention_modules(model):
        getattr(parent, name).register_forward_hook(hook, with_kwargs=True)
    return inputs, outputs


def generate(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """The library's own greedy generation (`generate`, its cache) from left-padded prompts `ids` [B, S] (mask
    True = real): [B, new_tokens]."""
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask.long(), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens,
                             do_sample=False, num_beams=1, pad_token_id=0, eos_token_id=None)
    return out[:, ids.shape[1]:]


def schedule(mask: torch.Tensor, new_tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """What each step of greedy decoding from left-padded prompts (mask [B, S], True = real) gives a layer:
    (positions [B, S_new] of the step's tokens, key_mask [B, S_k] over every position so far); the prompt first,
    then one token at a time."""
    out, key_mask, S_new = [], mask, mask.shape[1]
    for _ in range(new_tokens):
        out.append((positions_of(key_mask)[:, -S_new:], key_mask))
        key_mask, S_new = torch.cat([key_mask, torch.ones_like(key_mask[:, :1])], dim=1), 1
    return out


def teacher_forced(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, tokens: torch.Tensor,
                   layer: Callable[..., torch.Tensor]) -> torch.Tensor:
    """The greedy tokens [B, n] a Llama-style `model` chooses when each of its attention modules is
    `layer(index, hidden, step=, positions=, key_mask=)` (a StudentAttention's send, with the step's `schedule`) and it
    is fed the prompts `ids` [B, S] (left-padded, mask True = real), then `tokens` [B, n] one at a time (teacher
    forcing: the same inputs as the library's own run). The model runs with use_cache=False on the new tokens only:
    the caches are the layer's own."""
    now: dict = {}
    driven = with_student_layers(copy.deepcopy(model), lambda index, hidden: layer(index, hidden, **now))
    chosen, fed = [], ids
    with torch.no_grad():
        for step, (positions, key_mask) in enumerate(schedule(mask, tokens.shape[1])):
            now.update(step=step, positions=positions, key_mask=key_mask)
            logits = driven(input_ids=fed, position_ids=positions, use_cache=False).logits[:, -1]
            chosen.append(logits.argmax(-1))
            fed = tokens[:, step:step + 1]  # [B, 1]: the library's token
    return torch.stack(chosen, dim=1)


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """Each token's position in its sequence, as `generate` gives it to left-padded rows: [B, S] (0 on padding)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


preload()  # at the checks' collection, outside every part's time limit (see the module's docstring)
