"""A submission's score never depends on what the grader graded before it (issue 53): every job starts from the
same random numbers in the worker (batch.JOB_SEED) and every module the grader builds there is seeded, so a check
whose result hangs on random weights (a parity_error without .abs(), given the grader's broken stand-in modules)
earns the same points whichever parts ran before it in the same warm worker, and in another grading.
"""
from __future__ import annotations

from pathlib import Path

from autograder.foundation import spec

ROOT = Path(__file__).resolve().parent.parent
SIGNED = ROOT / "tests" / "catalogue" / "submissions" / "parity_error_signed.py"


def _points(result) -> dict:
    return {(p.id, c.name): c.points for p in result.parts for c in p.checks}


def test_the_same_submission_earns_the_same_points_after_different_predecessors(grader):
    """official_parity alone, after the parts before it, after every part, and graded again: every check's points
    are the same (the worker's generator is in another state each time before official_parity's checks)"""
    assignment = spec.assignment("self_attention")
    orders = (["official_parity"], ["scaled_scores", "masks", "multihead", "official_parity"], None,
              ["official_parity"])
    graded = [_points(grader.grade(SIGNED, part_ids=order, assignment=assignment)) for order in orders]
    parity = [{k: v for k, v in points.items() if k[0] == "official_parity"} for points in graded]
    assert parity[0] and all(p == parity[0] for p in parity), parity
    assert sum(parity[0].values()) < assignment.part("official_parity").points  # the mistake costs points
    assert graded[1] == {k: v for k, v in graded[2].items() if k in graded[1]}
