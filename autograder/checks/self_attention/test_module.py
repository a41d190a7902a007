"""Hidden checks for part module: class SelfAttention.

The student's module is built in the worker, then given the weights of the reference
module (same shapes, load_state_dict), so its forward can be compared exactly.
"""
import pytest
import torch

import solutions as ref
from autograder.foundation import i18n, spec
from autograder.checks import expect, lent
from autograder.checks.cases import seeded
from autograder.checks.self_attention.common import (B, D_K, D_MODEL, D_V, LENGTHS, PIECE_PROBES, S, lengths_mask, module_mistakes,
                                                     reference_module)
from autograder.foundation.failures import StudentRaised

_ = i18n.message


@pytest.fixture(autouse=True)
def lent_pieces_module(student):
    """SelfAttention is graded with the reference scaled_scores, attention_weights, attend and masks in place of the
    student's (each costs points in its own part only); the part's note names the student's wrong ones."""
    lent.lending(student, "SelfAttention", spec.SELF_ATTENTION.part("module"), ref, PIECE_PROBES)

DROPOUT = 0.25
LAYERS = {"W_q": (D_MODEL, D_K), "W_k": (D_MODEL, D_K), "W_v": (D_MODEL, D_V), "W_o": (D_V, D_MODEL)}
ROLE = {"W_q": "d_model -> d_k", "W_k": "d_model -> d_k", "W_v": "d_model -> d_v",
        "W_o": _("the output projection, d_v -> d_model")}
SEED_BROADCAST = (_("a [B, S] mask needs mask[:, None, :] to line up with [B, S, S] scores; mask[:, None, None, :] "
                    "broadcasts them to [B, B, S, S]"))


CASES = {"no mask": (False, False), "padding mask": (True, False), "causal": (False, True),
         "padding mask and causal": (True, True)}


def _built(student) -> dict:
    """SelfAttention built three ways in one round trip: described (with the check's settings, and with the
    defaults), and the names of its weights (which of the reference weights fit it)."""
    jobs = {}
    for key, args, kwargs, read in (("settings", (D_MODEL, D_K, D_V), {"dropout": DROPOUT}, "describe"),
                                    ("defaults", (D_MODEL,), {}, "describe"),
                                    ("weights", (D_MODEL, D_K, D_V), {"dropout": DROPOUT}, "state_dict")):
        job = student.job()
        jobs[key] = (job, getattr(job, read)(job.new("SelfAttention", *args, **kwargs)))
    results = student.run([job for job, _ in jobs.values()])
    return {key: (result, step) for (key, (_, step)), result in zip(jobs.items(), results)}


def built(student, key: str):
    """What SelfAttention built as `key` gave ("settings", "defaults": its description; "weights": its weights)."""
    result, step = student.once("SelfAttention built", lambda: _built(student))[key]
    return result[step]


@pytest.mark.points(4)
def test_submodules(student):
    """SelfAttention has bias-free W_q, W_k, W_v, W_o of the right widths and an nn.Dropout"""
    call = f"SelfAttention({D_MODEL}, d_k={D_K}, d_v={D_V}, dropout={DROPOUT})"
    expect.submodules(built(student, "settings"), LAYERS, DROPOUT, call, ROLE)


@pytest.mark.points(1)
def test_defaults(student):
    """SelfAttention(d_model) uses d_k = d_v = d_model and dropout 0.1"""
    layers = {k: (D_MODEL, D_MODEL) for k in LAYERS}
    expect.submodules(built(student, "defaults"), layers, 0.1, f"SelfAttention({D_MODEL})", ROLE)


def loaded(student, dropout: float = DROPOUT):
    """(a job that builds the student's module with the reference weights, in eval mode; the module's step;
    the loading step; the reference module)."""
    reference = reference_module(ref.SelfAttention, D_MODEL, D_K, D_V, dropout=dropout)
    state = reference.state_dict()
    theirs = built(student, "weights")
    # A missing layer or an extra bias costs the structure check; here the weights that do fit are
    # loaded (extra biases set to zero), so that the forward checks judge the forward alone.
    fitting = {k: v for k, v in state.items() if k in theirs}
    fitting.update({k: torch.zeros_like(v) for k, v in theirs.items()
                    if k not in state and k.endswith(".bias") and isinstance(v, torch.Tensor)})
    job = student.job()
    module = job.new("SelfAttention", D_MODEL, D_K, D_V, dropout=dropout)
    load = job.load_state_dict(module, fitting, strict=False)
    job.eval(module)
    return job, module, load, reference


