"""grade-class's seed: one zygote started by exec that forks the zygote of each grading process (issue 35).

The seed imports torch once for the class; each forked zygote serves one grading process over a socket only that
process holds, confines its workers exactly as a zygote started by exec does, and ends, with every worker it forked,
once that socket closes (the grading process ended, killed at a deadline or with grade-class).
"""
from __future__ import annotations

import os
import time

import pytest

from autograder.foundation.limits import Limits
from autograder.sandbox import pool, prestart
from autograder.worker import protocol, proctree
from autograder.worker.sandbox import SandboxConfig


def parent_of(pid: int) -> int:
    stat = open(f"/proc/{pid}/stat", "rb").read()
    return int(stat[stat.rfind(b")") + 2:].split()[1])


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(proctree.alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def seed():
    control, proc = prestart.launch()
    yield control, proc
    control.close()
    proc.kill()
    proc.wait()


def adopted(control) -> pool.Zygote:
    """A Zygote over a socket to a forked zygote, as a grading process of grade-class holds it."""
    prestart.adopt(control.detach())
    return pool.Zygote()


def test_the_seeds_request_is_the_protocols_own_frame_built_without_torch():
    for message in ({"kind": "zygote"}, {"kind": "ping", "text": "é ü", "n": [1, 2.5, None]}):
        assert prestart.plain_frame(message) == protocol.encode(message)


def test_a_forked_zygote_is_the_seeds_child_and_its_worker_comes_up_with_every_layer_on(seed):
    control, proc = seed
    zygote = adopted(prestart.zygote_from(control))
    zygote.ping()
    limits = Limits()
    worker = zygote.spawn(SandboxConfig(memory_bytes=limits.memory_bytes, cpu_seconds=limits.cpu_seconds))
    try:
        worker.hello(60)
        forked = parent_of(worker.pid)
        assert parent_of(forked) == proc.pid, "the zygote is not the seed's fork"
        assert os.getsid(forked) == forked, "the forked zygote is not in a session of its own"
        assert worker.protections.get("on") and not worker.protections.get("off"), worker.protections
    finally:
        worker.kill()
        zygote.close()


def test_a_forked_zygote_and_its_live_worker_end_when_its_grading_processs_socket_closes(seed):
    control, _ = seed
    zygote = adopted(prestart.zygote_from(control))
    limits = Limits()
    worker = zygote.spawn(SandboxConfig(memory_bytes=limits.memory_bytes, cpu_seconds=limits.cpu_seconds))
    worker.hello(60)
    forked = parent_of(worker.pid)
    zygote.control.close()  # (as when its grading process is killed: the worker is never told to stop)
    assert gone_within([worker.pid, forked], 10), "the worker or its zygote outlived the grading process's socket"


def test_a_kill_left_unawaited_is_answered_before_the_next_worker_is_forked(seed):
    control, _ = seed
    zygote = adopted(prestart.zygote_from(control))
    zygote.wait_for_kills = False
    limits = Limits()
    config = SandboxConfig(memory_bytes=limits.memory_bytes, cpu_seconds=limits.cpu_seconds)
    try:
        first = zygote.spawn(config)
        first.hello(60)
        first.kill()  # (returns before the zygote's answer)
        second = zygote.spawn(config)
        assert not proctree.alive(first.pid), "a worker was forked while the last one was still alive"
        second.hello(60)
        second.kill()
        zygote.settle()
        assert not proctree.alive(second.pid)
    finally:
        zygote.close()
