"""The course's reference solutions: the ground truth the autograder compares against."""
from .attention import (
    MultiHeadSelfAttention,
    SelfAttention,
    apply_causal_mask,
    apply_padding_mask,
    attend,
    attention_matrix_bytes,
    attention_weights,
    causal_mask,
    chunked_attention,
    make_projections,
    merge_heads,
    padding_mask,
    parity_error,
    project_qkv,
    scaled_scores,
    sdpa_attention,
    split_heads,
    to_official,
)

__all__ = [
    "make_projections", "project_qkv",
    "scaled_scores", "attention_weights", "attend",
    "padding_mask", "causal_mask", "apply_padding_mask", "apply_causal_mask",
    "SelfAttention",
    "to_official", "parity_error",
    "split_heads", "merge_heads", "MultiHeadSelfAttention",
    "attention_matrix_bytes", "sdpa_attention", "chunked_attention",
]