def weights_loaded(result, load) -> None:
    """The failure of loading the reference weights, in the student's terms."""
    if result.failed(load) and isinstance(result.failure, StudentRaised):
        raise expect.CheckFailure(_("the weights of a correct SelfAttention could not be loaded into yours ({failure}): it needs "
                                    "exactly the bias-free layers W_q, W_k, W_v, W_o").format(failure=result.failure))


def _forwards(student) -> dict:
    """Each case's forward, in its own module (as each check built its own), in one round trip."""
    cases, jobs = {}, []
    for case, (use_mask, causal) in CASES.items():
        job, module, load, reference = loaded(student)
        x = torch.randn(B, S, D_MODEL, generator=seeded())
        mask = lengths_mask() if use_mask else None
        kwargs = ({"mask": mask} if use_mask else {}) | ({"causal": True} if causal else {})
        cases[case] = (x, mask, load, job.forward(module, x, **kwargs), reference)
        jobs.append(job)
    return {case: (*cases[case], result) for case, result in zip(cases, student.run(jobs))}


@pytest.mark.points(3)
@pytest.mark.parametrize("case", list(CASES))
def test_forward_matches_reference(student, case):
    """in eval mode, forward(x, mask, causal) equals the reference attention"""
    use_mask, causal = CASES[case]
    x, mask, load, out, reference, result = student.once("SelfAttention forward", lambda: _forwards(student))[case]
    weights_loaded(result, load)
    with torch.no_grad():
        want = reference(x, mask, causal)
    try:
        got = result[out]
    except StudentRaised as exc:
        if use_mask and exc.kind == "RuntimeError":
            raise expect.CheckFailure(_("{failure}; {hint}").format(failure=exc.message, hint=SEED_BROADCAST)) from None
        raise
    what = f"forward(x{', mask' if use_mask else ''}{', causal=True' if causal else ''})"
    if use_mask:
        what = _("{call} with lengths {lengths}").format(call=what, lengths=list(LENGTHS))
    state = reference.state_dict()
    expect.close(got, want, what, mistakes=module_mistakes(state, x, mask, causal, d_model=D_MODEL),
                 shapes={(B, B, S, D_MODEL): _("your output has shape [{b}, {b}, {s}, {d_model}]: {seed_broadcast}").format(b=B, s=S, d_model=D_MODEL, seed_broadcast=SEED_BROADCAST)})


@pytest.mark.points(3)
def test_dropout_on_attention_weights(student):
    """in train mode, dropout acts on the attention weights (after the softmax), not on the values or the output"""
    p = 0.5
    job, module, load, reference = loaded(student, dropout=p)
    job.train(module)
    # Every token is the same vector, so every value vector is the same v and every row of the
    # weights is uniform. Dropout on the weights rescales a row's sum: each output row is then a
    # multiple (kept / (S * (1 - p)), never exactly 1 for S = 5) of u = W_o v. Dropout anywhere
    # else either does nothing here or scales single features, which breaks the proportion.
    x = torch.randn(1, 1, D_MODEL, generator=seeded()).expand(B, S, D_MODEL).contiguous()
    out = job.forward(module, x)
    [result] = student.run([job])
    weights_loaded(result, load)
    with torch.no_grad():
        u = reference(x[:1, :1])[0, 0].double()  # [d_model]
    got = expect.shape(result[out], (B, S, D_MODEL), _("forward(x) in train mode")).double()
    expect.finite(got, _("forward(x) in train mode"))
    rows = got.reshape(-1, D_MODEL)
    factors = rows @ u / (u @ u)  # [B * S]
    if torch.allclose(rows, u.expand_as(rows), atol=1e-5, rtol=1e-4):
        raise expect.CheckFailure(_("in train mode with dropout={p} your output is the same as in eval mode: apply self.dropout to "
                                    "the attention weights, after the softmax (dropout on the scores before the softmax, or no "
                                    "dropout at all, does nothing here)").format(p=p))
    residual = (rows - factors[:, None] * u).abs().max().item()
    if residual > 1e-4 * (1 + u.abs().max().item()):
        raise expect.CheckFailure(_("in train mode with dropout={p} your output is not what dropout on the attention weights gives: "
                                    "dropout seems to act on the values, on weights @ V or on the output; apply self.dropout to the "
                                    "weights right after the softmax").format(p=p))
