# Corpus of real implementations (tests/test_real_code.py): karpathy/minGPT's CausalSelfAttention.
# Source: github.com/karpathy/minGPT, mingpt/model.py, class CausalSelfAttention, commit bbbdac74fa9b2e55574d70056163ffbae42310c1
# License: MIT, (c) Andrej Karpathy.
# Provides: MultiHeadSelfAttention (part multihead). minGPT's math (separate key/query/value layers, -1e10 fill,
# softmax, dropout on the weights), unchanged; the adaptations are marked ADAPTED.
import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0):  # ADAPTED: the course's signature instead of a config
        super().__init__()
        assert d_model % num_heads == 0
        # key, query, value projections for all heads
        # ADAPTED: minGPT's self.query, self.key, self.value are the three row blocks (q, k, v) of the course's
        # one W_qkv layer; bias-free as the contract asks
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        # regularization
        self.dropout = nn.Dropout(dropout)  # ADAPTED: attn_drop, under the contract's name
        # output projection
        self.W_o = nn.Linear(d_model, d_model, bias=False)  # ADAPTED: self.proj, bias-free
        self.n_head = num_heads

    def forward(self, x, mask=None, causal=False):  # ADAPTED: the course's signature (minGPT: always causal)
        B, T, C = x.size()
        query, key, value = self.W_qkv(x).chunk(3, dim=-1)  # ADAPTED: the three layers, as row blocks

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        k = key.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = query.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = value.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

        # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if causal:  # ADAPTED: minGPT's registered tril buffer, built here for T
            tril = torch.tril(torch.ones(T, T, device=x.device)).view(1, 1, T, T)
            att = att.masked_fill(tril == 0, -1e10)  # todo: just use float('-inf') instead?
        if mask is not None:  # ADAPTED: a padding mask (True = real token), minGPT's fill
            att = att.masked_fill(~mask[:, None, None, :], -1e10)
        att = F.softmax(att, dim=-1)
        att = self.dropout(att)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs side by side

        # output projection
        return self.W_o(y)  # ADAPTED: resid_drop belongs to the block, left out
