"""`make demo`: the instructor's job, end to end, on the bundled example class (`python -m autograder demo`).

For each assignment (self_attention, generation, efficient, real_models, then serving), in each edition (English,
then Chinese: self_attention_zh, generation_zh, efficient_zh, real_models_zh, serving_zh):
1. release: `nbgrader generate_assignment` into a course directory (default build/demo-course);
2. collect: the example class (examples/class/students.json, generation.json, efficient.json, real_models.json,
   serving.json: the reference
   and typical mistakes, each derived from the source notebooks by examples/make_class.py) goes
   to submitted/<student>/<assignment>/;
3. autograde: `grade-class` (parallel, sandboxed, resumable) writes the gradebook;
   with --nbgrader, stock `nbgrader autograde` with this grader's preprocessor instead,
   followed by `nbgrader generate_feedback`;
then 4. export: `nbgrader export` writes grades.csv (every assignment and edition);
5. print the score tables, whether both editions scored every student alike (they must: the same
   checks; the demo fails if not), one Chinese feedback report, and where everything is (with each
   edition's class report, autograder_reports/<edition>/class_report.html, in grade-class mode).
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

from rich.console import Console

from . import gradebook
from ..foundation import spec
from .classgrade import Settings, Stopped, class_report, grade_class, reports_dir
from ..foundation.edition import Edition
from .report import render, summary_table
from ..foundation.results import CheckResult, GradeResult, PartResult

REPO = Path(__file__).resolve().parent.parent.parent
DEFAULT_COURSE = REPO / "build" / "demo-course"


def main(course: str | Path = DEFAULT_COURSE, use_nbgrader: bool = False, workers: int | None = None,
         fresh: bool = True) -> int:
    """Release, collect, autograde and export the example class in `course`; print what happened."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from examples.make_class import (  # noqa: PLC0415 - after sys.path
        MISTAKES_OF,
        collect,
        example_class,
        make_course,
        nbgrader,
        repo_source,
        write_written_answers,
    )

    assignments = tuple(spec.ASSIGNMENTS.values())
    editions = [Edition(a, lang) for a in assignments for lang in spec.LANGUAGES]
    console = Console()
    course = Path(course).resolve()
    if fresh and course.exists():
        shutil.rmtree(course)
    t0 = time.perf_counter()
    console.rule("1. release")
    make_course(course, assignments=tuple(a.id for a in assignments))
    for ed in editions:
        if ed.lang != spec.DEFAULT_LANGUAGE:
            make_course(course, edition_source(course, ed, repo_source), assignments=(ed.id,))
    for ed in editions:
        console.print(f"nbgrader generate_assignment {ed.id} -> {course / 'release' / ed.id}")
    scored: dict[str, list[GradeResult]] = {}
    pages: dict[str, Path] = {}  # the class report of each edition (grade-class mode)
    for ed in editions:
        assignment, name = ed.assignment, ed.id
        console.rule(f"2. collect {name}")
        students = example_class(name)
        collect(course, students, name)
        marks = write_written_answers(course, students, name)
        for s, m in students.items():
            console.print(f"  {s:6s} {MISTAKES_OF[assignment.id][m][0]}")
        console.rule(f"3. autograde {name}")
        if use_nbgrader:
            proc = nbgrader(course, "autograde", name, "--force", check=False)
            failed = sorted(set(re.findall(r"error processing assignment '[^']+' for student '([^']+)'", proc.stderr)))
            if failed:
                console.print(f"[yellow]nbgrader autograde could not grade {', '.join(failed)}: see its log above")
            grade_written_answers(course, name, marks, console)
            nbgrader(course, "generate_feedback", name, "--force", check=False)
            rows = _rows_from_gradebook(course, students, assignment, name)
        else:
            try:
                outcomes = grade_class(course, name, Settings(workers=workers, force=True))
            except Stopped as exc:  # Ctrl-C, a full disk: one line, as grade-class says it
                print(f"demo: {exc}", file=sys.stderr)
                return exc.exit_code
            rows = [o.result for o in outcomes if o.result is not None]
            grade_written_answers(course, name, marks, console)
            pages[name] = class_report(course, name, outcomes)
        console.print(summary_table(rows, title=f"example class, {name}"))
        scored[name] = rows
    differ = [f"{ed.id}: {row}" for ed in editions if ed.lang != spec.DEFAULT_LANGUAGE
              for row in differences(scored[ed.assignment.id], scored[ed.id])]
    console.rule("both editions")
    if differ:
        console.print("[red]the editions scored these students differently:\n" + "\n".join(differ))
        return 1
    console.print("every student scored the same in the English and the Chinese edition, part by part")
    chinese = Edition(spec.DEFAULT, "zh")
    example = chinese_example(scored.get(chinese.id, []))
    if example is not None and not use_nbgrader:
        console.rule(f"one Chinese feedback report ({chinese.id})")
        render(example, console)
    console.rule("4. export")
    nbgrader(course, "export", "--to", str(course / "grades.csv"))
    console.print(f"gradebook: {course / 'gradebook.db'}")
    console.print(f"CSV:       {course / 'grades.csv'} (one row per student and assignment; the autograded and "
                  "the written points in their own columns)")
    for ed in editions:
        if use_nbgrader:
            console.print(f"feedback:  {course / 'feedback'}/<student>/{ed.id}/*.html")
        else:
            console.print(f"feedback:  {reports_dir(course, ed.id)}/<student>.json "
                          "(HTML feedback: run again with --nbgrader)")
    for name, page in pages.items():
        console.print(f"class report ({name}): {page}", soft_wrap=True)
    console.print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


