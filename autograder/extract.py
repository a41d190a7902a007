"""Stage 1 of grading: find the student's code in a notebook, a folder of notebooks or a .py file.

Nothing here runs student code: notebooks are read as JSON, cells are read as text.
From a notebook we take the cells that nbgrader marks as solution cells (or, in a
notebook without nbgrader metadata, every code cell). IPython magics and shell escapes
are dropped, with a note, since the worker runs plain Python.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import spec


class SubmissionError(Exception):
    """The submission cannot be graded at all; the message is one line for the user."""


@dataclass(frozen=True)
class Source:
    name: str  # the notebook's or file's stem, e.g. "02_masks"
    path: str
    cells: tuple[str, ...]
    notes: tuple[str, ...] = ()
    assignment_cells: int = 0  # nbgrader solution cells found (0: a plain notebook or a .py file)
    error: str | None = None  # why nothing could be read from this file (the parts then score 0)
    graded_ids: frozenset[str] = frozenset()  # the grade_ids of the notebook's nbgrader graded cells


@dataclass(frozen=True)
class Extracted:
    path: str
    sources: tuple[Source, ...]
    notes: tuple[str, ...] = field(default=())


MAGIC = re.compile(r"^\s*(%|!)")
MAX_FILE_BYTES = 20 * 2**20


def clean_cell(code: str) -> tuple[str, list[str]]:
    """Drop IPython magics (%, %%) and shell escapes (!); return the code and what was dropped."""
    if code.lstrip().startswith("%%"):
        return "", [f"a cell magic ({code.strip().splitlines()[0][:40]}) was skipped"]
    kept, dropped = [], []
    for line in code.splitlines():
        if MAGIC.match(line):
            dropped.append(line.strip()[:40])
            kept.append("")  # keep line numbers stable for error messages
        else:
            kept.append(line)
    notes = [f"skipped IPython line {d!r}" for d in dropped]
    return "\n".join(kept), notes


def _split_python(code: str) -> list[str]:
    """A .py file as cells: whole if it parses, else one chunk per top-level statement block."""
    try:
        ast.parse(code)
        return [code]
    except SyntaxError:
        pass
    chunks, current = [], []
    for line in code.splitlines():
        if current and re.match(r"(def|class|async def|@|import|from)\b", line):
            chunks.append(current)
            current = []
        current.append(line)
    if current:
        chunks.append(current)
    # pad with blank lines so that error line numbers match the file
    out, offset = [], 0
    for chunk in chunks:
        out.append("\n" * offset + "\n".join(chunk))
        offset += len(chunk)
    return out


def read_notebook(path: Path, part_ids: frozenset[str] = frozenset()) -> Source:
    """A notebook's solution cells (every code cell without nbgrader metadata); `part_ids`: the
    graded cells of the assignment, for a note when the notebook has graded cells but none of them."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = f"{path.name} could not be read as a notebook ({exc.__class__.__name__}: {str(exc)[:80]})"
        return Source(path.stem, str(path), (), error=reason)
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return Source(path.stem, str(path), (), error=f"{path.name} is not a notebook: it has no list of cells")
    code_cells = [c for c in nb["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]
    solution = [c for c in code_cells if (c.get("metadata") or {}).get("nbgrader", {}).get("solution")]
    chosen = solution or code_cells
    cells, notes = [], []
    for cell in chosen:
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        code, dropped = clean_cell(source)
        notes.extend(dropped)
        cells.append(code)
    if not solution and code_cells:
        notes.append("no nbgrader solution cells: every code cell was taken")
    grade_ids = frozenset(str((c.get("metadata") or {}).get("nbgrader", {}).get("grade_id")) for c in code_cells
                          if (c.get("metadata") or {}).get("nbgrader", {}).get("grade"))
    if grade_ids and part_ids and not grade_ids & part_ids:
        owner = _owner(grade_ids)
        shown = ", ".join(sorted(grade_ids))[:80]
        notes.append(f"{path.name} is a notebook of assignment {owner.id} (its graded cells: {shown}): grade it with "
                     f"--assignment {owner.id}" if owner else
                     f"{path.name} looks like a notebook of another assignment: none of its graded cells ({shown}) "
                     "is a part of this one")
    return Source(path.stem, str(path), tuple(cells), tuple(notes), len(solution), graded_ids=grade_ids)


def _owner(grade_ids: frozenset[str]) -> spec.Assignment | None:
    """The one registered assignment whose parts include all these graded cells, if exactly one does."""
    owners = [a for a in spec.ASSIGNMENTS.values() if grade_ids <= {p.id for p in a.all_parts}]
    return owners[0] if len(owners) == 1 else None


def recognise(path: str | Path) -> spec.Assignment | None:
    """The assignment a submission's notebooks belong to, by their nbgrader graded cells (None for a .py
    file, a notebook without nbgrader metadata, or notebooks of several assignments)."""
    graded = frozenset().union(*(s.graded_ids for s in extract(path, part_ids=frozenset()).sources))
    return _owner(graded) if graded else None


def read_python(path: Path) -> Source:
    try:
        code = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SubmissionError(f"{path}: not a UTF-8 text file") from None
    return Source(path.stem, str(path), tuple(_split_python(code)))


def _check_size(path: Path) -> None:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise SubmissionError(f"{path}: {path.stat().st_size} bytes is too large for a submission")


def extract(path: str | Path, assignment: spec.Assignment | None = None,
            part_ids: frozenset[str] | None = None) -> Extracted:
    """The code of a submission, one Source per notebook or file, in name order (for grading against
    `assignment`, default spec.DEFAULT; `part_ids`: the graded cells to expect instead, none for no note)."""
    if part_ids is None:
        part_ids = frozenset(p.id for p in (assignment or spec.DEFAULT).all_parts)
    p = Path(path)
    if not p.exists():
        raise SubmissionError(f"{p}: no such file or folder")
    if p.is_file():
        _check_size(p)
        if p.suffix == ".ipynb":
            return Extracted(str(p), (read_notebook(p, part_ids),))
        if p.suffix == ".py":
            return Extracted(str(p), (read_python(p),))
        raise SubmissionError(f"{p}: not a submission (expected a .ipynb notebook, a .py file or a folder)")
    if not p.is_dir():
        raise SubmissionError(f"{p}: not a file or folder")
    sources, notes = [], []
    for child in sorted(p.iterdir()):
        if child.name.startswith(".") or child.is_dir():
            if child.is_dir() and child.name not in (".ipynb_checkpoints", "__pycache__"):
                notes.append(f"ignored folder {child.name}/")
            continue
        if child.suffix == ".ipynb":
            _check_size(child)
            sources.append(read_notebook(child, part_ids))
        elif child.suffix != ".py" or child.name not in ("visible_checks.py", "memory_meter.py"):
            notes.append(f"ignored {child.name}: only notebooks are graded in a folder")
    if not sources:
        raise SubmissionError(f"{p}: no gradable notebook in this folder")
    return Extracted(str(p), tuple(sources), tuple(notes))
