"""What a graded class says to its instructor, as data: which parts were hard, which mistakes were common,
who needs help. Frozen dataclasses made from the students' GradeResults; classpage.py draws them as one
HTML page (grade-class writes it next to the students' reports).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..foundation import edition
from ..foundation.results import GradeResult

DEFAULT_THRESHOLD = 0.6  # a student below this fraction of the points is listed as needing help
MOST_COMMON = 10  # failing checks listed


@dataclass(frozen=True)
class PartScores:
    """One part across the class: every student's score on it (in the class's order)."""
    id: str
    max_score: float
    scores: tuple[float, ...]

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0

    @property
    def full_marks(self) -> int:
        return sum(s >= self.max_score for s in self.scores)

    @property
    def zero(self) -> int:
        return sum(s <= 0 for s in self.scores)


@dataclass(frozen=True)
class CommonFailure:
    """A mistake: the message of failing checks of one part (what they say is wrong), the students who got it
    and the checks that said it (one unfinished function fails many checks with one message: one row)."""
    part: str
    message: str
    students: tuple[str, ...]
    checks: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.students)


@dataclass(frozen=True)
class Student:
    """A student's total and the parts where they lost most."""
    id: str
    score: float
    max_score: float
    weakest: tuple[str, ...]  # part ids, most points lost first (the parts with full marks left out)

    @property
    def fraction(self) -> float:
        return self.score / self.max_score if self.max_score else 0.0


@dataclass(frozen=True)
class ReviewFlag:
    """A part to review by hand (PartResult.review): its code mentions a torch function it may not call and the
    watch did not see the call (the watch cannot prove it never ran), or its notebook is much the same code as
    other students' (copies.py: that proves nothing by itself). It kept its points."""
    student: str
    part: str
    why: tuple[str, ...]  # "SelfAttention (scaled_dot_product_attention)", "01_scores.ipynb: 97% the same code ...", ...
    score: float


@dataclass(frozen=True)
class ClassReport:
    assignment: str  # the edition graded (self_attention, generation_zh, ...)
    lang: str  # the edition's language: the page's headings are in it
    max_score: float
    students: tuple[Student, ...]  # in the class's order
    parts: tuple[PartScores, ...]
    common_failures: tuple[CommonFailure, ...]  # most frequent first
    threshold: float  # a fraction of the points
    review: tuple[ReviewFlag, ...] = ()  # in the class's order, then the parts' order
    # The written answers, graded by hand in formgrader (outside `max_score`): their points in the gradebook,
    # student -> points, or None while one of their answers waits for a grader; no column when written_max is 0.
    written: dict = field(default_factory=dict)
    written_max: float = 0.0

    @property
    def below_threshold(self) -> tuple[Student, ...]:
        """The students below the threshold, lowest first."""
        return tuple(sorted((s for s in self.students if s.fraction < self.threshold), key=lambda s: (s.score, s.id)))

    @property
    def mean(self) -> float:
        return sum(s.score for s in self.students) / len(self.students) if self.students else 0.0


def weakest_parts(result: GradeResult, most: int = 3) -> tuple[str, ...]:
    lost = sorted(((p.max_score - p.score, p.id) for p in result.parts if p.score < p.max_score), key=lambda x: -x[0])
    return tuple(pid for _, pid in lost[:most])


def common_failures(results: list[GradeResult], most: int = MOST_COMMON) -> tuple[CommonFailure, ...]:
    """The mistakes most students made: failing checks grouped by part and message, most students first."""
    students: dict[tuple[str, str], set[str]] = {}
    checks: dict[tuple[str, str], dict[str, None]] = {}
    for result in results:
        for part in result.parts:
            for check in part.checks:
                if not check.passed:
                    key = (part.id, check.message or check.name)
                    students.setdefault(key, set()).add(result.submission)
                    checks.setdefault(key, {})[check.name] = None
    order = {p.id: index for index, p in enumerate(results[0].parts)} if results else {}  # ties: in the parts' order
    ranked = sorted(students, key=lambda key: (-len(students[key]), order.get(key[0], 0), -len(checks[key]), key))
    return tuple(CommonFailure(part, message, tuple(sorted(students[(part, message)])), tuple(checks[(part, message)]))
                 for part, message in ranked[:most])


def review_flags(results: list[GradeResult]) -> tuple[ReviewFlag, ...]:
    """Every part, of every student, flagged for review (scan.note_mentions, copies.flag_twins)."""
    return tuple(ReviewFlag(r.submission, p.id, p.review, p.score) for r in results for p in r.parts if p.review)


def summarize(assignment: str, results: list[GradeResult], threshold: float = DEFAULT_THRESHOLD) -> ClassReport:
    """The class report of `assignment` (an edition id) from its students' results (their `submission`: the id)."""
    graded = edition.resolve(assignment)
    contract = graded.assignment
    results = sorted(results, key=lambda r: r.submission)
    parts = tuple(PartScores(p.id, p.points, tuple(r.part(p.id).score for r in results)) for p in contract.parts)
    students = tuple(Student(r.submission, r.score, r.max_score or contract.max_score, weakest_parts(r)) for r in results)
    return ClassReport(assignment, graded.lang, float(contract.max_score), students, parts,
                       common_failures(results), threshold, review_flags(results))
