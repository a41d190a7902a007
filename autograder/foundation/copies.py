"""A submitted notebook that is not the student's own work: a copy of the instructor's source notebook, or the
same file another student submitted. Such a notebook is not graded: its parts score 0 and the reason is a note
the instructor reads (the report, the class report, nbgrader's feedback); the student's other notebooks are
graded as usual.

The rules (docs/security.md, "Submitted files"):

* byte for byte the instructor's `source/<assignment>/<notebook>` (a copy made through a link, `cp`, a download):
  refused, at every entry point (`grade`, `grade-class`, nbgrader autograde). A notebook that still carries the
  source's solution markers is refused by extract.py itself;
* byte for byte the same notebook of another student of the class (`grade-class`, nbgrader autograde): refused
  for each of them, unless its solution cells are the released notebook's (a student who did nothing: every such
  notebook is alike, and nobody copied anybody). Work that only looks alike (the same code, run or saved apart)
  is never the same bytes: it is graded, and judging it is the instructor's business.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from . import i18n
from .extract import Extracted, Source, read_notebook
from .readfile import Unreadable, read_bytes

_ = i18n.message
SOURCE_COPY = _("{name} is byte for byte the instructor's source notebook (source/{assignment}/{name}), not a "
                "student's work: it was not graded (0 for its parts)")
SHARED = _("{name} is byte for byte the same file as the {name} submitted by {students}, and not the released "
           "notebook: it was not graded (0 for its parts); the instructor compares the submissions")


@dataclass(frozen=True)
class Originals:
    """What a submission's notebooks are compared with: the instructor's notebooks of its assignment (`source`,
    source/<assignment>/), the released ones (`release`: a notebook whose solution cells are these is untouched)
    and the other students' submission folders of the same assignment (`others`, their folder's parent named
    after the student)."""
    assignment: str
    source: Path | None = None
    release: Path | None = None
    others: tuple[Path, ...] = ()


def digest_of(path: Path, inside: Path | None = None) -> str | None:
    """sha256 of the file `path` (None when it cannot be read: it then matches nothing). Each file is read once per
    process while it is unchanged (grade-class compares every student's notebook with every other's: without the
    cache that is N^2 reads of a class)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _digest(str(path), None if inside is None else str(inside), st.st_dev, st.st_ino, st.st_size,
                   st.st_mtime_ns)


@functools.lru_cache(maxsize=8192)
def _digest(path: str, inside: str | None, _dev: int, _ino: int, _size: int, _mtime_ns: int) -> str | None:
    """sha256 of `path` as it is now; the file's identity, size and time are in the key, so a change reads it again."""
    try:
        return hashlib.sha256(read_bytes(Path(path), inside=None if inside is None else Path(inside))).hexdigest()
    except Unreadable:
        return None


def released_cells(path: Path) -> tuple[str, ...] | None:
    """The solution cells of the released notebook `path` (None when it cannot be read), parsed once per process
    while it is unchanged (as digest_of): grade-class compares every notebook of every submission with it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _released_cells(str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _released_cells(path: str, _dev: int, _ino: int, _size: int, _mtime_ns: int) -> tuple[str, ...] | None:
    released = read_notebook(Path(path))
    return None if released.error is not None else released.cells


def why_copied(source: Source, originals: Originals) -> i18n.Message | None:
    """Why the readable notebook `source` is not the student's own work (a Message), or None."""
    name = Path(source.path).name
    if not source.digest or not name.endswith(".ipynb"):
        return None
    if originals.source is not None and digest_of(originals.source / name) == source.digest:
        return SOURCE_COPY.format(name=name, assignment=originals.assignment)
    if not originals.others or originals.release is None:
        return None
    released = released_cells(originals.release / name)
    if released is None or released == source.cells:
        return None  # untouched (or no release to tell): alike by design, never a copy
    same = sorted(folder.parent.name for folder in originals.others
                  if digest_of(folder / name, inside=folder) == source.digest)
    return SHARED.format(name=name, students=", ".join(same)) if same else None


def refuse_copies(extracted: Extracted, originals: Originals) -> Extracted:
    """`extracted` with every notebook that is not the student's own work marked unreadable, with the reason."""
    sources = tuple(dataclasses.replace(s, cells=(), error=why) if s.error is None and (why := why_copied(s, originals))
                    else s for s in extracted.sources)
    return dataclasses.replace(extracted, sources=sources)
