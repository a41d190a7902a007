"""autograder/sandbox/resident.py: the trusted side's outside count of a worker's resident memory."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from autograder.sandbox.resident import ResidentPeak, resident_bytes
from autograder.worker.proctree import descendants

# A parent that forks a child; on a line on stdin the child touches `MIB` MiB for 0.2 s, frees
# them, and says "done". Plain python (no torch), so the test costs a fraction of a second.
MIB = 48
TREE = f"""
import os, sys, time
r, w = os.pipe()
if os.fork() == 0:
    sys.stdin.readline()
    block = bytearray({MIB} * 2**20)  # zero-filled: every page is written
    time.sleep(0.2)
    del block
    os.write(w, b"x")
    time.sleep(30)
    os._exit(0)
print("ready", flush=True)
os.read(r, 1)
print("done", flush=True)
time.sleep(30)
"""


@pytest.fixture
def tree():
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    for pid in reversed(descendants(proc.pid)):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    proc.wait()


def test_descendants_finds_the_forked_child(tree):
    for _ in range(100):  # the child exists once "ready" was printed, but give /proc a moment
        found = descendants(tree.pid)
        if len(found) == 2:
            break
        time.sleep(0.01)
    assert found[0] == tree.pid and len(found) == 2, found


def test_resident_bytes_reads_a_live_process_and_none_for_a_missing_one(tree):
    assert resident_bytes(tree.pid) > 0
    assert resident_bytes(2**22 + 12345) is None  # above the largest pid the kernel hands out


def test_a_short_peak_in_a_child_process_is_counted_whole(tree):
    with ResidentPeak(tree.pid) as peak:
        tree.stdin.write("go\n")
        tree.stdin.flush()
        assert tree.stdout.readline().strip() == "done"
    assert peak.samples > 10
    assert peak.growth >= (MIB - 4) * 2**20, f"grew by {peak.growth / 2**20:.1f} MiB, expected about {MIB} MiB"


def test_an_idle_process_shows_almost_no_growth(tree):
    with ResidentPeak(tree.pid) as peak:
        time.sleep(0.1)
    assert peak.growth is not None and peak.growth < 4 * 2**20, peak.growth


def test_growth_is_none_when_the_process_cannot_be_read():
    with ResidentPeak(2**22 + 12345) as peak:
        time.sleep(0.01)
    assert peak.growth is None
