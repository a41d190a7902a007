"""Hidden checks of the GPU stage (part long_sequence_gpu); run only by autograder/grading/gpu/stage.py.

One case per function (sdpa_attention, chunked_attention), mode (no mask, padding mask,
causal) and sequence length (S = 32768 when graded): the stage parametrizes `case` and
provides its run as `gpu_run`. Each case runs once on the device; its two checks share the
run: the output matches exact attention on sampled query rows, and the peak of extra device
memory stays within the budget (only for a correct output). The logic, the budgets and the
messages live in autograder/grading/gpu/. Weight 1 each, and no pytest import: a device machine
without pytest runs this file too (stage._run_without_pytest).
"""
from __future__ import annotations

from autograder.grading.gpu import stage


def test_output_matches_exact_attention(student, case, gpu_run):
    """the output equals exact attention on sampled query rows"""
    stage.check_correct(gpu_run, student, case)


def test_peak_memory_within_budget(student, case, gpu_run):
    """peak extra device memory stays within the budget"""
    stage.check_memory(gpu_run, student, case)
