"""Reference implementation of the third assignment, `efficient` (see ../shared/course-spec.md).

Attention that scales: FlashAttention's algorithm (online softmax over tiles, the log-sum-exp,
merging partial results), sliding-window attention computed chunk by chunk, linear attention
(the kernel trick, and its recurrent form), and the small functions that FlexAttention takes
instead of mask tensors. Like solutions/attention.py, this file is the single ground truth:
the solution cells of the `efficient` notebooks are generated from it, and the hidden checks
compare every submission against it. Each graded function is self-contained (a notebook cell
holds exactly one of them).

Names follow the maths: B batch, H heads, S_q queries, S_k keys, D the width of queries and
keys, D_v the width of values. Per-head tensors are [B, H, S, D].
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------- #
# Part flash
# --------------------------------------------------------------------------- #


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, block_q: int = 64, block_k: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, H, S_q, D], k [B, H, S_k, D], v [B, H, S_k, D_v] -> (out [B, H, S_q, D_v] in q's dtype, lse [B, H, S_q] float32), one (block_q x block_k) tile of scores at a time."""
    B, H, S_q, D = q.shape
    S_k, D_v = k.shape[-2], v.shape[-1]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32  # half inputs accumulate in float32
    scale = 1.0 / math.sqrt(D)
    offset = S_k - S_q  # bottom-right causal: query i sees keys j <= i + offset
    out = torch.zeros(B, H, S_q, D_v, dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, S_q), float("-inf"), dtype=torch.float32, device=q.device)
    for i0 in range(0, S_q, block_q):
        i1 = min(i0 + block_q, S_q)
        q_blk = q[:, :, i0:i1].to(acc)  # [B, H, bq, D]
        m = torch.full((B, H, i1 - i0), float("-inf"), dtype=acc, device=q.device)  # running max of each row
        row_sum = torch.zeros(B, H, i1 - i0, dtype=acc, device=q.device)  # running sum of exp(score - m)
        o = torch.zeros(B, H, i1 - i0, D_v, dtype=acc, device=q.device)  # running unnormalised output
        # causal: key blocks that start after the last visible key of this query block are skipped
        kv_stop = min(S_k, i1 + offset) if causal else S_k
        for j0 in range(0, max(kv_stop, 0), block_k):
            j1 = min(j0 + block_k, S_k)
            s = q_blk @ k[:, :, j0:j1].to(acc).transpose(-2, -1) * scale  # [B, H, bq, bk]
            if causal and j1 - 1 > i0 + offset:  # the tile crosses the diagonal
                query = torch.arange(i0, i1, device=q.device)[:, None]  # [bq, 1]
                key = torch.arange(j0, j1, device=q.device)[None, :]  # [1, bk]
                s = s.masked_fill(key > query + offset, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))  # [B, H, bq]
            m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # a row that has seen no key yet
            p = torch.exp(s - m_safe[..., None])  # [B, H, bq, bk]
            alpha = torch.exp(m - m_safe)  # [B, H, bq]: rescales what was summed under the old max
            row_sum = alpha * row_sum + p.sum(dim=-1)
            o = alpha[..., None] * o + p @ v[:, :, j0:j1].to(acc)  # [B, H, bq, D_v]
            m = m_new
        seen = row_sum > 0  # [B, H, bq]: False for a query that sees no key (causal with S_q > S_k)
        out[:, :, i0:i1] = torch.where(seen[..., None], o / row_sum.clamp_min(1e-30)[..., None], 0.0).to(q.dtype)
        lse[:, :, i0:i1] = (m + torch.log(row_sum)).float()  # log sum_j exp(s_j) = m + log sum_j exp(s_j - m)
    return out, lse


