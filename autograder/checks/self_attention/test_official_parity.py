"""Hidden checks for part official_parity: to_official, parity_error.

Both functions take a SelfAttention. So that this part's score depends only on them, they
receive the grader's stand-in module (job.standin), never the student's own class:
a correct one, and deliberately broken ones that a working parity_error must expose.
"""
import math

import pytest
import torch
import torch.nn as nn

import solutions as ref
from autograder.foundation import i18n, spec
from autograder.checks import expect, lent
from autograder.checks.self_attention import standin
from autograder.checks.cases import seeded
from autograder.foundation.failures import StudentRaised
from autograder.checks.self_attention.common import (B, D_MODEL, LENGTHS, PIECE_PROBES, S, attention, lengths_mask, linear,
                                                     module_forward, randn)

_ = i18n.message


@pytest.fixture(autouse=True)
def lent_pieces_official_parity(student):
    """parity_error is graded with the reference scaled_scores, attention_weights, attend and masks in place of the
    student's (each costs points in its own part only); the part's note names the student's wrong ones."""
    lent.lending(student, "parity_error", spec.SELF_ATTENTION.part("official_parity"), ref, PIECE_PROBES)
    standin.serve(student.session, "official_parity")  # the stand-in's forward is answered here, in this part only

QKV = ("W_q", "W_k", "W_v")


BROKEN = {
    "no_scale": _("does not scale its scores"),
    "softmax_over_queries": _("takes the softmax over the queries"),
    "ignores_mask": _("ignores the padding mask"),
    "no_output_projection": _("skips W_o"),
}


def official(job):
    """(the stand-in's state, the student's to_official(stand-in)), queued on `job`."""
    custom = job.standin(D_MODEL, "correct")
    state = job.state_dict(custom)
    return state, job.wrap(job.call("to_official", custom), "to_official(custom)")


def _first(student) -> dict:
    """The requests of the checks up to the dropout check, in their order, in one round trip:
    {check: (its job, its steps by name, its inputs)}."""
    checks = {}
    job = student.job()
    __, module = official(job)
    checks["settings"] = (job, {"info": job.describe(module)}, ())
    job = student.job()
    state, module = official(job)
    checks["weights"] = (job, {"state": state, "got": job.state_dict(module)}, ())
    job = student.job()
    state, module = official(job)
    x, mask = randn(seeded(), B, S, D_MODEL), lengths_mask()
    reply = job.forward(module, x, x, x, key_padding_mask=~mask, need_weights=False)
    checks["same"] = (job, {"state": state, "reply": reply}, (x, mask))
    for with_mask in (False, True):
        job = student.job()
        custom = job.standin(D_MODEL, "correct")
        x, mask = randn(seeded(), B, S, D_MODEL), lengths_mask() if with_mask else None
        checks[f"small {with_mask}"] = (job, {"err": job.call("parity_error", custom, x, mask),
                                              "state": job.state_dict(custom)}, (x, mask))
    job = student.job()
    custom = job.standin(D_MODEL, "correct", dropout=0.5)
    job.train(custom)
    x = randn(seeded(), B, S, D_MODEL)
    checks["dropout"] = (job, {"custom": custom, "err": job.call("parity_error", custom, x, lengths_mask())}, (x,))
    return checks


def _broken(student) -> dict:
    """The broken stand-ins' requests, in one round trip. Not with the others: the dropout check may
    still call parity_error before them (and its nn.MultiheadAttention draws from the worker's
    random numbers, which the stand-ins' weights come from)."""
    checks = {}
    for variant in BROKEN:
        job = student.job()
        custom = job.standin(D_MODEL, variant)
        x, mask = randn(seeded(), B, S, D_MODEL), lengths_mask() if variant == "ignores_mask" else None
        checks[variant] = (job, {"err": job.call("parity_error", custom, x, mask), "state": job.state_dict(custom)},
                           (x, mask))
    return checks


def _sent(student, checks: dict) -> dict:
    results = student.run([job for job, _, _ in checks.values()])
    return {key: (result, steps, inputs) for (key, (_, steps, inputs)), result in zip(checks.items(), results)}


def part(student, check: str):
    """(its job's result, its steps by name, its inputs) of a check of this part."""
    group = "broken" if check in BROKEN else "first"
    build = _broken if check in BROKEN else _first
    return student.once(f"official_parity {group}", lambda: _sent(student, build(student)))[check]


