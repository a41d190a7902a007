# Corpus of real implementations (tests/test_real_code.py): transformers 4.10's own GPT-2 attention.
# Source: github.com/huggingface/transformers, src/transformers/models/gpt2/modeling_gpt2.py at the commit tagged
#   v4.10.0: GPT2Attention.__init__, _attn, _split_heads, _merge_heads, forward; the padding mask of
#   GPT2Model.forward ((1.0 - attention_mask) * -10000.0)
# License: Apache-2.0, (c) the OpenAI Team Authors and the HuggingFace Inc. team.
# Provides (real_models): GPT2StyleAttention (4.10's math: the causal mask by torch.where with masked_bias -1e4, the
# padding added as -1e4, scale_attn_weights read from the library's module by from_hf). The math is the source's;
# adaptations are marked ADAPTED.
import torch
import torch.nn as nn


class GPT2StyleAttention(nn.Module):
    # ADAPTED: GPT2Attention(config, is_cross_attention=False) takes (d_model, num_heads); the config's fields that
    # its __init__ reads (max_position_embeddings, scale_attn_weights) are keywords, given by from_hf
    def __init__(self, d_model, num_heads, max_positions=1024, scale_attn_weights=True):
        super().__init__()
        # ADAPTED: persistent=False, so that the layer's state_dict is the course's four projections
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.uint8)).view(
                1, 1, max_positions, max_positions
            ),
            persistent=False,
        )
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)

        self.embed_dim = d_model
        self.num_heads = num_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        if self.head_dim * self.num_heads != self.embed_dim:
            raise ValueError(
                f"embed_dim must be divisible by num_heads (got `embed_dim`: {self.embed_dim} and `num_heads`: {self.num_heads})."
            )

        self.scale_attn_weights = scale_attn_weights
        self.is_cross_attention = False

        # ADAPTED: c_attn (a Conv1D, [d, 3d]) as the course's W_q, W_k, W_v; c_proj as W_o (nn.Linear layout)
        self.W_q = nn.Linear(self.embed_dim, self.embed_dim)
        self.W_k = nn.Linear(self.embed_dim, self.embed_dim)
        self.W_v = nn.Linear(self.embed_dim, self.embed_dim)
        self.W_o = nn.Linear(self.embed_dim, self.embed_dim)

    def _attn(self, query, key, value, attention_mask=None, head_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))

        if self.scale_attn_weights:
            attn_weights = attn_weights / (float(value.size(-1)) ** 0.5)

        if not self.is_cross_attention:
            # if only "normal" attention layer implements causal mask
            query_length, key_length = query.size(-2), key.size(-2)
            causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length].bool()
            attn_weights = torch.where(causal_mask, attn_weights, self.masked_bias.to(attn_weights.dtype))

        if attention_mask is not None:
            # Apply the attention mask
            attn_weights = attn_weights + attention_mask

        attn_weights = nn.Softmax(dim=-1)(attn_weights)

        # Mask heads if we want to
        if head_mask is not None:
            attn_weights = attn_weights * head_mask

        attn_output = torch.matmul(attn_weights, value)

        return attn_output, attn_weights

    def _split_heads(self, tensor, num_heads, attn_head_size):
        """
        Splits hidden_size dim into attn_head_size and num_heads
        """
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(*new_shape)
        return tensor.permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        """
        Merges attn_head_size dim and num_attn_heads dim into hidden_size
        """
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, x, key_mask=None):  # ADAPTED: hidden_states = x; no layer_past, head_mask, use_cache
        attention_mask = None
        if key_mask is not None:
            # ADAPTED: GPT2Model.forward's padding mask, [B, 1, 1, S] in the layer's dtype
            attention_mask = key_mask[:, None, None, :].to(dtype=x.dtype)
            attention_mask = (1.0 - attention_mask) * -10000.0

        query, key, value = self.W_q(x), self.W_k(x), self.W_v(x)  # ADAPTED: self.c_attn(x).split(split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)

        attn_output, attn_weights = self._attn(query, key, value, attention_mask)

        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        return self.W_o(attn_output)  # ADAPTED: self.c_proj; no resid_dropout (the layer is graded in eval mode)

    @classmethod
    def from_hf(cls, attn):
        # ADAPTED: the course's loader, written as 4.10's own code reads its module: its attributes and config
        layer = cls(attn.embed_dim, attn.num_heads, attn.config.max_position_embeddings, attn.scale_attn_weights)
        W = attn.c_attn.weight  # Conv1D: [embed_dim, 3 * embed_dim], y = x @ W + b
        b = attn.c_attn.bias
        with torch.no_grad():
            for i, linear in enumerate((layer.W_q, layer.W_k, layer.W_v)):
                linear.weight.copy_(W[:, i * attn.split_size : (i + 1) * attn.split_size].T)
                linear.bias.copy_(b[i * attn.split_size : (i + 1) * attn.split_size])
            layer.W_o.weight.copy_(attn.c_proj.weight.T)
            layer.W_o.bias.copy_(attn.c_proj.bias)
        return layer

    def to_hf(self, attn):
        # ADAPTED: the course's writer, the inverse of from_hf
        with torch.no_grad():
            attn.c_attn.weight.copy_(torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight], dim=0).T)
            attn.c_attn.bias.copy_(torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias]))
            attn.c_proj.weight.copy_(self.W_o.weight.T)
            attn.c_proj.bias.copy_(self.W_o.bias)
        return attn
