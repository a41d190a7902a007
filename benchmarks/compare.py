"""Side by side: this tree's grading against another revision's, on identical classes, in one run.

    .venv/bin/python benchmarks/run.py --compare REV [--students 40] [--growth 200] [--rounds 2]
                                      [--stock-students 2] [--plugin-students 4] [--out FILE]

REV (any git revision: 659af98, main~3, a branch) is extracted with `git archive` into a temporary
folder and run with the same Python (the same venv) as this tree. Each class is built once, by this
tree's examples/make_class.py, and copied for each side, so both grade the same notebooks. Runs
alternate (this tree, REV, REV, this tree, ...) so that a change of the machine's load falls on both.
Printed: per submission (median over the rounds), the peak memory of the whole process tree (Pss)
and of its largest process, and the ratio this tree / REV; stock `nbgrader autograde` and the
nbgrader path (`nbgrader autograde` with the course's plugin) on a few students each; one cold
`grade` of each side against one `python -c "import torch"`, all measured in this run.
"""
from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.measure import PY, course_with, run_timed  # noqa: E402
from examples.make_class import synthetic_class  # noqa: E402
from autograder.foundation.spec import ASSIGNMENT  # noqa: E402


def extract(rev: str, into: Path) -> Path:
    """The files of `rev` (as committed) in a new folder under `into`."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    data = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", sha], check=True,
                          capture_output=True).stdout
    tree = into / f"rev-{sha}"
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(tree)
    compile_tree(tree)
    return tree


def compile_tree(tree: Path) -> None:
    """The bytecode of `tree`'s packages, written now: under PYTHONDONTWRITEBYTECODE (CI's setting) a module whose
    .pyc is missing or older than its source is compiled again by every process that imports it, which once cost
    this tree's side of the comparison 66 modules per process start."""
    subprocess.run([PY, "-m", "compileall", "-q", str(tree / "autograder"), str(tree / "examples")], check=False,
                   stdout=subprocess.DEVNULL)


def side_env(tree: Path) -> dict:
    return dict(os.environ, PATH=str(Path(PY).parent) + os.pathsep + os.environ.get("PATH", ""),
                PYTHONPATH=str(tree), JUPYTER_NO_CONFIG="1")


