"""Shared by tests/test_hostile.py, tests/test_broken.py and tests/test_sandbox.py: one warm
grader for the whole test run, a sentinel course tree, and what to observe after grading.

Not a test module (pytest collects only test_*.py); the files next to it are hostile
submissions: an honest section, a line `# --- attack ---`, then the attack. A submission
is the reference solutions followed by that file; its honest twin is the reference
followed by the section before the marker (or the reference alone).
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import platform
import stat
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from autograder.grading.grade import Grader
from autograder.foundation.limits import Limits
from autograder.foundation.results import GradeResult

REPO = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).resolve().parent
REFERENCE = (REPO / "solutions" / "attention.py").read_text()
# an assignment's reference solutions, what a case of that assignment is appended to (self_attention: REFERENCE)
REFERENCES = {"self_attention": "attention.py", "efficient": "efficient.py", "real_models": "real_models.py"}
MARK = "# --- attack ---"
# Short limits so that the endless-loop and memory cases stay cheap; the honest parts need well under this.
LIMITS = Limits(part_seconds=6.0, load_seconds=20.0, memory_bytes=3 * 2**30, cpu_seconds=120)
PWNED = Path("/tmp/autograder-hostile-PWNED")  # what a pickle trick would create in the trusted process
KEY = (b"autograder-hostile-instructor-token", b"the instructor's token")  # planted in the grader's session keyring

_grader: Grader | None = None
_worker_pids: list[int] = []
_baselines: dict = {}


def grader() -> Grader:
    """One Grader (one zygote) for every test of the run; it records the pid of each worker it starts."""
    global _grader
    if _grader is None:
        plant_key()  # before the zygote starts: it and every worker inherit this process's session keyring
        _grader = Grader(LIMITS).warm()
        zygote = _grader.zygote
        spawn = zygote.spawn

        def recording_spawn(*args, **kwargs):
            worker = spawn(*args, **kwargs)
            _worker_pids.append(worker.pid)
            return worker

        zygote.spawn = recording_spawn
        atexit.register(_grader.close)
    return _grader


def grade(path, limits: Limits | None = None, part_ids=None, assignment: str = "self_attention",
          ) -> tuple[GradeResult, float]:
    from autograder.foundation import spec  # (a case names its assignment)

    g = grader()
    g.limits = limits or LIMITS
    try:
        started = time.perf_counter()
        result = g.grade(path, part_ids=part_ids, assignment=spec.assignment(assignment))
        return result, time.perf_counter() - started
    finally:
        g.limits = LIMITS


# ---------------------------------------------------------------- sentinel course
def _writable_base() -> str:
    """Outside the sandbox's default covers (/tmp, /home, ...) where possible, so that what hides
    the course is the grader's knowledge of the submission's folders, not a lucky default."""
    for base in ("/var/lib", "/var/cache"):
        if os.access(base, os.W_OK):
            return base
    return tempfile.gettempdir()


def make_course() -> Path:
    """course/{gradebook.db, SECRET.txt, source/..., submitted/bob/...}, everything world-writable,
    so that only the sandbox (not file permissions) can stop a write."""
    root = Path(tempfile.mkdtemp(prefix="autograder-sentinel-", dir=_writable_base()))
    atexit.register(_remove, root)
    course = root / "course"
    files = {
        "gradebook.db": os.urandom(4096).hex(),
        "SECRET.txt": "the instructor's secret\n",
        "source/self_attention/01_scores.ipynb": '{"cells": []}',
        "submitted/bob/self_attention/01_scores.ipynb": '{"cells": [], "bob": 1}',
        "submitted/alice/self_attention/.keep": "",
    }
    for rel, text in files.items():
        path = course / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    return course


def _remove(root: Path) -> None:
    import shutil

    shutil.rmtree(root, ignore_errors=True)


def snapshot(*roots: Path) -> dict[str, str]:
    """sha256 and mode of every file under the roots (and the set of names)."""
    out = {}
    for root in roots:
        for path in sorted(Path(root).rglob("*")):
            if "__pycache__" in path.parts or ".pytest_cache" in path.parts:
                continue
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else "dir"
            out[str(path)] = f"{digest} {oct(st.st_mode)}"
    return out


def protected_trees(course: Path) -> list[Path]:
    """The sentinel course and a folder of the repository that no one else edits during a test run
    (the attacks target solutions/ and autograder/ too, but other people may edit those meanwhile)."""
    return [course, HOSTILE]


# ---------------------------------------------------------------- the instructor's keyring
_KEY_CALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}  # add_key, keyctl
_planted: list[int] = []


def _keys(which: int, *args) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    number = _KEY_CALLS[platform.machine()][which]
    return libc.syscall(ctypes.c_long(number), *[a if isinstance(a, bytes) else ctypes.c_long(a) for a in args])


def plant_key() -> None:
    """This process joins a new session keyring holding one key, the instructor's token (a login session's
    keyring as a grader started from it has). Where this machine refuses keyrings, nothing is planted."""
    if _keys(1, 1, 0) >= 0:  # KEYCTL_JOIN_SESSION_KEYRING, anonymous
        serial = _keys(0, b"user", KEY[0], KEY[1], len(KEY[1]), -3)  # add_key to KEY_SPEC_SESSION_KEYRING
        if serial >= 0:
            _planted.append(serial)


def planted_key() -> bytes | None:
    """The planted key's payload now (None when none was planted): what a submission must not change."""
    if not _planted:
        return None
    buf = ctypes.create_string_buffer(256)
    size = _keys(1, 11, _planted[0], ctypes.addressof(buf), 256)  # KEYCTL_READ
    return buf.raw[:size] if size >= 0 else b"unreadable"


