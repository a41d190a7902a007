"""The instructor's job, end to end, on the bundled example class: `python -m autograder demo`.

1. release: `nbgrader generate_assignment` into a course directory (default build/demo-course);
2. collect: the example class (examples/class/students.json: the reference and typical
   mistakes, each derived from the source notebooks by examples/make_class.py) goes to
   submitted/<student>/self_attention/;
3. autograde: `grade-class` (parallel, sandboxed, resumable) writes the gradebook;
   with --nbgrader, stock `nbgrader autograde` with this grader's preprocessor instead,
   followed by `nbgrader generate_feedback`;
4. export: `nbgrader export` writes grades.csv;
5. print the score table and where everything is.
"""
from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_demo(course: Path, use_nbgrader: bool = False, workers: int | None = None, fresh: bool = True) -> int:
    from rich.console import Console  # noqa: PLC0415

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from examples.make_class import MISTAKES, collect, example_class, make_course, nbgrader  # noqa: PLC0415

    from .classgrade import grade_class  # noqa: PLC0415
    from .report import summary_table  # noqa: PLC0415
    from .spec import ASSIGNMENT  # noqa: PLC0415

    console = Console()
    course = course.resolve()
    if fresh and course.exists():
        shutil.rmtree(course)
    t0 = time.perf_counter()
    console.rule("1. release")
    make_course(course)
    console.print(f"nbgrader generate_assignment -> {course / 'release' / ASSIGNMENT}")
    console.rule("2. collect")
    students = example_class()
    collect(course, students)
    for s, m in students.items():
        console.print(f"  {s:6s} {MISTAKES[m][0]}")
    console.rule("3. autograde")
    if use_nbgrader:
        proc = nbgrader(course, "autograde", ASSIGNMENT, "--force", check=False)
        failed = sorted(set(re.findall(r"error processing assignment '[^']+' for student '([^']+)'", proc.stderr)))
        if failed:
            console.print(f"[yellow]nbgrader autograde could not grade {', '.join(failed)} (it stops at a "
                          "notebook it cannot read; grade-class records zeros with a message instead)")
        nbgrader(course, "generate_feedback", ASSIGNMENT, "--force", check=False)
        rows = _rows_from_gradebook(course, students)
    else:
        outcomes = grade_class(course, ASSIGNMENT, workers=workers, force=True)
        rows = [o.result for o in outcomes if o.result is not None]
    console.print(summary_table(rows, title="example class"))
    console.rule("4. export")
    nbgrader(course, "export", "--to", str(course / "grades.csv"))
    console.print(f"gradebook: {course / 'gradebook.db'}")
    console.print(f"CSV:       {course / 'grades.csv'}")
    if use_nbgrader:
        console.print(f"feedback:  {course / 'feedback'}/<student>/{ASSIGNMENT}/*.html")
    else:
        console.print(f"feedback:  {course / 'autograder_reports' / ASSIGNMENT}/<student>.json "
                      "(HTML feedback: run again with --nbgrader)")
    console.print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


def _rows_from_gradebook(course: Path, students: dict):
    from nbgrader.api import Gradebook, MissingEntry  # noqa: PLC0415

    from .results import CheckResult, GradeResult, PartResult  # noqa: PLC0415
    from .spec import ASSIGNMENT, PARTS  # noqa: PLC0415

    rows = []
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for s in students:
            parts = []
            for p in PARTS:
                try:
                    score = gb.find_grade(p.id, p.notebook, ASSIGNMENT, s).auto_score or 0.0
                except MissingEntry:
                    score = 0.0
                parts.append(PartResult(p.id, p.points, (CheckResult("gradebook", score >= p.points, score, p.points),)))
            rows.append(GradeResult(s, tuple(parts)))
    return rows


def cmd_demo(args) -> int:
    return run_demo(Path(args.course), use_nbgrader=args.nbgrader, workers=args.workers)


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="release, collect, autograde and export the bundled example class")
    p.add_argument("--course", default=str(REPO / "build" / "demo-course"), help="course directory to (re)create")
    p.add_argument("--nbgrader", action="store_true",
                   help="autograde with `nbgrader autograde` (this grader's preprocessor) and write HTML feedback")
    p.add_argument("--workers", type=int, help="grading processes (default: one per core)")
    p.set_defaults(func=cmd_demo)
