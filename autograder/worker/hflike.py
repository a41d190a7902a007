"""What a `real_models` student's `from_hf` reads in the worker: the library's attention modules, weights only.

The `transformers` library never runs in the worker (its models, masks and rotary code run on the trusted
side, autograder/checks/real_models/library.py). A student's `GPT2StyleAttention.from_hf(attn)`,
`layer.to_hf(attn)`, `BertStyleSelfAttention.from_hf(attn)` and `from_hf_llama(attn, rope_base)` get these
instead: modules with the class name, the submodules, the attributes and the `config` fields of the library's
`GPT2Attention`, `BertSelfAttention` and `LlamaAttention` (4.x and 5.x), holding the trusted side's weights. Their
forward refuses to run: a student's layer must compute attention itself, not call the library's module.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn as nn


class Conv1D(nn.Module):
    """GPT-2's Conv1D, as the library writes it: weight [nx, nf] (in x out), y = x @ weight + bias."""

    def __init__(self, nf: int, nx: int):
        super().__init__()
        self.nf, self.nx = nf, nx
        self.weight = nn.Parameter(torch.zeros(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], self.nf)


class _WeightsOnly(nn.Module):
    def forward(self, *args, **kwargs):
        raise RuntimeError(f"the grader's {type(self).__name__} holds the library's weights only: your layer must "
                           "compute attention itself, not call the library's module")


class GPT2Attention(_WeightsOnly):
    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.config = SimpleNamespace(hidden_size=d_model, n_embd=d_model, num_attention_heads=num_heads,
                                      n_head=num_heads, scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
                                      reorder_and_upcast_attn=False, _attn_implementation="eager")
        self.embed_dim, self.num_heads = d_model, num_heads
        self.head_dim, self.split_size = d_model // num_heads, d_model
        self.scaling = self.head_dim ** -0.5
        self.is_cross_attention, self.is_causal, self.layer_idx = False, True, 0
        self.c_attn = Conv1D(3 * d_model, d_model)
        self.c_proj = Conv1D(d_model, d_model)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)


class BertSelfAttention(_WeightsOnly):
    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.config = SimpleNamespace(hidden_size=d_model, num_attention_heads=num_heads, is_decoder=False,
                                      _attn_implementation="eager")
        self.num_attention_heads = num_heads
        self.attention_head_size = d_model // num_heads
        self.all_head_size = d_model
        self.scaling = self.attention_head_size ** -0.5
        self.is_decoder, self.is_causal, self.layer_idx = False, False, 0
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(0.0)


class LlamaAttention(_WeightsOnly):
    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, rope_base: float):
        super().__init__()
        head_dim = d_model // num_heads
        self.config = SimpleNamespace(hidden_size=d_model, num_attention_heads=num_heads,
                                      num_key_value_heads=num_kv_heads, head_dim=head_dim, attention_bias=False,
                                      rope_theta=rope_base, rope_parameters={"rope_type": "default",
                                                                             "rope_theta": rope_base},
                                      _attn_implementation="eager")
        self.head_dim, self.num_key_value_groups = head_dim, num_heads // num_kv_heads
        self.scaling = head_dim ** -0.5
        self.is_causal, self.layer_idx, self.attention_dropout = True, 0, 0.0
        self.q_proj = nn.Linear(d_model, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, d_model, bias=False)


def _loaded(module: nn.Module, state: dict | None) -> nn.Module:
    if state:
        module.load_state_dict(state)
    return module.eval()


def hf_gpt2_attention(d_model: int, num_heads: int, state: dict | None = None) -> GPT2Attention:
    return _loaded(GPT2Attention(d_model, num_heads), state)


def hf_bert_self_attention(d_model: int, num_heads: int, state: dict | None = None) -> BertSelfAttention:
    return _loaded(BertSelfAttention(d_model, num_heads), state)


def hf_llama_attention(d_model: int, num_heads: int, num_kv_heads: int, rope_base: float,
                       state: dict | None = None) -> LlamaAttention:
    return _loaded(LlamaAttention(d_model, num_heads, num_kv_heads, rope_base), state)
