"""The course contract (../shared/course-spec.md) as data: part ids, their API names, points.

Everything else in the grader reads the parts from here, so the contract lives in one place.
"""
from __future__ import annotations

from dataclasses import dataclass

from .worker.names import FORBIDDEN_PATTERNS, is_forbidden_name  # noqa: F401 - part of the spec


@dataclass(frozen=True)
class Part:
    id: str
    names: tuple[str, ...]
    points: float
    notebook: str  # the released notebook that teaches and grades this part
    gpu: bool = False


PARTS: tuple[Part, ...] = (
    Part("qkv_projection", ("make_projections", "project_qkv"), 10, "01_scores"),
    Part("scaled_scores", ("scaled_scores", "attention_weights", "attend"), 15, "01_scores"),
    Part("masks", ("padding_mask", "causal_mask", "apply_padding_mask", "apply_causal_mask"), 15, "02_masks"),
    Part("module", ("SelfAttention",), 20, "03_module"),
    Part("official_parity", ("to_official", "parity_error"), 15, "03_module"),
    Part("multihead", ("split_heads", "merge_heads", "MultiHeadSelfAttention"), 15, "04_multihead"),
    Part("long_sequence", ("attention_matrix_bytes", "sdpa_attention", "chunked_attention"), 10, "05_long_sequence"),
)
GPU_PART = Part("long_sequence_gpu", ("sdpa_attention", "chunked_attention"), 10, "05_long_sequence", gpu=True)

CPU_PARTS = PARTS
MAX_SCORE = sum(p.points for p in PARTS)
PART_BY_ID = {p.id: p for p in PARTS + (GPU_PART,)}
API_NAMES = tuple(name for p in PARTS for name in p.names)
ASSIGNMENT = "self_attention"
NOTEBOOKS = tuple(dict.fromkeys(p.notebook for p in PARTS))

# Parts that must be written from scratch: calling the fused kernel or the official module
# there earns nothing. (official_parity and long_sequence are about those very functions.)
FROM_SCRATCH = ("qkv_projection", "scaled_scores", "masks", "module", "multihead")


assert MAX_SCORE == 100, MAX_SCORE