def merge_attention(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B, H, S_q, D_v], lse [B, H, S_q]) of attention over the keys of a and b together, from each side's attention."""
    m = torch.maximum(lse_a, lse_b).float()  # [B, H, S_q]
    m = m.masked_fill(m == float("-inf"), 0.0)  # both sides empty: both weights below become 0
    w_a = torch.exp(lse_a.float() - m)  # [B, H, S_q]: each side's sum of exp(score - m), at most 1
    w_b = torch.exp(lse_b.float() - m)
    total = w_a + w_b
    lse = m + torch.log(total)  # -inf when neither side sees a key
    # a side whose lse is -inf has weight 0 and adds nothing, whatever its out holds
    part_a = torch.where(w_a[..., None] > 0, w_a[..., None] * out_a.float(), 0.0)  # [B, H, S_q, D_v]
    part_b = torch.where(w_b[..., None] > 0, w_b[..., None] * out_b.float(), 0.0)
    out = (part_a + part_b) / total.clamp_min(1e-30)[..., None]
    return out.to(out_a.dtype), lse


# --------------------------------------------------------------------------- #
# Part flash_backward
# --------------------------------------------------------------------------- #


def flash_attention_backward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, grad_out: torch.Tensor,
    causal: bool = False, block_q: int = 64, block_k: int = 64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad_q, grad_k, grad_v) of flash_attention's out, each tile's probabilities recomputed from q, k and lse: never an [S_q, S_k] matrix."""
    B, H, S_q, D = q.shape
    S_k = k.shape[-2]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32  # half inputs accumulate in float32
    scale = 1.0 / math.sqrt(D)
    offset = S_k - S_q  # bottom-right causal: query i sees keys j <= i + offset
    grad_q = torch.zeros(q.shape, dtype=acc, device=q.device)  # [B, H, S_q, D]
    grad_k = torch.zeros(k.shape, dtype=acc, device=q.device)  # [B, H, S_k, D]
    grad_v = torch.zeros(v.shape, dtype=acc, device=q.device)  # [B, H, S_k, D_v]
    # delta_i = rowsum(dO_i * O_i) = sum_j P_ij dP_ij: one number per query, computed once
    delta = (grad_out.to(acc) * out.to(acc)).sum(dim=-1)  # [B, H, S_q]
    # a query that sees no key has lse = -inf: +inf makes each of its P = exp(s - lse) exactly 0
    lse_safe = lse.to(acc).masked_fill(lse == float("-inf"), float("inf"))  # [B, H, S_q]
    for i0 in range(0, S_q, block_q):
        i1 = min(i0 + block_q, S_q)
        q_blk, do_blk = q[:, :, i0:i1].to(acc), grad_out[:, :, i0:i1].to(acc)  # [B, H, bq, D], [B, H, bq, D_v]
        kv_stop = min(S_k, i1 + offset) if causal else S_k  # key blocks after the last visible key: skipped
        for j0 in range(0, max(kv_stop, 0), block_k):
            j1 = min(j0 + block_k, S_k)
            k_blk, v_blk = k[:, :, j0:j1].to(acc), v[:, :, j0:j1].to(acc)  # [B, H, bk, D], [B, H, bk, D_v]
            s = q_blk @ k_blk.transpose(-2, -1) * scale  # [B, H, bq, bk]
            if causal and j1 - 1 > i0 + offset:  # the tile crosses the diagonal
                query = torch.arange(i0, i1, device=q.device)[:, None]  # [bq, 1]
                key = torch.arange(j0, j1, device=q.device)[None, :]  # [1, bk]
                s = s.masked_fill(key > query + offset, float("-inf"))
            p = torch.exp(s - lse_safe[:, :, i0:i1, None])  # [B, H, bq, bk]: the forward's probabilities
            grad_v[:, :, j0:j1] += p.transpose(-2, -1) @ do_blk  # [B, H, bk, D_v]
            dp = do_blk @ v_blk.transpose(-2, -1)  # [B, H, bq, bk]
            ds = p * (dp - delta[:, :, i0:i1, None])  # [B, H, bq, bk]: the softmax's backward
            grad_q[:, :, i0:i1] += ds @ k_blk * scale  # [B, H, bq, D]
            grad_k[:, :, j0:j1] += ds.transpose(-2, -1) @ q_blk * scale  # [B, H, bk, D]
    return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)


class FlashAttentionFunction(torch.autograd.Function):
    """Attention whose forward is flash_attention and whose backward is flash_attention_backward: it saves q, k, v, out, lse, never the probabilities."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        out, lse = flash_attention(q, k, v, causal=causal)
        ctx.save_for_backward(q, k, v, out, lse)  # O(S) per head: no [S_q, S_k] tensor survives the forward
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        grad_q, grad_k, grad_v = flash_attention_backward(q, k, v, out, lse, grad_out, causal=ctx.causal)
        return grad_q, grad_k, grad_v, None  # no gradient for causal


