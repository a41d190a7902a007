"""`python -m autograder grade-gpu COURSE_DIR`: the GPU stage for a whole nbgrader course (docs/gpu.md).

Grades every submitted/<student>/<edition>/ on the GPU (the edition's nbgrader id, e.g. self_attention_zh; its
feedback in the edition's language), writes the results to a CSV, and
records each score in nbgrader's gradebook as the extra credit of the cell of the part the
GPU part credits (spec.Part.credit_to): nbgrader has no place for a grade without a cell, and
the GPU stage is outside the 100 points, which is what extra credit is. Where the gradebook
is on another machine than the GPU, `--from-csv` records an earlier CSV there.
"""
from __future__ import annotations

import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import courselock, gradebook, gradebookretry
from ..foundation import spec
from ..foundation.edition import Edition, resolve
from ..foundation.extract import extract
from ..foundation.limits import Limits
from ..sandbox.pool import SandboxUnavailable, Zygote
from ..foundation.results import CheckResult, PartResult
from ..grading.gpu import stage
from ..grading.gpu.config import GpuConfig
from ..grading.gpu.reference import Inputs

CSV_FIELDS = ("student_id", "ran", "score", "max_score", "failed_checks", "notes")


@dataclass
class CourseResult:
    rows: list[dict] = field(default_factory=list)
    csv_path: Path | None = None
    recorded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def csv_name(assignment: spec.Assignment) -> str:
    return f"{assignment.gpu_part.id}.csv"


def credited_cell(assignment: spec.Assignment) -> tuple[str, str]:
    """(cell, notebook): the gradebook cell whose extra credit holds the GPU part's score."""
    part = assignment.part(assignment.gpu_part.credit_to)
    return part.id, part.notebook


def submissions(course_dir: Path, edition_id: str = spec.ASSIGNMENT) -> dict[str, Path]:
    """student id -> the folder of notebooks the student submitted (nbgrader's submitted/<student>/<edition id>)."""
    base = Path(course_dir) / "submitted"
    if not base.is_dir():
        return {}
    return {d.name: d / edition_id for d in sorted(base.iterdir()) if (d / edition_id).is_dir()}


def result_row(student_id: str, part: PartResult) -> dict:
    failed = [c.name for c in part.checks if not c.passed]
    return {"student_id": student_id, "ran": part.ran, "score": part.score if part.ran else "",
            "max_score": part.max_score, "failed_checks": " | ".join(failed), "notes": " | ".join(part.notes)}


def write_csv(rows: list[dict], path: Path) -> Path:
    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in CSV_FIELDS})
    return path


