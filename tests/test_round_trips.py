"""The round trips one submission costs, counted (not timed): a change that multiplies them fails here.

A round trip to the sandboxed worker costs far more than the small tensor functions it carries,
so the checks batch their requests (autograder/sandbox/batch.py, docs/adding-a-part.md). Grading an
assignment's reference solutions, which runs every check to its end, may make at most
`2 + 2 * parts` round trips: loading the code, the memory check's measured call, and two
batches per part. A part whose check drives a library model around the student's layer (real_models) adds the trips
that cannot be batched, each named in STEPWISE with its reason; every other part keeps the budget.
"""
from __future__ import annotations

import collections
from pathlib import Path

import pytest

from autograder.sandbox import pool
from autograder.foundation import spec

REPO = Path(__file__).resolve().parent.parent


# Round trips a part cannot batch: each is one call of the student's layer inside a library model (transformers) whose
# next input is what that call returned (autograder/checks/real_models/library.StudentAttention): nothing to send
# before the answer comes back. (real_models' reference: 39 trips, 1 load + gpt2 3 + bert 1 + rope_permutation 1 +
# llama 33.)
STEPWISE = {
    ("real_models", "gpt2"): 2,  # one forward of a 2-layer GPT2LMHeadModel: one trip per layer
    ("real_models", "llama"): 2 * 16,  # greedy decoding of 16 tokens by a 2-layer Llama: one trip per layer and token
}


def budget(assignment: spec.Assignment) -> int:
    return 2 + 2 * len(assignment.parts) + sum(STEPWISE.get((assignment.id, p.id), 0) for p in assignment.parts)


def reference(assignment: spec.Assignment) -> Path:
    return REPO / (assignment.solutions.replace(".", "/") + ".py")


@pytest.fixture
def counted(monkeypatch):
    """{kind: messages sent to workers}, and the requests they carried ("requests")."""
    sent: collections.Counter = collections.Counter()
    send = pool.WorkerProcess.send

    def counting(self, message, deadline):
        sent[message.get("kind")] += 1
        sent["requests"] += sum(len(job) for job in message["jobs"]) if message.get("kind") == "batch" else 1
        return send(self, message, deadline)

    monkeypatch.setattr(pool.WorkerProcess, "send", counting)
    return sent


@pytest.mark.parametrize("assignment", list(spec.ASSIGNMENTS.values()), ids=list(spec.ASSIGNMENTS))
def test_the_reference_solutions_are_graded_within_the_round_trip_budget(grader, counted, assignment):
    result = grader.grade(reference(assignment), assignment=assignment)
    assert result.score == result.max_score, [c for p in result.parts for c in p.checks if not c.passed]
    trips = sum(n for kind, n in counted.items() if kind != "requests")
    assert trips <= budget(assignment), (
        f"{assignment.id}: {trips} round trips to the worker for one submission ({dict(counted)}), over the budget "
        f"of {budget(assignment)} (2 + 2 per part, plus STEPWISE): send a part's calls together (student.call_each, student.run; "
        "docs/adding-a-part.md)")
    assert counted["requests"] >= len(assignment.parts), "the checks sent nothing: the count is broken"
