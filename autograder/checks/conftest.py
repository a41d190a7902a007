"""Fixtures for the hidden checks: the student's submission and a seeded generator."""
from __future__ import annotations

import pytest
import torch

from autograder import check


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """The trusted re-computations are tiny: one thread avoids thread start-up and contention costs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def student():
    if check.CURRENT is None:
        pytest.fail("the hidden checks run only through the grader")
    return check.CURRENT


@pytest.fixture
def gen():
    """A seeded generator: every check sees the same inputs on every run."""
    return torch.Generator().manual_seed(1234)