@pytest.mark.points(2)
def test_official_module_settings(student):
    """to_official returns an nn.MultiheadAttention with one head, batch_first=True and no dropout"""
    result, steps, __ = part(student, "settings")
    info = result[steps["info"]]
    if info["type"] != "MultiheadAttention":
        raise expect.CheckFailure(_("to_official returned a {info}, expected an nn.MultiheadAttention").format(info=info['type']))
    attrs = info["attrs"]
    if attrs.get("embed_dim") != D_MODEL:
        raise expect.CheckFailure(_("the official module has embed_dim={get}, expected {d_model} (the custom module's d_model)").format(get=attrs.get('embed_dim'), d_model=D_MODEL))
    if attrs.get("num_heads") != 1:
        raise expect.CheckFailure(_("the official module has num_heads={get}: SelfAttention is one head, use num_heads=1").format(get=attrs.get('num_heads')))
    if attrs.get("batch_first") is not True:
        raise expect.CheckFailure(_("the official module has batch_first=False: our tensors are [B, S, d_model], so build it with "
                                    "batch_first=True"))
    if attrs.get("dropout", 0.0) != 0.0:
        raise expect.CheckFailure(_("the official module has dropout={get}: use dropout=0.0").format(get=attrs.get('dropout')))


@pytest.mark.points(3)
def test_official_module_weights(student):
    """the official module carries W_q, W_k, W_v (in that order) in in_proj_weight, W_o in out_proj, biases zero"""
    result, steps, __ = part(student, "weights")
    state, got = result[steps["state"]], result[steps["got"]]
    w = got.get("in_proj_weight")
    if not isinstance(w, torch.Tensor) or tuple(w.shape) != (3 * D_MODEL, D_MODEL):
        raise expect.CheckFailure(_("the official module has no in_proj_weight of shape [3 * d_model, d_model]"))
    blocks = w.split(D_MODEL)
    found = []
    for block in blocks:
        match = [n for n in QKV if torch.allclose(block, state[f"{n}.weight"])]
        match += [f"{n}^T" for n in QKV if torch.allclose(block, state[f"{n}.weight"].T)]
        found.append(match[0] if match else "?")
    if found != list(QKV):
        if any(f.endswith("^T") for f in found):
            hint = _("copy the weights as they are (nn.Linear.weight is [out, in] like in_proj_weight), not "
                     "transposed")
        elif "?" in found:
            hint = _("copy W_q.weight, W_k.weight, W_v.weight into in_proj_weight (e.g. torch.cat along dim 0)")
        else:
            hint = _("the rows of in_proj_weight must be W_q, then W_k, then W_v")
        raise expect.CheckFailure(_("the blocks of in_proj_weight are {join}, expected W_q, W_k, W_v: {hint}").format(join=', '.join(found), hint=hint))
    out_w = got.get("out_proj.weight")
    if not isinstance(out_w, torch.Tensor) or not torch.allclose(out_w, state["W_o.weight"]):
        raise expect.CheckFailure(_("out_proj.weight is not W_o's weight: copy custom.W_o.weight into it"))
    for key in ("in_proj_bias", "out_proj.bias"):
        bias = got.get(key)
        if isinstance(bias, torch.Tensor) and bias.abs().max() > 0:
            raise expect.CheckFailure(_("{key} is not zero: our SelfAttention has no biases, so set them to zero").format(key=key))


def _official_reference(state, x, mask, batch_first=True, convention="converted"):
    """nn.MultiheadAttention with the stand-in's weights, built here in the trusted process.

    convention="converted" passes ~mask as key_padding_mask (the right convention), "raw" passes our mask as it is."""
    mha = nn.MultiheadAttention(D_MODEL, 1, dropout=0.0, batch_first=batch_first)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([state[f"{n}.weight"] for n in QKV]))
        mha.in_proj_bias.zero_()
        mha.out_proj.weight.copy_(state["W_o.weight"])
        mha.out_proj.bias.zero_()
        ignore = None if mask is None else (~mask if convention == "converted" else mask)  # True = ignore this key
        return mha.eval()(x, x, x, key_padding_mask=ignore, need_weights=False)[0]


@pytest.mark.points(3)
def test_official_module_computes_the_same_attention(student):
    """official(x, x, x, key_padding_mask=~mask) gives the custom module's output"""
    result, steps, (x, mask) = part(student, "same")
    state = result[steps["state"]]
    try:
        reply = result[steps["reply"]]
    except StudentRaised as exc:
        raise expect.CheckFailure(_("{exc}; is the module built with batch_first=True? our tensors are [B, S, d_model]").format(exc=exc.message)) from None
    got = reply[0] if isinstance(reply, (tuple, list)) else reply
    want = module_forward(state, x, mask)
    mistakes = {_("the official module was built with batch_first=False; our tensors are [B, S, d_model]"):
                lambda: _official_reference(state, x, mask, batch_first=False)}
    for order in ("W_k W_q W_v", "W_q W_v W_k", "W_v W_k W_q"):
        swapped = dict(state)
        for name, src in zip(QKV, order.split()):
            swapped[f"{name}.weight"] = state[f"{src}.weight"]
        mistakes[_("in_proj_weight holds {join}: its rows must be W_q, then W_k, then W_v").format(join=', '.join(order.split()))] = \
            (lambda s=swapped: module_forward(s, x, mask))
    expect.close(got, want, _("the official module's output (lengths {lengths})").format(lengths=list(LENGTHS)), mistakes=mistakes)


