"""A worker holds nothing of the grader: seen from inside a worker started by `grade`'s grader and by a
grading process of grade-class's pool, with a secret planted in the instructor's environment.

The probe makes itself dumpable again (prctl(PR_SET_DUMPABLE, 1)), then reads its own environment block
(/proc/self/environ), searches its whole stack for the secret (/proc/self/mem), lists its writable shared
mappings (/proc/self/maps: the pool's semaphores in /dev/shm would be some), its open descriptors and its
capability sets (/proc/self/status).
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
import _kit as kit

from autograder.foundation.extract import Source
from autograder.foundation.spec import ASSIGNMENT
from autograder.sandbox.session import Session
from autograder.sandbox.student import Student
from tests.runcache import released_course

SECRET_NAME, SECRET = "PGPASSWORD", "planted-instructor-secret-5f2c9e"
# What the zygote's exec gives it (autograder/sandbox/prestart.py ZYGOTE_ENV, PASSED_THROUGH): names only, no value of the
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


def assert_clean(seen: dict) -> None:
    assert not seen["secret_in_environ"] and not seen["secret_in_stack"], "the instructor's secret is in the worker"
    assert set(seen["environ"]) <= ZYGOTE_NAMES, seen["environ"]
    assert seen["writable_shared"] == [], "the worker shares writable memory with the grader"
    assert len(seen["fds"]) <= 5, seen["fds"]  # 0, 1, 2 on /dev/null, the socket, the listing's own descriptor
    assert seen["caps"] == dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), 0), seen["caps"]


def test_a_worker_of_grade_holds_no_secret_no_shared_memory_and_no_capability(monkeypatch):
    monkeypatch.setenv(SECRET_NAME, SECRET)
    from autograder.grading.grade import Grader

    with Grader(kit.LIMITS) as grader:  # a zygote started while the secret is in this environment
        assert_clean(look_inside(grader))


# A submission whose code, run at load time, reports what its worker holds (in the report's notes), and one that
# never finishes loading: grade-class kills its grading process at the deadline and goes on.
PROBE_AT_LOAD = PROBE + "raise RuntimeError('PROBE ' + probe(%r))\n" % SECRET
HANG = "import time\nwhile True:\n    time.sleep(0.05)\n"  # never finishes loading, and spends no CPU on it


def submit(course: Path, student: str, code: str) -> None:
    """01_scores.ipynb as released, with `code` at the top of its first solution cell."""
    nb = json.loads((course / "release" / ASSIGNMENT / "01_scores.ipynb").read_text())
    cell = next(c for c in nb["cells"] if (c.get("metadata") or {}).get("nbgrader", {}).get("solution"))
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    cell["source"] = code + "\n" + source
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / "01_scores.ipynb").write_text(json.dumps(nb))


@pytest.fixture(scope="module")
def class_run(private_tmp):
    """grade-class on {hang, probe}, two grading processes, a 10 s deadline per submission, the secret planted in
    the instructor's environment: (completed process, seconds, course)."""
    course = released_course(private_tmp / "image" / "course")  # (make_course, built once per run)
    submit(course, "hang", HANG)
    submit(course, "probe", PROBE_AT_LOAD)
    env = dict(os.environ, **{SECRET_NAME: SECRET}, PYTHONPATH=str(kit.REPO))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade-class", str(course), "--workers", "2",
                           "--submission-seconds", str(DEADLINE), "--load-seconds", "100"],
                          cwd=kit.REPO, env=env, capture_output=True, text=True, timeout=400)
    return proc, time.monotonic() - started, course


DEADLINE = 10


def class_report(course: Path, student: str) -> dict:
    return json.loads((course / "autograder_reports" / ASSIGNMENT / f"{student}.json").read_text())


def test_a_worker_of_grade_class_holds_no_secret_no_shared_memory_and_no_capability(class_run):
    proc, _, course = class_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    notes = "\n".join(class_report(course, "probe")["notes"])
    assert "PROBE " in notes, notes
    assert_clean(ast.literal_eval(notes.split("PROBE ", 1)[1].split("}", 2)[0] + "}}"))


def test_a_submission_past_its_deadline_scores_0_with_the_reason_and_the_class_goes_on(class_run):
    proc, seconds, course = class_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    hang = class_report(course, "hang")
    assert sum(p["score"] for p in hang["parts"]) == 0
    assert f"did not finish within {DEADLINE} s" in json.dumps(hang), hang["notes"]
    assert "probe" in proc.stdout and "errors 0" in proc.stdout, proc.stdout
    assert seconds < 200, f"the class took {seconds:.0f} s"  # (not the hang's 100 s load limit on top of start-up)


@pytest.fixture(autouse=True)
def _no_leftovers():
    yield
    assert kit.leftovers() == []