def read_csv(path: Path, assignment: spec.Assignment = spec.DEFAULT) -> list[dict]:
    with Path(path).open(newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [k for k in ("student_id", "ran", "score") if rows and k not in rows[0]]
    if missing:
        raise ValueError(f"{path} is not a {csv_name(assignment)} file: columns {missing} are missing")
    return rows


def record_in_gradebook(location: gradebook.Location, rows: list[dict],
                        edition: Edition | None = None) -> tuple[list[str], list[str]]:
    """Write each student's GPU score as extra credit (gradebook.set_extra_credit) of the edition's gradebook
    assignment (default: the default assignment's). A row that did not run clears nothing and writes nothing.
    Returns (recorded, skipped with the reason), in row order."""
    edition = edition or resolve()
    cell, notebook = credited_cell(edition.assignment)
    ran = {str(r["student_id"]): r["score"] for r in rows if str(r.get("ran")).lower() in ("true", "1")}
    outcome = gradebook.set_extra_credit(location, edition.id, notebook, cell, ran) if ran else {}
    recorded, skipped = [], []
    for row in rows:
        sid = str(row["student_id"])
        if sid not in ran:
            skipped.append(f"{sid}: the GPU stage did not run")
        elif outcome[sid] is None:
            recorded.append(sid)
        else:
            skipped.append(f"{sid}: {outcome[sid]}")
    return recorded, skipped


def grade_course(course_dir, *, location: gradebook.Location | None = None, csv_path=None, students=None,
                 limits: Limits | None = None, config: GpuConfig | None = None,
                 edition: Edition | None = None, zygote: Zygote | None = None,
                 gradebook_wait: float = 60.0) -> CourseResult:
    """Grade every submitted notebook folder of the edition (default: the default assignment's English one)
    on the GPU, write the CSV, update the gradebook at `location` (none: only the CSV). `zygote`: a running
    worker pool to use (else one of its own)."""
    course_dir = Path(course_dir)
    edition = edition or resolve()
    assignment = edition.assignment
    found = submissions(course_dir, edition.id)
    if students:
        found = {s: p for s, p in found.items() if s in set(students)}
    out, limits, inputs = CourseResult(), limits or Limits(), Inputs()
    pool = zygote or Zygote()
    try:
        for sid, folder in found.items():
            try:
                part = stage.run(pool, limits, extract(folder), edition, config, inputs).part
            except SandboxUnavailable:
                raise  # this machine, not the student: nothing is graded
            except Exception as exc:  # noqa: BLE001 - one broken submission must not stop the class
                points = assignment.gpu_part.points
                part = PartResult(assignment.gpu_part.id, points, (CheckResult("your submission can be graded", False,
                                                                               0.0, points, str(exc)[:300]),))
            out.rows.append(result_row(sid, part))
    finally:
        if zygote is None:
            pool.close()
    out.csv_path = write_csv(out.rows, Path(csv_path) if csv_path else course_dir / csv_name(assignment))
    if location:
        out.recorded, out.skipped = gradebookretry.retrying(
            location, lambda: record_in_gradebook(location, out.rows, edition), gradebook_wait)
    return out


def main(course_dir: str, edition: Edition, csv: str | None = None, gradebook_url: str | None = None,
         no_gradebook: bool = False, from_csv: str | None = None, students: list[str] | None = None,
         lock_wait: float = 0.0, gradebook_wait: float = 60.0) -> int:
    """The command: grade (or, with `from_csv`, only record) and print what was done. One run per course
    at a time (courselock); a gradebook held by another writer is retried for `gradebook_wait` seconds."""
    course = Path(course_dir)
    if not course.is_dir():
        print(f"error: {course} is not a directory", file=sys.stderr)
        return 2
    try:
        with courselock.hold(course, f"grade-gpu {edition.id}", lock_wait):
            return _main(course, edition, csv, gradebook_url, no_gradebook, from_csv, students, gradebook_wait)
    except courselock.CourseBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except gradebookretry.GradebookError as exc:
        print(f"grade-gpu: {exc}", file=sys.stderr)
        return 1


def _main(course, edition: Edition, csv, gradebook_url, no_gradebook, from_csv, students, gradebook_wait) -> int:
    assignment = edition.assignment
    location = _location(course, gradebook_url, no_gradebook)
    if from_csv:
        if not location:
            print(f"error: no gradebook: {course}/gradebook.db does not exist (give --gradebook URL)", file=sys.stderr)
            return 2
        rows = read_csv(Path(from_csv), assignment)
        _print_recorded(assignment, *gradebookretry.retrying(location, lambda: record_in_gradebook(location, rows, edition),
                                                        gradebook_wait))
        return 0
    if not stage.cuda_available():
        print("error: no CUDA device on this machine (torch.cuda.is_available() is False): run grade-gpu on a GPU "
              f"machine, then `grade-gpu COURSE_DIR --from-csv {csv_name(assignment)}` where the gradebook is",
              file=sys.stderr)
        return 2
    if not submissions(course, edition.id):
        print(f"error: no submissions under {course}/submitted/*/{edition.id}", file=sys.stderr)
        return 2
    result = grade_course(course, location=location, csv_path=csv, students=students, edition=edition,
                          gradebook_wait=gradebook_wait)
    for row in result.rows:
        state = f"{row['score']}/{row['max_score']}" if str(row["ran"]) == "True" else "not run"
        print(f"{row['student_id']}: {state}" + (f"  failed: {row['failed_checks']}" if row["failed_checks"] else ""))
    print(f"wrote {result.csv_path}")
    if location:
        _print_recorded(assignment, result.recorded, result.skipped)
    return 0


def _location(course: Path, url: str | None, none: bool) -> gradebook.Location | None:
    """--gradebook URL, else the course's own gradebook if it exists; None with --no-gradebook."""
    if none:
        return None
    found = gradebook.locate(course)
    if url:
        return gradebook.Location(url, found.course_id)
    return None if found.missing else found


def _print_recorded(assignment: spec.Assignment, recorded: list[str], skipped: list[str]) -> None:
    cell, notebook = credited_cell(assignment)
    print(f"gradebook: extra credit of {notebook}/{cell} set for {len(recorded)} student(s)")
    for s in skipped:
        print(f"  skipped {s}")
