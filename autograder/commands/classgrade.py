"""Grade a whole class: every submission of an nbgrader course directory, in parallel.

    python -m autograder grade-class COURSE_DIR [--assignment self_attention] [--workers N] [--force]

Design
* Each submitted/<student>/<assignment>/ folder is one task. A pool of trusted grading
  processes (one per core by default) each keeps one warm `Grader`, whose zygote has
  imported torch once; every notebook still runs in its own fresh sandboxed worker. Speed
  comes from not starting Python and importing torch per notebook, not from less isolation.
* Each notebook is graded with only its own code and its own parts, exactly as the nbgrader
  preprocessor does (autograder/nbgrader_plugin.py), so both write the same scores.
* Gradebook writes (gradebook.py) happen only in this (parent) process, one transaction per
  submission; the rows are those nbgrader's SaveAutoGrades writes.
* Resumption (resume.py): a submission whose files and whose grader are unchanged since its
  last grading is skipped, unless --force.
* A bad submission (corrupt notebook, syntax error, endless loop) gets zeros and a message;
  a grading process that dies is replaced and the rest of the class goes on (a submission that
  ends it twice is recorded as 0 with the reason); one that does not answer within the
  submission's deadline (Limits.submission_deadline) is killed and the submission recorded as 0
  with the reason (classpool.py). Each grading process has a memory limit (Limits.grader_memory_bytes).
* Where the sandbox is incomplete, nothing is graded: one line, exit status 2 (limits.SandboxUnavailable),
  unless --unsafe-no-sandbox.
Reports (the student's messages, the JSON document of document.py) go to
COURSE_DIR/autograder_reports/<assignment>/<student>.json; the command then writes the class report
(classpage.py: the score distributions, the common mistakes, who needs help) there as class_report.html.
"""
from __future__ import annotations

import errno
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import classpool, courselock, document, exposure, gradebook, gradebookretry
from ..foundation import edition, i18n, spec
from .classpage import write_class_report
from .classreport import DEFAULT_THRESHOLD
from ..foundation.copies import Originals, compare_copies
from ..foundation.extract import extract
from ..sandbox.lifetime import Interrupted, Stopper
from ..foundation.limits import Limits, SandboxUnavailable, platform_refusal
from .report import summary_table
from .resume import State, atomic_write, grader_fingerprint
from ..foundation.results import CheckResult, GradeResult, PartResult


# --------------------------------------------------------------------------- one submission, in a grading process
_ = i18n.message
NOT_SUBMITTED = _("{notebook} was not submitted")
WAS_GRADED = _("your notebook was graded")  # a check's name: English in the results, translated in the reports
OVERDUE = _("not graded: grading your submission did not finish within {seconds:.0f} s and was stopped (an endless "
            "loop, or code that blocks the grader?)")
DIED = _("not graded: grading your submission ended the grader's own process twice ({why}): code that makes the grader "
         "run out of memory?")


def missing_part(part: spec.Part, why: str) -> PartResult:
    return PartResult(part.id, part.points, (CheckResult(WAS_GRADED.msgid, False, 0.0, part.points, why),),
                      (why,))


def originals(folder: Path, assignment_id: str) -> Originals:
    """What the notebooks of the submission `folder` (COURSE/submitted/<student>/<assignment>) are compared with:
    the course's source/ and release folders of the assignment (as its nbgrader_config.py names them) and the
    other students' submissions of it (copies.py)."""
    course = folder.parent.parent.parent
    dirs = gradebook.course_directories(course)
    try:
        students = sorted((course / "submitted").iterdir())
    except OSError:
        students = []
    others = tuple(d / assignment_id for d in students if d.name != folder.parent.name and (d / assignment_id).is_dir())
    return Originals(assignment_id, course / dirs["source"] / assignment_id, course / dirs["release"] / assignment_id,
                     others)


def class_originals(course: Path, assignment_id: str, folders: dict[str, Path]) -> dict[str, Originals]:
    """originals() of each submission folder of `folders` (student -> COURSE/submitted/<student>/<assignment>, every
    one of the class), with the course's settings read once and submitted/ listed once: one call per class, not per
    submission (at 200 students, 200 listings of 200 folders)."""
    dirs = gradebook.course_directories(course)
    source, release = course / dirs["source"] / assignment_id, course / dirs["release"] / assignment_id
    return {student: Originals(assignment_id, source, release,
                               tuple(f for other, f in folders.items() if other != student)) for student in folders}


