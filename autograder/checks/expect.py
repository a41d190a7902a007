"""Comparisons that explain themselves: each failure says what is wrong in the student's terms."""
from __future__ import annotations

import torch

from autograder.session import CheckFailure


def tensor(value, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise CheckFailure(f"{what} should return a torch.Tensor, got {type(value).__name__}")
    return value


def shape(value, expected, what: str) -> torch.Tensor:
    value = tensor(value, what)
    if tuple(value.shape) != tuple(expected):
        raise CheckFailure(f"{what} returned shape {list(value.shape)}, expected {list(expected)}")
    return value


def finite(value: torch.Tensor, what: str) -> torch.Tensor:
    if value.is_floating_point() and not torch.isfinite(value).all():
        bad = (~torch.isfinite(value)).sum().item()
        raise CheckFailure(f"{what} returned {bad} NaN or inf values")
    return value


def close(value, expected: torch.Tensor, what: str, hint: str = "", atol: float = 1e-5, rtol: float = 1e-4):
    value = shape(value, expected.shape, what)
    if value.dtype != expected.dtype:
        raise CheckFailure(f"{what} returned dtype {value.dtype}, expected {expected.dtype} (the inputs' dtype)")
    if not torch.allclose(value, expected, atol=atol, rtol=rtol, equal_nan=True):
        diff = (value.double() - expected.double()).abs().nan_to_num(float("inf")).max().item()
        raise CheckFailure(f"{what} is off by up to {diff:.3g}" + (f": {hint}" if hint else ""))
    return value
