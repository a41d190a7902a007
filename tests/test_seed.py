"""grade-class's seed: one zygote started by exec that forks the zygote of each grading process (issue 35).

The seed imports torch once for the class; each forked zygote serves one grading process over a socket only that
process holds, confines its workers exactly as a zygote started by exec does, and ends, with every worker it forked,
once that socket closes (the grading process ended, killed at a deadline or with grade-class).
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

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


@pytest.fixture(scope="module")
def seed():
    """One seed for the tests that fork zygotes of it (none of them ends it)."""
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


# --------------------------------------------------------------------------- #
# grade-class's grading processes, forked by the seed too (autograder/commands/seed.py): torch once per class.
# --------------------------------------------------------------------------- #

SECRET = "planted-instructor-secret-9d41c7"


@contextlib.contextmanager
def started_pool(folder: Path):
    """grade-class's pool of two grading processes, both ready, started from `folder` with a secret in the
    instructor's environment: (pool, the seed's pid)."""
    from autograder.commands import classpool

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOGRADER_TEST_SECRET", SECRET)
        patch.chdir(folder)
        grading = classpool.Pool(2, Limits())
        try:
            for proc in grading.procs:
                assert classpool.recv(proc.results) == ("ready",)
                proc.ready = True
            yield grading, grading.seed[1].pid
        finally:
            grading.close()


@pytest.fixture(scope="module")
def shared_pool(private_tmp):
    """A pool for the tests that leave it as they found it."""
    with started_pool(private_tmp) as started:
        yield started


@pytest.fixture
def class_pool(private_tmp):
    """A pool of its own, for a test that closes it."""
    with started_pool(private_tmp) as started:
        yield started


@pytest.fixture(scope="module")
def spoiled_pool(private_tmp):
    """A pool that the tests below each break in a part of their own, in file order (a grading process killed, then
    the seed): neither part is the other's."""
    with started_pool(private_tmp) as started:
        yield started


def test_a_grading_process_is_the_seeds_fork_through_a_monitor_and_works_where_grade_class_was_started(
        shared_pool, private_tmp):
    grading, seed_pid = shared_pool
    for proc in grading.procs:
        monitor = parent_of(proc.proc.pid)
        assert parent_of(monitor) == seed_pid, "the grading process is not forked by the seed"
        assert os.readlink(f"/proc/{proc.proc.pid}/cwd") == str(private_tmp), "not in grade-class's working folder"


def readable_memory(pid: int) -> bytes:
    """Every private writable mapping of process `pid` (its heap, Python's arenas), read through /proc."""
    out = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            fields = line.split()
            if "rw" not in fields[1] or fields[1][3] != "p" or (len(fields) > 5 and fields[5].startswith("/")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                out.append(mem.read(end - start))
            except OSError:
                continue
    return b"".join(out)


def test_the_seed_never_holds_the_instructors_environment_that_its_grading_processes_receive(shared_pool):
    grading, seed_pid = shared_pool
    memory = readable_memory(seed_pid)
    assert len(memory) > 10_000_000, "the seed's memory was not read"
    assert SECRET.encode() not in memory, "the instructor's environment reached the seed, which every worker copies"


def test_a_forked_grading_process_that_dies_is_reported_with_the_signal_that_killed_it(spoiled_pool):
    from autograder.commands import classpool

    grading, _ = spoiled_pool
    proc = grading.procs[0]
    os.kill(proc.proc.pid, signal.SIGSEGV)
    with pytest.raises(EOFError):
        classpool.recv(proc.results)
    assert proc.why_ended() == "killed by SIGSEGV"


def test_closing_the_pool_ends_the_seed_and_every_process_it_forked(class_pool):
    grading, seed_pid = class_pool
    below = proctree.descendants(seed_pid)
    assert len(below) >= 5, below  # the seed, two monitors, two grading processes, two zygotes
    grading.close()
    assert gone_within(below, 10), "a process of the seed outlived the pool"


def test_a_grading_process_is_given_its_next_submission_before_the_last_ones_result_is_recorded(shared_pool):
    """the parent's write of a result (nbgrader's gradebook: tens of milliseconds) overlaps the next grading"""
    from autograder.commands import classworker

    grading, _ = shared_pool
    notebook = str(Path(__file__).resolve().parent.parent / "solutions" / "notebooks" / "01_scores.ipynb")
    task = (classworker.NOTEBOOK, notebook, ["qkv_projection"], "self_attention", None)
    queue = {f"student{i}": task for i in range(5)}
    busy_while_recording, recorded = [], []

    def record(student, data):
        busy_while_recording.append(sum(p.student is not None for p in grading.procs))
        recorded.append(student)

    grading.run(queue, 120.0, record, lambda s, e: pytest.fail(f"{s}: {e}"), lambda s, t: pytest.fail(s),
                lambda s: None, lambda: None)
    assert sorted(recorded) == sorted(queue)
    # (two grading processes, five submissions: while each of the first three results is written, both are grading)
    assert busy_while_recording[:3] == [2, 2, 2], busy_while_recording


def test_a_grading_process_asked_of_a_seed_that_has_ended_says_so_instead_of_a_broken_pipe(spoiled_pool):
    from autograder.commands import classpool

    grading, _ = spoiled_pool
    control, seed = grading.seed
    seed.kill()
    seed.wait()
    proc = classpool.GradingProcess(Limits(), control)
    try:
        with pytest.raises(EOFError):
            classpool.recv(proc.results)
        assert proc.why_ended() == "never started: the seed that forks it had ended"
    finally:
        proc.kill()
