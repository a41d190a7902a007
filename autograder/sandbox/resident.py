"""Resident memory of a worker's process tree, sampled by the trusted side from outside.

The live-tensor meter runs inside the worker, next to the student's code, so student code
can switch it off (a TorchDispatchMode can be disabled in one line). The kernel's count of
the pages a process holds cannot be switched off from inside. While a measured call runs,
`ResidentPeak` reads /proc/<pid>/status of the worker and of each of its descendants about
every millisecond, and keeps the largest total of anonymous and shared-memory pages
(RssAnon + RssShmem). File pages, such as the torch library's code, are left out: they come
and go with no tensor behind them. The figure is the growth over the total just before the
call; a process forked during the call counts whole.

The descendants are found by a scan of /proc (worker/proctree.py) every `TREE_REFRESH`
seconds rather than every sample.
"""
from __future__ import annotations

import threading
import time

from ..worker.proctree import descendants

INTERVAL = 0.001  # seconds between samples
TREE_REFRESH = 0.02  # seconds between scans for new descendants
_FIELDS = (b"RssAnon:", b"RssShmem:")


def resident_bytes(pid: int) -> int | None:
    """Anonymous + shared-memory resident bytes of one process; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read()
    except OSError:
        return None
    total, found = 0, False
    for line in text.splitlines():
        if line.startswith(_FIELDS):
            total += int(line.split()[1]) * 1024  # the kernel writes kB
            found = True
    return total if found else None


def tree_resident(pids: list[int]) -> int | None:
    sizes = [resident_bytes(pid) for pid in pids]
    known = [s for s in sizes if s is not None]
    return sum(known) if known else None


class ResidentPeak:
    """with ResidentPeak(worker_pid) as peak: <the call>;  peak.growth (bytes, or None if unreadable)"""

    def __init__(self, pid: int, interval: float = INTERVAL):
        self.pid, self.interval = pid, interval
        self.baseline: int | None = None
        self.peak: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resident-peak", daemon=True)

    @property
    def growth(self) -> int | None:
        if self.baseline is None or self.peak is None:
            return None
        return max(self.peak - self.baseline, 0)

    def _sample(self, pids: list[int]) -> None:
        total = tree_resident(pids)
        if total is not None:
            self.peak = total if self.peak is None else max(self.peak, total)
            self.samples += 1

    def _run(self) -> None:
        pids, refreshed = descendants(self.pid), time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() - refreshed > TREE_REFRESH:
                pids, refreshed = descendants(self.pid), time.monotonic()
            self._sample(pids)
            self._stop.wait(self.interval)
        self._sample(descendants(self.pid))

    def __enter__(self) -> "ResidentPeak":
        self.baseline = tree_resident(descendants(self.pid))
        self.peak = self.baseline
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
