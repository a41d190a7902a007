# Corpus of real implementations (tests/test_real_code.py): Hugging Face transformers' Llama attention.
# Sources: github.com/huggingface/transformers
#   src/transformers/models/llama/modeling_llama.py: LlamaRotaryEmbedding.forward, rotate_half, apply_rotary_pos_emb,
#   repeat_kv; commit 5dd4a63548857797727ae73eeb6a6e886ea02a3e (inv_freq as modeling_rope_utils' default RoPE:
#   1 / base ** (arange(0, dim, 2) / dim))
#   src/transformers/integrations/sdpa_attention.py: sdpa_attention_forward; commit e2feb59b62124ad52a51616968f1465613bf8644
# License: Apache-2.0, (c) the HuggingFace Inc. team.
# Provides (generation): apply_rope (rotate_half RoPE), repeat_kv, CachedSelfAttention (LlamaAttention's projections
# and cache, SDPA through sdpa_attention_forward with attention_mask None). The math is the source's; adaptations
# are marked ADAPTED.
import torch
import torch.nn as nn


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, positions, base=10000.0):
    # ADAPTED: LlamaRotaryEmbedding.forward (cos, sin for position_ids), then apply_rotary_pos_emb on one tensor
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = positions.float()[..., :, None] * inv_freq  # [..., S, dim / 2] (the source: inv_freq @ position_ids)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if positions.dim() == 2 and x.dim() == 4:  # ADAPTED: unsqueeze_dim=1 for [B, H, S, hd] with [B, S] positions
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return ((x * cos) + (rotate_half(x) * sin)).to(x.dtype)


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """
    This is the equivalent of torch.repeat_interleave(x, dim=1, repeats=n_rep). The hidden states go from (batch,
    num_key_value_heads, seqlen, head_dim) to (batch, num_attention_heads, seqlen, head_dim)
    """
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def sdpa_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None):
    # ADAPTED: the GQA branch (num_key_value_groups) and the tracing branch left out: no GQA here
    if attention_mask is not None and attention_mask.ndim == 4:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    if is_causal is None:
        # The last condition is for encoder (decoder) models which specify this by passing their own `is_causal` flag
        is_causal = query.shape[2] > 1 and attention_mask is None and getattr(module, "is_causal", True)
    attn_output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=is_causal,
    )
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, None


class CachedSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads):  # ADAPTED: LlamaAttention(config, layer_idx)
        super().__init__()
        self.head_dim = d_model // num_heads
        self.scaling = self.head_dim ** -0.5
        self.is_causal = True
        # ADAPTED: q_proj, k_proj, v_proj are the row blocks (q, k, v) of W_qkv; o_proj is W_o (attention_bias False)
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None):  # ADAPTED: hidden_states = x, past_key_value = cache, no RoPE, no mask
        input_shape = x.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states, key_states, value_states = (
            t.view(hidden_shape).transpose(1, 2) for t in self.W_qkv(x).chunk(3, dim=-1))

        if cache is not None:
            key_states, value_states = cache.append(key_states, value_states)  # ADAPTED: past_key_value.update

        attn_output, _ = sdpa_attention_forward(self, query_states, key_states, value_states, None,
                                                scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.W_o(attn_output)
