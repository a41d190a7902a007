"""Mutation testing of the hidden checks: grade every small edit of the references, count the ones that lose points.

    .venv/bin/python -m tests.mutation [--workers 2] [--only attention|generation|efficient|real_models]
                                       [--notebook generation/03_cross_attention] [--visible-only] [--sample N --seed S]
    make mutation

Each mutant (mutants.py) is a whole-module submission, graded like a student's by warm `Grader`s
(one per grading process, each keeping its zygote of forked sandboxed workers), on the parts
that grade the definition it edits. A mutant is killed when it scores below those parts' maximum.
Mutants listed in equivalent.toml (each with the reason it behaves like the reference) are left
out of the figure; the rest must all be killed. Exit status 1 when one survives, or when a listed
equivalent mutant is killed or no longer exists (the list is then out of date).

Each mutant also meets the visible checks of the notebook that owns what it edits, as the released notebook runs
them (visible.py). The report gives, per notebook, how many of the mutants the grader kills the visible checks catch
too; a killed mutant that passes every visible check must be listed in hidden_only.toml with the reason it must stay
hidden (else exit status 1, as for a listed one that the visible checks now catch or that is no mutant any more).
`--visible-only` runs the visible checks alone, taking every non-equivalent mutant as killed (what a full run checks).
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
from .visible import Seen, notebook_of, seen

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCES = {"attention": ("self_attention", ROOT / "solutions" / "attention.py"),
              "generation": ("generation", ROOT / "solutions" / "generation.py"),
              "efficient": ("efficient", ROOT / "solutions" / "efficient.py"),
              "real_models": ("real_models", ROOT / "solutions" / "real_models.py"),
              "serving": ("serving", ROOT / "solutions" / "serving.py")}
EQUIVALENT = HERE / "equivalent.toml"
HIDDEN_ONLY = HERE / "hidden_only.toml"


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    parts: tuple[str, ...]
    score: float
    max_score: float
    message: str  # the first failing check's message (what a student would read)
    visible: Seen | None = None  # what the visible checks of its notebook say (None: not run)

    @property
    def killed(self) -> bool:
        return self.score < self.max_score - 1e-9

    @property
    def split(self) -> bool:
        """Killed by the grader, yet every visible check of its notebook passes."""
        return self.killed and self.visible is not None and not self.visible.caught


def equivalents(path: Path = EQUIVALENT, table: str = "equivalent") -> dict[str, str]:
    """{mutant key: why it behaves like the reference}, reviewed by hand (with HIDDEN_ONLY, "hidden_only": {mutant
    key: why no visible check may catch it})."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {e["key"]: e["reason"] for e in data.get(table, [])}


def hidden_only() -> dict[str, str]:
    """{mutant key: why it must stay hidden}: the killed mutants every visible check lets pass, reviewed by hand."""
    return equivalents(HIDDEN_ONLY, "hidden_only")


def all_mutants(only: str | None = None, notebook: str | None = None) -> list[Mutant]:
    """Every mutant of the references' graded definitions (of one reference, of one notebook's definitions). A
    definition no part grades is a piece pasted from another assignment (real_models' copy of generation's
    DecoderAttention and its helpers): its mutants are that assignment's, tested there."""
    every = [m for name, (assignment, path) in REFERENCES.items() if only in (None, name)
             for m in mutants(path, frozenset(spec.assignment(assignment).api_names))]
    return [m for m in every if notebook is None or notebook_of(m, parts_of(m)) == notebook]


def parts_of(mutant: Mutant) -> tuple[str, ...]:
    """The parts whose API the edited definition belongs to."""
    assignment = spec.assignment(REFERENCES[mutant.module][0])
    return tuple(p.id for p in assignment.parts if mutant.scope in p.names)


def visible_only(mutant: Mutant) -> Outcome:
    """The visible checks alone on `mutant`, taken as killed (no grader run: see --visible-only)."""
    parts = parts_of(mutant)
    return Outcome(mutant, parts, 0.0, 1.0, "(not graded)", seen(mutant, parts))


def grade_one(grader, mutant: Mutant, folder: Path, visible: bool = False) -> Outcome:
    """Grade one mutant as a submission with `grader` (a warm autograder.grading.grade.Grader); with `visible`, run
    the visible checks of its notebook on it too."""
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
    return Outcome(mutant, part_ids, result.score, result.max_score, first, seen(mutant, part_ids) if visible else None)


