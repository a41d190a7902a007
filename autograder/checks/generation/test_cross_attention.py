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

from autograder.foundation import i18n
from autograder.checks import expect
from autograder.checks.cases import Ran, seeded, send, smallest_failure, weights_taken
from autograder.checks.generation.common import B, CONTEXT_LENGTHS, D_CONTEXT, D_MODEL, H, HEAD_DIM, S_K, S_Q, cross_variant, \
    lengths_mask
from autograder.foundation.failures import StudentRaised

_ = i18n.message

ROLES = {"W_q": _("d_model -> d_model, for the queries"), "W_k": _("d_context -> d_model, for the keys"),
         "W_v": _("d_context -> d_model, for the values"), "W_o": "d_model -> d_model"}
FROM_CONTEXT = (_("queries come from x [B, S_q, d_model], keys and values from context [B, S_k, d_context]: "
                  "W_k(context), W_v(context)"))


def layers(d_context):
    return {"W_q": (D_MODEL, D_MODEL), "W_k": (d_context, D_MODEL), "W_v": (d_context, D_MODEL),
            "W_o": (D_MODEL, D_MODEL)}


@pytest.mark.points(4)
def test_submodules(student):
    """CrossAttention(d_model, H, d_context) has bias-free W_q (d_model -> d_model), W_k, W_v (d_context -> d_model), W_o"""
    call = f"CrossAttention({D_MODEL}, {H}, d_context={D_CONTEXT})"
    info = part(student)["submodules"].value()
    expect.submodules(info, layers(D_CONTEXT), None, call, ROLES)


@pytest.mark.points(1)
def test_context_width_defaults_to_d_model(student):
    """CrossAttention(d_model, H) takes a context as wide as d_model"""
    info = part(student)["defaults"].value()
    expect.submodules(info, layers(D_MODEL), None, f"CrossAttention({D_MODEL}, {H})", ROLES)


def loaded(job, g, d_context) -> dict:
    """CrossAttention built and given the checks' weights, in eval mode, queued on `job`: its steps (and the state)."""
    state = {"W_q.weight": torch.randn(D_MODEL, D_MODEL, generator=g) / math.sqrt(D_MODEL),
             "W_k.weight": torch.randn(D_MODEL, d_context, generator=g) / math.sqrt(d_context),
             "W_v.weight": torch.randn(D_MODEL, d_context, generator=g) / math.sqrt(d_context),
             "W_o.weight": torch.randn(D_MODEL, D_MODEL, generator=g) / math.sqrt(D_MODEL)}
    module = job.new("CrossAttention", D_MODEL, H, d_context)
    return {"module": module, "load": job.load_state_dict(module, state), "eval": job.eval(module), "state": state}


def module_of(run: Ran) -> dict:
    """The checks' weights, once the student's module was built and took them (or the failure, in its terms)."""
    weights_taken(run, "W_q, W_k, W_v, W_o")
    return run.steps["state"]


def cross_mistakes(state, x, context, mask):
    def v(**kw):
        return lambda: cross_variant(state, x, context, mask, **kw)

    out = {
        _("keys and values are projected from x, the queries' sequence: {from_context}").format(from_context=FROM_CONTEXT): v(kv_from="x"),
        _("cross-attention has no causal mask: every query may look at every (real) context token"): v(causal=True),
        _("your keys and values are swapped: keys are W_k(context), values W_v(context)"): v(swap_kv=True),
        _("you scaled by sqrt(d_model) = sqrt({d_model}); scale each head by sqrt(head_dim) = "
          "sqrt({head_dim})").format(d_model=D_MODEL, head_dim=HEAD_DIM):
            v(scale=D_MODEL ** -0.5),
        _("you did not scale the scores: divide by sqrt(head_dim)"): v(scale=1.0),
        _("the softmax runs over the queries: it must run over the context tokens, dim=-1"): v(dim=-2),
    }
    if mask is not None:
        out[_("your context mask is inverted: True marks a real context token, so fill -inf where it is False")] = \
            v(invert=True)
        out[_("the context mask is ignored: padded context tokens must get -inf before the softmax "
              "(context_mask[:, None, None, :] against [B, H, S_q, S_k] scores)")] = v(mask=None)
        out[_("your context mask hides queries, not context tokens: it lines up with the last axis of the "
              "scores, context_mask[:, None, None, :]")] = v(mask_on="queries")
    return out


def forward(run: Ran, what):
    try:
        return run.value("forward")
    except StudentRaised as exc:
        if exc.kind != "RuntimeError" or not run.result.failed(run.steps["forward"]):
            raise
        raise expect.CheckFailure(_("{what}: {exc}; {from_context}; a [B, S_k] context mask becomes context_mask[:, None, None, :] "
                                    "against [B, H, S_q, S_k] scores").format(what=what, exc=exc.message, from_context=FROM_CONTEXT)) from None


CASES = {"no mask": False, "context mask": True}


@pytest.mark.points(3.5)
@pytest.mark.parametrize("case", list(CASES))
def test_forward_matches_official_module(student, case):
    """forward(x, context, context_mask) equals nn.MultiheadAttention(kdim=d_context, vdim=d_context) with the same weights"""
    use_mask = CASES[case]
    run = part(student)[case]
    state = module_of(run)
    x, context, mask = run.inputs
    what = f"forward(x [{B}, {S_Q}, {D_MODEL}], context [{B}, {S_K}, {D_CONTEXT}])"
    if use_mask:
        what = _("{call}, context_mask with lengths {context_lengths})").format(
            call=what[:-1], context_lengths=list(CONTEXT_LENGTHS))
    got = forward(run, what)
    expect.close(got, cross_variant(state, x, context, mask), what,
                 mistakes=cross_mistakes(state, x, context, mask),
                 shapes={(B, S_K, D_MODEL): _("the output has one row per query (S_q rows), not per context token")})


