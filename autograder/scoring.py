"""From the outcome of each check to a part's score: weights, forbidden calls, missing names.

Pytest-free, so that both check runners share it: check.py (pytest, as graded) and the GPU
stage's runner for a device machine without pytest (gpu/stage.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from .failures import CheckFailure
from .results import CheckResult, PartResult
from .spec import Part


@dataclass(frozen=True)
class CheckRecord:
    """One check's outcome, before points are shared out."""

    name: str  # the first line of the check's docstring, with its parameters, e.g. "... [causal]"
    weight: float  # @pytest.mark.points(n); 1 without the marker
    passed: bool
    message: str  # for the student; "" when it passed


def failure_message(exc: BaseException) -> str:
    """What a failed check tells the student."""
    if isinstance(exc, CheckFailure):
        return str(exc)
    if isinstance(exc, AssertionError):
        text = str(exc).split("\nassert ")[0].strip()
        return text or "the check's condition was not met"
    # a student's value broke the check's own code (e.g. a tuple where a tensor belongs)
    return f"your result could not be checked ({type(exc).__name__}: {str(exc)[:200]})"


def score_part(part: Part, records: list[CheckRecord], session, seconds: float) -> PartResult:
    """The part's points shared out by weight; nothing for a from-scratch part that called the fused
    kernel or the official module (the session saw it); a note for each API name the submission lacks."""
    total = sum(r.weight for r in records) or 1.0
    state = session.parts.get(part.id)
    forbidden = sorted(state.forbidden) if state else []
    notes = []
    missing = [n for n in part.names if not session.defines(n, part.id)]
    if missing:
        notes.append(f"missing from your submission: {', '.join(missing)}")
    if forbidden and part.forbidden:
        notes.append(f"{part.rule}, but your code called {', '.join(forbidden)}: its checks earn nothing")
    checks = []
    for r in records:
        max_points = part.points * r.weight / total
        ok = r.passed and not forbidden
        message = f"correct result, but computed with {', '.join(forbidden)}" if r.passed and forbidden else r.message
        checks.append(CheckResult(r.name, ok, max_points if ok else 0.0, max_points, message))
    return PartResult(part.id, part.points, tuple(checks), tuple(notes), seconds=round(seconds, 3))


def unreadable(extracted, parts) -> list[PartResult]:
    """Every part scores 0 with the reason, when no file of the submission could be read."""
    reason = "; ".join(s.error for s in extracted.sources if s.error) or "no code found"
    return zeros(parts, reason)


def zeros(parts, reason: str) -> list[PartResult]:
    """Each part 0 points, with the reason as its one failed check and its note."""
    return [PartResult(p.id, p.points, (CheckResult("your submission can be read", False, 0.0, p.points, reason),),
                       (reason,)) for p in parts]
