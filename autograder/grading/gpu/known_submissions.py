"""Known submissions for the GPU stage: the reference and deliberately broken variants (data, not checks).

The device script (scripts/device_check.sh) grades them on a GPU and the CPU tests
(tests/test_gpu_stage.py) grade them at small sizes: the stage must pass the reference and
catch each broken one with the message that names its mistake.
"""
from __future__ import annotations

from pathlib import Path

REFERENCE = Path(__file__).resolve().parent.parent.parent.parent / "solutions" / "attention.py"

# Builds the whole [B, H, S, S] matrix (twice: scores and weights) in both functions.
FULL_MATRIX = '''
def _plain(q, k, v, mask=None, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    if causal:
        S = q.shape[-2]
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def sdpa_attention(q, k, v, mask=None, causal=False):
    return _plain(q, k, v, mask, causal)


def chunked_attention(q, k, v, mask=None, causal=False, chunk_size=1024):
    return _plain(q, k, v, mask, causal)
'''

# Memory-frugal, but the padding mask is inverted (nn.MultiheadAttention's sense: True = ignore).
INVERTED_MASK = '''
def sdpa_attention(q, k, v, mask=None, causal=False):
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~mask[:, None, None, :], is_causal=causal)


def chunked_attention(q, k, v, mask=None, causal=False, chunk_size=1024):
    out = torch.empty_like(q)
    S = q.shape[-2]
    for start in range(0, S, chunk_size):
        stop = min(start + chunk_size, S)
        scores = q[:, :, start:stop] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :], float("-inf"))
        if causal:
            future = torch.arange(S, device=q.device)[None, :] > torch.arange(start, stop, device=q.device)[:, None]
            scores = scores.masked_fill(future, float("-inf"))
        out[:, :, start:stop] = torch.softmax(scores, dim=-1) @ v
    return out
'''

# Ignores its mask and causal arguments.
IGNORES_MASK = '''
def sdpa_attention(q, k, v, mask=None, causal=False):
    return F.scaled_dot_product_attention(q, k, v)


def chunked_attention(q, k, v, mask=None, causal=False, chunk_size=1024):
    return F.scaled_dot_product_attention(q, k, v)
'''

VARIANTS = {"full_matrix": FULL_MATRIX, "inverted_mask": INVERTED_MASK, "ignores_mask": IGNORES_MASK}


def write_variants(folder) -> dict[str, Path]:
    """Write each broken variant as <name>.py in `folder`; returns name -> path (the reference included)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"reference": REFERENCE}
    for name, code in VARIANTS.items():
        path = folder / f"{name}.py"
        path.write_text("import math\nimport torch\nimport torch.nn.functional as F\n" + code.lstrip())
        paths[name] = path
    return paths
