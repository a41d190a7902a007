"""Fixtures for the hidden checks: the student's submission and a seeded generator."""
from __future__ import annotations

import pytest
import torch

from autograder import check


@pytest.fixture
def student():
    if check.CURRENT is None:
        pytest.fail("the hidden checks run only through the grader")
    return check.CURRENT


@pytest.fixture
def gen():
    """A seeded generator: every check sees the same inputs on every run."""
    return torch.Generator().manual_seed(1234)
