"""Gradescope: build an autograder bundle, and the entry point it runs on Gradescope.

    python -m autograder gradescope-bundle OUT.zip [--assignment NAME]

The zip follows Gradescope's autograder specification: at its root `setup.sh` (run once
when the image is built: a Python venv with torch==2.13.0 CPU and requirements.txt) and
`run_autograder` (run per submission), plus the grader (autograder/, with the hidden
checks) and the reference solutions (solutions/). Gradescope unpacks it to
/autograder/source, puts the student's files in /autograder/submission, and reads
/autograder/foundation/results/results.json: one test per check (name, score, max_score, output,
visibility) and the total score.

The root /autograder can be moved with the environment variable AUTOGRADER_ROOT (the tests
run the bundle in a temporary folder laid out like /autograder).
"""
from __future__ import annotations

import json
import os
import re
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..foundation.edition import Edition, resolve
from ..foundation.extract import SubmissionError, extract
from ..foundation.limits import UNSAFE_ENV
from ..sandbox.pool import SandboxUnavailable

PACKAGE = Path(__file__).resolve().parent.parent
REPO = PACKAGE.parent
TORCH_VERSION = "2.13.0"

SETUP_SH = f"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image (Ubuntu).
set -euo pipefail
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv python3-pip
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
/autograder/venv/bin/pip install torch=={TORCH_VERSION} --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/pip install -r /autograder/source/requirements.txt
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission: grade /autograder/submission against the
# assignment ASSIGNMENT, write /autograder/foundation/results/results.json. AUTOGRADER_ROOT moves
# /autograder (for tests).
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
cd "$ROOT/source"
UNSAFE
exec "$PY" -m autograder.commands.gradescope "$ROOT" ASSIGNMENT
"""


def _version(dist: str, default: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return default


# The newest release for Python 3.10 of what the grader imports, where a newer one needs 3.11: setup.sh installs the
# image's own python3, 3.10 on Gradescope's base image (Ubuntu 22.04), which has no numpy after 2.2.6.
# transformers: 5.x needs 3.11, the grader's adapters also read 4.x's signatures (requirements.txt pins both).
NEWEST_FOR_PY310 = {"numpy": "2.2.6", "transformers": "4.57.6"}


# an extra package's release where the instructor's environment lacks it (requirements.txt's pin)
EXTRA_DEFAULTS = {"transformers": "5.25.0"}


def _release(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text.split("+")[0])[:3])


def _pin(dist: str, default: str) -> str:
    """requirements.txt's line(s) for `dist`: the instructor's release, and where Python 3.10 has none, the newest
    one it has, each with its environment marker."""
    pinned, old = _version(dist, default), NEWEST_FOR_PY310.get(dist)
    if old is None or _release(pinned) <= _release(old):
        return f"{dist}=={pinned}\n"
    return f'{dist}=={pinned}; python_version >= "3.11"\n{dist}=={old}; python_version < "3.11"\n'


def requirements(extra: tuple[str, ...] = ()) -> str:
    """What the grader imports besides torch (installed by setup.sh), for Python 3.10 and newer; `extra`: the
    packages an assignment's checks need besides (spec.Assignment.requires), at the instructor's release."""
    return "".join(_pin(d, v) for d, v in (("pytest", "8.3.3"), ("rich", "13.9.4"), ("numpy", "2.1.3"),
                                           ("Babel", "2.19.0")) + tuple((d, EXTRA_DEFAULTS[d]) for d in extra))


def _files():
    for base in ("autograder", "solutions"):
        for path in sorted((REPO / base).rglob("*")):
            rel = path.relative_to(REPO)
            if (path.is_file() and "__pycache__" not in rel.parts and path.suffix in (".py", ".ini", ".md", ".po")
                    and "notebooks" not in rel.parts):
                yield path, rel.as_posix()


def build_bundle(out: str | Path, edition: Edition | None = None, unsafe_no_sandbox: bool = False) -> Path:
    """Write the Gradescope autograder zip that grades `edition` (default: the default assignment's English one;
    every edition has the same checks and points, its feedback in its language); returns its path. With `unsafe_no_sandbox`, its run_autograder
    grades even where the sandbox is incomplete (a Docker container without user namespaces); else it refuses
    there with one line and no results.json."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        run_autograder = RUN_AUTOGRADER.replace("ASSIGNMENT", (edition or resolve()).id).replace(
            "UNSAFE\n", f"export {UNSAFE_ENV}=1\n" if unsafe_no_sandbox else "")
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", run_autograder)):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, text)
        z.writestr("requirements.txt", requirements((edition or resolve()).assignment.requires))
        for path, rel in _files():
            z.write(path, rel)
    return out


