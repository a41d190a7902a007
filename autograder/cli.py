"""python -m autograder grade SUBMISSION [--json] [--gpu]  (fixed by the course spec)."""
from __future__ import annotations

import argparse
import sys

from .extract import SubmissionError
from .results import Limits


def _limits(args) -> Limits:
    defaults = Limits()
    return Limits(part_seconds=args.part_seconds or defaults.part_seconds,
                  memory_bytes=int((args.memory_gib or defaults.memory_bytes / 2**30) * 2**30),
                  namespaces=not args.no_namespaces,
                  load_seconds=getattr(args, "load_seconds", None) or defaults.load_seconds,
                  cpu_seconds=getattr(args, "cpu_seconds", None) or defaults.cpu_seconds,
                  extra_hidden=tuple(getattr(args, "hide", None) or ()))


def cmd_grade(args) -> int:
    from .extract import extract

    extract(args.submission)  # no submission: exit 2 at once, before torch is even imported
    from .prestart import prestart

    prestart()  # the worker pool imports torch while this process does
    from .grade import grade
    from .report import as_json, render

    result = grade(args.submission, gpu=args.gpu, limits=_limits(args))
    if args.json:
        sys.stdout.write(as_json(result) + "\n")
    else:
        render(result)
    return 0


def cmd_grade_gpu(args) -> int:
    from .gpu import main_grade_gpu

    return main_grade_gpu(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="The self-attention course's grader.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade a notebook, a folder of notebooks or a .py file")
    g.add_argument("submission")
    g.add_argument("--json", action="store_true", help="print exactly one JSON document on stdout")
    g.add_argument("--gpu", action="store_true", help="also run the GPU stage (long_sequence_gpu)")
    g.add_argument("--part-seconds", type=float, help="wall-clock limit per part (default 20)")
    g.add_argument("--memory-gib", type=float, help="address-space limit of the worker (default 6)")
    g.add_argument("--no-namespaces", action="store_true", help="do not use Linux namespaces (weaker sandbox)")
    g.add_argument("--load-seconds", type=float, help="limit for starting a worker and running the top-level "
                   "code (default 30)")
    g.add_argument("--cpu-seconds", type=int, help="CPU-time limit of one worker (default 300)")
    g.add_argument("--hide", action="append", metavar="PATH", help="also hide this path from student code "
                   "(repeatable; the submission's folders and the current directory are always hidden)")
    g.set_defaults(func=cmd_grade)
    gg = sub.add_parser("grade-gpu", help="GPU stage for a whole nbgrader course: CSV + gradebook extra credit "
                        "(docs/gpu.md)")
    gg.add_argument("course_dir", help="the nbgrader course directory (with submitted/ and gradebook.db)")
    gg.add_argument("--assignment", default="self_attention")
    gg.add_argument("--csv", help="where to write the results (default COURSE_DIR/long_sequence_gpu.csv)")
    gg.add_argument("--gradebook", help="gradebook URL (default sqlite:///COURSE_DIR/gradebook.db if it exists)")
    gg.add_argument("--no-gradebook", action="store_true", help="only write the CSV")
    gg.add_argument("--from-csv", help="do not grade: record an earlier CSV in the gradebook")
    gg.add_argument("--student", action="append", help="grade only this student (repeatable)")
    gg.set_defaults(func=cmd_grade_gpu)
    from . import classgrade, demo, gradescope  # instructor commands: grade-class, gradescope-bundle, demo

    for module in (classgrade, gradescope, demo):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SubmissionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
