"""The names of torch's attention functions that a part may be forbidden to call, by group.

Shared by the trusted side's static scan (autograder/grading/scan.py) and the worker's call watch
(runtime.ForbiddenCallWatch), so that both look for the same things. Every pattern is matched
against TORCH's names only: the worker labels a call by the torch function that ran
(F.scaled_dot_product_attention, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
nn.MultiheadAttention, ...) and the scan only looks at names reached from torch. A student's
own function may carry any name (`flash_attention` is an API name of the `efficient` assignment).

A part forbids whole groups (spec.Part.forbids): a from-scratch part of the first assignment
forbids the fused kernel and the official module, cross_attention the official module only,
and a new assignment adds its parts' groups as data in spec.py.
"""
from __future__ import annotations

# The file name every piece of student code is compiled under (runtime.py): how the worker tells its frames.
STUDENT_PREFIX = "<student:"

# F.scaled_dot_product_attention and its private relatives: torch._scaled_dot_product_attention_math,
# aten._scaled_dot_product_flash_attention_for_cpu, aten._flash_attention_forward, ...
FUSED_KERNEL = ("scaled_dot_product", "scaled_dot_attention", "_flash_attention",
                "_efficient_attention", "_cudnn_attention")
# nn.MultiheadAttention, F.multi_head_attention_forward, torch._native_multi_head_attention, and the
# fused encoder layer that calls it (torch._transformer_encoder_layer_fwd)
OFFICIAL_MODULE = ("multi_head_attention", "multiheadattention", "_transformer_encoder_layer")
# torch.nn.attention.flex_attention.flex_attention (and the higher-order operator it runs)
FLEX_ATTENTION = ("flex_attention",)
# The transformers library's own code (the fourth assignment, real_models: the library supplies weights and the
# reference, never a student's forward). Matched against the labels the watch gives a torch call made from the
# library's code: its module and function ("transformers.models.gpt2.modeling_gpt2.eager_attention_forward",
# watch.library_label), never against torch's names (none holds "transformers.").
LIBRARY = "transformers"  # the package whose code the watch names by module and function
TRANSFORMERS = (LIBRARY + ".",)
# The fifth assignment, serving: the kernels that servers call instead of writing attention. Torch's own varlen
# attention (torch.nn.attention.varlen.varlen_attn and its op), SDPA handed nested tensors (the watch labels that
# call NESTED_SDPA_LABEL; SDPA with an explicit mask on one sequence at a time stays allowed), flex_attention, and the
# serving libraries' code, matched like the transformers library's: by the module of the frame that made a torch call.
VARLEN_KERNEL = ("varlen_attn",)
NESTED_SDPA_LABEL = "F.scaled_dot_product_attention on nested tensors"
NESTED_SDPA = ("on nested tensors",)
SERVING_LIBRARIES = ("flash_attn", "vllm", "flashinfer", "xformers", "sglang")
SERVING_KERNELS = VARLEN_KERNEL + NESTED_SDPA + FLEX_ATTENTION + tuple(lib + "." for lib in SERVING_LIBRARIES)
WATCHED_LIBRARIES = (LIBRARY,) + SERVING_LIBRARIES  # packages whose code the watch names by module and function
# What the worker reports when student code removed its watch (watch.py): forbidden in every part that forbids
WATCH_OFF = "the grader's watch of torch calls (switched off)"
FORBIDDEN_PATTERNS = FUSED_KERNEL + OFFICIAL_MODULE + FLEX_ATTENTION + VARLEN_KERNEL  # everything the worker watches


def is_forbidden_name(name: str, patterns: tuple[str, ...] = FORBIDDEN_PATTERNS) -> bool:
    """Does torch's name `name` hold one of `patterns` (default: all of them; a part forbids some,
    spec.Part.forbidden)?"""
    low = name.lower()
    return any(p in low for p in patterns)