# --------------------------------------------------------------------------- on Gradescope
def _submission_target(folder: Path) -> Path:
    """What to grade in /autograder/submission: the folder of notebooks, or the one .py file."""
    notebooks = sorted(folder.rglob("*.ipynb"))
    notebooks = [n for n in notebooks if ".ipynb_checkpoints" not in n.parts]
    if notebooks:
        parents = {n.parent for n in notebooks}
        return notebooks[0].parent if len(parents) == 1 else folder
    pys = [p for p in sorted(folder.rglob("*.py")) if p.name not in ("visible_checks.py", "memory_meter.py")]
    if len(pys) == 1:
        return pys[0]
    return folder


def results_json(result) -> dict:
    """Gradescope's results.json for a GradeResult: one test per check."""
    tests = []
    for part in result.parts:
        if not part.checks:
            tests.append({"name": f"{part.id}", "score": 0.0, "max_score": part.max_score,
                          "output": "; ".join(part.notes) or "no check of this part could run",
                          "visibility": "visible"})
        for c in part.checks:
            output = c.message if not c.passed else "passed"
            if part.notes and c is part.checks[0]:
                output += "\n" + "\n".join(f"note: {n}" for n in part.notes)
            tests.append({"name": f"{part.id}: {c.name}", "score": c.points,
                          "max_score": c.max_points, "output": output, "visibility": "visible"})
    out = {"score": result.score, "tests": tests, "visibility": "visible", "stdout_visibility": "hidden"}
    if result.notes:
        out["output"] = "\n".join(result.notes)
    return out


def run(root: str | Path, edition: Edition | None = None) -> dict:
    """Grade ROOT/submission as `edition` (default: the default assignment's English one); write
    ROOT/results/results.json (Gradescope's contract). The feedback in the edition's language."""
    from ..grading.grade import Grader  # noqa: PLC0415 - imports torch: not needed to build a bundle

    edition = edition or resolve()
    root = Path(root)
    (root / "results").mkdir(parents=True, exist_ok=True)
    try:
        submission = extract(_submission_target(root / "submission"))  # (nothing to grade: no worker pool started)
        with Grader() as grader:
            doc = results_json(grader.grade(submission, assignment=edition.assignment, lang=edition.lang))
    except SubmissionError as exc:
        doc = {"score": 0.0, "output": f"your submission could not be graded: {exc}",
               "tests": [{"name": p.id, "score": 0.0, "max_score": p.points, "output": str(exc),
                          "visibility": "visible"} for p in edition.assignment.parts]}
    (root / "results" / "results.json").write_text(json.dumps(doc, indent=1))
    return doc


def main(out: str, edition: Edition | None = None, unsafe_no_sandbox: bool = False) -> int:
    """The command: write the bundle and say what to do with it."""
    path = build_bundle(out, edition, unsafe_no_sandbox)
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB): upload it as the Gradescope autograder "
          f"(Ubuntu base image); setup.sh installs torch=={TORCH_VERSION} CPU")
    return 0


if __name__ == "__main__":  # run_autograder: python -m autograder.commands.gradescope ROOT [ASSIGNMENT]
    try:
        run(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("AUTOGRADER_ROOT", "/autograder"),
            resolve(sys.argv[2] if len(sys.argv) > 2 else None))
    except SandboxUnavailable as exc:  # no results.json: Gradescope shows the instructor a failed autograder
        print(f"error: {exc} (gradescope-bundle --unsafe-no-sandbox)", file=sys.stderr)
        sys.exit(2)
