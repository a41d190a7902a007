"""What grade-class graded with what, so that a rerun skips a submission that nothing has changed.

A submission is skipped when both its files and the grader that decides its score (the
assignment's hidden checks, the checks' shared helpers, the check runner and the scoring,
the spec, the reference solutions) are as they were at its last grading. The state lives in
COURSE/autograder_reports/<assignment>/.state.json.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..foundation.readfile import Unreadable, read_bytes
from ..foundation.spec import CHECKS_ROOT, Assignment

PACKAGE = CHECKS_ROOT.parent
REPO = PACKAGE.parent
# Besides the checks and the references, what decides a score: the spec, the check runner, the scoring.
DECIDING = (PACKAGE / "foundation" / "spec.py", PACKAGE / "grading" / "check.py", PACKAGE / "grading" / "scoring.py")


def _solution_files(assignment: Assignment) -> list[Path]:
    """The reference solutions' module, and its package's __init__ (what `import solutions` runs)."""
    module = REPO / (assignment.solutions.replace(".", "/") + ".py")
    return [module.parent / "__init__.py", module]


def grader_fingerprint(assignment: Assignment) -> str:
    """Changes whenever what decides a score of `assignment` changes."""
    h = hashlib.sha256()
    files = (sorted(CHECKS_ROOT.glob("*.py")) + sorted(assignment.checks_dir.glob("*.py"))
             + list(DECIDING) + _solution_files(assignment))
    for f in files:
        h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _files(folder: Path) -> list[Path]:
    """Every entry below `folder` but folders, links not followed into folders, unreadable folders skipped."""
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != ".ipynb_checkpoints"]
        out += [Path(root) / name for name in files]
    return sorted(out)


def submission_hash(folder: Path) -> str:
    """What the submission's files hold; a file that cannot be read counts by the reason (read_bytes never
    blocks on a FIFO nor reads a device), so that fixing it changes the hash."""
    h = hashlib.sha256()
    for f in _files(folder):
        try:
            data = read_bytes(f)
        except Unreadable as exc:
            data = str(exc).encode()
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:16]


def atomic_write(path: Path, text: str) -> None:
    """The file as it was or with `text`, never half written (a full disk leaves no .tmp behind)."""
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class State:
    """{student: {"key": what was graded with what, "score": ...}} of one assignment in one course."""

    def __init__(self, reports: Path, fingerprint: str):
        self.path = reports / ".state.json"
        self.fingerprint = fingerprint
        self.data: dict = json.loads(self.path.read_text()) if self.path.exists() else {}

    def key(self, folder: Path) -> str:
        return f"{submission_hash(folder)}:{self.fingerprint}"

    def unchanged(self, student: str, key: str) -> bool:
        return self.data.get(student, {}).get("key") == key

    def record(self, student: str, key: str, score: float) -> None:
        self.data[student] = {"key": key, "score": score}
        atomic_write(self.path, json.dumps(self.data, indent=1, sort_keys=True))