def grade_written_answers(course: Path, name: str, marks: dict, console) -> None:
    """Grade the example class's written answers as an instructor does in formgrader (nbgrader's gradebook API):
    points and a comment for each answer given; an empty answer keeps the 0 autograde gave it."""
    from . import written  # noqa: PLC0415 - nbgrader is slow to import

    with gradebook.opened(gradebook.locate(course)) as gb:
        for (student, notebook, cell), (points, comment) in sorted(marks.items()):
            written.grade_by_hand(gb, name, student, notebook, cell, points, comment)
        given = {}
        for (student, _, _), (points, _) in marks.items():
            given[student] = given.get(student, 0.0) + points
    console.print("written answers graded by hand: " + ", ".join(f"{s} {p:g} points" for s, p in given.items())
                  + "; every other student left them empty (0)")


def edition_source(course: Path, edition: Edition, repo_source) -> Path | None:
    """The instructor notebooks of an edition: the course build's (source/<id>_<lang>/), or until it has built
    them, a stand-in: the English ones marked with the edition's language (metadata course.lang), in `course`."""
    assignment, lang, name = edition.assignment, edition.lang, edition.id
    built, english = repo_source(assignment=name), repo_source(assignment=assignment.id)
    if built is not None or english is None:
        return built
    dest = course / ".edition-sources" / name
    dest.mkdir(parents=True, exist_ok=True)
    for notebook in assignment.notebooks:
        nb = json.loads((english / f"{notebook}.ipynb").read_text(encoding="utf-8"))
        nb.setdefault("metadata", {})["course"] = {"lang": lang}
        (dest / f"{notebook}.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
    return dest


def differences(english: list[GradeResult], edition: list[GradeResult]) -> list[str]:
    """The students whose part scores differ between two editions' rows (none: the same checks, the same scores)."""
    en = {r.submission: [(p.id, p.score) for p in r.parts] for r in english}
    return [f"{r.submission}: {en.get(r.submission)} vs {[(p.id, p.score) for p in r.parts]}" for r in edition
            if en.get(r.submission) != [(p.id, p.score) for p in r.parts]]


def chinese_example(rows: list[GradeResult]) -> GradeResult | None:
    """A Chinese edition's result worth showing: the first that lost points with a message."""
    return next((r for r in rows if r.lang != spec.DEFAULT_LANGUAGE and 0 < r.score < r.max_score), None)


def _rows_from_gradebook(course: Path, students: dict, assignment: spec.Assignment,
                         name: str | None = None) -> list[GradeResult]:
    """The example class's part scores as nbgrader autograde recorded them (for the edition `name`), as
    summary rows."""
    scores = gradebook.read_part_scores(gradebook.locate(course), assignment, students, name)
    return [GradeResult(s, tuple(PartResult(p.id, p.points, (CheckResult("gradebook", scores[s][p.id] >= p.points,
                                                                        scores[s][p.id], p.points),))
                                 for p in assignment.parts)) for s in students]
