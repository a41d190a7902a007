"""Build an nbgrader course directory with a class of example submissions.

Used by `python -m autograder demo`, the benchmark (benchmarks/run.py) and the tests.
Submissions are derived, never hand-written: a student's notebook is the released
notebook with each solution cell filled in from the instructor's (source) notebook, then
one typical mistake applied as a text edit of the solution code (MISTAKES). An edit whose
text is no longer in the solutions raises, so that the examples cannot silently turn
into correct submissions when the solutions change.

    course = make_course(tmp)               # source/ copied, nbgrader_config.py, generate_assignment
    collect(course, {"ada": "correct", "bob": "no_scale"})
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from autograder.spec import ASSIGNMENT, NOTEBOOKS, PARTS  # noqa: E402

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
TIMESTAMP = "2026-11-30 09:00:00.000000 UTC"

# name -> (what the student got wrong, [(notebook, old text, new text), ...]).
# Special kinds (not text edits): "unfinished" keeps the released stubs of one notebook,
# "corrupt" truncates a notebook file, "missing" leaves a notebook out.
MISTAKES: dict[str, tuple[str, list]] = {
    "correct": ("the reference solution", []),
    "no_scale": ("scores not divided by sqrt(d_k)",
                 [("01_scores", "Q @ K.transpose(-2, -1) / math.sqrt(d_k)", "Q @ K.transpose(-2, -1)")]),
    "softmax_dim": ("softmax over the query axis (dim=-2) in attention_weights",
                    [("01_scores", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")]),
    "seed_broadcast": ("the seed's [B,1,1,S] padding mask on 3-D scores (broadcasts to [B,B,S,S])",
                       [("02_masks", "keep = mask.reshape(B, *([1] * (scores.dim() - 2)), S_k)",
                         "keep = mask[:, None, None, :]")]),
    "mask_inverted": ("padding mask used the wrong way round in SelfAttention",
                      [("03_module", "scores.masked_fill(~mask[:, None, :]", "scores.masked_fill(mask[:, None, :]")]),
    "kpm_not_inverted": ("key_padding_mask passed without inverting it",
                         [("03_module", "key_padding_mask = None if mask is None else ~mask",
                           "key_padding_mask = None if mask is None else mask")]),
    "heads_view": ("split_heads views [B, H, S, hd] directly instead of [B, S, H, hd] + transpose",
                   [("04_multihead", "return x.transpose(1, 2)",
                     "return x.reshape(B, num_heads, S, head_dim)")]),
    "syntax_error": ("a syntax error in the masks notebook",
                     [("02_masks", "def causal_mask(", "def causal_mask(:")]),
    "unfinished": ("05_long_sequence left as released (stubs)", ["05_long_sequence"]),
    "missing": ("05_long_sequence not submitted", ["05_long_sequence"]),
    "corrupt": ("02_masks is not valid JSON (truncated file)", ["02_masks"]),
}


def repo_source(repo: Path = REPO) -> Path | None:
    """The course's instructor notebooks, when they have been built (python -m course.build)."""
    src = repo / "source" / ASSIGNMENT
    if all((src / f"{nb}.ipynb").exists() for nb in NOTEBOOKS):
        return src
    return None


# --------------------------------------------------------------------------- fallback source
def _cell(kind: str, source: str, nbgrader: dict | None = None, cid: str = "") -> dict:
    cell = {"cell_type": kind, "id": cid, "metadata": {}, "source": source}
    if nbgrader:
        cell["metadata"]["nbgrader"] = {"schema_version": 3, **nbgrader}
    if kind == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


def fallback_source(dest: Path) -> Path:
    """Minimal instructor notebooks made from solutions/attention.py (when source/ is not built)."""
    dest.mkdir(parents=True, exist_ok=True)
    code = (REPO / "solutions" / "attention.py").read_text()
    tree = ast.parse(code)
    defs = {n.name: ast.get_source_segment(code, n) for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for nb_name in NOTEBOOKS:
        cells = [_cell("markdown", f"# {nb_name}", cid="title"),
                 _cell("code", "import math\n\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F",
                       {"grade": False, "solution": False, "locked": True, "grade_id": "setup"}, "setup")]
        for part in [p for p in PARTS if p.notebook == nb_name]:
            for name in part.names:
                cells.append(_cell("code", f"{BEGIN}\n{defs[name]}\n{END}",
                                   {"grade": False, "solution": True, "locked": False, "grade_id": f"sol_{name}"},
                                   f"sol-{name}".replace("_", "-")))
            check = "\n".join(f"assert callable({n}), 'define {n}'" for n in part.names)
            cells.append(_cell("code", check, {"grade": True, "solution": False, "locked": True,
                                               "grade_id": part.id, "points": part.points},
                               part.id.replace("_", "-")))
        nb = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                          "name": "python3"}, "language_info": {"name": "python"}},
              "nbformat": 4, "nbformat_minor": 5}
        (dest / f"{nb_name}.ipynb").write_text(json.dumps(nb, indent=1))
    return dest


