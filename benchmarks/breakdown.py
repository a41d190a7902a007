"""Where one warm submission's grading time goes, and how many round trips it makes.

    .venv/bin/python benchmarks/breakdown.py [SUBMISSION] [--runs 8] [--cprofile N]

Grades SUBMISSION (default: the solved notebooks, solutions/notebooks/) with one warm
`Grader` in this process, `--runs` times, and prints, per submission:
  * the round trips to the sandboxed worker (requests sent), by kind, with the steps a batch
    carried, and the bytes framed each way: counts that do not depend on the machine's load;
  * the CPU time of this (trusted) process and of the worker's process tree;
  * wall time split into buckets (starting the worker and loading the code, waiting for
    replies, framing requests, the checks' own work), the median over the runs;
  * with --cprofile N, the N functions with the most cumulative time in one more run.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import os
import pstats
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.grading import check  # noqa: E402
from autograder.sandbox import pool  # noqa: E402
from autograder.grading.grade import Grader  # noqa: E402
from autograder.worker import protocol  # noqa: E402
from autograder.worker.proctree import descendants  # noqa: E402


class Tally:
    """Counters and timers filled by the wrappers below, reset before each run."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.kinds: collections.Counter = collections.Counter()
        self.seconds: collections.Counter = collections.Counter()
        self.steps = self.bytes_out = self.bytes_in = 0
        self.worker_cpu = 0.0
        self.worker_faults = 0


def cpu_and_faults(pid: int) -> tuple[float, int]:
    """(utime + stime, minor page faults) of a live process ((0, 0) once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[7])


def tree_cpu(pid: int) -> tuple[float, int]:
    """CPU seconds and page faults of a worker and every process below it (in a PID namespace, the
    worker proper is the child of the forked process)."""
    found = [cpu_and_faults(p) for p in descendants(pid)]
    return sum(c for c, _ in found), sum(f for _, f in found)


@contextlib.contextmanager
def instrumented(tally: Tally):
    """Wrap the grader's functions with counters and timers; undone on exit."""
    originals = []

    def patch(owner, name, new):
        originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, new)

    def timed(bucket: str, fn):
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                tally.seconds[bucket] += time.perf_counter() - started

        return wrapper

    send, receive, kill, encode = (pool.WorkerProcess.send, pool.WorkerProcess.receive, pool.WorkerProcess.kill,
                                   protocol.encode)

    def counted_send(self, message, deadline):
        kind = message.get("kind")
        tally.kinds[kind] += 1
        tally.steps += sum(len(job) for job in message["jobs"]) if kind == "batch" else 1
        return send(self, message, deadline)

    def counted_encode(message):
        started = time.perf_counter()
        frame = encode(message)
        tally.seconds["framing requests"] += time.perf_counter() - started
        tally.bytes_out += len(frame)
        return frame

    def counted_receive(self, deadline):
        started = time.perf_counter()
        try:
            return receive(self, deadline)
        finally:
            tally.seconds["waiting for and reading replies"] += time.perf_counter() - started

    def counting_recv_exact(sock, n, *args, **kwargs):
        tally.bytes_in += n
        return recv_exact(sock, n, *args, **kwargs)

    def counting_kill(self):
        if self.alive:
            cpu, faults = tree_cpu(self.pid)
            tally.worker_cpu += cpu
            tally.worker_faults += faults
        return kill(self)

    recv_exact = protocol.recv_exact
    patch(pool.WorkerProcess, "send", counted_send)
    patch(pool.WorkerProcess, "receive", counted_receive)
    patch(pool.WorkerProcess, "kill", counting_kill)
    patch(protocol, "recv_exact", counting_recv_exact)
    patch(protocol, "encode", counted_encode)
    patch(pool, "start_worker", timed("starting a worker, loading the code", pool.start_worker))
    from autograder.sandbox import session  # noqa: PLC0415 - patched where it is looked up

    patch(session, "start_worker", timed("starting a worker, loading the code", session.start_worker))
    patch(check, "run_checks", timed("run_checks", check.run_checks))
    try:
        yield
    finally:
        for owner, name, value in reversed(originals):
            setattr(owner, name, value)


def measure(submission: str, runs: int, cprofile: int) -> tuple[list[dict], object, pstats.Stats | None]:
    tally, rows, stats = Tally(), [], None
    with Grader() as grader, instrumented(tally):
        grader.grade(submission)  # warm-up: the zygote imported torch, the checks are imported
        for _ in range(runs):
            tally.reset()
            before = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            result = grader.grade(submission)
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_SELF)
            rows.append({"wall": wall, "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                         "worker_cpu": tally.worker_cpu, "worker_faults": tally.worker_faults, "kinds": dict(tally.kinds), "steps": tally.steps,
                         "out": tally.bytes_out, "in": tally.bytes_in,
                         **{f"t:{k}": v for k, v in tally.seconds.items()}})
        if cprofile:
            prof = cProfile.Profile()
            prof.enable()
            grader.grade(submission)
            prof.disable()
            stats = pstats.Stats(prof)
    return rows, result, stats


def report(rows: list[dict], result, submission: str) -> None:
    med = {k: statistics.median(r.get(k, 0.0) for r in rows) for k in rows[0] if k != "kinds"}
    kinds = rows[-1]["kinds"]
    load = med.get("t:starting a worker, loading the code", 0.0)
    waiting = med.get("t:waiting for and reading replies", 0.0)
    framing = med.get("t:framing requests", 0.0)
    checks = med.get("t:run_checks", 0.0)
    print(f"submission: {submission}  score {result.score:g}/{result.max_score:g}  runs {len(rows)}  "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"round trips per submission: {sum(kinds.values())} ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}),"
          f" carrying {rows[-1]['steps']} requests")
    print(f"bytes framed: {med['out'] / 1024:.0f} KiB to the worker, {med['in'] / 1024:.0f} KiB back")
    print(f"CPU: this process {med['cpu'] * 1000:.0f} ms, the worker {med['worker_cpu'] * 1000:.0f} ms "
          f"({med['worker_faults']:.0f} page faults)")
    print(f"wall {med['wall'] * 1000:.0f} ms (median), of which:")
    for label, seconds in (
        ("starting a sandboxed worker and loading the code", load),
        ("waiting for and reading the worker's replies", waiting),
        ("framing the requests (this process)", framing),
        ("the checks' own work: pytest, re-computations, scoring", checks - waiting - framing),
        ("the rest: extracting the code, the static scan, closing the worker", med["wall"] - checks - load),
    ):
        print(f"  {seconds * 1000:7.0f} ms  {label}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("submission", nargs="?", default=str(REPO / "solutions" / "notebooks"))
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--cprofile", type=int, default=0, help="print the N top functions by cumulative time")
    args = ap.parse_args(argv)
    rows, result, stats = measure(args.submission, args.runs, args.cprofile)
    report(rows, result, args.submission)
    if stats is not None:
        stats.sort_stats("cumulative").print_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
