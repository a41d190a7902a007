"""Shapes, seeded inputs and trusted re-computations of the `efficient` checks.

Shapes expose bugs: B, H, S all different and above 1; S_q != S_k; D != D_v; block sizes that
divide nothing (S is never a multiple of the block). Every reference here is dense attention in
float64, written independently of solutions/efficient.py; each `*_variant` function recomputes a
result with one classic mistake (no rescaling of the running sum, lse without the max, top-left
causal, a window off by one, elu without the + 1, a recurrence that forgets its state, ALiBi's
slopes reversed, clamping instead of tanh, ...), so that a check can name the mistake whose
output the student's matches. Without keywords each variant equals the reference
(tests/test_efficient_checks_helpers.py).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.foundation import i18n
from autograder.checks import expect

_ = i18n.message

B, H = 2, 3
S_Q, S_K = 11, 17  # queries, keys: different, and neither a multiple of the blocks below
D, D_V = 8, 5  # the width of queries and keys, and of values
BLOCK_Q, BLOCK_K = 4, 5
S = 13  # self-attention length (sliding window, linear attention)
NEG_INF = float("-inf")
# The memory checks' second figure, the growth of the worker's resident memory sampled from outside, counts what the
# tensor meter cannot see (memory taken around it) but also the allocator's own pages: it may reach this many times
# a memory check's bound before it counts against the student (the S x S matrices it is there for are far beyond).
RESIDENT_ROOM = 3


def randn(g: torch.Generator, *shape, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def qkv(g: torch.Generator, S_q: int = S_Q, S_k: int = S_K, dtype=torch.float32, b: int = B, h: int = H,
        d: int = D, d_v: int = D_V, scale: float = 1.0):
    """q [b, h, S_q, d], k [b, h, S_k, d], v [b, h, S_k, d_v]."""
    return (randn(g, b, h, S_q, d, dtype=dtype, scale=scale), randn(g, b, h, S_k, d, dtype=dtype, scale=scale),
            randn(g, b, h, S_k, d_v, dtype=dtype))


# --------------------------------------------------------------------------- #
# dense attention (the ground truth) and flash_attention's mistakes
# --------------------------------------------------------------------------- #


def visible(S_q: int, S_k: int, causal: bool, align: str = "bottom_right", diagonal: bool = True) -> torch.Tensor:
    """BoolTensor [S_q, S_k]: may query i see key j. Bottom-right: j <= i + S_k - S_q; top-left: j <= i."""
    if not causal:
        return torch.ones(S_q, S_k, dtype=torch.bool)
    offset = (S_k - S_q if align == "bottom_right" else 0) - (0 if diagonal else 1)
    return torch.ones(S_q, S_k, dtype=torch.bool).tril(offset)


def masked_attention(q, k, v, allowed: torch.Tensor | None, scale: float | None = None):
    """(out in q's dtype, lse float32) of attention in float64 where `allowed` [..., S_q, S_k] is True; a query that
    sees no key has out 0 and lse -inf."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q.double() @ k.double().transpose(-2, -1) * scale  # [B, H, S_q, S_k]
    if allowed is not None:
        s = s.masked_fill(~allowed, NEG_INF)
    lse = torch.logsumexp(s, dim=-1)  # -inf for a row without keys
    weights = torch.exp(s - lse.masked_fill(lse == NEG_INF, 0)[..., None])  # 0 on a row without keys
    return (weights @ v.double()).to(q.dtype), lse.float()


def dense_attention(q, k, v, causal: bool = False, align: str = "bottom_right", diagonal: bool = True,
                    scale: float | None = None):
    """(out, lse) of exact attention; causal bottom-right aligned unless `align` says "top_left"."""
    return masked_attention(q, k, v, visible(q.shape[-2], k.shape[-2], causal, align, diagonal), scale)


def flash_variant(q, k, v, causal: bool = False, block_q: int = BLOCK_Q, block_k: int = BLOCK_K, *,
                  rescale_sum: bool = True, rescale_out: bool = True, lse_max: bool = True, normalise: bool = True,
                  skip: str = "last", acc: torch.dtype | None = None, align: str = "bottom_right"):
    """flash_attention written out with switches for its classic mistakes.

    rescale_sum / rescale_out False: the running sum / the unnormalised output is not multiplied by
    exp(m_old - m_new) when the maximum grows; lse_max False: lse = log(sum) without the running max;
    normalise False: the output is not divided by the sum at the end; skip "first": key blocks are
    skipped after the last key the block's FIRST query sees; acc: the accumulation dtype (float16: no
    float32 accumulation); align "top_left": the causal mask without the S_k - S_q offset."""
    Bq, Hq, S_q, _ = q.shape
    S_k, D_v = k.shape[-2], v.shape[-1]
    acc = acc or (torch.float64 if q.dtype == torch.float64 else torch.float32)
    scale = 1 / math.sqrt(q.shape[-1])
    offset = S_k - S_q if align == "bottom_right" else 0
    out = torch.zeros(Bq, Hq, S_q, D_v, dtype=q.dtype)
    lse = torch.full((Bq, Hq, S_q), NEG_INF)
    for i0 in range(0, S_q, block_q):
        i1 = min(i0 + block_q, S_q)
        m = torch.full((Bq, Hq, i1 - i0), NEG_INF, dtype=acc)
        total = torch.zeros(Bq, Hq, i1 - i0, dtype=acc)
        o = torch.zeros(Bq, Hq, i1 - i0, D_v, dtype=acc)
        last = i1 if skip == "last" else i0 + 1
        stop = min(S_k, last + offset) if causal else S_k
        for j0 in range(0, max(stop, 0), block_k):
            j1 = min(j0 + block_k, S_k)
            s = q[:, :, i0:i1].to(acc) @ k[:, :, j0:j1].to(acc).transpose(-2, -1) * scale
            if causal:
                hide = torch.arange(j0, j1)[None, :] > torch.arange(i0, i1)[:, None] + offset
                s = s.masked_fill(hide, NEG_INF)
            m_new = torch.maximum(m, s.amax(-1))
            m_safe = m_new.masked_fill(m_new == NEG_INF, 0)
            p = torch.exp(s - m_safe[..., None])
            alpha = torch.exp(m - m_safe)
            total = (alpha * total if rescale_sum else total) + p.sum(-1)
            o = (alpha[..., None] * o if rescale_out else o) + p @ v[:, :, j0:j1].to(acc)
            m = m_new
        result = o / total.clamp_min(1e-30)[..., None] if normalise else o
        out[:, :, i0:i1] = torch.where(total[..., None] > 0, result, 0).to(q.dtype)
        lse[:, :, i0:i1] = ((m if lse_max else 0) + torch.log(total)).float()
    return out, lse


def merge_variant(out_a, lse_a, out_b, lse_b, kind: str = "exact"):
    """merge_attention and its mistakes. kind "naive": weights exp(lse) without subtracting the larger lse first
    (overflow past 88); "max": the merged lse is the larger one, not log(exp + exp); "unnormalised": weights
    exp(lse_side - max) not divided by their sum; "average": the two outputs averaged; "asymmetric": lse =
    lse_a + log1p(exp(lse_b - lse_a)) (NaN when lse_a is -inf); "both_empty_nan": right, but the larger lse is
    subtracted even where both are -inf (NaN there)."""
    la, lb = lse_a.double(), lse_b.double()
    if kind == "naive":
        wa, wb = torch.exp(la.float()), torch.exp(lb.float())  # float32 overflows, as the student's would
        out = (wa[..., None] * out_a + wb[..., None] * out_b) / (wa + wb)[..., None]
        return out.to(out_a.dtype), torch.log(wa + wb)
    if kind == "asymmetric":
        lse = la + torch.log1p(torch.exp(lb - la))
    else:
        m = torch.maximum(la, lb)
        m = m if kind == "both_empty_nan" else m.masked_fill(m == NEG_INF, 0)
        lse = m + torch.log(torch.exp(la - m) + torch.exp(lb - m))
    if kind == "max":
        lse = torch.maximum(la, lb)
    if kind == "average":
        return ((out_a.double() + out_b.double()) / 2).to(out_a.dtype), lse.float()
    wa, wb = torch.exp(la - lse), torch.exp(lb - lse)
    if kind == "unnormalised":
        m = torch.maximum(la, lb)
        wa, wb = torch.exp(la - m), torch.exp(lb - m)
    part_a = torch.where(wa[..., None] > 0, wa[..., None] * out_a.double(), 0)
    part_b = torch.where(wb[..., None] > 0, wb[..., None] * out_b.double(), 0)
    return (part_a + part_b).to(out_a.dtype), lse.float()


# --------------------------------------------------------------------------- #
# sliding window
# --------------------------------------------------------------------------- #


def window_mask_variant(S_: int, window: int, kind: str = "exact") -> torch.Tensor:
    """BoolTensor [S, S]: i - window < j <= i. kind "wide": window + 1 keys (i - window <= j); "narrow":
    window - 1 keys; "two_sided": |i - j| < window (future keys too); "transposed": j - window < i <= j."""
    i, j = torch.arange(S_)[:, None], torch.arange(S_)[None, :]
    low = {"wide": i - window - 1, "narrow": i - window + 1}.get(kind, i - window)
    if kind == "two_sided":
        return (i - j).abs() < window
    if kind == "transposed":
        return (i <= j) & (i > j - window)
    return (j <= i) & (j > low)


def sliding_variant(q, k, v, window: int, chunk_size: int, kind: str = "exact") -> torch.Tensor:
    """sliding_window_attention and its mistakes: the kinds of window_mask_variant, and "own_chunk": each chunk
    reads only its own keys (none before the chunk starts)."""
    S_ = q.shape[-2]
    if kind == "own_chunk":
        i, j = torch.arange(S_)[:, None], torch.arange(S_)[None, :]
        allowed = window_mask_variant(S_, window) & (j // chunk_size == i // chunk_size)
        return masked_attention(q, k, v, allowed)[0]
    return masked_attention(q, k, v, window_mask_variant(S_, window, kind))[0]


# --------------------------------------------------------------------------- #
# linear attention
# --------------------------------------------------------------------------- #

FEATURES = {
    "elu1": lambda x: F.elu(x) + 1,
    "elu": F.elu,  # negative for x < 0
    "identity": lambda x: x,
    "relu": F.relu,
    "exp": torch.exp,
}


def linear_variant(q, k, v, causal: bool = False, *, feature: str = "elu1", normalise: bool = True,
                   diagonal: bool = True, eps: float = 1e-6, eps_in_keys: bool = False,
                   restart: int | None = None) -> torch.Tensor:
    """Linear attention in float64 through the [S, S] weights phi(q) phi(k)^T (trusted side only, small S).
    feature: the feature map; normalise False: no division by phi(q_i) . sum_j phi(k_j); diagonal False:
    causal without j = i; eps_in_keys: Performer's normaliser phi(q_i) . (sum_j phi(k_j) + eps); restart C:
    causal in chunks of C positions that each start from zero sums (the running sums not carried over)."""
    phi = FEATURES[feature]
    phi_q = phi(q.double())  # [B, H, S, D]
    w = phi_q @ phi(k.double()).transpose(-2, -1)  # [B, H, S, S]
    if causal:
        w = w.tril(0 if diagonal else -1)
    if causal and restart:
        position = torch.arange(q.shape[-2])
        w = w * (position[:, None] // restart == position[None, :] // restart)  # [S, S]: same chunk only
    out = w @ v.double()
    if normalise:
        added = eps * phi_q.sum(-1, keepdim=True) if eps_in_keys else eps  # [B, H, S, 1] or a number
        out = out / (w.sum(-1, keepdim=True) + added)
    return out.to(q.dtype)


def recurrent_variant(q, k, v, kind: str = "exact", eps: float = 1e-6) -> torch.Tensor:
    """Outputs [B, H, S, D_v] of linear_attention_step run over the sequence, with its mistakes. kind "forgets":
    each step starts from an empty state (out_t from k_t, v_t alone); "stale": the step returns the state it was
    given, not the updated one (each step sees only the first key and its own)."""
    phi_q, phi_k = F.elu(q.double()) + 1, F.elu(k.double()) + 1
    kv = torch.zeros(*k.shape[:2], k.shape[-1], v.shape[-1], dtype=torch.float64)
    z = torch.zeros(*k.shape[:2], k.shape[-1], dtype=torch.float64)
    outs = []
    for t in range(q.shape[-2]):
        step_kv = kv + phi_k[:, :, t, :, None] * v.double()[:, :, t, None, :]
        step_z = z + phi_k[:, :, t]
        if kind == "forgets":
            step_kv, step_z = phi_k[:, :, t, :, None] * v.double()[:, :, t, None, :], phi_k[:, :, t]
        num = (phi_q[:, :, t, :, None] * step_kv).sum(-2)
        den = (phi_q[:, :, t] * step_z).sum(-1)
        outs.append(num / (den[..., None] + eps))
        if kind == "stale" and t > 0:
            continue  # the state handed back is the one received: only the first step's update survives
        kv, z = step_kv, step_z
    return torch.stack(outs, dim=2).to(q.dtype)


# --------------------------------------------------------------------------- #
# FlexAttention's mods, evaluated on whole index grids (trusted side)
# --------------------------------------------------------------------------- #


def grid(B_: int, H_: int, S_q: int, S_k: int):
    """Index tensors b [B, 1, 1, 1], h [1, H, 1, 1], q_idx [1, 1, S_q, 1], kv_idx [1, 1, 1, S_k]."""
    return (torch.arange(B_).view(-1, 1, 1, 1), torch.arange(H_).view(1, -1, 1, 1),
            torch.arange(S_q).view(1, 1, -1, 1), torch.arange(S_k).view(1, 1, 1, -1))


def document_mask_variant(document_ids: torch.Tensor, kind: str = "exact") -> torch.Tensor:
    """[B, 1, S, S]: causal within each document. kind "not_causal": the whole document both ways; "no_documents":
    plain causal across documents."""
    b, _, q, kv = grid(document_ids.shape[0], 1, document_ids.shape[1], document_ids.shape[1])
    same = document_ids[:, None, :, None] == document_ids[:, None, None, :]
    causal = kv <= q
    return {"not_causal": same, "no_documents": causal.expand_as(same)}.get(kind, same & causal)


def prefix_mask_variant(prefix_lengths: torch.Tensor, S_: int, kind: str = "exact") -> torch.Tensor:
    """[B, 1, S, S]: the prefix seen by every query, causal after it. kind "inclusive": kv_idx <= prefix_length
    (one key too many); "first_row": prefix_lengths[0] for every sequence; "prefix_only": no causal part."""
    _, _, q, kv = grid(1, 1, S_, S_)
    lengths = prefix_lengths.view(-1, 1, 1, 1)
    if kind == "first_row":
        lengths = prefix_lengths[0].expand(len(prefix_lengths)).view(-1, 1, 1, 1)
    in_prefix = kv <= lengths if kind == "inclusive" else kv < lengths
    return in_prefix if kind == "prefix_only" else in_prefix | (kv <= q)


def alibi_slopes(num_heads: int, kind: str = "exact") -> torch.Tensor:
    """[H] float64: the ALiBi paper's slopes (get_slopes): 2^(-8 (h + 1) / n) for the largest power of two n <= H,
    then the first H - n of the slopes of 2n heads at even indices. kind "formula": 2^(-8 (h + 1) / H) for every H
    (attention-gym's; the same for a power of two); "reversed": the slopes in the other head order; "from_zero":
    2^(-8 h / H), heads counted from 0 in the exponent (head 0 gets slope 1)."""
    def power_of_two(n: int, start: int = 1) -> torch.Tensor:
        return torch.exp2(-8 * (torch.arange(n, dtype=torch.float64) + start) / n)

    if kind in ("formula", "from_zero"):
        return power_of_two(num_heads, 0 if kind == "from_zero" else 1)
    n = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = torch.cat([power_of_two(n), power_of_two(2 * n)[0::2][: num_heads - n]])
    return slopes.flip(0) if kind == "reversed" else slopes


def scored_attention(q, k, v, bias: torch.Tensor | None = None, transform=None) -> torch.Tensor:
    """Attention in float64 with score -> transform(score) + bias (after the 1 / sqrt(D) scaling), in q's dtype."""
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if transform is not None:
        s = transform(s)
    if bias is not None:
        s = s + bias
    return (torch.softmax(s, dim=-1) @ v.double()).to(q.dtype)


def alibi_variant(q, k, v, kind: str = "exact") -> torch.Tensor:
    """ALiBi attention: score + slope_h (kv_idx - q_idx). kind "sign": slope_h (q_idx - kv_idx); "reversed" and
    "from_zero": as alibi_slopes."""
    _, H_, S_q, _ = q.shape
    slopes = alibi_slopes(H_, "exact" if kind == "sign" else kind)
    _, h, qi, kv = grid(1, H_, S_q, k.shape[-2])
    distance = (qi - kv) if kind == "sign" else (kv - qi)
    return scored_attention(q, k, v, bias=slopes.view(1, -1, 1, 1) * distance)


def softcap_variant(q, k, v, cap: float, kind: str = "exact") -> torch.Tensor:
    """Soft-capped attention: cap tanh(score / cap). kind "clamp": score clamped to [-cap, cap]; "no_divide":
    cap tanh(score); "none": no capping."""
    transforms = {"exact": lambda s: cap * torch.tanh(s / cap), "clamp": lambda s: s.clamp(-cap, cap),
                  "no_divide": lambda s: cap * torch.tanh(s), "none": lambda s: s}
    return scored_attention(q, k, v, transform=transforms[kind])


def mib(n: int | None) -> str:
    return f"{(n or 0) / 2**20:.2f} MiB"


def within_memory(run, what: str, name: str, bound: int, sizes: str, how: str) -> None:
    """A measured call (student.call_measured) of the function `name` within `bound` bytes: the tensor meter's peak,
    then the worker's resident growth (allowed RESIDENT_ROOM x the bound). Each excess is named with the `sizes` that
    put it in scale and `how` to stay within."""
    if run.peak_bytes is None or run.peak_bytes > bound:
        raise expect.CheckFailure(_("{what}: your {name} held {peak} of tensors at once; {sizes}: {how}").format(
            what=what, name=name, peak=mib(run.peak_bytes), sizes=sizes, how=how))
    if run.resident_growth is not None and run.resident_growth > RESIDENT_ROOM * bound:
        raise expect.CheckFailure(_(
            "{what}: the tensor meter saw only {peak}, but the memory of your process grew by {growth} while {name} "
            "ran; {sizes}: the grader also counts the memory the meter cannot see (numpy arrays, a child process, "
            "...)").format(what=what, peak=mib(run.peak_bytes), growth=mib(run.resident_growth), name=name,
                           sizes=sizes))
