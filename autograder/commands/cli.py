"""The command line: `python -m autograder COMMAND ...`. Declares each command's arguments and calls
the module that does its work; it decides nothing itself.

    grade SUBMISSION [--assignment NAME] [--json] [--gpu] [--lang en|zh]  (the course spec)   grade.py, report.py
    grade-workspace [WORKSPACE] [--assignment NAME] [--full]  (make grade)                 workspace.py, report.py
    grade-class COURSE_DIR [--assignment NAME] ...                                        classgrade.py
    grade-gpu COURSE_DIR [--assignment NAME] ...                                          gpucourse.py
    gradescope-bundle OUT.zip [--assignment NAME]                                         gradescope.py
    demo [--course DIR] [--nbgrader]                                                      demo.py

Exit status: 0 when the command finished; 2 with one line on stderr when it cannot start
(no such submission, an unknown assignment, another run grading the course, ...); 1 when grade-class
stopped part way (the gradebook stayed locked, the disk is full: what was written is kept); 128 + the
signal's number when a signal stopped it (130 for Ctrl-C, 143 for SIGTERM), with one line. The modules behind
the commands are imported only when their command runs, so that `grade` starts fast.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..foundation import edition, limits, spec
from ..foundation.copies import Originals, compare_copies
from ..foundation.extract import SubmissionError, extract, recognise
from ..foundation.limits import SandboxUnavailable

DEMO_COURSE = Path(__file__).resolve().parent.parent.parent / "build" / "demo-course"
SOURCE = Path(__file__).resolve().parent.parent.parent / "source"  # the course's instructor notebooks


def _assignment(parser: argparse.ArgumentParser, recognised: bool = False) -> None:
    default = "the one its notebooks' graded cells name, else " if recognised else ""
    parser.add_argument("--assignment", default=None if recognised else spec.DEFAULT.id,
                        help=f"the assignment to grade against (default: {default}{spec.DEFAULT.id}; known: "
                             f"{', '.join(spec.ASSIGNMENTS)})")


def _one_writer(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="when another run is grading this course, wait up to this long for it (default: refuse "
                             "at once, naming it)")
    parser.add_argument("--gradebook-wait", type=float, default=60.0, metavar="SECONDS",
                        help="when another writer (formgrader, nbgrader) holds the gradebook, retry for up to this "
                             "long, then stop (default 60)")


def cmd_grade(args) -> int:
    if args.assignment:
        spec.assignment(args.assignment)  # an unknown name: exit 2 first
    submission = extract(args.submission)  # read once; no submission: exit 2 at once, before torch is imported
    # nbgrader notebooks say which assignment they belong to; anything else is graded as the default's
    graded = edition.resolve(args.assignment, args.lang, notebooks=submission.lang, folder=submission.path,
                             default=None if args.assignment else recognise(submission))
    # a notebook that is the instructor's source notebook is no student's work: 0 for its parts, with the reason
    submission = compare_copies(submission, Originals(graded.id, source=SOURCE / graded.id))
    if args.gpu and graded.assignment.gpu_part is None:
        raise SubmissionError(f"assignment {graded.assignment.id} has no GPU stage")
    from ..sandbox.prestart import prestart  # noqa: PLC0415 - the commands' modules load only when they run

    prestart()  # the worker pool imports torch while this process does
    from . import document  # noqa: PLC0415
    from ..grading import grade, scope  # noqa: PLC0415

    # one notebook of the assignment named alone: only the parts it owns (the folder grades them all)
    only = scope.of(submission, graded.assignment)
    result = grade.grade(submission, gpu=args.gpu, limits=limits.from_args(args), assignment=graded.assignment,
                         lang=graded.lang, part_ids=only.part_ids if only else None)
    if only:
        result = scope.complete(result, only, graded.assignment)
    if args.json:
        sys.stdout.write(document.dumps(result) + "\n")
    else:
        from . import report  # noqa: PLC0415 - rich's tables, only for people

        report.render(result)
    return 0


def cmd_grade_workspace(args) -> int:
    from . import workspace  # noqa: PLC0415

    return workspace.main(args.workspace, args.assignment, full=args.full, limits=limits.from_args(args))


def cmd_grade_class(args) -> int:
    graded = edition.resolve(args.assignment)  # an unknown name: exit 2 before anything is imported
    from . import classgrade  # noqa: PLC0415

    settings = classgrade.Settings(workers=args.workers, force=args.force, limits=limits.from_args(args),
                                   lock_wait=args.wait, gradebook_wait=args.gradebook_wait,
                                   report_below=args.report_below / 100)
    return classgrade.main(args.course, graded.id, settings)


def cmd_grade_gpu(args) -> int:
    graded = edition.resolve(args.assignment)  # self_attention_zh: its own folders and gradebook, in Chinese
    if graded.assignment.gpu_part is None:
        raise SubmissionError(f"assignment {graded.assignment.id} has no GPU stage")
    from . import gpucourse as course  # noqa: PLC0415

    return course.main(args.course_dir, graded, csv=args.csv, gradebook_url=args.gradebook,
                       no_gradebook=args.no_gradebook, from_csv=args.from_csv, students=args.student,
                       lock_wait=args.wait, gradebook_wait=args.gradebook_wait)


def cmd_gradescope_bundle(args) -> int:
    graded = edition.resolve(args.assignment)
    from . import gradescope  # noqa: PLC0415

    return gradescope.main(args.out, graded, args.unsafe_no_sandbox)


def cmd_demo(args) -> int:
    from . import demo  # noqa: PLC0415

    return demo.main(args.course, use_nbgrader=args.nbgrader, workers=args.workers)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="The self-attention course's grader.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("grade", help="grade a notebook (one of an assignment's: only the parts it owns), a folder of "
                       "notebooks or a .py file")
    p.add_argument("submission")
    _assignment(p, recognised=True)
    p.add_argument("--json", action="store_true", help="print exactly one JSON document on stdout")
    p.add_argument("--gpu", action="store_true", help="also run the GPU stage (long_sequence_gpu)")
    p.add_argument("--lang", choices=spec.LANGUAGES, default=None,
                   help="the language of the feedback (default: the one the notebooks' metadata names, else the "
                        "edition in the folder's name, e.g. self_attention_zh, else en); the scores never depend on it")
    limits.add_flags(p)
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("grade-workspace", help="make grade: the student's workspace, the folders worked in, "
                       "one summary table each")
    p.add_argument("workspace", nargs="?", default="workspace", help="make lab's workspace (default: workspace)")
    p.add_argument("--assignment", help="grade this folder of the workspace (e.g. generation), changed or not")
    p.add_argument("--full", action="store_true", help="the whole report, one row per check")
    limits.add_flags(p)
    p.set_defaults(func=cmd_grade_workspace)

    p = sub.add_parser("grade-class", help="grade every submission of an nbgrader course directory, in parallel")
    p.add_argument("course", help="the nbgrader course directory (holds submitted/ and the gradebook)")
    _assignment(p)
    p.add_argument("--workers", type=int, help="grading processes (default: one per core)")
    p.add_argument("--force", action="store_true", help="regrade submissions that have not changed")
    p.add_argument("--report-below", type=float, default=60.0, metavar="PERCENT",
                   help="the class report (autograder_reports/<assignment>/class_report.html) lists the students "
                        "below this share of the points (default 60)")
    _one_writer(p)
    limits.add_flags(p)
    p.set_defaults(func=cmd_grade_class)

    p = sub.add_parser("grade-gpu", help="GPU stage for a whole nbgrader course: CSV + gradebook extra credit "
                       "(docs/gpu.md)")
    p.add_argument("course_dir", help="the nbgrader course directory (with submitted/ and gradebook.db)")
    _assignment(p)
    p.add_argument("--csv", help="where to write the results (default COURSE_DIR/<GPU part>.csv, e.g. "
                   "long_sequence_gpu.csv)")
    p.add_argument("--gradebook", help="gradebook URL (default: the course's, from its nbgrader_config.py, if it "
                   "exists)")
    p.add_argument("--no-gradebook", action="store_true", help="only write the CSV")
    p.add_argument("--from-csv", help="do not grade: record an earlier CSV in the gradebook")
    p.add_argument("--student", action="append", help="grade only this student (repeatable)")
    _one_writer(p)
    _unsafe_flag(p)
    p.set_defaults(func=cmd_grade_gpu)

    p = sub.add_parser("gradescope-bundle", help="build a Gradescope autograder zip")
    p.add_argument("out", help="the zip to write, e.g. build/gradescope.zip")
    _assignment(p)
    _unsafe_flag(p)
    p.set_defaults(func=cmd_gradescope_bundle)

    p = sub.add_parser("demo", help="release, collect, autograde and export the bundled example class")
    p.add_argument("--course", default=str(DEMO_COURSE), help="course directory to (re)create")
    p.add_argument("--nbgrader", action="store_true",
                   help="autograde with `nbgrader autograde` (this grader's preprocessor) and write HTML feedback")
    p.add_argument("--workers", type=int, help="grading processes (default: one per core)")
    _unsafe_flag(p)
    p.set_defaults(func=cmd_demo)
    return parser


def one_line(text: str) -> str:
    """A message on one line, whatever a file's name holds (a newline in it is shown as \\n)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _unsafe_flag(parser: argparse.ArgumentParser) -> None:
    """--unsafe-no-sandbox for the commands without the limits' flags: it reaches their grading processes
    (and nbgrader's) through the environment (limits.UNSAFE_ENV)."""
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade even when a layer of the sandbox cannot be had on this machine (default: refuse, "
                             "naming it); every report then says so")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "unsafe_no_sandbox", False):
        os.environ[limits.UNSAFE_ENV] = "1"  # (the pool's and nbgrader's processes inherit it)
    try:
        if not hasattr(os, "fork") and args.command != "gradescope-bundle" and (refused := limits.platform_refusal()):
            raise refused  # (Windows: no worker can start at all, not even without the sandbox)
        return args.func(args)
    except (SubmissionError, spec.UnknownAssignment, edition.UnknownLanguage, SandboxUnavailable) as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # this machine, not the submission: e.g. the worker pool's Python cannot be started
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return 2
