"""Grading one notebook of an assignment: only the parts that notebook owns.

`python -m autograder grade workspace/generation/04_decoder.ipynb` grades the parts whose `notebook` is
04_decoder, not the whole assignment: the other parts' functions are not in that notebook, or are the
student's pasted copies, which are graded in their own notebooks. The course contract fixes the JSON's
form (every part, the assignment's max_score), so the parts left out stay in it with 0 points and one
check that says where they are graded; the readable report shows only the notebook's own parts.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..foundation import i18n, spec
from ..foundation.extract import Extracted
from ..foundation.results import CheckResult, GradeResult, PartResult

_ = i18n.message

ONLY = _("graded only the parts of {notebook}: {parts}; grade the folder for the whole assignment")
ELSEWHERE = _("not graded here: this part is graded in {notebook}; grade the folder for the whole assignment")
ELSEWHERE_CHECK = "graded_elsewhere"


@dataclass(frozen=True)
class Scope:
    """The notebook named alone (its file name) and the parts it owns, in the assignment's order."""

    notebook: str
    parts: tuple[spec.Part, ...]

    @property
    def part_ids(self) -> list[str]:
        return [p.id for p in self.parts]


def of(submission: Extracted, assignment: spec.Assignment) -> Scope | None:
    """The scope of a submission that is one notebook file of `assignment` (its stem one of the assignment's
    notebooks), else None: a folder, a .py file or a notebook of another name is graded as the whole assignment."""
    path = Path(submission.path)
    if path.suffix != ".ipynb" or path.is_dir() or len(submission.sources) != 1:
        return None
    stem = submission.sources[0].name
    if stem not in assignment.notebooks:
        return None
    return Scope(path.name, assignment.parts_of(stem))


def elsewhere(part: spec.Part, lang: str) -> PartResult:
    """A part that the notebook does not own: 0 points, one check that says where it is graded."""
    message = ELSEWHERE.format(notebook=f"{part.notebook}.ipynb").render(lang)
    return PartResult(part.id, part.points, (CheckResult(ELSEWHERE_CHECK, False, 0.0, part.points, message),))


def complete(result: GradeResult, scope: Scope, assignment: spec.Assignment) -> GradeResult:
    """The result of the scope's parts, with the other parts in their places (for the contract's JSON), the scope
    in `only` and its line first among the notes."""
    graded = {p.id: p for p in result.parts}
    parts = tuple(graded.get(p.id) or elsewhere(p, result.lang) for p in assignment.parts)
    line = ONLY.format(notebook=scope.notebook, parts=", ".join(scope.part_ids)).render(result.lang)
    return replace(result, parts=parts, notes=(line, *result.notes), only=tuple(scope.part_ids))
