"""nbgrader's gradebook of a course: where it is, and what the grader writes to it and reads back.

grade-class (classgrade.py), grade-gpu (gpucourse.py) and the demo (demo.py) all go through
here. The gradebook is found as nbgrader finds it: CourseDirectory.db_url and course_id from
COURSE/nbgrader_config.py, nbgrader's defaults where the configuration says nothing. The rows
written are the ones nbgrader's own autograde writes, so formgrader, `nbgrader export` and
`nbgrader generate_feedback` read them as theirs.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..foundation.extract import parse_json
from ..foundation.readfile import Unreadable, read_bytes
from ..foundation.results import PartResult
from ..foundation.spec import Assignment

SQLITE = "sqlite:///"


@dataclass(frozen=True)
class Location:
    db_url: str
    course_id: str

    @property
    def shown(self) -> str:
        """The URL as messages print it: a server's password replaced by ***."""
        return redact(self.db_url)

    @property
    def missing(self) -> bool:
        """A SQLite gradebook whose file does not exist (nbgrader would create an empty one)."""
        return self.db_url.startswith(SQLITE) and not Path(self.db_url[len(SQLITE):]).exists()


_PASSWORD = re.compile(r"(\w[\w+.-]*://[^:/@\s]*:)[^@\s]*@")


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by *** (postgresql://user:***@host/db)."""
    return _PASSWORD.sub(r"\1***@", text)


def course_settings(course: Path) -> dict:
    """The CourseDirectory settings of the course directory's nbgrader_config.py ({} without one, or one that cannot
    be read: nbgrader's defaults); read once while the file is unchanged."""
    cfg = course / "nbgrader_config.py"
    try:
        return _settings(str(course), cfg.stat().st_mtime_ns)
    except OSError:
        return {}


@functools.lru_cache(maxsize=32)
def _settings(course: str, mtime: int) -> dict:
    cfg = Path(course) / "nbgrader_config.py"
    from traitlets.config.loader import PyFileConfigLoader  # noqa: PLC0415 - only for a course directory

    try:
        return dict(PyFileConfigLoader(cfg.name, path=course).load_config().get("CourseDirectory", {}))
    except Exception:  # noqa: BLE001 - a config we cannot read: nbgrader's defaults
        return {}


def course_directories(course: Path) -> dict[str, str]:
    """The folders of the course's instructor notebooks ("source"), released ones ("release"), autograded ones
    ("autograded") and feedback pages ("feedback"), as nbgrader names them there."""
    cd = course_settings(Path(course))
    return {"source": cd.get("source_directory") or "source", "release": cd.get("release_directory") or "release",
            "autograded": cd.get("autograded_directory") or "autograded",
            "feedback": cd.get("feedback_directory") or "feedback"}


def locate(course: Path) -> Location:
    """The gradebook of the course directory `course`, as nbgrader would find it."""
    course = Path(course)
    cd = course_settings(course)
    db_url = cd.get("db_url") or f"{SQLITE}{course / 'gradebook.db'}"
    course_id = cd.get("course_id") or "default_course"
    path = db_url[len(SQLITE):]
    if db_url.startswith(SQLITE) and path and not path.startswith(("/", ":memory:")):
        db_url = f"{SQLITE}{course.resolve() / path}"  # relative: to the course, where nbgrader runs
    return Location(db_url, course_id)


def cell_score(score: float, part_max: float, cell_points: float) -> float:
    """A part's score as the points of its nbgrader cell: scaled, rounded, clipped to [0, points]."""
    scaled = score * cell_points / part_max if part_max else 0.0
    return min(max(round(float(scaled), 4), 0.0), float(cell_points))


def load_nbgrader() -> None:
    """Import nbgrader's gradebook API now, without jsonschema's optional checker of the "iri" format:
    its module (rfc3987_syntax) compiles a grammar at import, about 1.3 s of CPU, and neither nbformat
    nor nbgrader ever checks that format. A process that writes a gradebook calls this first."""
    if "jsonschema" in sys.modules:
        return
    sys.modules.setdefault("rfc3987_syntax", None)  # (an import of None fails: jsonschema skips that checker)
    try:
        import nbgrader.api  # noqa: F401, PLC0415 - the point of this function
    finally:
        if sys.modules.get("rfc3987_syntax", 0) is None:
            del sys.modules["rfc3987_syntax"]


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


@contextlib.contextmanager
def quiet():
    """Without the SQLAlchemy autoflush warnings nbgrader's own add_submission triggers (stock autograde shows
    them too), and without the traceback nbgrader logs for each failed write before it raises (`retrying`
    says it in one line)."""
    logger = logging.getLogger("tornado.application")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not in session.*")
            yield
    finally:
        logger.setLevel(level)


def connect(location: Location):
    """nbgrader's Gradebook of `location` (the caller closes it). A SQLite gradebook waits at most a second for
    another writer per statement: `retrying` decides how long a run waits in all."""
    from nbgrader.api import Gradebook  # noqa: PLC0415 - nbgrader and SQLAlchemy are slow to import

    url = location.db_url
    if url.startswith(SQLITE) and "?" not in url:
        url += "?timeout=1"
    with quiet():
        return Gradebook(url, location.course_id)


@contextlib.contextmanager
def opened(location: Location):
    """nbgrader's Gradebook, quiet (`quiet`) while the block runs, closed after it."""
    gb = connect(location)
    try:
        with quiet():
            yield gb
    finally:
        gb.close()


class Writer:
    """One gradebook connection for the writes of a run (grade-class: one per submission). Opening nbgrader's
    Gradebook checks every table, and SQLAlchemy caches its compiled statements per connection: a connection
    per write cost about 20 ms more CPU than one kept open (docs/benchmark.md). Each write is still its own transaction
    (other programs see it at once, and hold no lock of ours between writes); after a failed one the connection
    is closed and the next write opens a new one (a server that went away, a lock held by another writer)."""

    def __init__(self, location: Location) -> None:
        self.location = location
        self._gb = None

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._gb is not None:
            gb, self._gb = self._gb, None
            with contextlib.suppress(Exception):  # (a connection that already failed)
                gb.close()

    def using(self, action):
        """action(gb) on the run's connection, opened on first use; closed if the action fails."""
        if self._gb is None:
            self._gb = connect(self.location)
        try:
            with quiet():
                return action(self._gb)
        except BaseException:
            with contextlib.suppress(Exception):
                self._gb.db.rollback()
            self.close()
            raise

    def submitted(self, assignment: str) -> set[str] | None:
        """`submitted`, on this connection."""
        return self.using(lambda gb: submitted_in(gb, assignment))

    def write_part_grades(self, assignment: str, student: str, folder: Path, parts: list[PartResult]) -> None:
        """`write_part_grades`, on this connection."""
        self.using(lambda gb: part_grades_into(gb, assignment, student, folder, parts))


def submitted(location: Location, assignment: str) -> set[str] | None:
    """The students with a submission of `assignment` in the gradebook; None if it has no such assignment."""
    with Writer(location) as writer:
        return writer.submitted(assignment)


def submitted_in(gb, assignment: str) -> set[str] | None:
    """`submitted`, read through the open Gradebook `gb`."""
    from nbgrader.api import MissingEntry  # noqa: PLC0415 - nbgrader is slow to import

    try:
        return {s.student.id for s in gb.find_assignment(assignment).submissions}
    except MissingEntry:
        return None


def _timestamp(folder: Path) -> str | None:
    """The submission's timestamp.txt, when it holds one nbgrader can parse (else none: nbgrader's default)."""
    from nbgrader.utils import parse_utc  # noqa: PLC0415 - nbgrader is slow to import

    try:
        text = read_bytes(folder / "timestamp.txt", limit=4096).decode("utf-8-sig").strip()
        parse_utc(text)
    except (Unreadable, ValueError, OverflowError):
        return None
    return text or None


def _answered(folder: Path, notebook: str, released: dict[str, str] | None = None) -> dict[str, bool]:
    """grade_id -> whether the student changed that solution cell (nbgrader's checksum test, against the
    checksum the gradebook keeps of the released cell when `released` has it, as autograde's OverwriteCells
    does: a released written answer carries none)."""
    from nbformat import from_dict  # noqa: PLC0415 - nbformat and nbgrader are slow to import
    from nbgrader import utils  # noqa: PLC0415

    path = folder / f"{notebook}.ipynb"
    try:
        nb = parse_json(read_bytes(path, inside=folder), path.name)
    except (Unreadable, ValueError):  # unreadable (a link out of the folder too): nothing answered
        return {}
    out = {}
    cells = nb.get("cells") if isinstance(nb, dict) else None
    for cell in cells if isinstance(cells, list) else []:
        meta = cell.get("metadata") if isinstance(cell, dict) else None
        meta = meta.get("nbgrader") if isinstance(meta, dict) else None
        if isinstance(meta, dict) and meta.get("solution") and isinstance(meta.get("grade_id"), str):
            try:
                cell = from_dict(cell)  # (only the solution cells: a notebook's outputs can be large)
                if isinstance(cell.get("source"), list):  # (the file's lines, as nbformat's reader joins them)
                    cell["source"] = "".join(cell["source"])
                checksum = (released or {}).get(meta["grade_id"]) or meta.get("checksum")
                out[meta["grade_id"]] = checksum != utils.compute_checksum(cell)
            except Exception:  # noqa: BLE001 - a cell nbgrader cannot checksum counts as answered
                out[meta["grade_id"]] = True
    return out


def write_part_grades(location: Location, assignment: str, student: str, folder: Path,
                      parts: list[PartResult]) -> None:
    """The rows nbgrader autograde + SaveAutoGrades write for this submission, in one transaction:
    each graded cell's auto_score (a part's score scaled to its cell; 0 for a notebook not
    submitted), needs_manual_grade, and "No response." for solution cells left as released. A written answer
    waits for an instructor (0 if left as released); one an instructor graded stays as graded (written.py)."""
    with Writer(location) as writer:
        writer.write_part_grades(assignment, student, folder, parts)


def part_grades_into(gb, assignment: str, student: str, folder: Path, parts: list[PartResult]) -> None:
    """`write_part_grades`, through the open Gradebook `gb`."""
    from . import written  # noqa: PLC0415 - nbgrader is slow to import

    by_id = {p.id: p for p in parts}
    with one_transaction(gb):
        gb.update_or_create_student(student)
        ts = _timestamp(folder)
        if ts:
            submission = gb.update_or_create_submission(assignment, student, timestamp=ts)
        else:
            submission = gb.update_or_create_submission(assignment, student)
        for submitted in submission.notebooks:  # its rows by cell (what find_grade and find_comment find, in
            nb = submitted.notebook            # 4 queries per notebook instead of one per cell)
            grades = {g.cell_id: g for g in submitted.grades}
            comments = {c.cell_id: c for c in submitted.comments}
            submitted_nb = (folder / f"{nb.name}.ipynb").exists()
            by_hand = []  # the written answers' grades, set once we know which answers were written
            for cell in nb.grade_cells:
                grade = grades.get(cell.id) or gb.find_grade(cell.name, nb.name, assignment, student)
                part = by_id.get(cell.name)
                if not submitted_nb:
                    grade.auto_score = 0.0  # what nbgrader autograde records for a missing notebook
                elif written.is_written(cell):  # graded by hand: an instructor's grade stays as it is
                    by_hand.append((cell.name, grade))
                    continue
                elif cell.cell_type != "code":
                    grade.auto_score = None  # another cell graded by hand
                elif part is None:
                    grade.auto_score = 0.0  # a graded cell that is no part of the course
                else:
                    grade.auto_score = cell_score(part.score, part.max_score, cell.max_score)
                grade.needs_manual_grade = written.needs_review(grade.manual_score, grade.auto_score, written=False)
            released = {c.name: c.checksum for c in nb.source_cells}  # (a released written answer has none)
            answered = _answered(folder, nb.name, released) if submitted_nb else {}
            for name, grade in by_hand:
                written.written_grade(grade, answered.get(name, False))  # (an unreadable notebook: as released)
            for cell in nb.solution_cells:
                comment = comments.get(cell.id) or gb.find_comment(cell.name, nb.name, assignment, student)
                comment.auto_comment = None if answered.get(cell.name, not submitted_nb) else "No response."
        gb.db.commit()


def set_extra_credit(location: Location, assignment: str, notebook: str, cell: str,
                     credits: dict[str, float]) -> dict[str, str | None]:
    """Each student's credit as the extra credit of their grade of `cell`; {student: None when
    recorded, else why not}. Extra credit adds to the assignment's score, not to its maximum;
    nbgrader counts it only on a graded cell."""
    from nbgrader.api import MissingEntry  # noqa: PLC0415 - nbgrader is slow to import

    outcome: dict[str, str | None] = {}
    with opened(location) as gb:
        for sid, credit in credits.items():
            try:
                grade = gb.find_grade(cell, notebook, assignment, sid)
            except MissingEntry:
                outcome[sid] = (f"no {assignment}/{notebook} submission in the gradebook "
                                "(run nbgrader autograde first)")
                continue
            if grade.auto_score is None and grade.manual_score is None:
                outcome[sid] = f"{notebook} is not autograded yet (nbgrader counts extra credit only on a graded cell)"
                continue
            grade.extra_credit = float(credit)
            outcome[sid] = None
        gb.db.commit()
    return outcome


def read_part_scores(location: Location, assignment: Assignment, students,
                     name: str | None = None) -> dict[str, dict[str, float]]:
    """{student: {part id: the auto_score of its cell}} (0 where there is none), of the nbgrader assignment
    `name` (an edition of `assignment`, e.g. self_attention_zh; default: the assignment's own id)."""
    from nbgrader.api import MissingEntry  # noqa: PLC0415 - nbgrader is slow to import

    out: dict[str, dict[str, float]] = {}
    with opened(location) as gb:
        for s in students:
            out[s] = {}
            for p in assignment.parts:
                try:
                    out[s][p.id] = gb.find_grade(p.id, p.notebook, name or assignment.id, s).auto_score or 0.0
                except MissingEntry:
                    out[s][p.id] = 0.0
    return out
