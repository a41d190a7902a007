"""Stage 1 of grading: find the student's code in a notebook, a folder of notebooks or a .py file.

Nothing here runs student code: notebooks are read as JSON, cells are read as text.
From a notebook we take the cells that nbgrader marks as solution cells (or, in a
notebook without nbgrader metadata, every code cell). IPython magics and shell escapes
are dropped, with a note, since the worker runs plain Python.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import i18n, spec
from .readfile import Unreadable, entry_kind, list_folder, read_bytes


_ = i18n.message


class SubmissionError(Exception):
    """The submission cannot be graded at all; the message is one line for the user."""


@dataclass(frozen=True)
class Source:
    name: str  # the notebook's or file's stem, e.g. "02_masks"
    path: str
    cells: tuple[str, ...]
    notes: tuple = ()  # i18n.Message or text
    assignment_cells: int = 0  # nbgrader solution cells found (0: a plain notebook or a .py file)
    error: i18n.Message | str | None = None  # why nothing could be read from this file (the parts then score 0)
    graded_ids: frozenset[str] = frozenset()  # the grade_ids of the notebook's nbgrader graded cells
    lang: str | None = None  # the edition's language its metadata names (metadata.course.lang), if any
    digest: str = ""  # sha256 of the bytes read (copies.py compares it with the source's and other students')
    same_as: tuple = ()  # fingerprint.Likeness: the other students whose notebook is much like it (copies.py)
    # where each of `cells` sits in the notebook, counting every cell from the top (1-based, what a student counts);
    # empty for a .py file, whose chunks are numbered in order
    numbers: tuple[int, ...] = ()

    def number(self, index: int) -> int:
        """The number a student finds `cells[index]` by: its place among all the notebook's cells."""
        return self.numbers[index] if index < len(self.numbers) else index + 1

    def notes_against(self, assignment: spec.Assignment) -> tuple:
        """What is said about this file when it is graded against `assignment`: its notes, and last, when its
        graded cells are all another assignment's, which one (or that none of them is this one's)."""
        ids = frozenset(p.id for p in assignment.all_parts)
        if not self.graded_ids or self.graded_ids & ids:
            return self.notes
        owner, name = _owner(self.graded_ids), Path(self.path).name
        shown = ", ".join(sorted(self.graded_ids))[:80]
        return self.notes + (OWNED.format(name=name, owner=owner.id, ids=shown) if owner else
                             OTHER_ASSIGNMENT.format(name=name, ids=shown),)


@dataclass(frozen=True)
class Extracted:
    """A submission read once, at the command's entry point, and passed down: every stage of grading takes its
    code, its notes and what its notebooks say about themselves (graded cells, language) from here."""
    path: str  # as the user named it (the JSON document's "submission")
    sources: tuple[Source, ...]
    notes: tuple = field(default=())  # i18n.Message or text

    @property
    def lang(self) -> str | None:
        """The language the notebooks' metadata names (the first that names one), else None."""
        return next((s.lang for s in self.sources if s.lang), None)


MAGIC = re.compile(r"^\s*(%|!)")


def clean_cell(code: str) -> tuple[str, list[str]]:
    """Drop IPython magics (%, %%) and shell escapes (!); return the code and what was dropped."""
    if code.lstrip().startswith("%%"):
        return "", [_("a cell magic ({magic}) was skipped").format(magic=code.strip().splitlines()[0][:40])]
    kept, dropped = [], []
    for line in code.splitlines():
        if MAGIC.match(line):
            dropped.append(line.strip()[:40])
            kept.append("")  # keep line numbers stable for error messages
        else:
            kept.append(line)
    notes = [_("skipped IPython line {line}").format(line=repr(d)) for d in dropped]
    return "\n".join(kept), notes


def _split_python(code: str) -> list[str]:
    """A .py file as cells: whole if it parses, else one chunk per top-level statement block."""
    try:
        ast.parse(code)
        return [code]
    except (SyntaxError, ValueError):  # (ValueError: a null byte)
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


# What a student reads about a notebook that is not quite one (whole sentences, for translation).
NOT_JSON = _("{name} could not be read as a notebook ({error})")
TOO_DEEP = _("{name} could not be read as a notebook: its JSON is nested too deeply")
TOO_MANY_VALUES = _("{name} could not be read as a notebook: its JSON holds more than {count} values")
NO_CELLS = _("{name} is not a notebook: it has no list of cells")
BAD_META = _("{name}: the nbgrader metadata of cell {cells} is not a dictionary: read as a plain cell")
BAD_SOURCE = _("{name}: the source of cell {cells} is not text: that cell was skipped")
BAD_GRADE_ID = _("{name}: the grade_id of cell {cells} is not a string: ignored")
OTHER_ASSIGNMENT = _("{name} looks like a notebook of another assignment: none of its graded cells ({ids}) is a part "
                     "of this one")