# --------------------------------------------------------------------------- course
def nbgrader(course: Path, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run an nbgrader command in the course directory with this environment's Python."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))  # alembic
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-3000:]}")
    return proc


def course_config(course: Path, plugin: bool = True) -> str:
    """nbgrader_config.py of a course directory: the repository's settings, this course's gradebook."""
    lines = [f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"]
    repo_cfg = REPO / "nbgrader_config.py"
    if repo_cfg.exists():
        text = repo_cfg.read_text()
        # the repository's own config may enable the plugin itself; we decide here
        text = "\n".join(line for line in text.splitlines()
                         if "nbgrader_plugin" not in line and "_configure_autograder" not in line)
        lines.append(text)
    else:
        lines.append("c = get_config()\nc.CourseDirectory.course_id = 'self_attention_course'\n")
    lines.append(f"c.CourseDirectory.root = {str(course)!r}")
    lines.append("c.CourseDirectory.source_directory = 'source'")
    lines.append("c.CourseDirectory.release_directory = 'release'")
    lines.append(f"c.CourseDirectory.db_url = 'sqlite:///{course / 'gradebook.db'}'")
    if plugin:
        lines.append("from autograder.nbgrader_plugin import configure\nconfigure(c)")
    return "\n".join(lines) + "\n"


def make_course(course: Path, source: Path | None = None, plugin: bool = True) -> Path:
    """A course directory: source/ (the repository's, or a fallback), config, release, gradebook."""
    course = Path(course)
    course.mkdir(parents=True, exist_ok=True)
    src = source or repo_source()
    dest = course / "source" / ASSIGNMENT
    if src is None:
        fallback_source(dest)
    else:
        shutil.copytree(src, dest, dirs_exist_ok=True)
    (course / "nbgrader_config.py").write_text(course_config(course, plugin))
    nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    return course


def _strip_markers(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.strip() not in (BEGIN, END))


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def solved(course: Path, nb_name: str) -> dict:
    """The released notebook with every solution cell filled in from the source notebook."""
    release = json.loads((course / "release" / ASSIGNMENT / f"{nb_name}.ipynb").read_text())
    source = json.loads((course / "source" / ASSIGNMENT / f"{nb_name}.ipynb").read_text())
    answers = {c["metadata"]["nbgrader"]["grade_id"]: _strip_markers(_src(c)) for c in source["cells"]
               if (c.get("metadata") or {}).get("nbgrader", {}).get("solution")}
    for cell in release["cells"]:
        meta = (cell.get("metadata") or {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            cell["source"] = answers[meta["grade_id"]]
    return release


def student_notebooks(course: Path, mistake: str) -> dict[str, str | None]:
    """notebook name -> file text (None: not submitted) for a student making `mistake`."""
    _, edits = MISTAKES[mistake]
    out: dict[str, str | None] = {}
    for nb_name in NOTEBOOKS:
        nb = solved(course, nb_name)
        for edit in edits:
            if isinstance(edit, tuple) and edit[0] == nb_name:
                _, old, new = edit
                hits = 0
                for cell in nb["cells"]:
                    if (cell.get("metadata") or {}).get("nbgrader", {}).get("solution") and old in _src(cell):
                        cell["source"] = _src(cell).replace(old, new)
                        hits += 1
                if not hits:
                    raise ValueError(f"mistake {mistake!r}: {old!r} is not in the solution cells of {nb_name}")
        text = json.dumps(nb, indent=1)
        if nb_name in [e for e in edits if isinstance(e, str)]:
            if mistake == "unfinished":
                text = (course / "release" / ASSIGNMENT / f"{nb_name}.ipynb").read_text()
            elif mistake == "missing":
                text = None
            elif mistake == "corrupt":
                text = text[: len(text) // 2]
        out[nb_name] = text
    return out


def collect(course: Path, students: dict[str, str]) -> list[str]:
    """Write submitted/<student>/self_attention/ for each student -> mistake name."""
    made = []
    for student, mistake in students.items():
        folder = Path(course) / "submitted" / student / ASSIGNMENT
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for nb_name, text in student_notebooks(Path(course), mistake).items():
            if text is not None:
                (folder / f"{nb_name}.ipynb").write_text(text)
        (folder / "timestamp.txt").write_text(TIMESTAMP)
        made.append(student)
    return made


# The bundled example class (examples/class/students.json): student id -> mistake.
def example_class() -> dict[str, str]:
    return json.loads((Path(__file__).resolve().parent / "class" / "students.json").read_text())


def synthetic_class(n: int) -> dict[str, str]:
    """n students cycling through the mistakes, about a third of them correct."""
    kinds = list(MISTAKES)
    out = {}
    for i in range(n):
        kind = "correct" if i % 3 == 0 else kinds[1 + (i // 3 * 2 + i % 3 - 1) % (len(kinds) - 1)]
        out[f"student{i:02d}"] = kind
    return out
