"""Benchmark: stock `nbgrader autograde` against `python -m autograder grade-class`, and how both grow.

    .venv/bin/python benchmarks/run.py [--students 40] [--stock-students 4] [--growth 10,40,200]
                                      [--cells 0,1000,10000] [--workers N] [--out FILE]
    .venv/bin/python benchmarks/run.py --compare REV [--students 40] [--growth 200] [--rounds 2] ...

One command prints every figure of the goals (docs/benchmark.md), each measured in this run:
  * stock nbgrader autograde (its default Execute preprocessor: a kernel per notebook) on
    --stock-students students, extrapolated per submission (it takes about 35 s each);
  * grade-class on classes of each --growth size (synthetic classes from examples/make_class.py:
    the reference and typical mistakes, a corrupt and a missing notebook), --force, --workers N:
    wall time, time per submission, peak memory; the --students class is the goal's row, with the
    speed-up over stock nbgrader;
  * one cold `python -m autograder grade <submission folder>`, three times;
  * one submission of growing size: the correct submission with --cells extra cells (scratch code
    with outputs, and notes) in its first notebook, graded cold.
Each run is a child process. Memory is sampled from /proc every 0.1 s over the command's whole
process tree: the largest single process (the peak of its VmHWM) and the whole tree (the peak of
the summed proportional set size, Pss: pages shared by forked processes are counted once, split
between them). The machine's load average is printed with the figures.
With --compare REV it measures this tree and revision REV side by side instead (benchmarks/compare.py).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from examples.make_class import synthetic_class  # noqa: E402
from autograder.foundation.spec import ASSIGNMENT  # noqa: E402
from benchmarks.compare import compare  # noqa: E402
from benchmarks.measure import PY, course_with, run_timed  # noqa: E402


def bigger(folder: Path, cells: int) -> None:
    """Add `cells` extra cells to the first notebook of a submission folder: scratch code with an
    output, and notes, as a student leaves them (neither is graded)."""
    path = sorted(folder.glob("*.ipynb"))[0]
    nb = json.loads(path.read_text())
    for i in range(cells):
        if i % 2:
            nb["cells"].append({"cell_type": "markdown", "id": f"note-{i}", "metadata": {},
                                "source": f"Note {i}: the scores are Q K^T / sqrt(d_k); try another seed."})
        else:
            nb["cells"].append({"cell_type": "code", "id": f"scratch-{i}", "metadata": {}, "execution_count": i,
                                "source": f"x{i} = torch.randn(2, 5, 8)\nx{i}.shape",
                                "outputs": [{"output_type": "execute_result", "execution_count": i, "metadata": {},
                                             "data": {"text/plain": "torch.Size([2, 5, 8])"}}]})
    path.write_text(json.dumps(nb, indent=1))


def row(label: str, n: int, res: dict, per: float | None = None) -> str:
    per = res["wall"] / n if per is None else per
    return (f"| {label} | {n} | {per * n:.1f} s | {per:.3f} s | {res['largest_mib']:.0f} MiB "
            f"| {res['tree_mib']:.0f} MiB |")


HEADER = ("| run | submissions | wall time | per submission | largest process (peak) | whole tree (peak Pss) |\n"
          "|---|---|---|---|---|---|")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=40, help="the goal's class size")
    ap.add_argument("--stock-students", type=int, default=4, help="students stock nbgrader grades (extrapolated)")
    ap.add_argument("--growth", default="10,40,200", help="class sizes of the growth table")
    ap.add_argument("--cells", default="0,1000,10000", help="extra cells of the growing submission")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", help="also write the Markdown tables here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary course directories")
    ap.add_argument("--compare", metavar="REV", help="instead: grade-class, one cold grade and the nbgrader path "
                    "of this tree and of git revision REV side by side, on the same classes (benchmarks/compare.py)")
    ap.add_argument("--rounds", type=int, default=2, help="with --compare: runs of each side on the --students class")
    ap.add_argument("--plugin-students", type=int, default=4,
                    help="with --compare: students `nbgrader autograde` grades with the course's plugin (0: none)")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(args, list(argv if argv is not None else sys.argv[1:]))
    sizes = sorted({int(s) for s in args.growth.split(",") if s} | {args.students})
    cells = [int(c) for c in args.cells.split(",") if c]
    began = time.perf_counter()

    tmp = Path(tempfile.mkdtemp(prefix="autograder-bench-"))
    env = dict(os.environ, PATH=str(Path(PY).parent) + os.pathsep + os.environ.get("PATH", ""), PYTHONPATH=str(REPO))
    everyone = synthetic_class(max(sizes))
    kinds = sorted(set(everyone.values()))
    print(f"classes of {', '.join(map(str, sizes))} students; mistakes: {', '.join(kinds)}", flush=True)

    stock_students = dict(list(everyone.items())[: args.stock_students])
    stock = course_with(tmp, "stock", stock_students, plugin=False)
    res_stock = run_timed([PY, "-m", "nbgrader", "autograde", ASSIGNMENT, "--force", f"--CourseDirectory.root={stock}"],
                          stock, dict(env, JUPYTER_NO_CONFIG="1"))  # (never a personal config's course)
    stock_per = res_stock["wall"] / len(stock_students)
    print(f"stock nbgrader autograde, {len(stock_students)} students: {res_stock}", flush=True)

    classes = {}
    for n in sizes:
        course = course_with(tmp, f"class{n}", dict(list(everyone.items())[:n]))
        classes[n] = run_timed([PY, "-m", "autograder", "grade-class", str(course), "--force", "--workers",
                                str(args.workers)], REPO, env)
        print(f"grade-class, {n} students: {classes[n]}", flush=True)

    one = tmp / f"class{args.students}" / "submitted" / next(iter(everyone)) / ASSIGNMENT
    cold = [run_timed([PY, "-m", "autograder", "grade", str(one), "--json"], REPO, env) for _ in range(3)]
    print(f"cold grade of one submission: {cold}", flush=True)

    grown = {}
    for count in cells:
        folder = tmp / "grown" / f"cells{count}"
        shutil.copytree(one, folder)
        bigger(folder, count)
        grown[count] = run_timed([PY, "-m", "autograder", "grade", str(folder), "--json"], REPO, env)
        grown[count]["kib"] = sum(f.stat().st_size for f in folder.glob("*.ipynb")) / 1024
        print(f"cold grade, {count} extra cells: {grown[count]}", flush=True)

    goal = classes[args.students]
    ours_per = goal["wall"] / args.students
    cold_mid = sorted(cold, key=lambda r: r["wall"])[1]
    cold_each = ", ".join(f"{r['wall']:.2f}" for r in cold)
    load = os.getloadavg()
    extrap = f"measured on {len(stock_students)}, extrapolated"
    lines = [
        f"**Goals** ({args.students} students, {args.workers} workers): grade-class "
        f"**{ours_per:.3f} s** per submission (goal: at most 0.4 s), **{stock_per / ours_per:.0f}x** stock "
        f"nbgrader (goal: at least 50x); one cold `grade` **{cold_mid['wall']:.2f} s** (median of 3: "
        f"{cold_each} s; goal: at most 3 s).",
        "",
        HEADER,
        row(f"stock `nbgrader autograde` (Execute), {extrap}", args.students, res_stock, stock_per),
        row(f"`python -m autograder grade-class --workers {args.workers}`", args.students, goal),
        row("`python -m autograder grade` (one submission, cold start, median of 3)", 1, cold_mid),
        "",
        "Growth with the class (`grade-class`, pool start included):",
        "",
        "| students | wall time | per submission | speed-up over stock nbgrader | largest process (peak) "
        "| whole tree (peak Pss) |",
        "|---|---|---|---|---|---|",
        *[f"| {n} | {classes[n]['wall']:.1f} s | {classes[n]['wall'] / n:.3f} s | "
          f"{stock_per / (classes[n]['wall'] / n):.0f}x | {classes[n]['largest_mib']:.0f} MiB "
          f"| {classes[n]['tree_mib']:.0f} MiB |" for n in sizes],
        "",
        "Growth with one submission (`grade` of the correct submission, cold, with extra cells in 01_scores):",
        "",
        "| extra cells | notebooks' size | wall time | largest process (peak) | whole tree (peak Pss) |",
        "|---|---|---|---|---|",
        *[f"| {c} | {grown[c]['kib']:.0f} KiB | {grown[c]['wall']:.2f} s | {grown[c]['largest_mib']:.0f} MiB "
          f"| {grown[c]['tree_mib']:.0f} MiB |" for c in cells],
        "",
        f"Command: `{' '.join(['.venv/bin/python', 'benchmarks/run.py', *(argv if argv is not None else sys.argv[1:])])}`"
        f", {datetime.date.today().isoformat()}, {(time.perf_counter() - began) / 60:.1f} min.  ",
        f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; "
        f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min).  ",
        f"Exit codes: stock {res_stock['rc']}, grade-class {', '.join(str(classes[n]['rc']) for n in sizes)}, "
        f"grade {', '.join(str(r['rc']) for r in cold + list(grown.values()))}.",
    ]
    table = "\n".join(lines)
    print()
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    if args.keep:
        print(f"course directories kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