OWNED = _("{name} is a notebook of assignment {owner} (its graded cells: {ids}): grade it with --assignment {owner}")
MISSING_PATH = _("{path}: no such file or folder")
MARKED = _("{name} still carries the instructor's solution markers: it is the course's source notebook, not a "
           "student's work; it was not graded (0 for its parts)")
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
PY_NOT_UTF8 = "{path}: not a UTF-8 text file"
PY_TOO_DEEP = "{path}: nested too deeply for Python to read (a line of thousands of brackets or signs?)"


# A notebook's JSON, bounded before it is parsed: each value costs every reader (this one, nbformat, nbgrader's
# preprocessors) about a hundred bytes per copy, and a 20 MB file of `[[],[],...]` or of nested metadata held nbgrader
# for minutes and gigabytes. A real notebook holds a few thousand values, nested under ten deep.
MAX_NOTEBOOK_VALUES = 2**18
MAX_NOTEBOOK_DEPTH = 64
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_values(data: bytes) -> int:
    """At least the number of values of a JSON document outside its strings (a value but the first follows a comma or
    opens a list or an object), counted at C speed before anything is built; strings are skipped only when the count
    with them is over the cap (code cells are full of commas and brackets)."""
    count = data.count(b",") + data.count(b"[") + data.count(b"{") + 1
    if count <= MAX_NOTEBOOK_VALUES:
        return count
    bare = _STRING.sub(b"0", data)
    return bare.count(b",") + bare.count(b"[") + bare.count(b"{") + 1


