# Corpus of real implementations (tests/test_real_code.py): karpathy/nanochat's rotary embeddings.
# Source: github.com/karpathy/nanochat, nanochat/gpt.py: apply_rotary_emb, GPT._precompute_rotary_embeddings;
# commit e28d4ead22c6b9d1238042c81db12e1e5760c438
# License: MIT, (c) Andrej Karpathy.
# Provides (generation): apply_rope. nanochat's math (half-split pairs, rotated the other way), unchanged;
# adaptations are marked ADAPTED.
import torch


def apply_rotary_emb(x, cos, sin):
    d = x.shape[-1] // 2  # ADAPTED: x.shape[3] of its (B, T, H, D) layout; the course's [..., S, D] has it last too
    x1, x2 = x[..., :d], x[..., d:]  # split up last dim into two halves
    y1 = x1 * cos + x2 * sin  # rotate pairs of dims
    y2 = x1 * (-sin) + x2 * cos
    return torch.cat([y1, y2], -1)


def apply_rope(x, positions, base=10000):  # ADAPTED: _precompute_rotary_embeddings at `positions`, then the rotation
    head_dim = x.shape[-1]
    # stride the channels
    channel_range = torch.arange(0, head_dim, 2, dtype=torch.float32, device=x.device)
    inv_freq = 1.0 / (base ** (channel_range / head_dim))
    # stride the time steps (ADAPTED: the given positions, not arange(seq_len))
    t = positions.to(torch.float32)
    # calculate the rotation frequencies at each (time, channel) pair
    freqs = t[..., None] * inv_freq  # (ADAPTED: torch.outer for a [S] t; this also takes [B, S] positions)
    cos, sin = freqs.cos(), freqs.sin()
    # ADAPTED: nanochat keeps the tables in bfloat16 (a GPU-memory choice); float32 here, so that only the
    # convention differs. cos[None, :, None, :] was for its (B, T, H, D) layout; [S, D/2] broadcasts on [..., S, D/2]
    if positions.dim() == 2 and x.dim() == 4:
        cos, sin = cos[:, None], sin[:, None]
    return apply_rotary_emb(x.float(), cos, sin).to(x.dtype)
