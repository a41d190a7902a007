"""Grade a whole class: every submission of an nbgrader course directory, in parallel.

    python -m autograder grade-class COURSE_DIR [--assignment self_attention] [--workers N] [--force]

Design
* Each submitted/<student>/<assignment>/ folder is one task. A pool of trusted grading
  processes (one per core by default) each keeps one warm `Grader`, whose zygote has
  imported torch once; every notebook still runs in its own fresh sandboxed worker. Speed
  comes from not starting Python and importing torch per notebook, not from less isolation.
* Each notebook is graded with only its own code and its own parts, exactly as the nbgrader
  preprocessor does (autograder/nbgrader_plugin.py), so both write the same scores.
* Gradebook writes happen only in this (parent) process, one transaction per submission;
  the rows are those nbgrader's SaveAutoGrades writes (auto_score, needs_manual_grade, the
  "No response." comment for untouched solution cells; 0 for a notebook not submitted).
* Resumption: a submission whose files and whose grader (hidden checks, reference solutions)
  are unchanged since its last grading is skipped, unless --force.
* A bad submission (corrupt notebook, syntax error, endless loop) gets zeros and a message;
  a grading process that dies is replaced and the rest of the class goes on.
Reports (the student's messages, as JSON) go to COURSE_DIR/autograder_reports/<assignment>/.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import json
import multiprocessing
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .results import CheckResult, GradeResult, PartResult, part_to_json
from .spec import ASSIGNMENT, NOTEBOOKS, PARTS

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parent


# --------------------------------------------------------------------------- fingerprints
def grader_fingerprint() -> str:
    """Changes whenever what decides a score changes: the hidden checks, the reference solutions, the spec."""
    h = hashlib.sha256()
    files = sorted((PACKAGE / "checks").glob("*.py")) + [PACKAGE / "spec.py", PACKAGE / "check.py"] \
        + sorted((REPO / "solutions").glob("*.py"))
    for f in files:
        h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def submission_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- the pool side
_GRADER = None


def _init_worker(limits) -> None:
    global _GRADER
    from .grade import Grader  # noqa: PLC0415 - imports torch once per grading process

    _GRADER = Grader(limits).warm()


def missing_part(part_id: str, why: str) -> PartResult:
    part = next(p for p in PARTS if p.id == part_id)
    return PartResult(part_id, part.points, (CheckResult("your notebook was graded", False, 0.0, part.points, why),),
                      (why,))


def grade_folder(folder: str, grader=None) -> dict:
    """Grade one submission folder: {"parts": [PartResult...], "notes": [...]}.

    One sandboxed worker and one run of the checks for the whole folder; each part runs only
    its own notebook's code (Session.namespace_for), so the scores equal nbgrader's notebook
    by notebook grading. A part whose notebook is missing or unreadable scores 0, as in nbgrader.
    """
    grader = grader or _GRADER
    started = time.perf_counter()
    result = grader.grade(folder)
    parts = {p.id: p for p in result.parts}
    for nb in NOTEBOOKS:
        path = Path(folder) / f"{nb}.ipynb"
        why = None
        if not path.exists():
            why = f"{nb}.ipynb was not submitted"
        else:
            why = next((n for n in result.notes if n.startswith((f"{nb}.ipynb could not be read",
                                                                  f"{nb}.ipynb is not a notebook"))), None)
        if why:
            for part in PARTS:
                if part.notebook == nb:
                    parts[part.id] = missing_part(part.id, why)
    return {"parts": [parts[p.id] for p in PARTS], "notes": list(result.notes),
            "seconds": round(time.perf_counter() - started, 3)}


# --------------------------------------------------------------------------- the gradebook
@contextlib.contextmanager
def one_transaction(gb):
    """Run Gradebook API calls as ONE transaction: their internal commits become flushes."""
    db = gb.db
    real_commit = db.commit
    db.commit = db.flush
    try:
        yield gb
    except BaseException:
        db.commit = real_commit
        db.rollback()
        raise
    db.commit = real_commit
    db.commit()


def _timestamp(folder: Path) -> str | None:
    f = folder / "timestamp.txt"
    if f.exists():
        text = f.read_text().strip()
        return text or None
    return None


def _answered(folder: Path, notebook: str) -> dict[str, bool]:
    """grade_id -> whether the student changed that solution cell (nbgrader's checksum test)."""
    from nbformat import from_dict  # noqa: PLC0415
    from nbgrader import utils  # noqa: PLC0415

    try:
        nb = from_dict(json.loads((folder / f"{notebook}.ipynb").read_text(encoding="utf-8")))
    except Exception:  # noqa: BLE001 - unreadable: nothing answered
        return {}
    out = {}
    for cell in nb.get("cells", []):
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if meta.get("solution") and meta.get("grade_id"):
            try:
                out[meta["grade_id"]] = meta.get("checksum") != utils.compute_checksum(cell)
            except Exception:  # noqa: BLE001
                out[meta["grade_id"]] = True
    return out


def write_gradebook(db_url: str, course_id: str, assignment: str, student: str, folder: Path,
                    parts: list[PartResult]) -> None:
    """The rows nbgrader autograde + SaveAutoGrades write for this submission, in one transaction."""
    from nbgrader.api import Gradebook  # noqa: PLC0415

    from .nbgrader_plugin import cell_score  # noqa: PLC0415

    by_id = {p.id: p for p in parts}
    with warnings.catch_warnings(), Gradebook(db_url, course_id) as gb, one_transaction(gb):
        # nbgrader's own add_submission triggers SQLAlchemy autoflush warnings (stock autograde shows them too)
        warnings.filterwarnings("ignore", message=".*not in session.*")
        gb.update_or_create_student(student)
        ts = _timestamp(folder)
        if ts:
            gb.update_or_create_submission(assignment, student, timestamp=ts)
        else:
            gb.update_or_create_submission(assignment, student)
        for nb in gb.find_assignment(assignment).notebooks:
            submitted = (folder / f"{nb.name}.ipynb").exists()
            for cell in nb.grade_cells:
                grade = gb.find_grade(cell.name, nb.name, assignment, student)
                part = by_id.get(cell.name)
                if not submitted:
                    grade.auto_score = 0.0  # what nbgrader autograde records for a missing notebook
                elif cell.cell_type != "code":
                    grade.auto_score = None  # a written answer: graded by hand
                elif part is None:
                    grade.auto_score = 0.0  # a graded cell that is no part of the course
                else:
                    grade.auto_score = cell_score(part.score, part.max_score, cell.max_score)
                grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
            answered = _answered(folder, nb.name) if submitted else {}
            for cell in nb.solution_cells:
                comment = gb.find_comment(cell.name, nb.name, assignment, student)
                comment.auto_comment = None if answered.get(cell.name, not submitted) else "No response."
        gb.db.commit()


# --------------------------------------------------------------------------- the class
@dataclass
class Outcome:
    student: str
    status: str  # graded | skipped | error
    result: GradeResult | None = None
    message: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _course_settings(course: Path) -> tuple[str, str]:
    """(db_url, course_id) as nbgrader would read them from COURSE/nbgrader_config.py."""
    db_url = f"sqlite:///{course / 'gradebook.db'}"
    course_id = "default_course"
    cfg = course / "nbgrader_config.py"
    if cfg.exists():
        from traitlets.config.loader import PyFileConfigLoader  # noqa: PLC0415

        try:
            config = PyFileConfigLoader(cfg.name, path=str(course)).load_config()
            cd = config.get("CourseDirectory", {})
            db_url = cd.get("db_url", db_url) or db_url
            course_id = cd.get("course_id", course_id) or course_id
        except Exception:  # noqa: BLE001 - a config we cannot read: nbgrader's defaults
            pass
    return db_url, course_id


def _state_path(course: Path, assignment: str) -> Path:
    return course / "autograder_reports" / assignment / ".state.json"


def _result(student: str, data: dict) -> GradeResult:
    return GradeResult(student, tuple(data["parts"]), notes=tuple(data["notes"]), seconds=data["seconds"])


def _grade_error_result(student: str, message: str) -> GradeResult:
    return GradeResult(student, tuple(missing_part(p.id, message) for p in PARTS), notes=(message,))


def grade_class(course: str | Path, assignment: str = ASSIGNMENT, workers: int | None = None, force: bool = False,
                limits=None, progress: bool = True, console=None, grader=None) -> list[Outcome]:
    """Grade every submitted/<student>/<assignment>/ of the course; write the gradebook; return outcomes.

    With `grader` (a warm Grader), grading runs in this process, one submission at a time,
    instead of in a pool (tests, and machines where starting processes is the bottleneck).
    """
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    from nbgrader.api import Gradebook, MissingEntry  # noqa: PLC0415

    console = console or Console(stderr=True)
    course = Path(course).resolve()
    root = course / "submitted"
    if not root.is_dir():
        raise FileNotFoundError(f"{course}: no submitted/ folder (is this an nbgrader course directory?)")
    folders = {d.name: d / assignment for d in sorted(root.iterdir()) if (d / assignment).is_dir()}
    db_url, course_id = _course_settings(course)
    if db_url.startswith("sqlite:///") and not Path(db_url[len("sqlite:///"):]).exists():
        raise FileNotFoundError(f"no gradebook at {db_url}: run `nbgrader generate_assignment {assignment}` "
                                f"in {course} first")
    reports = course / "autograder_reports" / assignment
    reports.mkdir(parents=True, exist_ok=True)
    state_file = _state_path(course, assignment)
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    fingerprint = grader_fingerprint()

    with Gradebook(db_url, course_id) as gb:
        try:
            known = {s.student.id for s in gb.find_assignment(assignment).submissions}
        except MissingEntry:
            raise FileNotFoundError(f"assignment {assignment!r} is not in the gradebook {db_url}: run "
                                    f"`nbgrader generate_assignment {assignment}` in {course} first") from None

    outcomes: dict[str, Outcome] = {}
    todo: dict[str, str] = {}
    for student, folder in folders.items():
        key = f"{submission_hash(folder)}:{fingerprint}"
        if not force and state.get(student, {}).get("key") == key and student in known:
            outcomes[student] = Outcome(student, "skipped", _load_report(reports / f"{student}.json", student))
        else:
            todo[student] = key

    workers = max(1, min(workers or os.cpu_count() or 1, len(todo) or 1))
    columns = (TextColumn("[bold]grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    attempts: dict[str, int] = {}
    with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
        task = bar.add_task("", total=len(todo))
        pending = dict(todo)

        def record(student: str, data: dict) -> None:
            result = _result(student, data)
            write_gradebook(db_url, course_id, assignment, student, folders[student], list(result.parts))
            _save_report(reports / f"{student}.json", result)
            state[student] = {"key": pending[student], "score": result.score}
            _atomic_write(state_file, json.dumps(state, indent=1, sort_keys=True))
            outcomes[student] = Outcome(student, "graded", result, seconds=result.seconds)

        def failed(student: str, exc: BaseException) -> None:
            why = f"{type(exc).__name__}: {str(exc)[:300]}"
            outcomes[student] = Outcome(student, "error", _grade_error_result(student, f"not graded: {why}"), why)

        if grader is not None:
            for student in list(pending):
                try:
                    record(student, grade_folder(str(folders[student]), grader))
                except Exception as exc:  # noqa: BLE001 - the grader's own failure: reported, retried next run
                    failed(student, exc)
                pending.pop(student)
                bar.update(task, advance=1, description=student)
        while pending:
            ctx = multiprocessing.get_context("spawn")
            with cf.ProcessPoolExecutor(max_workers=min(workers, len(pending)), mp_context=ctx,
                                        initializer=_init_worker, initargs=(limits,)) as pool:
                futures = {pool.submit(grade_folder, str(folders[s])): s for s in pending}
                broken = False
                for fut in cf.as_completed(futures):
                    student = futures[fut]
                    try:
                        data = fut.result()
                    except cf.process.BrokenProcessPool as exc:
                        attempts[student] = attempts.get(student, 0) + 1
                        broken = True
                        if attempts[student] < 2:
                            continue  # retried in a fresh pool
                        failed(student, exc)
                    except Exception as exc:  # noqa: BLE001 - the grader's own failure: reported, retried next run
                        failed(student, exc)
                    else:
                        record(student, data)
                    pending.pop(student, None)
                    bar.update(task, advance=1, description=student)
                if broken:
                    pool.shutdown(wait=False, cancel_futures=True)
            if not broken:
                break
    return [outcomes[s] for s in folders if s in outcomes]


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _save_report(path: Path, result: GradeResult) -> None:
    doc = {"submission": result.submission, "score": result.score, "max_score": result.max_score,
           "parts": [part_to_json(p) for p in result.parts], "notes": list(result.notes)}
    _atomic_write(path, json.dumps(doc, indent=1))


def _load_report(path: Path, student: str) -> GradeResult | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    parts = tuple(PartResult(p["id"], p["max_score"],
                             tuple(CheckResult(c["name"], c["passed"], c["points"], c["max_points"], c["message"])
                                   for c in p["checks"]), tuple(p.get("notes", ())))
                  for p in doc["parts"])
    return GradeResult(student, parts, notes=tuple(doc.get("notes", ())))


def cmd_grade_class(args) -> int:
    from rich.console import Console  # noqa: PLC0415

    from .cli import _limits  # noqa: PLC0415
    from .report import summary_table  # noqa: PLC0415

    console = Console()
    started = time.perf_counter()
    try:
        outcomes = grade_class(args.course, args.assignment, args.workers, args.force, limits=_limits(args))
    except FileNotFoundError as exc:
        console.print(f"error: {exc}", style="red")
        return 2
    wall = time.perf_counter() - started
    rows = [o.result for o in outcomes if o.result is not None]
    console.print(summary_table(rows, title=f"{args.assignment}: {len(rows)} submissions"))
    graded = sum(o.status == "graded" for o in outcomes)
    skipped = sum(o.status == "skipped" for o in outcomes)
    errors = [o for o in outcomes if o.status == "error"]
    console.print(f"graded {graded}, unchanged and skipped {skipped} (use --force to regrade), "
                  f"errors {len(errors)}; {wall:.1f} s"
                  + (f", {wall / graded:.2f} s per graded submission" if graded else ""))
    for o in errors:
        console.print(f"[red]{o.student}: {o.message} (not written to the gradebook; retried next run)")
    console.print(f"gradebook: {_course_settings(Path(args.course).resolve())[0]}\n"
                  f"reports:   {Path(args.course).resolve() / 'autograder_reports' / args.assignment}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("grade-class", help="grade every submission of an nbgrader course directory, in parallel")
    p.add_argument("course", help="the nbgrader course directory (holds submitted/ and the gradebook)")
    p.add_argument("--assignment", default=ASSIGNMENT)
    p.add_argument("--workers", type=int, help="grading processes (default: one per core)")
    p.add_argument("--force", action="store_true", help="regrade submissions that have not changed")
    p.add_argument("--part-seconds", type=float, help="wall-clock limit per part (default 20)")
    p.add_argument("--memory-gib", type=float, help="address-space limit of the worker (default 6)")
    p.add_argument("--no-namespaces", action="store_true", help="do not use Linux namespaces (weaker sandbox)")
    p.set_defaults(func=cmd_grade_class)
