"""Benchmark: stock `nbgrader autograde` against `python -m autograder grade-class`, same submissions.

    .venv/bin/python benchmarks/run.py [--students 40] [--stock-students 40] [--workers N] [--out FILE]

Builds a synthetic class (examples/make_class.py: the reference and typical mistakes, as
nbgrader submitted/ notebooks) in a temporary course directory, then times, each in its own
child process:
  * stock nbgrader autograde (its default Execute preprocessor: a kernel per notebook),
    on --stock-students of the students (fewer than all: the time is extrapolated, and said so);
  * grade-class on all the students (--force, --workers N, default one per core);
  * one `python -m autograder grade <submission folder>`.
Memory: the peak of the summed RSS of the command's whole process tree, sampled from /proc
every 0.1 s, and the largest single process (getrusage(RUSAGE_CHILDREN).ru_maxrss).
Prints a Markdown table (docs/benchmark.md holds the last run).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from examples.make_class import collect, make_course, synthetic_class  # noqa: E402
from autograder.spec import ASSIGNMENT  # noqa: E402
from autograder.worker.proctree import descendants  # noqa: E402

PY = sys.executable


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(root: int) -> int:
    return sum(_rss_kib(pid) for pid in descendants(root))


def run_timed(cmd: list[str], cwd: Path, env: dict | None = None) -> dict:
    """Run cmd; wall seconds, peak summed tree RSS (MiB), largest process RSS (MiB), exit code."""
    wrapper = ("import resource, subprocess, sys\n"
               "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)\n")
    started = time.perf_counter()
    proc = subprocess.Popen([PY, "-c", wrapper, *cmd], cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
    peak = 0
    stop = threading.Event()

    def sample():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_rss_kib(proc.pid))
            stop.wait(0.1)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, _ = proc.communicate()
    wall = time.perf_counter() - started
    stop.set()
    t.join()
    maxrss, rc = out.split()
    return {"wall": wall, "tree_mib": peak / 1024, "max_proc_mib": int(maxrss) / 1024, "rc": int(rc)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=40)
    ap.add_argument("--stock-students", type=int, default=40, help="students stock nbgrader grades (extrapolated)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", help="also write the Markdown table here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary course directories")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="autograder-bench-"))
    env = dict(os.environ, PATH=str(Path(PY).parent) + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=str(REPO))
    students = synthetic_class(args.students)
    ours = make_course(tmp / "ours")
    collect(ours, students)
    stock_names = dict(list(students.items())[: args.stock_students])
    stock = make_course(tmp / "stock", plugin=False)
    collect(stock, stock_names)
    kinds = sorted(set(students.values()))
    print(f"class: {len(students)} students, mistakes: {', '.join(kinds)}", flush=True)

    res_stock = run_timed([PY, "-m", "nbgrader", "autograde", ASSIGNMENT, "--force"], stock, env)
    print(f"stock nbgrader autograde, {len(stock_names)} students: {res_stock}", flush=True)
    res_ours = run_timed([PY, "-m", "autograder", "grade-class", str(ours), "--force", "--workers",
                        str(args.workers)], REPO, env)
    print(f"grade-class, {len(students)} students: {res_ours}", flush=True)
    one = ours / "submitted" / next(iter(students)) / ASSIGNMENT
    res_one = run_timed([PY, "-m", "autograder", "grade", str(one), "--json"], REPO, env)
    print(f"grade one submission: {res_one}", flush=True)

    n, ns = len(students), len(stock_names)
    stock_per = res_stock["wall"] / ns
    ours_per = res_ours["wall"] / n
    extrap = "" if ns == n else f" (measured on {ns}, extrapolated to {n})"
    rows = [
        "| run | submissions | wall time | per submission | peak RSS, whole tree | largest process |",
        "|---|---|---|---|---|---|",
        f"| stock `nbgrader autograde` (Execute){extrap} | {n} | {stock_per * n:.1f} s | {stock_per:.2f} s "
        f"| {res_stock['tree_mib']:.0f} MiB | {res_stock['max_proc_mib']:.0f} MiB |",
        f"| `python -m autograder grade-class --workers {args.workers}` | {n} | {res_ours['wall']:.1f} s "
        f"| {ours_per:.2f} s | {res_ours['tree_mib']:.0f} MiB | {res_ours['max_proc_mib']:.0f} MiB |",
        f"| `python -m autograder grade` (one submission, cold start) | 1 | {res_one['wall']:.1f} s | "
        f"{res_one['wall']:.2f} s | {res_one['tree_mib']:.0f} MiB | {res_one['max_proc_mib']:.0f} MiB |",
    ]
    load = os.getloadavg()
    table = "\n".join(rows) + (
        f"\n\nSpeed-up of grade-class over stock nbgrader: **{stock_per / ours_per:.1f}x** per submission.  \n"
        f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; "
        f"load average at the end {load[0]:.1f} (other jobs share this machine).  \n"
        f"Exit codes: stock {res_stock['rc']}, grade-class {res_ours['rc']}, grade {res_one['rc']}.")
    print()
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"course directories kept in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