# --------------------------------------------------------------------------- #
# Part sliding_window
# --------------------------------------------------------------------------- #


def sliding_window_mask(S: int, window: int) -> torch.Tensor:
    """BoolTensor [S, S]: True where i - window < j <= i (each query sees itself and the window - 1 keys before it)."""
    i = torch.arange(S)[:, None]  # [S, 1] queries
    j = torch.arange(S)[None, :]  # [1, S] keys
    return (j <= i) & (j > i - window)


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, chunk_size: int = 128
) -> torch.Tensor:
    """q, k, v [B, H, S, D] -> [B, H, S, D_v]: attention within the window, one chunk of queries and only its visible keys at a time."""
    B, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D)
    out = torch.empty(B, H, S, v.shape[-1], dtype=q.dtype, device=q.device)  # [B, H, S, D_v]
    for i0 in range(0, S, chunk_size):
        i1 = min(i0 + chunk_size, S)
        j0 = max(0, i0 - window + 1)  # the first key the first query of the chunk can see
        s = q[:, :, i0:i1] @ k[:, :, j0:i1].transpose(-2, -1) * scale  # [B, H, chunk, <= chunk + window - 1]
        query = torch.arange(i0, i1, device=q.device)[:, None]  # [chunk, 1]
        key = torch.arange(j0, i1, device=q.device)[None, :]  # [1, keys read]
        visible = (key <= query) & (key > query - window)
        s = s.masked_fill(~visible, float("-inf"))
        out[:, :, i0:i1] = torch.softmax(s, dim=-1) @ v[:, :, j0:i1]  # [B, H, chunk, D_v]
    return out