# ---------------------------------------------------------------- processes
def _stat(pid: str):
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    return {"state": fields[0].decode(), "ppid": int(fields[1]), "pgid": int(fields[2]), "sid": int(fields[3])}


def leftovers() -> list[str]:
    """Live processes started by a worker: below the zygote (the subreaper every orphan of a worker
    goes to), or in a worker's process group or session. Must be empty once grading is over."""
    zygote = grader().zygote.proc.pid
    workers = set(_worker_pids)
    table = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p)) and s["state"] != "Z"}
    found = []
    for pid, s in table.items():
        chain, cur = [], pid
        while cur in table and cur not in chain and cur != zygote:
            chain.append(cur)
            cur = table[cur]["ppid"]
        if (cur == zygote and pid != zygote) or s["pgid"] in workers or s["sid"] in workers:
            found.append(f"pid {pid} ({Path(f'/proc/{pid}/cmdline').read_bytes()[:60]!r})")
    return found


# ---------------------------------------------------------------- hostile submissions
def case_sources(name: str, course: Path, assignment: str = "self_attention") -> tuple[str, str]:
    """(attacked submission, honest twin) for tests/hostile/<name>.py, a case of `assignment`."""
    text = (HOSTILE / f"{name}.py").read_text().replace("__SENTINEL__", str(course)).replace("__HOSTILE__", str(HOSTILE))
    honest = text.split(MARK)[0] if MARK in text else ""
    reference = (REPO / "solutions" / REFERENCES[assignment]).read_text()
    return reference + "\n\n" + text, reference + "\n\n" + honest


def write_submission(course: Path, name: str, code: str, assignment: str = "self_attention") -> Path:
    path = course / "submitted" / "alice" / assignment / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o777)
    path.write_text(code)
    path.chmod(0o666)
    return path


def baseline(course: Path, code: str, part_ids=None, assignment: str = "self_attention") -> GradeResult:
    """The grade of an honest submission (cached: several attacks share their honest twin)."""
    key = (code, tuple(part_ids or ()), assignment)
    if key not in _baselines:
        digest = hashlib.sha1(code.encode()).hexdigest()[:10]
        path = write_submission(course, f"honest_{digest}", code, assignment)
        _baselines[key] = grade(path, part_ids=part_ids, assignment=assignment)[0]
    return _baselines[key]


def scores(result: GradeResult) -> dict[str, float]:
    return {p.id: p.score for p in result.parts}


def messages(result: GradeResult, part_id: str) -> str:
    part = result.part(part_id)
    return "\n".join([c.message for c in part.checks] + list(part.notes) + list(result.notes))


__all__ = ["grade", "grader", "make_course", "plant_key", "planted_key", "KEY", "snapshot", "leftovers", "case_sources", "baseline", "write_submission",
           "scores", "messages", "protected_trees", "LIMITS", "PWNED", "REFERENCE", "REPO", "replace"]