def grade_folder(folder: str, assignment_id: str, grader, compared: Originals | None = None) -> dict:
    """Grade one submission folder: {"parts": [PartResult...], "notes": [...], "seconds": ...}.

    One sandboxed worker and one run of the checks for the whole folder; each part runs only
    its own notebook's code (Session.namespace_for), so the scores equal nbgrader's notebook
    by notebook grading. A part whose notebook is missing or unreadable, or is no work of the student's (a copy of
    the source notebook), scores 0 with the reason; one whose notebook is the same file as another student's
    (compared with `compared`, by default the course's: copies.py) keeps its points and is flagged for review.
    """
    assignment = spec.assignment(assignment_id)
    started = time.perf_counter()
    compared = compared or originals(Path(folder), assignment_id)
    submission = compare_copies(extract(folder), compared)  # (read once, here in the grading process)
    result = grader.grade(submission, assignment=assignment)
    parts = {p.id: p for p in result.parts}
    for nb in assignment.notebooks:  # (one that could not be read scored 0 with its reason in grade())
        if not os.path.lexists(Path(folder) / f"{nb}.ipynb"):
            for part in assignment.parts_of(nb):
                parts[part.id] = missing_part(part, NOT_SUBMITTED.format(notebook=f"{nb}.ipynb").render(result.lang))
    return {"parts": [parts[p.id] for p in assignment.parts], "notes": list(result.notes),
            "seconds": round(time.perf_counter() - started, 3), "lang": result.lang,
            "protections_off": list(result.protections_off)}


# --------------------------------------------------------------------------- the class
@dataclass(frozen=True)
class Settings:
    """What grade-class was asked to do (its command line, or the demo's), built once and passed down."""
    workers: int | None = None  # grading processes (None: one per core)
    force: bool = False  # regrade the submissions that have not changed too
    limits: Limits = field(default_factory=Limits)  # the sandbox's limits, and the deadline of one submission
    lock_wait: float = 0.0  # seconds to wait for another run grading the course (courselock)
    gradebook_wait: float = 60.0  # seconds to retry while another writer holds the gradebook
    report_below: float = DEFAULT_THRESHOLD  # the class report lists the students below this share of the points
    progress: bool = True  # a progress bar on the terminal


@dataclass
class Outcome:
    student: str
    status: str  # graded | skipped | error
    result: GradeResult | None = None
    message: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def reports_dir(course: Path, assignment: str) -> Path:
    return course / "autograder_reports" / assignment