# --------------------------------------------------------------------------- #
# Part linear
# --------------------------------------------------------------------------- #


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1: positive everywhere, so the weights phi(q) . phi(k) are too."""
    return F.elu(x) + 1


def linear_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, eps: float = 1e-6
) -> torch.Tensor:
    """q, k [B, H, S, D], v [B, H, S, D_v] -> [B, H, S, D_v]: phi(q_i) . sum_j phi(k_j) v_j^T / (phi(q_i) . sum_j phi(k_j) + eps), no [S, S] tensor."""
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1  # [B, H, S, D], positive
    if causal:
        # chunkwise: inside a chunk the weights phi(q_i) . phi(k_j), j <= i, as a small [C, C] matrix; the keys of
        # every earlier chunk through the running sums kv and z (the recurrent state after the previous chunk)
        B, H, S, D = q.shape
        C = 64  # positions per chunk
        kv = torch.zeros(B, H, D, v.shape[-1], dtype=v.dtype, device=v.device)  # sum of phi(k_j) v_j^T so far
        z = torch.zeros(B, H, D, dtype=k.dtype, device=k.device)  # sum of phi(k_j) so far
        numerator = torch.empty(B, H, S, v.shape[-1], dtype=v.dtype, device=v.device)  # [B, H, S, D_v]
        denominator = torch.empty(B, H, S, dtype=q.dtype, device=q.device)  # [B, H, S]
        for i0 in range(0, S, C):
            i1 = min(i0 + C, S)
            q_c, k_c, v_c = phi_q[:, :, i0:i1], phi_k[:, :, i0:i1], v[:, :, i0:i1]  # [B, H, C, D], [B, H, C, D_v]
            w = (q_c @ k_c.transpose(-2, -1)).tril()  # [B, H, C, C]: key j <= query i inside the chunk
            numerator[:, :, i0:i1] = q_c @ kv + w @ v_c  # [B, H, C, D_v]: the earlier chunks, then this one
            denominator[:, :, i0:i1] = (q_c * z[..., None, :]).sum(dim=-1) + w.sum(dim=-1)  # [B, H, C]
            kv = kv + k_c.transpose(-2, -1) @ v_c  # [B, H, D, D_v]: this chunk's keys join the state
            z = z + k_c.sum(dim=-2)  # [B, H, D]
    else:
        # associativity: phi(Q) (phi(K)^T V) instead of (phi(Q) phi(K)^T) V
        kv = phi_k.transpose(-2, -1) @ v  # [B, H, D, D_v]
        z = phi_k.sum(dim=-2)  # [B, H, D]
        numerator = phi_q @ kv  # [B, H, S, D_v]
        denominator = phi_q @ z[..., None]  # [B, H, S, 1]
        denominator = denominator[..., 0]  # [B, H, S]
    return numerator / (denominator[..., None] + eps)


def linear_attention_step(
    state: tuple[torch.Tensor, torch.Tensor] | None,
    q_t: torch.Tensor,
    k_t: torch.Tensor,
    v_t: torch.Tensor,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One step of causal linear attention: q_t, k_t [B, H, D], v_t [B, H, D_v] -> (out_t [B, H, D_v], state (sum phi(k) v^T [B, H, D, D_v], sum phi(k) [B, H, D]))."""
    phi_q, phi_k = F.elu(q_t) + 1, F.elu(k_t) + 1  # [B, H, D]
    if state is None:
        B, H, D = k_t.shape
        kv = torch.zeros(B, H, D, v_t.shape[-1], dtype=v_t.dtype, device=v_t.device)
        z = torch.zeros(B, H, D, dtype=k_t.dtype, device=k_t.device)
    else:
        kv, z = state
    kv = kv + phi_k[..., :, None] * v_t[..., None, :]  # [B, H, D, D_v]: add this key's outer product
    z = z + phi_k  # [B, H, D]
    numerator = (phi_q[..., :, None] * kv).sum(dim=-2)  # [B, H, D_v]
    denominator = (phi_q * z).sum(dim=-1)  # [B, H]
    return numerator / (denominator[..., None] + eps), (kv, z)


# --------------------------------------------------------------------------- #
# Part flex
# --------------------------------------------------------------------------- #


def document_causal_mask_mod(document_ids: torch.Tensor):
    """mask_mod for packed sequences, document_ids [B, S]: causal within each document, nothing across documents."""

    def mask_mod(b, h, q_idx, kv_idx):
        same_document = document_ids[b, q_idx] == document_ids[b, kv_idx]
        return same_document & (kv_idx <= q_idx)

    return mask_mod


def prefix_lm_mask_mod(prefix_lengths: torch.Tensor):
    """mask_mod for prefix-LM, prefix_lengths [B]: every query sees the whole prefix, and causally after it."""

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < prefix_lengths[b]) | (kv_idx <= q_idx)

    return mask_mod


def sliding_window_mask_mod(window: int):
    """mask_mod of sliding_window_mask: True where q_idx - window < kv_idx <= q_idx."""

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < window)

    return mask_mod


def alibi_score_mod(num_heads: int):
    """score_mod of ALiBi: score + slope_h * (kv_idx - q_idx), with the slopes of the ALiBi paper's code:
    2^(-8 (h + 1) / num_heads) for a power of two; else those of the largest power of two n below, then every
    other slope of 2n heads."""
    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    n = 2 ** int(math.floor(math.log2(num_heads)))  # the largest power of two <= num_heads
    slopes = torch.tensor(power_of_two(n) + power_of_two(2 * n)[0::2][: num_heads - n], dtype=torch.float32)  # [H]

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return score_mod


def softcap_score_mod(cap: float):
    """score_mod of logit soft-capping: cap * tanh(score / cap), close to score when small, never beyond +-cap."""

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return score_mod
