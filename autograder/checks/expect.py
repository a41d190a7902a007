"""Comparisons that explain themselves: each failure says what is wrong in the student's terms.

`close(value, expected, what, mistakes={hint: tensor})` compares a student's result with the
reference; when it differs, the result is compared with what each known mistake would have
produced (computed here, in the trusted process, from the same inputs) and the matching
hint is shown. The reference code itself is never revealed.
"""
from __future__ import annotations

import torch

from autograder.foundation import i18n
from autograder.foundation.failures import CheckFailure, StudentRaised

_ = i18n.message

__all__ = ["CheckFailure", "tensor", "shape", "finite", "close", "diagnose", "call", "value", "fmt_shape", "same", "hinted_message"]


def fmt_shape(t) -> str:
    return str(list(t.shape)) if isinstance(t, torch.Tensor) else str(list(t))


def tensor(value, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        kind = type(value).__name__
        if isinstance(value, tuple):
            raise CheckFailure(_("{what} should return a torch.Tensor, got {kind} (return the tensor itself, not a "
                                 "tuple)").format(what=what, kind=kind))
        raise CheckFailure(_("{what} should return a torch.Tensor, got {kind}").format(what=what, kind=kind))
    return value


def same(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and bool(torch.equal(a, b))
    a, b = a.double(), b.double()
    # -inf must meet -inf (and NaN meet NaN): allclose with equal_nan treats infinities exactly
    return bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))


def diagnose(value, mistakes: dict | None, atol: float = 1e-4, rtol: float = 1e-3) -> str:
    """The hint of the first known mistake whose output the student's result matches, else ''."""
    for hint, produced in (mistakes or {}).items():
        if callable(produced):
            try:
                produced = produced()
            except Exception:  # noqa: BLE001 - a mistake that cannot even be computed here
                continue
        if same(value, produced, atol, rtol):
            return hint
    return ""


def shape(value, expected, what: str, mistakes: dict | None = None, hints: dict | None = None) -> torch.Tensor:
    value = tensor(value, what)
    if tuple(value.shape) != tuple(expected):
        hint = (hints or {}).get(tuple(value.shape), "") or diagnose(value, mistakes)
        raise CheckFailure(hinted_message(_("{what} returned shape {got}, expected {expected}").format(
            what=what, got=fmt_shape(value), expected=fmt_shape(expected)), hint))
    return value


def finite(value: torch.Tensor, what: str) -> torch.Tensor:
    if value.is_floating_point() and not torch.isfinite(value).all():
        bad = (~torch.isfinite(value)).sum().item()
        raise CheckFailure(_("{what} returned {bad} NaN or inf values").format(what=what, bad=bad))
    return value


def close(value, expected: torch.Tensor, what: str, hint: str = "", atol: float = 1e-5, rtol: float = 1e-4,
          mistakes: dict | None = None, shapes: dict | None = None):
    """The student's tensor equals the reference (same shape, dtype and values), or a named failure."""
    value = shape(value, expected.shape, what, mistakes, shapes)
    if value.dtype != expected.dtype:
        raise CheckFailure(_("{what} returned dtype {got}, expected {expected} (the inputs' dtype)").format(
            what=what, got=value.dtype, expected=expected.dtype))
    if not same(value, expected, atol, rtol):
        named = diagnose(value, mistakes, max(atol, 1e-4), max(rtol, 1e-3)) or hint  # at the check's tolerance
        if value.is_floating_point() and torch.isnan(value).any() and not torch.isnan(expected).any():
            msg = _("{what} contains NaN ({count} values)").format(what=what, count=int(torch.isnan(value).sum()))
        else:
            msg = _("{what} is off by up to {diff:.3g}").format(what=what, diff=largest_difference(value, expected))
        raise CheckFailure(hinted_message(msg, named))
    return value


def largest_difference(value: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest |value - expected|: 0 where both are the same infinity, inf where only one is infinite or NaN
    (never the largest float, which nan_to_num would put there)."""
    a, b = value.double(), expected.double()
    diff = (a - b).abs()
    diff = torch.where((a == b) & a.isinf(), torch.zeros_like(diff), diff)
    return float(diff.nan_to_num(nan=float("inf"), posinf=float("inf")).max().item()) if diff.numel() else 0.0


def call(student, name: str, *args, hint: str = "", **kwargs):
    """student.call, with a hint added when the student's code raises (not for NotImplementedError)."""
    return hinted(lambda: student.call(name, *args, **kwargs), hint)


def value(outcome, hint: str = ""):
    """A batched call's value (batch.Outcome), with the hint of `call` when the student's code raised."""
    return hinted(lambda: outcome.value, hint)


def hinted(get, hint: str):
    try:
        return get()
    except StudentRaised as exc:
        if hint and exc.kind != "NotImplementedError":
            raise CheckFailure(_("{failure}; {hint}").format(failure=exc.message, hint=hint)) from None
        raise


def hinted_message(message, hint):
    """`message: hint`, or the message alone without a hint."""
    return _("{message}: {hint}").format(message=message, hint=hint) if hint else message


def submodules(info: dict, layers: dict, dropout: float | None, call: str, roles: dict | None = None) -> None:
    """A module's bias-free nn.Linear layers {name: (d_in, d_out)} and its nn.Dropout(p=dropout) (none
    asked for when dropout is None), read from Job.describe(); each gap is named in the student's terms."""
    children = info.get("children", {})
    if not info.get("is_module"):
        raise CheckFailure(_("{call} is not an nn.Module").format(call=call))
    for name, (d_in, d_out) in layers.items():
        child = children.get(name)
        role = _(" ({role})").format(role=roles[name]) if roles and name in roles else ""
        if child is None:
            raise CheckFailure(_("{call} has no submodule {name}{role}: assign self.{name} = nn.Linear(...)").format(
                call=call, name=name, role=role))
        if child["type"] != "Linear":
            raise CheckFailure(_("self.{name} is a {type}, expected nn.Linear").format(name=name, type=child["type"]))
        if child.get("bias"):
            raise CheckFailure(_("self.{name} has a bias: the projections are bias-free (bias=False)").format(name=name))
        if (child["in_features"], child["out_features"]) != (d_in, d_out):
            raise CheckFailure(_("{call}: self.{name} maps {d_in} -> {d_out} features, expected {want_in} -> "
                                 "{want_out}{role}").format(call=call, name=name, d_in=child["in_features"],
                                                            d_out=child["out_features"], want_in=d_in,
                                                            want_out=d_out, role=role))
    if dropout is None:
        return
    drop = children.get("dropout")
    if drop is None or drop["type"] != "Dropout":
        raise CheckFailure(_("{call} has no self.dropout = nn.Dropout(dropout)").format(call=call))
    if abs(drop["p"] - dropout) > 1e-9:
        raise CheckFailure(_("{call}: self.dropout has p={p}, expected {dropout} (the dropout argument)").format(
            call=call, p=drop["p"], dropout=dropout))