def median_run(runs: list[dict]) -> dict:
    """The run of median wall time; memory as the largest over the runs."""
    mid = sorted(runs, key=lambda r: r["wall"])[(len(runs) - 1) // 2]
    cpus = sorted(r["cpu"] for r in runs if r.get("cpu") is not None)
    return dict(mid, tree_mib=max(r["tree_mib"] for r in runs), largest_mib=max(r["largest_mib"] for r in runs),
                each=[r["wall"] for r in runs], rcs=[r["rc"] for r in runs],
                cpu=cpus[(len(cpus) - 1) // 2] if cpus else None, each_cpu=[r.get("cpu") for r in runs])


def alternate(sides: dict[str, Path], rounds: int, job, flip: bool = False) -> dict[str, dict]:
    """job(name, tree) for each side, `rounds` times, in the order A B, B A, A B, ... (B A, A B, ... with `flip`)."""
    names = list(sides)[::-1] if flip else list(sides)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            runs[name].append(job(name, sides[name]))
            cpu = runs[name][-1].get("cpu")
            print(f"  {name} round {r + 1}: {runs[name][-1]['wall']:.2f} s, tree {runs[name][-1]['tree_mib']:.0f} MiB,"
                  f"{f' CPU {cpu:.2f} s,' if cpu is not None else ''} rc {runs[name][-1]['rc']}", flush=True)
    return {n: median_run(rs) for n, rs in runs.items()}


def grade_class(course: Path, tree: Path, workers: int) -> dict:
    return run_timed([PY, "-m", "autograder", "grade-class", str(course), "--force", "--workers", str(workers)],
                     tree, side_env(tree))


def nbgrader(course: Path, tree: Path) -> dict:
    return run_timed([PY, "-m", "nbgrader", "autograde", ASSIGNMENT, "--force", f"--CourseDirectory.root={course}"],
                     course, side_env(tree))


def compare(args, argv: list[str]) -> int:
    began = time.perf_counter()
    load_start = os.getloadavg()
    tmp = Path(__import__("tempfile").mkdtemp(prefix="autograder-compare-"))
    other = extract(args.compare, tmp)
    compile_tree(REPO)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    this_name = f"this tree ({head}{' + changes' if dirty else ''})"
    other_name = f"{args.compare} ({other.name[4:]})"
    sides = {this_name: REPO, other_name: other}
    sizes = sorted({int(s) for s in args.growth.split(",") if s} | {args.students})
    everyone = synthetic_class(max(sizes))
    key = {this_name: "a", other_name: "b"}
    print(f"comparing {this_name} with {other_name}; classes of {', '.join(map(str, sizes))}", flush=True)

    # Every class built before the first run (a build's aftermath never lands on one side's run), and each size
    # begun by the other side than the size before it: with one run per size, the side that always ran first paid
    # alone for whatever came before it (once 58.7 s against 36.6 s for the same tree and class).
    courses = {n: {name: course_with(tmp, f"class{n}-{key[name]}", dict(list(everyone.items())[:n])) for name in sides}
               for n in sizes}
    classes: dict[int, dict[str, dict]] = {}
    flip = False
    for n in sizes:
        print(f"grade-class, {n} students:", flush=True)
        rounds = args.rounds if n == args.students else 1
        classes[n] = alternate(sides, rounds, flip=flip,
                               job=lambda name, tree, n=n: grade_class(courses[n][name], tree, args.workers))
        flip = not flip

    print("one cold grade, and `import torch`:", flush=True)
    one = tmp / f"class{args.students}-a" / "submitted" / next(iter(everyone)) / ASSIGNMENT
    torch_sides = dict(sides, **{"import torch": REPO})
    cold = alternate(torch_sides, 3, lambda name, tree: run_timed(
        [PY, "-c", "import torch"] if name == "import torch" else
        [PY, "-m", "autograder", "grade", str(one), "--json"], tree, side_env(tree)))

    nb: dict[str, dict] = {}
    if args.plugin_students:
        few = dict(list(everyone.items())[: args.plugin_students])
        print(f"nbgrader autograde with the course's plugin, {len(few)} students:", flush=True)
        plugin_courses = {name: course_with(tmp, f"plugin-{key[name]}", few) for name in sides}
        nb = alternate(sides, 1, lambda name, tree: nbgrader(plugin_courses[name], tree))
        nb = {name: dict(r, per=r["wall"] / len(few)) for name, r in nb.items()}
    stock = None
    if args.stock_students:
        few = dict(list(everyone.items())[: args.stock_students])
        print(f"stock nbgrader autograde, {len(few)} students:", flush=True)
        stock = nbgrader(course_with(tmp, "stock", few, plugin=False), REPO)
        stock["per"] = stock["wall"] / len(few)
        print(f"  {stock}", flush=True)

    load = os.getloadavg()
    lines = [f"| run | {this_name} | {other_name} | ratio |", "|---|---|---|---|"]
    a, b = this_name, other_name

    def pair(label: str, x: float, y: float, unit: str, fmt: str = ".3f") -> str:
        return f"| {label} | {x:{fmt}} {unit} | {y:{fmt}} {unit} | {x / y:.2f}x |"

    for n in sizes:
        ra, rb = classes[n][a], classes[n][b]
        runs = f" (median of {len(ra['each'])})" if len(ra["each"]) > 1 else ""
        lines.append(pair(f"grade-class, {n} students, per submission{runs}", ra["wall"] / n, rb["wall"] / n, "s"))
        if ra.get("cpu") is not None and rb.get("cpu") is not None:
            lines.append(pair(f"grade-class, {n} students, CPU of the whole tree per submission{runs}",
                              ra["cpu"] / n, rb["cpu"] / n, "s"))
        lines.append(pair(f"grade-class, {n} students, whole tree (peak Pss)", ra["tree_mib"], rb["tree_mib"], "MiB",
                          ".0f"))
        lines.append(pair(f"grade-class, {n} students, largest process (peak)", ra["largest_mib"],
                          rb["largest_mib"], "MiB", ".0f"))
        if stock:
            lines.append(f"| grade-class, {n} students, speed-up over stock nbgrader | "
                         f"{stock['per'] / (ra['wall'] / n):.0f}x | {stock['per'] / (rb['wall'] / n):.0f}x | |")
    torch_s = cold["import torch"]["wall"]
    lines.append(pair("one cold `grade` (median of 3)", cold[a]["wall"], cold[b]["wall"], "s", ".2f"))
    lines.append(f"| one cold `grade` / one `import torch` ({torch_s:.2f} s, median of 3) | "
                 f"{cold[a]['wall'] / torch_s:.2f}x | {cold[b]['wall'] / torch_s:.2f}x | |")
    if all(cold[k].get("cpu") for k in (a, b, "import torch")):
        torch_cpu = cold["import torch"]["cpu"]
        lines.append(pair("one cold `grade`, CPU of the whole tree (median of 3)", cold[a]["cpu"], cold[b]["cpu"], "s",
                          ".2f"))
        lines.append(f"| one cold `grade` / one `import torch`, CPU ({torch_cpu:.2f} s) | "
                     f"{cold[a]['cpu'] / torch_cpu:.2f}x | {cold[b]['cpu'] / torch_cpu:.2f}x | |")
    if nb:
        lines.append(pair(f"`nbgrader autograde` with the plugin, {args.plugin_students} students, per submission",
                          nb[a]["per"], nb[b]["per"], "s"))
        lines.append(pair("`nbgrader autograde` with the plugin, whole tree (peak Pss)", nb[a]["tree_mib"],
                          nb[b]["tree_mib"], "MiB", ".0f"))
        if stock:
            lines.append(f"| `nbgrader autograde` with the plugin, speed-up over stock nbgrader | "
                         f"{stock['per'] / nb[a]['per']:.1f}x | {stock['per'] / nb[b]['per']:.1f}x | |")
    if stock:
        lines.append(f"| stock `nbgrader autograde` (Execute), {args.stock_students} students, per submission "
                     f"| {stock['per']:.2f} s | (same run) | |")
    every = [r for n in sizes for r in classes[n].values()] + list(cold.values()) + list(nb.values())
    lines += [
        "",
        f"Command: `.venv/bin/python benchmarks/run.py {' '.join(argv)}`, "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{(time.perf_counter() - began) / 60:.1f} min.  ",
        f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; "
        f"load average (1 / 5 / 15 min) at the start {load_start[0]:.1f} / {load_start[1]:.1f} / {load_start[2]:.1f},"
        f" at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.  ",
        "Each run's CPU times: " + "; ".join(
            f"{name} {', '.join(f'{c:.1f}' for c in r['each_cpu'] if c is not None)}" for n in sizes
            for name, r in classes[n].items()) + ".  ",
        "Each run's wall times: " + "; ".join(
            f"{name} {', '.join(f'{w:.1f}' for w in r['each'])}" for n in sizes for name, r in classes[n].items())
        + ".  ",
        f"Exit codes: {sorted({c for r in every for c in r.get('rcs', [r['rc']])} | ({stock['rc']} if stock else set()))}.",
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
    return 0 if all(c == 0 for r in every for c in r.get("rcs", [r["rc"]])) else 1
