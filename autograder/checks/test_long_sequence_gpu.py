"""Hidden checks of the GPU stage (part long_sequence_gpu); run only by autograder.gpu.grade_gpu.

One case per function (sdpa_attention, chunked_attention), mode (no mask, padding mask,
causal) and sequence length (S = 32768 when graded). Each case runs once on the device;
its two checks share the run: the output matches exact attention on sampled query rows,
and the peak of extra device memory stays within the budget (only for a correct output).
The logic, the budgets and the messages live in autograder/gpu.py.
"""
from __future__ import annotations

import pytest

from autograder import gpu


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        found = gpu.cases()
        metafunc.parametrize("case", found, ids=[c.id for c in found])


@pytest.mark.points(1)
def test_output_matches_exact_attention(student, case):
    """the output equals exact attention on sampled query rows"""
    gpu.check_correct(student, case)


@pytest.mark.points(1)
def test_peak_memory_within_budget(student, case):
    """peak extra device memory stays within the budget"""
    gpu.check_memory(student, case)