def _load_report(path: Path, student: str) -> GradeResult | None:
    try:
        return document.from_json(json.loads(path.read_text()), student)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _progress(console, enabled: bool):
    columns = (TextColumn("[bold]grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    return Progress(*columns, console=console, disable=not enabled, transient=False)


class Stopped(Exception):
    """The run stopped before the end of the queue (a signal, the gradebook, a full disk); what was
    graded before is written. str() is one line; `outcomes` are the students done."""

    def __init__(self, message: str, outcomes: list[Outcome], exit_code: int):
        super().__init__(message)
        self.outcomes = outcomes
        self.exit_code = exit_code


def grade_class(course: str | Path, assignment: str = spec.ASSIGNMENT, settings: Settings | None = None,
                console=None, grader=None) -> list[Outcome]:
    """Grade every submitted/<student>/<assignment>/ of the course as `settings` say; write the gradebook;
    return outcomes.

    With `grader` (a warm Grader), grading runs in this process, one submission at a time,
    instead of in a pool (tests, and machines where starting processes is the bottleneck).
    One run at a time per course (courselock: CourseBusy after `settings.lock_wait` seconds); a gradebook
    held by another writer is waited for up to `settings.gradebook_wait` seconds. SIGINT/SIGTERM, a
    gradebook that stays busy or a full disk raise Stopped with what was written.
    """
    settings = settings or Settings()
    course = Path(course).resolve()
    if not (course / "submitted").is_dir():
        raise FileNotFoundError(f"{course}: no submitted/ folder (is this an nbgrader course directory?)")
    outcomes: dict[str, Outcome] = {}
    with Stopper() as stopper:
        try:
            with courselock.hold(course, f"grade-class {assignment}", settings.lock_wait):
                _grade_course(course, assignment, settings, console, grader, stopper, outcomes)
        except Interrupted as exc:
            raise Stopped(f"{exc}: {_written(outcomes)}; run the same command again to grade the rest",
                          list(outcomes.values()), exc.exit_code) from None
        except gradebookretry.GradebookError as exc:
            raise Stopped(f"{exc} ({_written(outcomes)})", list(outcomes.values()), 1) from None
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise Stopped(f"the disk is full: {exc.filename or course} could not be written; free some space and run "
                          f"again ({_written(outcomes)})", list(outcomes.values()), 1) from None
    return [outcomes[s] for s in sorted(outcomes)]  # (submitted/ is read in name order too)


def _written(outcomes: dict[str, Outcome]) -> str:
    graded = sum(o.status == "graded" for o in outcomes.values())
    return f"{graded} submission{'s' * (graded != 1)} graded and written to the gradebook before it stopped"


def _grade_course(course, assignment, settings: Settings, console, grader, stopper, outcomes) -> None:
    the_assignment = spec.assignment(assignment)
    console = console or Console(stderr=True)
    root = course / "submitted"
    folders = {d.name: d / assignment for d in sorted(root.iterdir()) if (d / assignment).is_dir()}
    reports = reports_dir(course, assignment)
    state = State(reports, grader_fingerprint(the_assignment))
    keys = {student: state.key(folder) for student, folder in folders.items()}
    changed = [s for s in folders if settings.force or not state.unchanged(s, keys[s])]
    # The grading processes start now, to import torch while this process reads the gradebook.
    pool = _start_pool(settings, len(changed)) if grader is None and changed else None
    try:
        _grade_queue(pool, course, assignment, settings, console, grader, stopper, outcomes, folders, reports, state,
                     keys)
    except BaseException:
        if pool is not None:
            pool.close()
        raise


def _grade_queue(pool, course, assignment, settings: Settings, console, grader, stopper, outcomes, folders, reports,
                 state, keys) -> None:
    """The gradebook found and opened once for the run (`_grade_into`)."""
    with stopper.eager():  # (seconds of imports on a busy machine: a stop signal needs no wait here)
        gradebook.load_nbgrader()
        location = gradebook.locate(course)
    if location.missing:
        raise FileNotFoundError(f"no gradebook at {location.shown}: run `nbgrader generate_assignment {assignment}` "
                                f"in {course} first")
    reports.mkdir(parents=True, exist_ok=True)
    with gradebook.Writer(location) as writer:  # (one connection for the run)
        _grade_into(writer, pool, course, assignment, settings, console, grader, stopper, outcomes, folders, reports,
                    state, keys)


def _grade_into(writer, pool, course, assignment, settings: Settings, console, grader, stopper, outcomes, folders,
                reports, state, keys) -> None:
    """The gradebook read, the queue made (changed or never recorded), each submission graded and written."""
    the_assignment, location = spec.assignment(assignment), writer.location
    known = gradebookretry.retrying(location, lambda: writer.submitted(assignment), settings.gradebook_wait, stopper.check)
    if known is None:
        raise FileNotFoundError(f"assignment {assignment!r} is not in the gradebook {location.shown}: run "
                                f"`nbgrader generate_assignment {assignment}` in {course} first")

    todo: dict[str, str] = {}
    for student in folders:
        key = keys[student]
        if not settings.force and state.unchanged(student, key) and student in known:
            outcomes[student] = Outcome(student, "skipped", _load_report(reports / f"{student}.json", student))
        else:
            todo[student] = key

    def record(student: str, data: dict) -> None:
        result = GradeResult(student, tuple(data["parts"]), notes=tuple(data["notes"]), seconds=data["seconds"],
                             lang=data.get("lang", spec.DEFAULT_LANGUAGE),
                             protections_off=tuple(data.get("protections_off", ())))

        def write() -> None:  # one try: the rows in one transaction, then the report and the state
            with stopper.critical():  # a signal waits for the end: the three go together
                writer.write_part_grades(assignment, student, folders[student], list(result.parts))
                atomic_write(reports / f"{student}.json", json.dumps(document.to_json(result), indent=1))
                state.record(student, todo[student], result.score)  # (written last: a rerun regrades if it is not)
                outcomes[student] = Outcome(student, "graded", result, seconds=result.seconds)

        gradebookretry.retrying(location, write, settings.gradebook_wait, stopper.check)

    def overdue(student: str, seconds: float) -> None:
        lang = edition.resolve(assignment).lang  # (the edition's language: self_attention_zh is graded in zh)
        why = OVERDUE.format(seconds=seconds).render(lang)
        record(student, {"parts": [missing_part(p, why) for p in the_assignment.parts], "notes": [why],
                         "seconds": seconds, "lang": lang})

    def failed(student: str, exc: BaseException) -> None:
        if isinstance(exc, classpool.ProcessDied):  # the submission's doing, as at its deadline: 0, recorded
            lang = edition.resolve(assignment).lang
            why = DIED.format(why=exc.why).render(lang)
            record(student, {"parts": [missing_part(p, why) for p in the_assignment.parts], "notes": [why],
                             "seconds": 0.0, "lang": lang})
            return
        why = f"{type(exc).__name__}: {str(exc)[:300]}"
        result = GradeResult(student, tuple(missing_part(p, f"not graded: {why}") for p in the_assignment.parts),
                             notes=(f"not graded: {why}",))
        outcomes[student] = Outcome(student, "error", result, why)

    with _progress(console, settings.progress) as bar:
        task = bar.add_task("", total=len(todo))

        def done(student: str) -> None:
            bar.update(task, advance=1, description=escape(student))  # (a folder's name is never markup)

        stopper.check()
        if grader is not None:
            _grade_here(todo, folders, assignment, grader, record, failed, done, stopper.check)
        elif todo:
            pool = pool or _start_pool(settings, len(todo))
            deadline = settings.limits.submission_deadline(len(the_assignment.parts))
            compared = class_originals(course, assignment, folders)
            queue = {s: (str(folders[s]), assignment, compared[s]) for s in todo}
            pool.run(queue, deadline, record, failed, overdue, done, stopper.check)
    if pool is not None:
        pool.close()  # (all done, or started for a queue that turned out empty)


def _grade_here(todo, folders, assignment, grader, record, failed, done, check) -> None:
    for student in todo:
        check()
        try:
            data = grade_folder(str(folders[student]), assignment, grader, originals(folders[student], assignment))
        except SandboxUnavailable:
            raise  # this machine, not the student: nothing is graded
        except Exception as exc:  # noqa: BLE001 - the grader's own failure: reported, retried next run
            failed(student, exc)
        else:
            record(student, data)
        done(student)


def _start_pool(settings: Settings, tasks: int) -> classpool.Pool:
    """min(workers, tasks) grading processes, started now (each imports torch while this process goes on)."""
    return classpool.Pool(max(1, min(settings.workers or os.cpu_count() or 1, tasks or 1)), settings.limits)


def main(course: str, assignment: str = spec.ASSIGNMENT, settings: Settings | None = None) -> int:
    """The command: grade the class as `settings` say, print the summary table and where the results are.
    Exit status: 0 done; 2 cannot start (one line); 1 stopped by the gradebook or a full disk
    (what was written, then one line); 128 + the signal when interrupted (one line)."""
    settings = settings or Settings()
    console = _console()
    started = time.perf_counter()
    if exposed := exposure.warning(Path(course)):
        print(exposed, file=sys.stderr)
    try:
        if not settings.limits.unsafe_no_sandbox and (refused := platform_refusal()):
            raise refused  # (macOS, Windows: before any grading process starts)
        outcomes = grade_class(course, assignment, settings)
    except (FileNotFoundError, courselock.CourseBusy, SandboxUnavailable) as exc:
        console.print(f"error: {gradebook.redact(str(exc))}", style="red", soft_wrap=True, markup=False)
        return 2
    except Stopped as exc:
        if exc.exit_code == 1 and exc.outcomes:  # not a person's Ctrl-C: show what is in the gradebook
            _summary(console, course, assignment, exc.outcomes, time.perf_counter() - started)
        print(f"grade-class: {gradebook.redact(str(exc))}", file=sys.stderr)
        return exc.exit_code
    _summary(console, course, assignment, outcomes, time.perf_counter() - started)
    console.print(f"class report: {class_report(course, assignment, outcomes, settings.report_below)}",
                  soft_wrap=True)
    return 0


def class_report(course: str | Path, assignment: str, outcomes: list[Outcome],
                 threshold: float = DEFAULT_THRESHOLD) -> Path:
    """The class report of a graded class (classpage.py), written next to the students' reports; its path."""
    course = Path(course).resolve()
    return write_class_report(course, assignment, [o.result for o in outcomes if o.result is not None],
                              reports_dir(course, assignment), threshold)


def _console(file=None) -> Console:
    """The summary's console: as wide as the terminal, and on a file or a CI log wide enough that no column
    (a student's name) is cut."""
    console = Console(file=file)
    return console if console.is_terminal else Console(file=file, width=max(console.width, 400))


def _summary(console, course, assignment, outcomes, wall) -> None:
    rows = [o.result for o in outcomes if o.result is not None]
    console.print(summary_table(rows, title=f"{assignment}: {len(rows)} submissions"))
    graded = sum(o.status == "graded" for o in outcomes)
    skipped = sum(o.status == "skipped" for o in outcomes)
    errors = [o for o in outcomes if o.status == "error"]
    console.print(f"graded {graded}, unchanged and skipped {skipped} (use --force to regrade), "
                  f"errors {len(errors)}; {wall:.1f} s"
                  + (f", {wall / graded:.2f} s per graded submission" if graded else ""))
    unsafe = [r for r in rows if r.protections_off]
    if unsafe:
        console.print(f"SANDBOX PROTECTIONS OFF: {len(unsafe)} submission{'s' * (len(unsafe) != 1)} graded without "
                      f"{', '.join(sorted({p.split(':')[0] for r in unsafe for p in r.protections_off}))} "
                      "(--unsafe-no-sandbox); their reports say so", style="bold red", markup=False)
    for o in errors:
        console.print(f"{o.student}: {gradebook.redact(o.message)} (not written to the gradebook; retried next run)",
                      style="red", markup=False)
    course_dir = Path(course).resolve()
    console.print(f"gradebook: {gradebook.locate(course_dir).shown}\n"
                  f"reports:   {reports_dir(course_dir, assignment)}", soft_wrap=True)
