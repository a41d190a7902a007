"""Where one warm submission's grading time goes, and how many round trips it makes.

    .venv/bin/python benchmarks/breakdown.py [SUBMISSION] [--runs 8] [--cprofile N]

Grades SUBMISSION (default: the solved notebooks, solutions/notebooks/) with one warm
`Grader` in this process, `--runs` times, and prints, per submission:
  * the requests to the sandboxed worker, by kind, and the bytes framed each way;
  * wall time split into buckets (starting the worker, loading the code, framing on the
    trusted side, waiting for the worker, the checks' own arithmetic, pytest and the rest),
    the median over the runs, with the CPU time of this process and of the worker;
  * with --cprofile N, the N functions with the most cumulative time in one more run.
The buckets come from timers around the grader's own functions (so they do not depend on
the machine's load the way wall time does; counts and bytes do not depend on it at all).
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

from autograder import check, pool, session  # noqa: E402
from autograder.grade import Grader  # noqa: E402
from autograder.worker import protocol  # noqa: E402
from autograder.worker.proctree import descendants  # noqa: E402


class Tally:
    """Counters and timers filled by the wrappers below, reset before each run."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.kinds: collections.Counter = collections.Counter()
        self.seconds: collections.Counter = collections.Counter()
        self.targets: collections.Counter = collections.Counter()
        self.bytes_out = self.bytes_in = 0
        self.worker_cpu = 0.0


def _timed(tally: Tally, bucket: str, fn):
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            tally.seconds[bucket] += time.perf_counter() - started

    return wrapper


def _cpu(pid: int) -> float:
    """utime + stime of a live process, in seconds (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _worker_cpu(pid: int) -> float:
    """CPU seconds of a worker and every process below it (in a PID namespace, the worker proper is
    the child of the forked process)."""
    return sum(_cpu(p) for p in descendants(pid))


@contextlib.contextmanager
def instrumented(tally: Tally):
    """Wrap the grader's functions with counters and timers; undone on exit."""
    originals = []

    def patch(owner, name, new):
        originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, new)

    send, recv = protocol.send, protocol.recv
    framing = getattr(protocol, "encode_frame", None)

    def counted_send(sock, obj):
        started = time.perf_counter()
        result = send(sock, obj)
        tally.seconds["frame out (trusted)"] += time.perf_counter() - started
        return result

    def counted_recv(sock, *args, **kwargs):
        return recv(sock, *args, **kwargs)

    request = pool.WorkerProcess.request

    trees: dict[int, list[int]] = {}

    def tree_cpu(pid: int) -> float:
        if pid not in trees:
            trees[pid] = descendants(pid)
        return sum(_cpu(p) for p in trees[pid])

    def timed_request(self, message, timeout):
        tally.kinds[message.get("kind")] += 1
        before = tree_cpu(self.pid)
        started = time.perf_counter()
        try:
            return request(self, message, timeout)
        finally:
            elapsed = time.perf_counter() - started
            used = tree_cpu(self.pid) - before
            kind = message.get("kind")
            if kind != "load":
                tally.seconds["round trips"] += elapsed
                tally.seconds["worker cpu in requests"] += used
            else:
                tally.seconds["worker cpu start+load"] += tree_cpu(self.pid)
            tally.targets[f"{kind} {message.get('target', '')}"] += used

    kill = pool.WorkerProcess.kill

    def counting_kill(self):
        if self.alive:
            tally.worker_cpu += _worker_cpu(self.pid)
        return kill(self)

    sendall = None
    if framing is None:
        import socket  # noqa: PLC0415

        sendall = socket.socket.sendall

        def counting_sendall(sock, data, *args):
            tally.bytes_out += len(data)
            return sendall(sock, data, *args)

        patch(socket.socket, "sendall", counting_sendall)
    recv_exact = protocol.recv_exact

    def counting_recv_exact(sock, n, *args, **kwargs):
        tally.bytes_in += n
        return recv_exact(sock, n, *args, **kwargs)

    patch(protocol, "send", counted_send)
    patch(protocol, "recv", counted_recv)
    patch(protocol, "recv_exact", counting_recv_exact)
    patch(pool.WorkerProcess, "request", timed_request)
    patch(pool.WorkerProcess, "kill", counting_kill)
    patch(pool, "start_worker", _timed(tally, "start worker + load code", pool.start_worker))
    patch(session, "start_worker", _timed(tally, "start worker + load code", session.start_worker))
    patch(check, "run_checks", _timed(tally, "run_checks", check.run_checks))
    try:
        yield
    finally:
        for owner, name, value in reversed(originals):
            setattr(owner, name, value)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("submission", nargs="?", default=str(REPO / "solutions" / "notebooks"))
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--cprofile", type=int, default=0, help="print the N top functions by cumulative time")
    args = ap.parse_args(argv)

    tally = Tally()
    rows = []
    with Grader() as grader, instrumented(tally):
        grader.grade(args.submission)  # warm-up: the zygote imported torch, the checks are imported
        for _ in range(args.runs):
            tally.reset()
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            result = grader.grade(args.submission)
            wall = time.perf_counter() - started
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            rows.append({"wall": wall, "cpu": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
                         "worker_cpu": tally.worker_cpu, "kinds": dict(tally.kinds), "out": tally.bytes_out,
                         "in": tally.bytes_in, "targets": dict(tally.targets),
                         **{f"t:{k}": v for k, v in tally.seconds.items()}})
        if args.cprofile:
            prof = cProfile.Profile()
            prof.enable()
            grader.grade(args.submission)
            prof.disable()
    med = {k: statistics.median(r.get(k, 0.0) for r in rows) for k in rows[0] if k not in ("kinds", "targets")}
    kinds = rows[-1]["kinds"]
    print(f"submission: {args.submission}  score {result.score:g}/{result.max_score:g}  runs {args.runs}  "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"requests per submission: {sum(kinds.values())}  ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    print(f"bytes framed: {med['out'] / 1024:.0f} KiB to the worker, {med['in'] / 1024:.0f} KiB back")
    print(f"wall {med['wall'] * 1000:.0f} ms (median); CPU: this process {med['cpu'] * 1000:.0f} ms, "
          f"worker {med['worker_cpu'] * 1000:.0f} ms (of which starting and loading "
          f"{med.get('t:worker cpu start+load', 0) * 1000:.0f} ms)")
    start = med.get("t:start worker + load code", 0.0)
    trips = med.get("t:round trips", 0.0)
    frame = med.get("t:frame out (trusted)", 0.0)
    checks = med.get("t:run_checks", 0.0)
    buckets = [
        ("start a sandboxed worker and load the code", start),
        ("round trips to the worker (framing both ways + the worker's work)", trips),
        ("  of which: framing the requests on the trusted side", frame),
        ("  of which: the worker's CPU (framing, student code, its encoding of the result)",
         med.get("t:worker cpu in requests", 0.0)),
        ("checks' arithmetic, pytest, scoring (run_checks minus round trips)", checks - trips),
        ("the rest (extract, static scan, closing the worker)", med["wall"] - checks - start),
    ]
    for label, seconds in buckets:
        print(f"  {seconds * 1000:7.0f} ms  {label}")
    top = collections.Counter(rows[-1]["targets"]).most_common(6)
    print("  the worker's CPU by request target (last run): "
          + ", ".join(f"{name.strip()} {sec * 1000:.0f} ms" for name, sec in top))
    if args.cprofile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
