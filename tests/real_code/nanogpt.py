# Corpus of real implementations (tests/test_real_code.py): karpathy/nanoGPT's CausalSelfAttention.
# Source: github.com/karpathy/nanoGPT, model.py, class CausalSelfAttention, commit 04a1d697ddc57aadb2edbe95816bf86c6b8918b0
# (the attention class is upstream nanoGPT's; that stored commit also carries a fork's SVD option, left out here).
# License: MIT, (c) Andrej Karpathy.
# Provides: MultiHeadSelfAttention (part multihead). The math is nanoGPT's, unchanged; only the adaptations
# marked ADAPTED differ (names, the course's forward(x, mask, causal) signature and mask convention).
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0):  # ADAPTED: the course's signature instead of a config
        super().__init__()
        assert d_model % num_heads == 0
        # key, query, value projections for all heads, but in a batch
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)  # ADAPTED: c_attn, bias=False as config.bias=False
        # output projection
        self.W_o = nn.Linear(d_model, d_model, bias=False)  # ADAPTED: c_proj
        # regularization
        self.dropout = nn.Dropout(dropout)  # ADAPTED: attn_dropout (resid_dropout belongs to the block, left out)
        self.n_head = num_heads
        self.n_embd = d_model
        # flash attention make GPU go brrrrr but support is only in PyTorch >= 2.0
        # ADAPTED: the flag off, as nanoGPT sets it on a torch without SDPA: the manual branch runs
        self.flash = False

    def forward(self, x, mask=None, causal=False):  # ADAPTED: the course's signature
        B, T, C = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        q, k, v = self.W_qkv(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

        # ADAPTED: nanoGPT is always causal with no padding; the course's flags select its tril mask and add
        # the [B, S] padding mask (True = real token) as [B, 1, 1, S], in the same masked_fill style
        allowed = torch.ones(1, 1, T, T, dtype=torch.bool, device=x.device)
        if causal:
            allowed = allowed & torch.tril(torch.ones(T, T, device=x.device)).view(1, 1, T, T).bool()
        if mask is not None:
            allowed = allowed & mask[:, None, None, :]

        # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        if self.flash:
            # efficient attention using Flash Attention CUDA kernels
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed,
                                                                 dropout_p=self.dropout.p if self.training else 0)
        else:
            # manual implementation of attention
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(allowed == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            att = self.dropout(att)
            y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs side by side

        # output projection
        return self.W_o(y)
