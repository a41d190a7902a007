"""The JSON document of a grade (fixed by the course contract), and reading a saved one back.

`python -m autograder grade --json` prints it, grade-class saves one per student in
COURSE/autograder_reports/<assignment>/<student>.json, and `from_json` reads those back.
Extra keys are additions to the contract's form, never renames: `lang` says the language of the
messages ("en", "zh"); the keys, the check names and the scores are the same in every language.
"""
from __future__ import annotations

import json

from ..foundation.results import CheckResult, GradeResult, PartResult


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
    if part.review:
        out["review"] = list(part.review)
    return out


def to_json(result: GradeResult) -> dict:
    """The document fixed by the course spec: the CPU parts, then the GPU part (outside the score)."""
    parts = [part_to_json(p) for p in result.parts]
    if result.gpu is not None:
        parts.append(part_to_json(result.gpu))
    doc = {"submission": result.submission, "score": result.score, "max_score": result.max_score, "parts": parts,
           "lang": result.lang}
    if result.notes:
        doc["notes"] = list(result.notes)
    if result.only:  # one notebook named alone: the parts graded (the others score 0, graded elsewhere)
        doc["only"] = list(result.only)
    if result.protections_off:
        doc["protections_off"] = list(result.protections_off)
    return doc


def dumps(result: GradeResult, indent: int = 2) -> str:
    return json.dumps(to_json(result), indent=indent)


def part_from_json(doc: dict) -> PartResult:
    checks = tuple(CheckResult(c["name"], c["passed"], c["points"], c["max_points"], c["message"])
                   for c in doc["checks"])
    return PartResult(doc["id"], doc["max_score"], checks, tuple(doc.get("notes", ())), ran=doc.get("ran", True),
                      review=tuple(doc.get("review", ())))


def from_json(doc: dict, submission: str | None = None) -> GradeResult:
    """A GradeResult from a document that `to_json` wrote without a GPU part (as grade-class saves them)."""
    return GradeResult(submission or doc["submission"], tuple(part_from_json(p) for p in doc["parts"]),
                       notes=tuple(doc.get("notes", ())), protections_off=tuple(doc.get("protections_off", ())),
                       lang=doc.get("lang", "en"))
