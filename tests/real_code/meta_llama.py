# Corpus of real implementations (tests/test_real_code.py): Meta's Llama 2 reference model, loaded from the library.
# Source: github.com/meta-llama/llama, llama/model.py: precompute_freqs_cis, reshape_for_broadcast, apply_rotary_emb,
# repeat_kv, Attention.__init__ and forward, the mask of Transformer.forward (Llama 2);
# commit 8580eb9a896bdb82d376b7040d18a2e7b402b10f
# License: the Llama 2 Community License Agreement (a few adapted lines for testing, with this attribution).
# Provides (real_models): from_hf_llama, which reads the library's LlamaAttention as transformers' conversion script
# maps Meta's params (max_seq_len is config.max_position_embeddings, n_heads, n_kv_heads, dim) and undoes its
# permutation of wq and wk with half_split_to_interleaved. The math is the source's; adaptations are marked ADAPTED.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)  # type: ignore
    freqs = torch.outer(t, freqs).float()  # type: ignore
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
    return freqs_cis


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor):
    # ADAPTED: freqs_cis per row ([B, S, head_dim / 2], taken at each token's position) as well as [S, head_dim / 2]
    ndim = x.ndim
    if freqs_cis.ndim == 3:
        return freqs_cis.view(x.shape[0], x.shape[1], *([1] * (ndim - 3)), x.shape[-1])
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        x[:, :, :, None, :]
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )


class Attention(nn.Module):
    # ADAPTED: Attention(args: ModelArgs) takes the params one by one; no model parallelism (model_parallel_size 1,
    # nn.Linear for ColumnParallelLinear and RowParallelLinear); the cache is the caller's (append / __len__), not
    # cache_k and cache_v of max_batch_size x max_seq_len
    def __init__(self, dim, n_heads, n_kv_heads, max_seq_len, rope_theta):
        super().__init__()
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.n_local_heads = n_heads
        self.n_local_kv_heads = self.n_kv_heads
        self.n_rep = self.n_local_heads // self.n_local_kv_heads
        self.head_dim = dim // n_heads

        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

        # ADAPTED: Transformer.__init__'s freqs_cis, kept by the layer, with the base given (Llama 3's rope_theta)
        self.freqs_cis = precompute_freqs_cis(self.head_dim, max_seq_len * 2, rope_theta)

    def forward(self, x, positions=None, cache=None, key_mask=None):
        # ADAPTED: (x, start_pos, freqs_cis, mask) -> the course's (x, positions, cache, key_mask)
        bsz, seqlen, _ = x.shape
        start_pos = 0 if cache is None else len(cache)
        if positions is None:
            positions = torch.arange(start_pos, start_pos + seqlen)
        freqs_cis = self.freqs_cis[positions]

        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)

        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)

        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)

        keys, values = xk, xv
        if cache is not None:  # ADAPTED: self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk (and cache_v)
            keys, values = cache.append(xk.transpose(1, 2), xv.transpose(1, 2))
            keys, values = keys.transpose(1, 2), values.transpose(1, 2)

        # repeat k/v heads if n_kv_heads < n_heads
        keys = repeat_kv(keys, self.n_rep)  # (bs, cache_len + seqlen, n_local_heads, head_dim)
        values = repeat_kv(values, self.n_rep)  # (bs, cache_len + seqlen, n_local_heads, head_dim)

        xq = xq.transpose(1, 2)  # (bs, n_local_heads, seqlen, head_dim)
        keys = keys.transpose(1, 2)  # (bs, n_local_heads, cache_len + seqlen, head_dim)
        values = values.transpose(1, 2)  # (bs, n_local_heads, cache_len + seqlen, head_dim)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)

        # ADAPTED: Transformer.forward's mask, built here for a cache of start_pos keys (triu(diagonal=1) after
        # start_pos zero columns, as later versions of the file write it); the padded keys hidden too
        start_pos = keys.shape[2] - seqlen
        mask = torch.full((seqlen, seqlen), float("-inf"), device=x.device)
        mask = torch.triu(mask, diagonal=1)
        mask = torch.hstack([torch.zeros((seqlen, start_pos), device=x.device), mask]).type_as(scores)
        if key_mask is not None:
            mask = mask.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        scores = scores + mask  # (bs, n_local_heads, seqlen, cache_len + seqlen)
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)  # (bs, n_local_heads, seqlen, head_dim)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


def from_hf_llama(attn, rope_base):
    # ADAPTED: transformers' convert_llama_weights_to_hf.py run backwards: Meta's params from the library's config
    # (max_seq_len -> max_position_embeddings, n_heads, n_kv_heads, dim), wq and wk unpermuted
    config = attn.config
    layer = Attention(config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                      config.max_position_embeddings, rope_base)
    with torch.no_grad():
        layer.wq.weight.copy_(half_split_to_interleaved(attn.q_proj.weight, config.num_attention_heads))  # noqa: F821
        layer.wk.weight.copy_(half_split_to_interleaved(attn.k_proj.weight, config.num_key_value_heads))  # noqa: F821
        layer.wv.weight.copy_(attn.v_proj.weight)
        layer.wo.weight.copy_(attn.o_proj.weight)
    return layer
