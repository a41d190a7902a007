# Corpus of real implementations (tests/test_real_code.py): Meta's Llama 3 reference model.
# Source: github.com/meta-llama/llama3, llama/model.py: ModelArgs.rope_theta, precompute_freqs_cis, apply_rotary_emb,
# repeat_kv, Attention.forward and the mask of Transformer.forward; commit 453ae54806ac9bd4ea793dfecd2b2f27ece5f9cf
# License: the Llama 3 Community License Agreement (a few adapted lines for testing, with this attribution).
# Provides (generation): apply_rope (complex-number RoPE with Llama 3's rope_theta as the default base), repeat_kv,
# CachedSelfAttention (its cache, scores and mask). The math is the source's; adaptations are marked ADAPTED.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ROPE_THETA = 500000  # ModelArgs.rope_theta


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
    return freqs_cis


def apply_rope(x, positions, base=ROPE_THETA):  # ADAPTED: apply_rotary_emb on one tensor, at `positions`
    # ADAPTED: the table for every position up to the largest, indexed by positions ([S] or [B, S]), and
    # broadcast over x [..., S, hd / 2] (the source's reshape_for_broadcast does it for its [B, S, H, hd] layout)
    freqs_cis = precompute_freqs_cis(x.shape[-1], int(positions.max()) + 1, base)[positions]
    if positions.dim() == 2 and x.dim() == 4:
        freqs_cis = freqs_cis[:, None]
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    x_out = torch.view_as_real(x_ * freqs_cis).flatten(-2)  # ADAPTED: flatten(3) for its 4-D layout
    return x_out.type_as(x)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
    x = x.transpose(1, 2)  # ADAPTED: the course's [B, H_kv, S, hd] to Llama's (bs, slen, n_kv_heads, head_dim)
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x.transpose(1, 2)
    return (
        x[:, :, :, None, :]
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    ).transpose(1, 2)  # ADAPTED: back to [B, H, S, hd]


class CachedSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads):  # ADAPTED: Attention(args), one process, no RoPE here
        super().__init__()
        self.n_local_heads = num_heads
        self.head_dim = d_model // num_heads
        # ADAPTED: wq, wk, wv are the row blocks (q, k, v) of W_qkv; wo is W_o
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None):  # ADAPTED: forward(x, start_pos, freqs_cis, mask), the mask built here
        bsz, seqlen, _ = x.shape
        start_pos = 0 if cache is None else len(cache)  # ADAPTED: the cache's length is start_pos
        # the mask of Transformer.forward
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=x.device)
            mask = torch.triu(mask, diagonal=1)
            # When performing key-value caching, we compute the attention scores
            # only for the new sequence. Thus, the matrix of scores is of size
            # (seqlen, cache_len + seqlen), and the only masked entries are (i, j) for
            # j > cache_len + i, since row i corresponds to token cache_len + i.
            mask = torch.hstack([torch.zeros((seqlen, start_pos), device=x.device), mask]).type_as(x)

        xq, xk, xv = self.W_qkv(x).chunk(3, dim=-1)
        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_heads, self.head_dim)

        # ADAPTED: the preallocated cache_k / cache_v become the course's KVCache ([B, H, S, hd] layout)
        keys, values = xk.transpose(1, 2), xv.transpose(1, 2)
        if cache is not None:
            keys, values = cache.append(keys, values)

        xq = xq.transpose(1, 2)  # (bs, n_local_heads, seqlen, head_dim)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask  # (bs, n_local_heads, seqlen, cache_len + seqlen)
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)  # (bs, n_local_heads, seqlen, head_dim)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.W_o(output)
