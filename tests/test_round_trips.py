"""The round trips one submission costs, counted (not timed): a change that multiplies them fails here.

A round trip to the sandboxed worker costs far more than the small tensor functions it carries,
so the checks batch their requests (autograder/sandbox/batch.py, docs/adding-a-part.md). Grading an
assignment's reference solutions, which runs every check to its end, may make at most
`2 + 2 * parts` round trips: loading the code, the memory check's measured call, and two
batches per part; and two more for each part that borrows pieces (spec.Part.borrows): the lend, and the
probe of the student's pieces (or, for a part that grades the piece itself, its own checks' batch of it).
"""
from __future__ import annotations

import collections
from pathlib import Path

import pytest

from autograder.sandbox import pool
from autograder.foundation import spec

REPO = Path(__file__).resolve().parent.parent


def budget(assignment: spec.Assignment) -> int:
    return 2 + 2 * len(assignment.parts) + 2 * sum(1 for part in assignment.parts if part.borrows)


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
        f"of {budget(assignment)} (2 + 2 per part, 2 more per part that borrows): send a part's calls together (student.call_each, student.run; "
        "docs/adding-a-part.md)")
    assert counted["requests"] >= len(assignment.parts), "the checks sent nothing: the count is broken"
