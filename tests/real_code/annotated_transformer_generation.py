# Corpus of real implementations (tests/test_real_code.py): The Annotated Transformer (Harvard NLP), for generation.
# Source: github.com/harvardnlp/annotated-transformer, the_annotated_transformer.py: PositionalEncoding,
# MultiHeadedAttention used as encoder-decoder ("src-attn") attention; commit 0a91a254735c07532e23733dce8a693e504f3a08
# License: MIT, (c) Harvard NLP.
# Provides (generation): sinusoidal_positions (PositionalEncoding's table), CrossAttention (MultiHeadedAttention with
# queries from the decoder, keys and values from the memory). The math is the source's; adaptations marked ADAPTED.
import math

import torch
import torch.nn as nn


def sinusoidal_positions(seq_len, d_model):  # ADAPTED: PositionalEncoding's buffer `pe`, for max_len = seq_len
    # Compute the positional encodings once in log space.
    pe = torch.zeros(seq_len, d_model)
    position = torch.arange(0, seq_len).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model)
    )
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe  # ADAPTED: [seq_len, d_model], without pe.unsqueeze(0)


class CrossAttention(nn.Module):
    def __init__(self, d_model, num_heads, d_context=None):  # ADAPTED: MultiHeadedAttention(h, d_model)
        super().__init__()
        assert d_model % num_heads == 0
        d_context = d_model if d_context is None else d_context
        # We assume d_v always equals d_k
        self.d_k = d_model // num_heads
        self.h = num_heads
        # ADAPTED: self.linears[0..3] under the contract's names, bias-free; the key and value layers read the
        # context's width (the source's memory has d_model features)
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_context, d_model, bias=False)
        self.W_v = nn.Linear(d_context, d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, context, context_mask=None):  # ADAPTED: forward(query=x, key=value=memory, mask=src_mask)
        mask = None if context_mask is None else context_mask.unsqueeze(-2)  # ADAPTED: the source's [B, 1, S_k]
        if mask is not None:
            # Same mask applied to all h heads.
            mask = mask.unsqueeze(1)
        nbatches = x.size(0)

        # 1) Do all the linear projections in batch from d_model => h x d_k
        query, key, value = [
            lin(t).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, t in zip((self.W_q, self.W_k, self.W_v), (x, context, context))
        ]

        # 2) Apply attention on all the projected vectors in batch (ADAPTED: attention() inlined, no dropout)
        d_k = query.size(-1)
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = scores.softmax(dim=-1)
        out = torch.matmul(p_attn, value)

        # 3) "Concat" using a view and apply a final linear.
        out = out.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.W_o(out)