@pytest.mark.points(4)
def test_keys_and_values_come_from_the_context(student):
    """with a context as long and as wide as x, keys and values still come from the context, not from x"""
    run = part(student)["same widths"]
    state = module_of(run)
    x, context, mask = run.inputs
    what = f"forward(x [{B}, {S_K}, {D_MODEL}], context [{B}, {S_K}, {D_MODEL}], context_mask)"
    got = forward(run, what)
    expect.close(got, cross_variant(state, x, context, mask), what, mistakes=cross_mistakes(state, x, context, mask))


# heads over widths, smallest first: (H, d_model, d_context); head_dim = d_model // H differs from H from the
# second on, so that heads and their width swapped in one of q, k, v shows
HEAD_SHAPES = ((1, 4, 3), (2, 6, 5), (3, 6, 4), (2, 8, 5), (4, 8, 6), (3, 12, 7), (2, 16, 9))
HEADS_SQ, HEADS_SK, HEADS_LENGTHS = 2, 3, (3, 2)


def heads_label(heads: int, d_model: int, d_context: int) -> str:
    return ("H={H}, d_model={d} (head_dim {hd}), d_context={dc}, B={B}, S_q={sq}, S_k={sk}, context lengths {lengths}"
            .format(H=heads, d=d_model, hd=d_model // heads, dc=d_context, B=B, sq=HEADS_SQ, sk=HEADS_SK,
                    lengths=list(HEADS_LENGTHS)))


@pytest.mark.points(3)
def test_forward_for_every_number_of_heads(student):
    """CrossAttention(d_model, H, d_context) is right for every number of heads and head width (the smallest failing case named)"""
    runs = part(student)["heads"]

    def check(shape):
        heads, d_model, d_context = shape
        run = runs[shape]
        state = module_of(run)
        x, context, mask = run.inputs
        what = "forward(x [{B}, {sq}, {d}], context [{B}, {sk}, {dc}], context_mask) of CrossAttention({d}, {H}, {dc})" \
            .format(B=B, sq=HEADS_SQ, sk=HEADS_SK, d=d_model, dc=d_context, H=heads)
        try:
            got = run.value("forward")
        except StudentRaised as exc:
            if exc.kind != "RuntimeError":
                raise
            raise expect.CheckFailure(_("{problem}; each of q, k, v is split as .view(B, S, H, head_dim).transpose(1, 2): "
                                        "H heads of head_dim = d_model // H features").format(problem=exc.message)) from None
        head_dim = d_model // heads
        swapped = _("you made head_dim = {hd} heads of width H = {H}: split q, k and v as .view(B, S, H, head_dim)"
                     ".transpose(1, 2), the head axis before the width").format(hd=head_dim, H=heads)
        expect.close(got, cross_variant(state, x, context, mask, heads=heads), what,
                     mistakes={swapped: lambda: cross_variant(state, x, context, mask, heads=head_dim)})

    smallest_failure([(heads_label(*shape), shape) for shape in HEAD_SHAPES], check)


def _heads_job(student, heads: int, d_model: int, d_context: int):
    job, g = student.job(), seeded()
    state = {"W_q.weight": torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model),
             "W_k.weight": torch.randn(d_model, d_context, generator=g) / math.sqrt(d_context),
             "W_v.weight": torch.randn(d_model, d_context, generator=g) / math.sqrt(d_context),
             "W_o.weight": torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model)}
    module = job.new("CrossAttention", d_model, heads, d_context)
    steps = {"module": module, "load": job.load_state_dict(module, state), "eval": job.eval(module), "state": state}
    x = torch.randn(B, HEADS_SQ, d_model, generator=g)
    context = torch.randn(B, HEADS_SK, d_context, generator=g)
    mask = lengths_mask(HEADS_LENGTHS, HEADS_SK)
    steps["forward"] = job.forward(module, x, context, mask)
    return job, steps, (x, context, mask)


# --------------------------------------------------------------------------- #
# every request of this part, in the order of the checks above, in one round trip
# --------------------------------------------------------------------------- #


def _forward_job(student, d_context, S_x, use_mask):
    job, g = student.job(), seeded()
    steps = loaded(job, g, d_context)
    x = torch.randn(B, S_x, D_MODEL, generator=g)
    context = torch.randn(B, S_K, d_context, generator=g)
    mask = lengths_mask(CONTEXT_LENGTHS, S_K) if use_mask else None
    steps["forward"] = job.forward(steps["module"], x, context) if mask is None else \
        job.forward(steps["module"], x, context, mask)
    return job, steps, (x, context, mask)


def _part(student) -> dict:
    checks = {}
    for key, args in (("submodules", (D_MODEL, H, D_CONTEXT)), ("defaults", (D_MODEL, H))):
        job = student.job()
        checks[key] = (job, {"value": job.describe(job.new("CrossAttention", *args))}, None)
    for case, use_mask in CASES.items():
        checks[case] = _forward_job(student, D_CONTEXT, S_Q, use_mask)
    checks["same widths"] = _forward_job(student, D_MODEL, S_K, True)
    for shape in HEAD_SHAPES:
        checks[("heads", shape)] = _heads_job(student, *shape)
    ran = send(student, checks)
    ran["heads"] = {shape: ran.pop(("heads", shape)) for shape in HEAD_SHAPES}
    return ran


def part(student) -> dict:
    return student.once("generation cross_attention", lambda: _part(student))
