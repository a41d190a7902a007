"""Measuring a command: wall time and the peak memory of its whole process tree, sampled from /proc, and, where
this machine lets us make a cgroup (cgroup v1's cpuacct, as root), the CPU time of every process the command ever
started (exited workers and zygotes included): on a machine shared with other work, wall time moves with their
load, CPU time much less. The synthetic course directories both benchmark modes grade (benchmarks/run.py,
benchmarks/compare.py)."""
from __future__ import annotations

import itertools
import os
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
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_runs = itertools.count()


class CpuGroup:
    """A cpuacct cgroup of its own for one command (`preexec`, in the child before exec, moves it in; every process
    it starts is then counted); `seconds` once it ended, None where there is no such cgroup to make."""

    def __init__(self):
        self.path: Path | None = CPUACCT / f"autograder-bench-{os.getpid()}-{next(_runs)}"
        try:
            self.path.mkdir()
        except OSError:
            self.path = None

    def preexec(self) -> None:
        if self.path is not None:
            try:
                (self.path / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                pass

    def seconds(self) -> float | None:
        if self.path is None:
            return None
        try:
            return int((self.path / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None
        finally:
            for _ in range(50):  # (a process of the tree still exiting holds the cgroup for a moment)
                try:
                    self.path.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


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
    """Run cmd (its output discarded); wall seconds, peak memory of its tree (MiB), exit code, CPU seconds of every
    process it started (None: no cgroup here)."""
    group = CpuGroup()
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=group.preexec if group.path else None)
    with Sampler(proc.pid) as sampler:
        rc = proc.wait()
    wall = time.perf_counter() - started
    return {"wall": wall, "tree_mib": sampler.tree_kib / 1024, "largest_mib": sampler.largest_kib / 1024, "rc": rc,
            "cpu": group.seconds()}


def course_with(base: Path, name: str, students: dict[str, str], plugin: bool = True) -> Path:
    course = make_course(base / name, plugin=plugin)
    collect(course, students)
    return course