def _depth(value) -> int:
    """How deep lists and dicts nest in `value` (a JSON document of at most MAX_NOTEBOOK_VALUES values)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def parse_json(data: bytes, name: str):
    """A notebook file's JSON (a UTF-8 byte-order mark is accepted); ValueError with one sentence, also for a
    document of more than MAX_NOTEBOOK_VALUES values (refused before parsing) or nested deeper than MAX_NOTEBOOK_DEPTH."""
    if json_values(data) > MAX_NOTEBOOK_VALUES:
        raise ValueError(TOO_MANY_VALUES.format(name=name, count=MAX_NOTEBOOK_VALUES))
    try:
        nb = json.loads(data.decode("utf-8-sig"))
    except RecursionError:
        raise ValueError(TOO_DEEP.format(name=name)) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        raise ValueError(NOT_JSON.format(name=name, error=f"{type(exc).__name__}: {str(exc)[:80]}")) from None
    if _depth(nb) > MAX_NOTEBOOK_DEPTH:
        raise ValueError(TOO_DEEP.format(name=name))
    return nb


def _nbgrader(cell: dict, bad: list[int], index: int) -> dict:
    meta = cell.get("metadata")
    meta = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    if isinstance(meta, dict):
        return meta
    bad.append(index)
    return {}


def _text(source) -> str | None:
    """A cell's source as text (a string, or nbformat's list of strings); None when it is neither."""
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        return "".join(source)
    return None


def _cells_note(template: i18n.Message, name: str, cells: list[int]) -> list[i18n.Message]:
    return [template.format(name=name, cells=", ".join(map(str, cells[:10])) + (", ..." if len(cells) > 10 else ""))
            ] if cells else []


def read_notebook(path: Path, inside: Path | None = None) -> Source:
    """A notebook's solution cells (every code cell without nbgrader metadata) and its graded cells' ids, read
    as a file of the folder `inside` (readfile.read_bytes: no link out of it is followed). A file that is not a
    notebook, or that still carries the source's solution markers, gives a Source with `error` (its parts then
    score 0, with the reason)."""
    try:
        data = read_bytes(path, inside=inside)
    except Unreadable as exc:
        return Source(path.stem, str(path), (), error=exc.args[0])
    return parse_notebook(data, path)


def marker_in(cells) -> str | None:
    """The first of the instructor's solution markers that a line of these cells' text is, if any."""
    for cell in cells:
        source = _text(cell.get("source", "")) if isinstance(cell, dict) else None
        for line in (source or "").splitlines():
            if line.strip() in SOLUTION_MARKERS:
                return line.strip()
    return None


def parse_notebook(data: bytes, path: Path) -> Source:
    """read_notebook on the bytes `data` of the notebook `path`."""
    digest = hashlib.sha256(data).hexdigest()
    try:
        nb = parse_json(data, path.name)
    except ValueError as exc:
        return Source(path.stem, str(path), (), error=exc.args[0], digest=digest)
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return Source(path.stem, str(path), (), error=NO_CELLS.format(name=path.name), digest=digest)
    if marker_in(nb["cells"]):
        return Source(path.stem, str(path), (), error=MARKED.format(name=path.name), digest=digest)
    bad_meta: list[int] = []
    code_cells = [(i, c, _nbgrader(c, bad_meta, i)) for i, c in enumerate(nb["cells"], 1)
                  if isinstance(c, dict) and c.get("cell_type") == "code"]
    solution = [(i, c) for i, c, meta in code_cells if meta.get("solution")]
    cells, numbers, notes, bad_source = [], [], [], []
    for index, cell in solution or [(i, c) for i, c, _ in code_cells]:
        source = _text(cell.get("source", ""))
        if source is None:
            bad_source.append(index)
            continue
        code, dropped = clean_cell(source)
        notes.extend(dropped)
        cells.append(code)
        numbers.append(index)
    if not solution and code_cells:
        notes.append(_("no nbgrader solution cells: every code cell was taken"))
    notes += _cells_note(BAD_META, path.name, bad_meta) + _cells_note(BAD_SOURCE, path.name, bad_source)
    graded = [(i, meta.get("grade_id")) for i, _, meta in code_cells if meta.get("grade")]
    notes += _cells_note(BAD_GRADE_ID, path.name, [i for i, gid in graded if not isinstance(gid, str)])
    grade_ids = frozenset(gid for _, gid in graded if isinstance(gid, str))
    return Source(path.stem, str(path), tuple(cells), tuple(notes), len(solution), graded_ids=grade_ids,
                  lang=notebook_language(nb), digest=digest, numbers=tuple(numbers))


def notebook_language(nb: dict) -> str | None:
    """The language of the edition a notebook belongs to: its metadata's course.lang (the Chinese edition's
    notebooks say "zh"); None when it names no known language (an English notebook names none)."""
    meta = nb.get("metadata")
    course = meta.get("course") if isinstance(meta, dict) else None
    lang = course.get("lang") if isinstance(course, dict) else None
    return lang if lang in spec.LANGUAGES else None


def _owner(grade_ids: frozenset[str]) -> spec.Assignment | None:
    """The one registered assignment whose parts include all these graded cells, if exactly one does."""
    owners = [a for a in spec.ASSIGNMENTS.values() if grade_ids <= {p.id for p in a.all_parts}]
    return owners[0] if len(owners) == 1 else None


def recognise(extracted: Extracted) -> spec.Assignment | None:
    """The assignment a submission's notebooks belong to, by their nbgrader graded cells (None for a .py
    file, a notebook without nbgrader metadata, or notebooks of several assignments)."""
    graded = frozenset().union(*(s.graded_ids for s in extracted.sources))
    return _owner(graded) if graded else None


def read_python(path: Path) -> Source:
    try:
        code = read_bytes(path, inside=path.parent).decode("utf-8-sig")
    except Unreadable as exc:
        raise SubmissionError(f"{path}: {exc}") from None
    except UnicodeDecodeError:
        raise SubmissionError(PY_NOT_UTF8.format(path=path)) from None
    try:
        cells = _split_python(code)
    except (MemoryError, RecursionError):
        raise SubmissionError(PY_TOO_DEEP.format(path=path)) from None
    return Source(path.stem, str(path), tuple(cells))


def extract(path: str | Path) -> Extracted:
    """The code of a submission, one Source per notebook or file, in name order: read once, whatever
    assignment it is then graded against (Source.notes_against). SubmissionError (one line) when there is
    nothing to grade."""
    p = Path(path)
    kind = entry_kind(p)
    if kind == "file":
        if p.suffix == ".ipynb":  # (a notebook named alone: its folder is the submission's)
            return Extracted(str(path), (read_notebook(p, inside=p.parent),))
        if p.suffix == ".py":
            return Extracted(str(path), (read_python(p),))
        raise SubmissionError(f"{p}: not a submission (expected a .ipynb notebook, a .py file or a folder)")
    if kind != "dir":
        raise SubmissionError(MISSING_PATH.format(path=p) if not os.path.lexists(p) else f"{p}: {kind}")
    try:
        children = list_folder(p)
    except Unreadable as exc:
        raise SubmissionError(f"{p}: {exc}") from None
    sources, notes = [], []
    for child in children:
        if child.name.startswith("."):
            continue
        kind = entry_kind(child)
        if kind == "dir":
            if child.name not in ("__pycache__",):
                notes.append(_("ignored folder {name}/").format(name=child.name))
        elif child.suffix == ".ipynb":
            sources.append(read_notebook(child, inside=p) if kind == "file"
                           else Source(child.stem, str(child), (), error=kind))
        elif child.suffix != ".py" or child.name not in ("visible_checks.py", "memory_meter.py"):
            notes.append(_("ignored {name}: only notebooks are graded in a folder").format(name=child.name))
    if not sources:
        raise SubmissionError(f"{p}: no gradable notebook in this folder")
    return Extracted(str(path), tuple(sources), tuple(notes))
