# Corpus of real implementations (tests/test_real_code.py): timm's Attention (PyTorch Image Models).
# Source: github.com/huggingface/pytorch-image-models, timm/layers/attention.py, class Attention,
# commit f354b305260bfd7c03b44421eb83f6350216d619
# License: Apache-2.0, (c) Ross Wightman.
# Provides: MultiHeadSelfAttention (part multihead). timm's math (one qkv layer reshaped to (3, B, H, N, hd),
# q scaled first, an additive mask, softmax, dropout), unchanged; adaptations are marked ADAPTED.
import torch
import torch.nn as nn
from torch.nn import functional as F


def maybe_add_mask(scores, attn_mask=None):
    return scores if attn_mask is None else scores + attn_mask


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0):  # ADAPTED: Attention(dim, num_heads, attn_drop=...)
        super().__init__()
        assert d_model % num_heads == 0, 'dim should be divisible by num_heads'
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.scale = self.head_dim ** -0.5
        # ADAPTED: timm's use_fused_attn() off (TIMM_FUSED_ATTN=0): the manual branch runs
        self.fused_attn = False

        self.W_qkv = nn.Linear(d_model, d_model * 3, bias=False)  # ADAPTED: qkv (qkv_bias=False, timm's default)
        self.dropout = nn.Dropout(dropout)  # ADAPTED: attn_drop
        self.W_o = nn.Linear(d_model, d_model, bias=False)  # ADAPTED: proj, proj_bias=False (q/k norms are Identity)

    def forward(self, x, mask=None, causal=False):  # ADAPTED: forward(x, attn_mask)
        B, N, C = x.shape
        # ADAPTED: timm takes an additive float mask; the course's [B, N] padding mask (True = real token) and
        # causal flag become one: 0 where a key may be seen, -inf where not, [B, 1, N, N]
        attn_mask = None
        if mask is not None or causal:
            allowed = torch.ones(B, 1, N, N, dtype=torch.bool, device=x.device)
            if mask is not None:
                allowed = allowed & mask[:, None, None, :]
            if causal:
                allowed = allowed & torch.ones(N, N, dtype=torch.bool, device=x.device).tril()
            attn_mask = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill(~allowed, float("-inf"))

        qkv = self.W_qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)

        if self.fused_attn:
            x = F.scaled_dot_product_attention(
                q, k, v,
                attn_mask=attn_mask,
                dropout_p=self.dropout.p if self.training else 0.,
            )
        else:
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
            attn = maybe_add_mask(attn, attn_mask)
            attn = attn.softmax(dim=-1)
            attn = self.dropout(attn)
            x = attn @ v

        x = x.transpose(1, 2).reshape(B, N, C)
        return self.W_o(x)  # ADAPTED: norm is Identity, proj_drop belongs to the block