# --------------------------------------------------------------------------- the grading processes
_STATE: dict = {}  # this pool process's warm Grader and scratch folder (set by _init), what it runs


def _init(parent: int, grading: bool) -> None:
    from autograder.sandbox import prestart
    from autograder.sandbox.lifetime import init_pool_process

    init_pool_process(parent)
    if not grading:
        return
    prestart.prefork()  # torch imported once, the zygote forked before the checks are imported
    from autograder.grading.grade import Grader

    _STATE["grader"] = Grader().warm()
    _STATE["folder"] = Path(tempfile.mkdtemp(prefix="mutation-"))


def _grade(mutant: Mutant) -> Outcome:
    if "grader" not in _STATE:
        return visible_only(mutant)
    return grade_one(_STATE["grader"], mutant, _STATE["folder"], visible=True)


def grade_all(todo: list[Mutant], workers: int, progress=None, grading: bool = True) -> list[Outcome]:
    """Every mutant graded (`grading`; else taken as killed) and run through its notebook's visible checks, in the order
    given, by `workers` processes."""
    outcomes: dict[str, Outcome] = {}
    with cf.ProcessPoolExecutor(workers, initializer=_init, initargs=(os.getpid(), grading)) as pool:
        futures = {pool.submit(_grade, m): m for m in todo}
        for future in cf.as_completed(futures):
            outcome = future.result()
            outcomes[outcome.mutant.key] = outcome
            if progress:
                progress(len(outcomes), len(todo), outcome)
    return [outcomes[m.key] for m in todo]


# --------------------------------------------------------------------------- the report
@dataclass(frozen=True)
class Agreement:
    """One notebook's visible agreement: of the mutants the grader kills, how many its visible checks catch."""
    notebook: str
    killed: int
    caught: int
    listed: int  # of the splits, those listed in hidden_only.toml

    @property
    def share(self) -> float:
        return self.caught / self.killed if self.killed else 1.0


@dataclass(frozen=True)
class Summary:
    mutants: int
    equivalent: int
    killed: int  # of the non-equivalent ones
    survivors: tuple[Outcome, ...]
    killed_equivalents: tuple[Outcome, ...]  # listed as equivalent, yet they lose points: the list is wrong
    stale: tuple[str, ...]  # listed keys that are no mutant any more
    agreement: tuple[Agreement, ...] = ()  # per notebook (empty: the visible checks were not run)
    splits: tuple[Outcome, ...] = ()  # killed, every visible check passes, not listed in hidden_only.toml
    stale_hidden: tuple[str, ...] = ()  # listed in hidden_only.toml, yet caught visibly, not killed or no mutant

    @property
    def share(self) -> float:
        graded = self.mutants - self.equivalent
        return self.killed / graded if graded else 1.0

    @property
    def visible_share(self) -> float:
        killed = sum(a.killed for a in self.agreement)
        return sum(a.caught for a in self.agreement) / killed if killed else 1.0

    @property
    def ok(self) -> bool:
        return not (self.survivors or self.killed_equivalents or self.stale or self.splits or self.stale_hidden)


def agreement(outcomes: list[Outcome], hidden: dict[str, str]) -> tuple[Agreement, ...]:
    """Per notebook, in the order first met: the killed mutants, those caught visibly, the listed splits."""
    rows: dict[str, list[int]] = {}
    for o in outcomes:
        if o.visible is not None and o.killed:
            row = rows.setdefault(o.visible.notebook, [0, 0, 0])
            row[0] += 1
            row[1] += o.visible.caught
            row[2] += o.split and o.mutant.key in hidden
    return tuple(Agreement(notebook, *row) for notebook, row in rows.items())


def summarise(outcomes: list[Outcome], listed: dict[str, str], universe: list[Mutant],
              hidden: dict[str, str] | None = None) -> Summary:
    keys = {m.key for m in universe}
    equivalent = [o for o in outcomes if o.mutant.key in listed]
    graded = [o for o in outcomes if o.mutant.key not in listed]
    hidden = hidden or {}
    seen_keys = {o.mutant.key: o for o in graded if o.visible is not None}
    stale_hidden = tuple(sorted(k for k in hidden if k not in keys or k in seen_keys and not seen_keys[k].split))
    return Summary(len(outcomes), len(equivalent), sum(o.killed for o in graded),
                   tuple(o for o in graded if not o.killed), tuple(o for o in equivalent if o.killed),
                   tuple(sorted(k for k in listed if k not in keys)), agreement(graded, hidden),
                   tuple(o for o in graded if o.split and o.mutant.key not in hidden), stale_hidden)