def _float(value, what):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if not isinstance(value, (float, int)) or isinstance(value, bool):
        raise expect.CheckFailure(_("{what} should return a float, got {kind}").format(what=what, kind=type(value).__name__))
    return float(value)


def _wrong_convention_error(state, x, mask):
    """What parity_error returns when it hands our mask to key_padding_mask without inverting it."""
    ours = module_forward(state, x, mask)
    theirs = _official_reference(state, x, mask, convention="raw")
    return (ours - theirs).abs().max().item()


@pytest.mark.points(3)
@pytest.mark.parametrize("with_mask", [False, True], ids=["no mask", "padding mask"])
def test_parity_error_small_for_a_correct_module(student, with_mask):
    """parity_error is below 1e-4 for a correct SelfAttention"""
    result, steps, (x, mask) = part(student, f"small {with_mask}")
    what = _("parity_error(correct module, x{value})").format(value=', mask' if with_mask else '')
    err = _float(result[steps["err"]], what)
    if not err < 1e-4:
        hint = ""
        if with_mask:
            wrong = _wrong_convention_error(result[steps["state"]], x, mask)
            if math.isnan(err) or (math.isnan(wrong) and math.isnan(err)) or abs(err - wrong) < 1e-4:
                hint = (_(": the mask convention is likely wrong: key_padding_mask is True where a key must be IGNORED, "
                          "the opposite of our mask, so pass key_padding_mask=~mask"))
        raise expect.CheckFailure(_("{what} returned {err:.3g} for the grader's correct SelfAttention (lengths {lengths}): it must "
                                    "be close to 0{hint}").format(what=what, err=err, lengths=list(LENGTHS), hint=hint))


@pytest.mark.points(1)
def test_parity_error_turns_dropout_off(student):
    """parity_error compares both modules without dropout, even when the custom module is in train mode"""
    result, steps, (x,) = part(student, "dropout")
    err = _float(result[steps["err"]], "parity_error")
    if not err < 1e-4:
        custom = result.remote(steps["custom"])
        custom.eval()
        in_eval = _float(student.call("parity_error", custom, x, lengths_mask()), "parity_error")
        hint = (_("switch both modules to eval() (and back afterwards) before comparing") if in_eval < 1e-4 else
                _("it is not small in eval mode either ({in_eval:.3g}): see the checks above").format(in_eval=in_eval))
        raise expect.CheckFailure(_("parity_error returned {err:.3g} for a correct module with dropout=0.5 in train mode: {hint}").format(err=err, hint=hint))


def _true_discrepancy(state, x, mask, variant) -> float:
    """max |broken(x) - official(x)|, computed here in the trusted process from the stand-in's weights."""
    correct = module_forward(state, x, mask)
    if variant == "no_output_projection":
        Q, K, V = (linear(x, state[f"W_{n}.weight"]) for n in "qkv")
        broken = attention(Q, K, V, mask)
    else:
        kwargs = {"no_scale": {"scale": 1.0}, "softmax_over_queries": {"dim": -2}}.get(variant, {})
        broken = module_forward(state, x, None if variant == "ignores_mask" else mask, **kwargs)
    return (broken - correct).abs().max().item()


@pytest.mark.points(2)
@pytest.mark.parametrize("variant", list(BROKEN))
def test_parity_error_exposes_a_broken_module(student, variant):
    """parity_error is large for a broken SelfAttention: exactly the largest difference of the two outputs"""
    result, steps, (x, mask) = part(student, variant)
    err = _float(result[steps["err"]], "parity_error")
    if not (err > 1e-3 or math.isnan(err)):  # NaN: the outputs could not even be compared equal
        raise expect.CheckFailure(_("parity_error returned {err:.3g} for a SelfAttention that {broken}: a parity check must run "
                                    "both modules on x and return the largest absolute difference of their outputs").format(err=err, broken=BROKEN[variant]))
    # The value itself must be the measured difference: a parity_error that only guesses "large" (say, by
    # looking at the module's attributes) instead of comparing outputs does not pass.
    true = _true_discrepancy(result[steps["state"]], x, mask, variant)
    if math.isnan(err) or abs(err - true) > 1e-3 * max(1.0, true):
        raise expect.CheckFailure(_("parity_error returned {err:.4g} for a SelfAttention that {broken}, but the largest absolute "
                                    "difference of the two outputs is {true:.4g}: return (custom(x, mask) - official(x, x, x, "
                                    "...)[0]).abs().max().item()").format(err=err, broken=BROKEN[variant], true=true))
