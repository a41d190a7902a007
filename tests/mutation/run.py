"""Mutation testing of the hidden checks: grade every small edit of the references, count the ones that lose points.

    .venv/bin/python -m tests.mutation [--workers 2] [--only attention|generation] [--sample N --seed S]
    make mutation

Each mutant (mutants.py) is a whole-module submission, graded like a student's by warm `Grader`s
(one per grading process, each keeping its zygote of forked sandboxed workers), on the parts
that grade the definition it edits. A mutant is killed when it scores below those parts' maximum.
Mutants listed in equivalent.toml (each with the reason it behaves like the reference) are left
out of the figure; the rest must all be killed. Exit status 1 when one survives, or when a listed
equivalent mutant is killed or no longer exists (the list is then out of date).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime
import hashlib
import os
import random
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from autograder.foundation import spec

from .mutants import Mutant, mutants

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCES = {"attention": ("self_attention", ROOT / "solutions" / "attention.py"),
              "generation": ("generation", ROOT / "solutions" / "generation.py"),
              "efficient": ("efficient", ROOT / "solutions" / "efficient.py"),
              "real_models": ("real_models", ROOT / "solutions" / "real_models.py"),
              "serving": ("serving", ROOT / "solutions" / "serving.py")}
EQUIVALENT = HERE / "equivalent.toml"


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    parts: tuple[str, ...]
    score: float
    max_score: float
    message: str  # the first failing check's message (what a student would read)

    @property
    def killed(self) -> bool:
        return self.score < self.max_score - 1e-9


def equivalents(path: Path = EQUIVALENT) -> dict[str, str]:
    """{mutant key: why it behaves like the reference}, reviewed by hand."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {e["key"]: e["reason"] for e in data.get("equivalent", [])}


def all_mutants(only: str | None = None) -> list[Mutant]:
    """Every mutant of the references' graded definitions. A definition no part grades is a piece pasted from
    another assignment (real_models' copy of generation's DecoderAttention and its helpers): its mutants are
    that assignment's, tested there."""
    return [m for name, (assignment, path) in REFERENCES.items() if only in (None, name)
            for m in mutants(path, frozenset(spec.assignment(assignment).api_names))]


def parts_of(mutant: Mutant) -> tuple[str, ...]:
    """The parts whose API the edited definition belongs to."""
    assignment = spec.assignment(REFERENCES[mutant.module][0])
    return tuple(p.id for p in assignment.parts if mutant.scope in p.names)


def grade_one(grader, mutant: Mutant, folder: Path) -> Outcome:
    """Grade one mutant as a submission with `grader` (a warm autograder.grading.grade.Grader)."""
    assignment = spec.assignment(REFERENCES[mutant.module][0])
    part_ids = parts_of(mutant)
    path = folder / f"mutant_{hashlib.sha1(mutant.key.encode()).hexdigest()[:12]}.py"
    path.write_text(mutant.source, encoding="utf-8")
    try:
        result = grader.grade(path, part_ids=list(part_ids), assignment=assignment)
    finally:
        path.unlink(missing_ok=True)
    failed = [c.message for p in result.parts for c in p.checks if not c.passed]
    first = failed[0].splitlines()[0][:300] if failed and failed[0] else ""
    return Outcome(mutant, part_ids, result.score, result.max_score, first)


# --------------------------------------------------------------------------- the grading processes
_STATE: dict = {}  # this pool process's warm Grader and scratch folder (set by _init)


def _init(parent: int) -> None:
    from autograder.sandbox import prestart
    from autograder.sandbox.lifetime import init_pool_process

    init_pool_process(parent)
    prestart.prefork()  # torch imported once, the zygote forked before the checks are imported
    from autograder.grading.grade import Grader

    _STATE["grader"] = Grader().warm()
    _STATE["folder"] = Path(tempfile.mkdtemp(prefix="mutation-"))


def _grade(mutant: Mutant) -> Outcome:
    return grade_one(_STATE["grader"], mutant, _STATE["folder"])


