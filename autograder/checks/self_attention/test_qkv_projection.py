"""Hidden checks for part qkv_projection: make_projections, project_qkv."""
import pytest
import torch

from autograder.foundation import i18n
from autograder.checks import expect
from autograder.checks.cases import seeded
from autograder.checks.self_attention.common import B, D_K, D_MODEL, D_V, S, randn

_ = i18n.message

NAMES = ("W_q", "W_k", "W_v")
WIDTHS = {"W_q": ("d_k", D_K), "W_k": ("d_k", D_K), "W_v": ("d_v", D_V)}


def _projections_job(student, read: str):
    """make_projections, then `read` ("describe" or "state_dict") of each of the three layers."""
    job = student.job()
    made = job.call("make_projections", D_MODEL, D_K, D_V)
    reads = {name: getattr(job, read)(made[i].named(f"make_projections(...) {name}")) for i, name in enumerate(NAMES)}
    return job, made, reads


def _layers_job(student):
    """Three grader-built Linear layers with known weights, then project_qkv(x, W_q, W_k, W_v)."""
    g = seeded()
    weights = {"W_q": randn(g, D_K, D_MODEL), "W_k": randn(g, D_K, D_MODEL), "W_v": randn(g, D_V, D_MODEL)}
    job = student.job()
    layers = {}
    for name, w in weights.items():
        layers[name] = job.linear(D_MODEL, w.shape[0])
        job.load_state_dict(layers[name], {"weight": w})
    x = randn(g, B, S, D_MODEL)
    return job, weights, x, job.call("project_qkv", x, layers["W_q"], layers["W_k"], layers["W_v"])


def _part(student) -> dict:
    """Every check's requests of this part, in one round trip."""
    jobs = {"describe": _projections_job(student, "describe"), "state": _projections_job(student, "state_dict"),
            "project": _layers_job(student)}
    results = student.run([j[0] for j in jobs.values()])
    return {key: (result, *job[1:]) for (key, job), result in zip(jobs.items(), results)}


def projections(student, result, made):
    """The three layers make_projections returned, checked as in the student's terms."""
    got = result[made]
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise expect.CheckFailure(_("make_projections({d_model}, {d_k}, {d_v}) should return three layers (W_q, W_k, W_v), got "
                                    "{kind}").format(d_model=D_MODEL, d_k=D_K, d_v=D_V, kind=type(got).__name__))
    return {name: student.wrap(h, f"make_projections(...) {name}") for name, h in zip(NAMES, got)}


@pytest.mark.points(4)
def test_three_bias_free_linear_layers(student):
    """make_projections returns three bias-free nn.Linear: W_q, W_k d_model -> d_k, W_v d_model -> d_v"""
    result, made, described = student.once("qkv_projection", lambda: _part(student))["describe"]
    for name in projections(student, result, made):
        info = result[described[name]]
        if info["type"] != "Linear":
            raise expect.CheckFailure(_("{name} is a {info}, expected an nn.Linear").format(name=name, info=info['type']))
        params = info.get("parameters", {})
        if "bias" in params:
            raise expect.CheckFailure(_("{name} has a bias: the projections are bias-free, use nn.Linear(..., bias=False)").format(name=name))
        width, size = WIDTHS[name]
        if params.get("weight") != [size, D_MODEL]:
            w = params.get("weight", [])
            got = f"{w[1]} -> {w[0]}" if len(w) == 2 else str(w)
            raise expect.CheckFailure(_("make_projections({d_model}, {d_k}, {d_v}): {name} maps {got} features, "
                                        "expected {d_model} -> {size} (d_model -> {width})").format(
                d_model=D_MODEL, d_k=D_K, d_v=D_V, name=name, got=got, size=size, width=width))


@pytest.mark.points(2)
def test_projections_are_independent(student):
    """W_q, W_k and W_v are three independent layers with their own weights"""
    result, made, states = student.once("qkv_projection", lambda: _part(student))["state"]
    weights = {name: result[states[name]].get("weight") for name in projections(student, result, made)}
    for a, b in (("W_q", "W_k"), ("W_q", "W_v"), ("W_k", "W_v")):
        wa, wb = weights[a], weights[b]
        if isinstance(wa, torch.Tensor) and isinstance(wb, torch.Tensor) and wa.shape == wb.shape \
                and torch.equal(wa, wb):
            raise expect.CheckFailure(_("{a} and {b} have the same weights (the same layer?): create a separate nn.Linear for each of "
                                        "W_q, W_k and W_v").format(a=a, b=b))


@pytest.mark.points(4)
def test_project_qkv_applies_each_layer(student):
    """project_qkv(x, W_q, W_k, W_v) returns (W_q(x), W_k(x), W_v(x)) for x [B, S, d_model]"""
    result, weights, x, projected = student.once("qkv_projection", lambda: _part(student))["project"]
    got = result[projected]
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise expect.CheckFailure(_("project_qkv should return three tensors (Q, K, V), got {kind}").format(kind=type(got).__name__))
    outputs = {n: x @ w.T for n, w in weights.items()}
    for (name, want), value in zip(outputs.items(), got):
        letter = name[-1].upper()
        mistakes = {_("your {letter} is {upper}: return W_q(x), W_k(x), W_v(x) in that order").format(letter=letter, upper=other[-1].upper()):
                    outputs[other] for other in NAMES if other != name}
        expect.close(value, want, f"project_qkv(...)[{NAMES.index(name)}] ({letter})",
                     mistakes=mistakes)
