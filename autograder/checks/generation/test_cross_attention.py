"""Hidden checks for part cross_attention (assignment generation): class CrossAttention.

The expected output is nn.MultiheadAttention(d_model, H, kdim=d_context, vdim=d_context,
bias=False, batch_first=True) with q_proj_weight = W_q.weight, k_proj_weight = W_k.weight,
v_proj_weight = W_v.weight and out_proj.weight = W_o.weight, recomputed by cross_variant()
(whose equality with it is tested in tests/test_generation_checks_helpers.py). S_q != S_k and
d_context != d_model, so keys taken from the wrong sequence cannot pass by accident; one
check uses equal lengths and widths so that this mistake runs and can be named.
"""
import math

import pytest
import torch

from autograder.checks import expect
from autograder.checks.generation.common import B, CONTEXT_LENGTHS, D_CONTEXT, D_MODEL, H, HEAD_DIM, S_K, S_Q, cross_variant, \
    lengths_mask
from autograder.failures import StudentRaised

ROLES = {"W_q": "d_model -> d_model, for the queries", "W_k": "d_context -> d_model, for the keys",
         "W_v": "d_context -> d_model, for the values", "W_o": "d_model -> d_model"}
FROM_CONTEXT = ("queries come from x [B, S_q, d_model], keys and values from context [B, S_k, d_context]: "
                "W_k(context), W_v(context)")


def layers(d_context):
    return {"W_q": (D_MODEL, D_MODEL), "W_k": (d_context, D_MODEL), "W_v": (d_context, D_MODEL),
            "W_o": (D_MODEL, D_MODEL)}


@pytest.mark.points(4)
def test_submodules(student):
    """CrossAttention(d_model, H, d_context) has bias-free W_q (d_model -> d_model), W_k, W_v (d_context -> d_model), W_o"""
    call = f"CrossAttention({D_MODEL}, {H}, d_context={D_CONTEXT})"
    info = student.new("CrossAttention", D_MODEL, H, D_CONTEXT).describe()
    expect.submodules(info, layers(D_CONTEXT), None, call, ROLES)


@pytest.mark.points(1)
def test_context_width_defaults_to_d_model(student):
    """CrossAttention(d_model, H) takes a context as wide as d_model"""
    info = student.new("CrossAttention", D_MODEL, H).describe()
    expect.submodules(info, layers(D_MODEL), None, f"CrossAttention({D_MODEL}, {H})", ROLES)


def loaded(student, gen, d_context):
    state = {"W_q.weight": torch.randn(D_MODEL, D_MODEL, generator=gen) / math.sqrt(D_MODEL),
             "W_k.weight": torch.randn(D_MODEL, d_context, generator=gen) / math.sqrt(d_context),
             "W_v.weight": torch.randn(D_MODEL, d_context, generator=gen) / math.sqrt(d_context),
             "W_o.weight": torch.randn(D_MODEL, D_MODEL, generator=gen) / math.sqrt(D_MODEL)}
    module = student.new("CrossAttention", D_MODEL, H, d_context)
    try:
        module.load_state_dict(state)
    except StudentRaised as exc:
        raise expect.CheckFailure(f"weights could not be loaded into your module ({exc}): it needs exactly the "
                                  "bias-free layers W_q, W_k, W_v, W_o") from None
    return module.eval(), state


def cross_mistakes(state, x, context, mask):
    def v(**kw):
        return lambda: cross_variant(state, x, context, mask, **kw)

    out = {
        f"keys and values are projected from x, the queries' sequence: {FROM_CONTEXT}": v(kv_from="x"),
        "cross-attention has no causal mask: every query may look at every (real) context token": v(causal=True),
        "your keys and values are swapped: keys are W_k(context), values W_v(context)": v(swap_kv=True),
        f"you scaled by sqrt(d_model) = sqrt({D_MODEL}); scale each head by sqrt(head_dim) = sqrt({HEAD_DIM})":
            v(scale=D_MODEL ** -0.5),
        "you did not scale the scores: divide by sqrt(head_dim)": v(scale=1.0),
        "the softmax runs over the queries: it must run over the context tokens, dim=-1": v(dim=-2),
    }
    if mask is not None:
        out["your context mask is inverted: True marks a real context token, so fill -inf where it is False"] = \
            v(invert=True)
        out["the context mask is ignored: padded context tokens must get -inf before the softmax "
            "(context_mask[:, None, None, :] against [B, H, S_q, S_k] scores)"] = v(mask=None)
        out["your context mask hides queries, not context tokens: it lines up with the last axis of the scores, "
            "context_mask[:, None, None, :]"] = v(mask_on="queries")
    return out


def forward(module, x, context, mask, what):
    try:
        return module(x, context) if mask is None else module(x, context, mask)
    except StudentRaised as exc:
        if exc.kind != "RuntimeError":
            raise
        raise expect.CheckFailure(f"{what}: {exc}; {FROM_CONTEXT}; a [B, S_k] context mask becomes "
                                  "context_mask[:, None, None, :] against [B, H, S_q, S_k] scores") from None


CASES = {"no mask": False, "context mask": True}


@pytest.mark.points(3.5)
@pytest.mark.parametrize("case", list(CASES))
def test_forward_matches_official_module(student, gen, case):
    """forward(x, context, context_mask) equals nn.MultiheadAttention(kdim=d_context, vdim=d_context) with the same weights"""
    use_mask = CASES[case]
    module, state = loaded(student, gen, D_CONTEXT)
    x = torch.randn(B, S_Q, D_MODEL, generator=gen)
    context = torch.randn(B, S_K, D_CONTEXT, generator=gen)
    mask = lengths_mask(CONTEXT_LENGTHS, S_K) if use_mask else None
    what = (f"forward(x [{B}, {S_Q}, {D_MODEL}], context [{B}, {S_K}, {D_CONTEXT}]"
            + (f", context_mask with lengths {list(CONTEXT_LENGTHS)})" if use_mask else ")"))
    got = forward(module, x, context, mask, what)
    expect.close(got, cross_variant(state, x, context, mask), what,
                 mistakes=cross_mistakes(state, x, context, mask),
                 shapes={(B, S_K, D_MODEL): "the output has one row per query (S_q rows), not per context token"})


@pytest.mark.points(4)
def test_keys_and_values_come_from_the_context(student, gen):
    """with a context as long and as wide as x, keys and values still come from the context, not from x"""
    module, state = loaded(student, gen, D_MODEL)
    x = torch.randn(B, S_K, D_MODEL, generator=gen)
    context = torch.randn(B, S_K, D_MODEL, generator=gen)
    mask = lengths_mask(CONTEXT_LENGTHS, S_K)
    what = f"forward(x [{B}, {S_K}, {D_MODEL}], context [{B}, {S_K}, {D_MODEL}], context_mask)"
    got = forward(module, x, context, mask, what)
    expect.close(got, cross_variant(state, x, context, mask), what, mistakes=cross_mistakes(state, x, context, mask))