def grade_all(todo: list[Mutant], workers: int, progress=None) -> list[Outcome]:
    """Every mutant graded, in the order given, by `workers` grading processes."""
    outcomes: dict[str, Outcome] = {}
    with cf.ProcessPoolExecutor(workers, initializer=_init, initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(_grade, m): m for m in todo}
        for future in cf.as_completed(futures):
            outcome = future.result()
            outcomes[outcome.mutant.key] = outcome
            if progress:
                progress(len(outcomes), len(todo), outcome)
    return [outcomes[m.key] for m in todo]


# --------------------------------------------------------------------------- the report
@dataclass(frozen=True)
class Summary:
    mutants: int
    equivalent: int
    killed: int  # of the non-equivalent ones
    survivors: tuple[Outcome, ...]
    killed_equivalents: tuple[Outcome, ...]  # listed as equivalent, yet they lose points: the list is wrong
    stale: tuple[str, ...]  # listed keys that are no mutant any more

    @property
    def share(self) -> float:
        graded = self.mutants - self.equivalent
        return self.killed / graded if graded else 1.0

    @property
    def ok(self) -> bool:
        return not self.survivors and not self.killed_equivalents and not self.stale


def summarise(outcomes: list[Outcome], listed: dict[str, str], universe: list[Mutant]) -> Summary:
    keys = {m.key for m in universe}
    equivalent = [o for o in outcomes if o.mutant.key in listed]
    graded = [o for o in outcomes if o.mutant.key not in listed]
    return Summary(len(outcomes), len(equivalent), sum(o.killed for o in graded),
                   tuple(o for o in graded if not o.killed), tuple(o for o in equivalent if o.killed),
                   tuple(sorted(k for k in listed if k not in keys)))


def report(summary: Summary, seconds: float, workers: int, command: str) -> str:
    lines = [f"mutation testing of the hidden checks, {datetime.date.today().isoformat()}: `{command}`",
             f"{summary.mutants} mutants, {summary.equivalent} reviewed as equivalent, "
             f"{summary.killed} of {summary.mutants - summary.equivalent} non-equivalent killed "
             f"({100 * summary.share:.1f}%), in {seconds:.0f} s with {workers} grading processes"]
    for o in summary.survivors:
        lines += [f"\nSURVIVOR ({o.mutant.operator}, graded on {', '.join(o.parts)}): {o.mutant.module}:{o.mutant.scope}",
                  o.mutant.diff]
    for o in summary.killed_equivalents:
        lines += [f"\nlisted as equivalent but loses points: {o.mutant.key}\n  {o.message}"]
    for key in summary.stale:
        lines += [f"\nlisted as equivalent but no longer a mutant (remove it from equivalent.toml): {key}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--only", choices=sorted(REFERENCES))
    parser.add_argument("--sample", type=int, help="grade only this many non-equivalent mutants, drawn with --seed")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    universe = all_mutants(args.only)
    modules = {m.module for m in universe}
    listed = {key: why for key, why in equivalents().items() if key.split(":")[0] in modules}  # (--only: its own)
    todo = universe
    if args.sample:
        todo = random.Random(args.seed).sample([m for m in universe if m.key not in listed], args.sample)

    def progress(done: int, total: int, o: Outcome) -> None:
        if not args.quiet:
            mark = "killed  " if o.killed else ("equiv.  " if o.mutant.key in listed else "SURVIVED")
            print(f"[{done}/{total}] {mark} {o.mutant.key[:150]}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    outcomes = grade_all(todo, args.workers, progress)
    summary = summarise(outcomes, listed if not args.sample else {}, universe)
    if args.sample:
        summary = Summary(summary.mutants, 0, summary.killed, summary.survivors, (), ())
    command = "python -m tests.mutation " + " ".join(argv if argv is not None else sys.argv[1:])
    print(report(summary, time.perf_counter() - started, args.workers, command.strip()))
    return 0 if summary.ok else 1
