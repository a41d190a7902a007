"""The data model of a grade: frozen dataclasses, no formatting (see report.py for that)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    points: float
    max_points: float
    message: str = ""


@dataclass(frozen=True)
class PartResult:
    id: str
    max_score: float
    checks: tuple[CheckResult, ...] = ()
    notes: tuple[str, ...] = ()
    ran: bool = True  # False: the stage did not run (e.g. no GPU); never counted as passed
    seconds: float = 0.0

    @property
    def score(self) -> float:
        if not self.ran:
            return 0.0
        return round(min(sum(c.points for c in self.checks), self.max_score), 4)

    @property
    def passed(self) -> bool:
        return self.ran and bool(self.checks) and all(c.passed for c in self.checks)


@dataclass(frozen=True)
class GradeResult:
    submission: str
    parts: tuple[PartResult, ...]
    gpu: PartResult | None = None
    notes: tuple[str, ...] = ()
    protections_off: tuple[str, ...] = ()  # sandbox layers that could not be applied here
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return round(sum(p.score for p in self.parts), 4)

    @property
    def max_score(self) -> float:
        return sum(p.max_score for p in self.parts)

    def part(self, part_id: str) -> PartResult:
        for p in self.parts + ((self.gpu,) if self.gpu else ()):
            if p.id == part_id:
                return p
        raise KeyError(part_id)


def part_to_json(part: PartResult) -> dict:
    out = {
        "id": part.id,
        "score": part.score,
        "max_score": part.max_score,
        "checks": [
            {"name": c.name, "passed": c.passed, "points": round(c.points, 4), "max_points": round(c.max_points, 4),
             "message": c.message}
            for c in part.checks
        ],
    }
    if part.notes:
        out["notes"] = list(part.notes)
    if not part.ran:
        out["ran"] = False
    return out


def to_json(result: GradeResult) -> dict:
    """The document fixed by the course spec (extra keys are additions, never renames)."""
    parts = [part_to_json(p) for p in result.parts]
    if result.gpu is not None:
        parts.append(part_to_json(result.gpu))
    doc = {"submission": result.submission, "score": result.score, "max_score": result.max_score, "parts": parts}
    if result.notes:
        doc["notes"] = list(result.notes)
    if result.protections_off:
        doc["protections_off"] = list(result.protections_off)
    return doc


@dataclass(frozen=True)
class Limits:
    """How much a submission may take. Defaults are in the README; the CLI can change them."""

    part_seconds: float = 20.0  # wall clock for all the checks of one part
    load_seconds: float = 30.0  # starting a worker and running the student's top-level code
    memory_bytes: int = 6 * 2**30
    cpu_seconds: int = 300
    max_restarts: int = 8  # fresh workers after a crash or a timeout, per submission
    namespaces: bool = True
    extra_hidden: tuple[str, ...] = field(default=())
