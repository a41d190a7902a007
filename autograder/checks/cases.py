"""The calls of several checks, built from seeded inputs and sent to the worker in one round trip.

    SCORES = Cases("scaled_scores", {
        "3-D": lambda g: Call("scaled_scores", randn(g, B, S, 8), randn(g, B, S + 2, 8)),
        "4-D": lambda g: Call("scaled_scores", randn(g, B, H, S, 4), randn(g, B, H, S + 1, 4)),
    })

    def test_scores_3d(student):
        call, outcome = SCORES.get(student, "3-D")   # the first check to ask sends every call
        Q, K = call.args
        got = expect.value(outcome)                 # the result, or this call's own failure

`send` does the same for checks that take several steps each (`Job`s): each check gets a `Ran`.

Each case's inputs come from its own generator seeded like the `gen` fixture, so a case sees
the same tensors as a check that drew them from `gen`. The calls run in the order of the
table, which is the order of the checks that read them: the student's code runs the same
calls in the same order as when each check sent its own.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from autograder.foundation import i18n
from autograder.sandbox.batch import Call, Job, JobResult, Outcome
from autograder.foundation.failures import CheckFailure, StudentRaised

_ = i18n.message

SEED = 1234  # the `gen` fixture's seed (conftest.py)


def seeded(seed: int = SEED) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class Cases:
    """A table {case: build(generator) -> Call}; `get` gives a case's call and its outcome."""

    def __init__(self, key: str, table: Mapping[str, Callable[[torch.Generator], Call]]):
        self.key, self.table = key, dict(table)

    def _send(self, student) -> dict[str, tuple[Call, Outcome]]:
        calls = {case: build(seeded()) for case, build in self.table.items()}
        return dict(zip(calls, zip(calls.values(), student.call_each(list(calls.values())))))

    def get(self, student, case: str) -> tuple[Call, Outcome]:
        return student.once(f"cases:{self.key}", lambda: self._send(student))[case]


@dataclass
class Ran:
    """One check's job, sent with the others of its part: its result, its steps by name, its inputs."""

    result: JobResult
    steps: dict
    inputs: object = None

    def value(self, name="value"):
        """What the step `name` returned; raises the job's failure if it failed there or before."""
        return self.result[self.steps[name]]


def send(student, checks: Mapping[str, tuple[Job, dict, object]]) -> dict[str, Ran]:
    """Every check's (job, steps by name, inputs) in one round trip: {check: Ran}."""
    results = student.run([job for job, _, _ in checks.values()])
    return {key: Ran(result, steps, inputs) for (key, (_, steps, inputs)), result in zip(checks.items(), results)}


def weights_taken(run: Ran, layers: str) -> None:
    """The student's module was built, took the checks' weights and went to eval mode (the steps "module",
    "load" and "eval" of `run`); weights it could not take are said in the student's terms."""
    run.value("module")
    try:
        run.value("load")
    except StudentRaised as exc:
        raise CheckFailure(_("weights could not be loaded into your module ({failure}): it needs exactly the "
                             "bias-free layers {layers}").format(failure=exc.message, layers=layers)) from None
    run.value("eval")


def smallest_failure(cases, check: Callable[[object], None]) -> None:
    """Run `check(case)` for each (label, case) of `cases`, ordered from the smallest case to the largest: the
    first failure is raised with its case named ("fails for H=2, d_model=6 (head_dim 3): ..."), so that the
    student reads the smallest input that shows the mistake. A part not implemented yet fails as it is."""
    for label, case in cases:
        try:
            check(case)
        except CheckFailure as exc:
            if isinstance(exc, StudentRaised) and exc.kind == "NotImplementedError":
                raise
            raise CheckFailure(_("fails for {case}: {problem}").format(case=label, problem=exc.message)) from None
