"""Fixtures for the hidden checks of every assignment.

The grader's check runner (autograder/grading/check.py) provides `student` (the submission, as
autograder/sandbox/student.py drives it) and whatever else a stage hands its checks (the GPU stage:
`gpu_run`, and the parameter `case`). Here: what every check may use besides.
"""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """The trusted re-computations are tiny: one thread avoids thread start-up and contention costs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def gen():
    """A seeded generator: every check sees the same inputs on every run."""
    return torch.Generator().manual_seed(1234)
