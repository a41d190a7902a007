"""Measuring a command: wall time and the peak memory of its whole process tree, sampled from /proc;
the synthetic course directories both benchmark modes grade (benchmarks/run.py, benchmarks/compare.py)."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from examples.make_class import collect, make_course  # noqa: E402
from autograder.worker.proctree import descendants  # noqa: E402

PY = sys.executable


def _status_kib(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return _status_kib(pid, "VmRSS:")  # (a kernel without smaps_rollup: RSS, which overstates)


class Sampler:
    """Peak memory of a process tree, sampled from /proc every `interval` seconds."""

    def __init__(self, root: int, interval: float = 0.1):
        self.root, self.interval = root, interval
        self.tree_kib = self.largest_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = descendants(self.root)
            self.tree_kib = max(self.tree_kib, sum(_pss_kib(p) for p in pids))
            self.largest_kib = max([self.largest_kib] + [_status_kib(p, "VmHWM:") for p in pids])
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_timed(cmd: list[str], cwd: Path, env: dict) -> dict:
    """Run cmd (its output discarded); wall seconds, peak memory of its tree (MiB), exit code."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with Sampler(proc.pid) as sampler:
        rc = proc.wait()
    return {"wall": time.perf_counter() - started, "tree_mib": sampler.tree_kib / 1024,
            "largest_mib": sampler.largest_kib / 1024, "rc": rc}


def course_with(base: Path, name: str, students: dict[str, str], plugin: bool = True) -> Path:
    course = make_course(base / name, plugin=plugin)
    collect(course, students)
    return course
