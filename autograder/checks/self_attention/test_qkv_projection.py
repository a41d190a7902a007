"""Hidden checks for part qkv_projection: make_projections, project_qkv."""
import pytest
import torch

from autograder.checks import expect
from autograder.checks.self_attention.common import B, D_K, D_MODEL, D_V, S, randn

NAMES = ("W_q", "W_k", "W_v")
WIDTHS = {"W_q": ("d_k", D_K), "W_k": ("d_k", D_K), "W_v": ("d_v", D_V)}


def projections(student):
    got = student.call("make_projections", D_MODEL, D_K, D_V)
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise expect.CheckFailure(f"make_projections({D_MODEL}, {D_K}, {D_V}) should return three layers "
                                  f"(W_q, W_k, W_v), got {type(got).__name__}")
    return {name: student.wrap(h, f"make_projections(...) {name}") for name, h in zip(NAMES, got)}


@pytest.mark.points(4)
def test_three_bias_free_linear_layers(student):
    """make_projections returns three bias-free nn.Linear: W_q, W_k d_model -> d_k, W_v d_model -> d_v"""
    for name, layer in projections(student).items():
        info = layer.describe()
        if info["type"] != "Linear":
            raise expect.CheckFailure(f"{name} is a {info['type']}, expected an nn.Linear")
        params = info.get("parameters", {})
        if "bias" in params:
            raise expect.CheckFailure(f"{name} has a bias: the projections are bias-free, use nn.Linear(..., bias=False)")
        width, size = WIDTHS[name]
        if params.get("weight") != [size, D_MODEL]:
            w = params.get("weight", [])
            got = f"{w[1]} -> {w[0]}" if len(w) == 2 else str(w)
            raise expect.CheckFailure(f"make_projections({D_MODEL}, {D_K}, {D_V}): {name} maps {got} features, "
                                      f"expected {D_MODEL} -> {size} (d_model -> {width})")


@pytest.mark.points(2)
def test_projections_are_independent(student):
    """W_q, W_k and W_v are three independent layers with their own weights"""
    weights = {name: layer.state_dict().get("weight") for name, layer in projections(student).items()}
    for a, b in (("W_q", "W_k"), ("W_q", "W_v"), ("W_k", "W_v")):
        wa, wb = weights[a], weights[b]
        if isinstance(wa, torch.Tensor) and isinstance(wb, torch.Tensor) and wa.shape == wb.shape \
                and torch.equal(wa, wb):
            raise expect.CheckFailure(f"{a} and {b} have the same weights (the same layer?): create a separate "
                                      "nn.Linear for each of W_q, W_k and W_v")


def _layers(student, gen):
    """Three grader-built Linear layers with known weights, living in the worker."""
    weights = {"W_q": randn(gen, D_K, D_MODEL), "W_k": randn(gen, D_K, D_MODEL), "W_v": randn(gen, D_V, D_MODEL)}
    layers = {}
    for name, w in weights.items():
        layer = student.linear(D_MODEL, w.shape[0])
        layer.load_state_dict({"weight": w})
        layers[name] = layer
    return weights, layers


@pytest.mark.points(4)
def test_project_qkv_applies_each_layer(student, gen):
    """project_qkv(x, W_q, W_k, W_v) returns (W_q(x), W_k(x), W_v(x)) for x [B, S, d_model]"""
    weights, layers = _layers(student, gen)
    x = randn(gen, B, S, D_MODEL)
    got = student.call("project_qkv", x, layers["W_q"], layers["W_k"], layers["W_v"])
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise expect.CheckFailure(f"project_qkv should return three tensors (Q, K, V), got {type(got).__name__}")
    outputs = {n: x @ w.T for n, w in weights.items()}
    for (name, want), value in zip(outputs.items(), got):
        letter = name[-1].upper()
        mistakes = {f"your {letter} is {other[-1].upper()}: return W_q(x), W_k(x), W_v(x) in that order":
                    outputs[other] for other in NAMES if other != name}
        expect.close(value, want, f"project_qkv(...)[{NAMES.index(name)}] ({letter})",
                     mistakes=mistakes)
