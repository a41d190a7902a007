# Corpus of real implementations (tests/test_real_code.py): The Annotated Transformer (Harvard NLP).
# Source: github.com/harvardnlp/annotated-transformer, the_annotated_transformer.py: attention(),
# subsequent_mask(), Batch's src_mask, MultiHeadedAttention; commit 0a91a254735c07532e23733dce8a693e504f3a08
# License: MIT, (c) Harvard NLP.
# Provides (self_attention): scaled_scores, attention_weights, attend (its attention() in three steps);
# padding_mask, causal_mask, apply_padding_mask, apply_causal_mask (its masks and its -1e9 fill);
# MultiHeadSelfAttention (its MultiHeadedAttention). The math is the source's; adaptations are marked ADAPTED.
import math

import torch
import torch.nn as nn


def scaled_scores(query, key):  # ADAPTED: the first line of attention(query, key, value, mask, dropout)
    d_k = query.size(-1)
    return torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)


def attention_weights(scores):  # ADAPTED: attention()'s softmax
    return scores.softmax(dim=-1)


def attend(p_attn, value):  # ADAPTED: attention()'s weighted sum
    return torch.matmul(p_attn, value)


def padding_mask(lengths, seq_len):
    # ADAPTED: the source compares token ids, (src != pad); the course gives lengths, so the same comparison
    # is made on positions (True = real token, as the source's mask)
    return torch.arange(seq_len)[None, :] < lengths[:, None]


def causal_mask(seq_len):
    "Mask out subsequent positions."
    attn_shape = (1, seq_len, seq_len)
    subsequent_mask = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8)
    return (subsequent_mask == 0)[0]  # ADAPTED: [S, S], without the leading batch axis of 1


def apply_padding_mask(scores, mask):
    # ADAPTED: the source's mask is [B, 1, S] for [B, S, S] scores and gets one more axis per head
    while mask.dim() < scores.dim():
        mask = mask.unsqueeze(1)
    return scores.masked_fill(mask == 0, -1e9)


def apply_causal_mask(scores):
    S_q, S_k = scores.shape[-2:]  # ADAPTED: subsequent_mask is square; the course's scores need not be
    subsequent = torch.triu(torch.ones(S_q, S_k), diagonal=1).type(torch.uint8) == 0
    return scores.masked_fill(subsequent == 0, -1e9)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0):  # ADAPTED: MultiHeadedAttention(h, d_model, dropout)
        "Take in model size and number of heads."
        super().__init__()
        assert d_model % num_heads == 0
        # We assume d_v always equals d_k
        self.d_k = d_model // num_heads
        self.h = num_heads
        # ADAPTED: self.linears[0:3] are the three row blocks (q, k, v) of W_qkv; self.linears[3] is W_o;
        # bias-free as the contract asks
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, mask=None, causal=False):  # ADAPTED: self-attention: query = key = value = x
        S = x.size(1)
        # ADAPTED: the course's [B, S] padding mask and causal flag become the source's [B, 1, S] src_mask, or
        # its tgt_mask (padding & subsequent_mask) for a decoder
        if mask is not None:
            mask = mask.unsqueeze(-2)
        if causal:
            future = causal_mask(S)[None]  # [1, S, S]
            mask = future if mask is None else mask & future
        if mask is not None:
            # Same mask applied to all h heads.
            mask = mask.unsqueeze(1)
        nbatches = x.size(0)

        # 1) Do all the linear projections in batch from d_model => h x d_k
        query, key, value = [
            projected.view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for projected in self.W_qkv(x).chunk(3, dim=-1)  # ADAPTED: lin(x) for the three row blocks
        ]

        # 2) Apply attention on all the projected vectors in batch (ADAPTED: attention() inlined, its dropout
        # argument being self.dropout)
        d_k = query.size(-1)
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = self.dropout(scores.softmax(dim=-1))
        x = torch.matmul(p_attn, value)

        # 3) "Concat" using a view and apply a final linear.
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.W_o(x)
