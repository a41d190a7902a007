"""`make demo`: the instructor's job, end to end, on the bundled example class (`python -m autograder demo`).

For each assignment (self_attention, then generation):
1. release: `nbgrader generate_assignment` into a course directory (default build/demo-course);
2. collect: the example class (examples/class/students.json and generation.json: the reference
   and typical mistakes, each derived from the source notebooks by examples/make_class.py) goes
   to submitted/<student>/<assignment>/;
3. autograde: `grade-class` (parallel, sandboxed, resumable) writes the gradebook;
   with --nbgrader, stock `nbgrader autograde` with this grader's preprocessor instead,
   followed by `nbgrader generate_feedback`;
then 4. export: `nbgrader export` writes grades.csv (both assignments);
5. print the score tables and where everything is.
"""
from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

from rich.console import Console

from . import gradebook, spec
from .classgrade import Stopped, grade_class, reports_dir
from .report import summary_table
from .results import CheckResult, GradeResult, PartResult

REPO = Path(__file__).resolve().parent.parent
DEFAULT_COURSE = REPO / "build" / "demo-course"


def main(course: str | Path = DEFAULT_COURSE, use_nbgrader: bool = False, workers: int | None = None,
         fresh: bool = True) -> int:
    """Release, collect, autograde and export the example class in `course`; print what happened."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from examples.make_class import MISTAKES_OF, collect, example_class, make_course, nbgrader  # noqa: PLC0415 - after sys.path

    assignments = tuple(spec.ASSIGNMENTS.values())
    console = Console()
    course = Path(course).resolve()
    if fresh and course.exists():
        shutil.rmtree(course)
    t0 = time.perf_counter()
    console.rule("1. release")
    make_course(course, assignments=tuple(a.id for a in assignments))
    for assignment in assignments:
        console.print(f"nbgrader generate_assignment {assignment.id} -> {course / 'release' / assignment.id}")
    for assignment in assignments:
        console.rule(f"2. collect {assignment.id}")
        students = example_class(assignment.id)
        collect(course, students, assignment.id)
        for s, m in students.items():
            console.print(f"  {s:6s} {MISTAKES_OF[assignment.id][m][0]}")
        console.rule(f"3. autograde {assignment.id}")
        if use_nbgrader:
            proc = nbgrader(course, "autograde", assignment.id, "--force", check=False)
            failed = sorted(set(re.findall(r"error processing assignment '[^']+' for student '([^']+)'", proc.stderr)))
            if failed:
                console.print(f"[yellow]nbgrader autograde could not grade {', '.join(failed)}: see its log above")
            nbgrader(course, "generate_feedback", assignment.id, "--force", check=False)
            rows = _rows_from_gradebook(course, students, assignment)
        else:
            try:
                outcomes = grade_class(course, assignment.id, workers=workers, force=True)
            except Stopped as exc:  # Ctrl-C, a full disk: one line, as grade-class says it
                print(f"demo: {exc}", file=sys.stderr)
                return exc.exit_code
            rows = [o.result for o in outcomes if o.result is not None]
        console.print(summary_table(rows, title=f"example class, {assignment.id}"))
    console.rule("4. export")
    nbgrader(course, "export", "--to", str(course / "grades.csv"))
    console.print(f"gradebook: {course / 'gradebook.db'}")
    console.print(f"CSV:       {course / 'grades.csv'} (one row per student and assignment)")
    for assignment in assignments:
        if use_nbgrader:
            console.print(f"feedback:  {course / 'feedback'}/<student>/{assignment.id}/*.html")
        else:
            console.print(f"feedback:  {reports_dir(course, assignment.id)}/<student>.json "
                          "(HTML feedback: run again with --nbgrader)")
    console.print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


def _rows_from_gradebook(course: Path, students: dict, assignment: spec.Assignment) -> list[GradeResult]:
    """The example class's part scores as nbgrader autograde recorded them, as summary rows."""
    scores = gradebook.read_part_scores(gradebook.locate(course), assignment, students)
    return [GradeResult(s, tuple(PartResult(p.id, p.points, (CheckResult("gradebook", scores[s][p.id] >= p.points,
                                                                        scores[s][p.id], p.points),))
                                 for p in assignment.parts)) for s in students]
