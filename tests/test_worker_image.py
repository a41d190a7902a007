"""A worker holds nothing of the grader: seen from inside a worker started by `grade`'s grader and by a
grading process of grade-class's pool, with a secret planted in the instructor's environment.

The probe makes itself dumpable again (prctl(PR_SET_DUMPABLE, 1)), then reads its own environment block
(/proc/self/environ), searches its whole stack for the secret (/proc/self/mem), lists its writable shared
mappings (/proc/self/maps: the pool's semaphores in /dev/shm would be some), its open descriptors and its
capability sets (/proc/self/status).
"""
from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
import _kit as kit

from autograder.extract import Source
from autograder.session import Session
from autograder.student import Student

SECRET_NAME, SECRET = "PGPASSWORD", "planted-instructor-secret-5f2c9e"
# What the zygote's exec gives it (autograder/prestart.py ZYGOTE_ENV, PASSED_THROUGH): names only, no value of the
# instructor's.
ZYGOTE_NAMES = {"PATH", "PYTHONPATH", "OMP_NUM_THREADS", "PYTHONDONTWRITEBYTECODE", "LANG", "LD_LIBRARY_PATH",
                "CUDA_VISIBLE_DEVICES"}

PROBE = r'''
import ctypes, os

def probe(secret):
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: what a student would do to read its own memory
    out = {"environ": sorted(e.split(b"=", 1)[0].decode() for e in open("/proc/self/environ", "rb").read().split(b"\0") if e)}
    out["secret_in_environ"] = secret.encode() in open("/proc/self/environ", "rb").read()
    shared, stack = [], b""
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if "w" in fields[1] and "s" in fields[1]:
                shared.append(" ".join(fields[5:]) or "anonymous")
            if fields[-1] == "[stack]":
                start, end = (int(x, 16) for x in fields[0].split("-"))
                mem.seek(start)
                stack = mem.read(end - start)
    out["writable_shared"] = shared
    out["secret_in_stack"] = secret.encode() in stack
    out["fds"] = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    out["caps"] = {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    return repr(out)
'''


def look_inside(grader) -> dict:
    """The probe's findings from a fresh worker of `grader`."""
    s = Session(grader.zygote, (Source("probe", "/nonexistent/probe.py", (PROBE,)),), grader.limits)
    s.start()
    s.enter_part("qkv_projection")
    try:
        return ast.literal_eval(Student(s).call("probe", SECRET))
    finally:
        s.close()


def probe_in_pool_process(_unused=None) -> dict:
    """Run in a grading process of grade-class's pool (its warm Grader, made by classgrade._init_worker)."""
    from autograder import classgrade

    return look_inside(classgrade._GRADER)


def assert_clean(seen: dict) -> None:
    assert not seen["secret_in_environ"] and not seen["secret_in_stack"], "the instructor's secret is in the worker"
    assert set(seen["environ"]) <= ZYGOTE_NAMES, seen["environ"]
    assert seen["writable_shared"] == [], "the worker shares writable memory with the grader"
    assert len(seen["fds"]) <= 5, seen["fds"]  # 0, 1, 2 on /dev/null, the socket, the listing's own descriptor
    assert seen["caps"] == dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), 0), seen["caps"]


def test_a_worker_of_grade_holds_no_secret_no_shared_memory_and_no_capability(monkeypatch):
    monkeypatch.setenv(SECRET_NAME, SECRET)
    from autograder.grade import Grader

    with Grader(kit.LIMITS) as grader:  # a zygote started while the secret is in this environment
        assert_clean(look_inside(grader))


def test_a_worker_of_grade_class_holds_no_secret_no_shared_memory_and_no_capability(monkeypatch):
    """Through grade-class's own pool (classgrade._start_pool, spawn, its initializer), with the secret in the
    environment of the process that starts it."""
    from autograder import classgrade

    monkeypatch.setenv(SECRET_NAME, SECRET)
    pool = classgrade._start_pool(1, 1, kit.LIMITS)
    try:
        seen = pool.submit(probe_in_pool_process).result(timeout=240)
    finally:
        classgrade._kill_pool(pool)
    assert os.environ[SECRET_NAME] == SECRET  # (the pool process had it: the worker must not)
    assert_clean(seen)


@pytest.fixture(autouse=True)
def _no_leftovers():
    yield
    assert kit.leftovers() == []
