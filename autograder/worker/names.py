"""The names of torch's fused attention and official module, public and private.

Shared by the trusted side's static scan (autograder/grade.py) and the worker's call watch
(runtime.ForbiddenCallWatch), so that both look for the same things: F.scaled_dot_product_attention,
torch._scaled_dot_product_attention_math, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
nn.MultiheadAttention, torch._native_multi_head_attention, ... A name is forbidden when it holds
one of these lower-case substrings.
"""
from __future__ import annotations

FORBIDDEN_PATTERNS = ("scaled_dot_product", "scaled_dot_attention", "flash_attention", "multi_head_attention",
                      "multiheadattention")


def is_forbidden_name(name: str) -> bool:
    low = name.lower()
    return any(p in low for p in FORBIDDEN_PATTERNS)
