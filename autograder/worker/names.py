"""The names of torch's fused attention and official module, public and private.

Shared by the trusted side's static scan (autograder/grade.py) and the worker's call watch
(runtime.ForbiddenCallWatch), so that both look for the same things: F.scaled_dot_product_attention,
torch._scaled_dot_product_attention_math, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
nn.MultiheadAttention, torch._native_multi_head_attention, ... A name is forbidden when it holds
one of these lower-case substrings. A from-scratch part forbids them all; another part may forbid
some of them (spec.Part.forbids: cross_attention forbids the official module, not the fused kernel).
"""
from __future__ import annotations

FUSED_KERNEL = ("scaled_dot_product", "scaled_dot_attention", "flash_attention")
OFFICIAL_MODULE = ("multi_head_attention", "multiheadattention")
FORBIDDEN_PATTERNS = FUSED_KERNEL + OFFICIAL_MODULE
# The third assignment's flash, sliding_window and linear parts build attention themselves: torch's fused
# attention (SDPA, its aten ops, the CUDA kernels' private entry points) and FlexAttention earn nothing
# there. Not a bare "flash_attention": that is the student's own function in part flash.
EFFICIENT_KERNELS = ("scaled_dot_product", "scaled_dot_attention", "_flash_attention_forward",
                     "_efficient_attention_forward", "flex_attention")


def is_forbidden_name(name: str, patterns: tuple[str, ...] = FORBIDDEN_PATTERNS) -> bool:
    """Does `name` hold one of `patterns` (default: all of them; a part may forbid fewer, spec.Part.forbidden)?"""
    low = name.lower()
    return any(p in low for p in patterns)
