"""The data model of a grade: frozen dataclasses, no formatting (document.py writes them as JSON,
report.py as tables)."""
from __future__ import annotations

from dataclasses import dataclass


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
    # For the instructor's review: where the part's code mentions a torch function it may not call that the watch
    # did not see called, e.g. "SelfAttention (scaled_dot_product_attention)" (grading/scan.py). It costs nothing:
    # the watch cannot prove it never ran (docs/security.md).
    review: tuple[str, ...] = ()

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
    lang: str = "en"  # the language of its messages (spec.LANGUAGES); the scores never depend on it
    only: tuple[str, ...] = ()  # one notebook named alone: the parts it owns (the others: 0, graded elsewhere)

    @property
    def score(self) -> float:
        return round(sum(p.score for p in self.parts), 4)

    @property
    def max_score(self) -> float:
        return sum(p.max_score for p in self.parts)

    @property
    def shown(self) -> tuple[PartResult, ...]:
        """The parts a person's report shows: those graded (one notebook's, when it was named alone)."""
        return tuple(p for p in self.parts if not self.only or p.id in self.only)

    def part(self, part_id: str) -> PartResult:
        for p in self.parts + ((self.gpu,) if self.gpu else ()):
            if p.id == part_id:
                return p
        raise KeyError(part_id)