def report(summary: Summary, seconds: float, workers: int, command: str) -> str:
    lines = [f"mutation testing of the hidden checks, {datetime.date.today().isoformat()}: `{command}`",
             f"{summary.mutants} mutants, {summary.equivalent} reviewed as equivalent, "
             f"{summary.killed} of {summary.mutants - summary.equivalent} non-equivalent killed "
             f"({100 * summary.share:.1f}%), in {seconds:.0f} s with {workers} grading processes"]
    if summary.agreement:
        caught, killed = sum(a.caught for a in summary.agreement), sum(a.killed for a in summary.agreement)
        lines += [f"visible checks: {caught} of {killed} killed mutants caught visibly ({100 * summary.visible_share:.1f}%)",
                  f"  {'notebook':36} {'killed':>6} {'caught':>6} {'agreement':>9} {'listed':>6}"]
        lines += [f"  {a.notebook:36} {a.killed:6} {a.caught:6} {100 * a.share:8.1f}% {a.listed:6}"
                  for a in summary.agreement]
    for o in summary.survivors:
        lines += [f"\nSURVIVOR ({o.mutant.operator}, graded on {', '.join(o.parts)}): {o.mutant.module}:{o.mutant.scope}",
                  o.mutant.diff]
    for o in summary.splits:
        lines += [f"\nSPLIT (killed, yet every visible check of {o.visible.notebook} passes; fix a check or list it in "
                  f"hidden_only.toml): {o.mutant.key}", o.mutant.diff]
    for o in summary.killed_equivalents:
        lines += [f"\nlisted as equivalent but loses points: {o.mutant.key}\n  {o.message}"]
    for key in summary.stale:
        lines += [f"\nlisted as equivalent but no longer a mutant (remove it from equivalent.toml): {key}"]
    for key in summary.stale_hidden:
        lines += [f"\nlisted in hidden_only.toml but caught visibly, not killed, or no mutant any more (remove it): {key}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--only", choices=sorted(REFERENCES))
    parser.add_argument("--notebook", help="only the mutants of one notebook's definitions, e.g. generation/04_decoder")
    parser.add_argument("--visible-only", action="store_true",
                        help="run only the visible checks, every non-equivalent mutant taken as killed")
    parser.add_argument("--sample", type=int, help="grade only this many non-equivalent mutants, drawn with --seed")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    universe = all_mutants(args.only, args.notebook)
    keys = {m.key for m in universe}
    modules = {m.module for m in universe}

    def own(table: dict[str, str]) -> dict[str, str]:  # (--only, --notebook: the entries of its own mutants)
        return {key: why for key, why in table.items()
                if key in keys or (args.notebook is None and key.split(":")[0] in modules)}

    listed, hidden = own(equivalents()), own(hidden_only())
    todo = [m for m in universe if not (args.visible_only and m.key in listed)]
    if args.sample:
        todo = random.Random(args.seed).sample([m for m in universe if m.key not in listed], args.sample)

    def progress(done: int, total: int, o: Outcome) -> None:
        if not args.quiet:
            mark = "killed  " if o.killed else ("equiv.  " if o.mutant.key in listed else "SURVIVED")
            if o.split:
                mark = "hidden  " if o.mutant.key in hidden else "SPLIT   "
            print(f"[{done}/{total}] {mark} {o.mutant.key[:150]}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    outcomes = grade_all(todo, args.workers, progress, grading=not args.visible_only)
    if args.visible_only:  # the equivalent ones, not run: as listed
        outcomes += [Outcome(m, parts_of(m), 1.0, 1.0, "") for m in universe if m.key in listed]
    summary = summarise(outcomes, listed if not args.sample else {}, universe, hidden if not args.sample else {})
    if args.sample:
        summary = Summary(summary.mutants, 0, summary.killed, summary.survivors, (), (), summary.agreement,
                          summary.splits, ())
    command = "python -m tests.mutation " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.visible_only:
        print("(--visible-only: the grader did not run; every non-equivalent mutant is taken as killed)")
    print(report(summary, time.perf_counter() - started, args.workers, command.strip()))
    return 0 if summary.ok else 1
