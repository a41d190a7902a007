"""A submitted notebook that is not the student's own work (a copy of the instructor's source notebook), or that
is the same file another student submitted (flagged for the instructor's review, never refused).

The rules (docs/security.md, "Submitted files"):

* byte for byte the instructor's `source/<assignment>/<notebook>` (a copy made through a link, `cp`, a download):
  refused, at every entry point (`grade`, `grade-class`, nbgrader autograde): its parts score 0 and the reason is a
  note; the student's other notebooks are graded as usual. A notebook that still carries the source's solution
  markers is refused by extract.py itself;
* much the same code as another student's notebook of the class (`grade-class`, nbgrader autograde): compared by
  what the code says, not its bytes (fingerprint.py: tokens without comments, spacing or the names the student chose,
  less what the release gave; a one-line answer never makes a pair). Graded as usual, and flagged for the instructor's
  review on both sides (the part's `review` names the other student, the similarity and the pairs of cells; the
  student's note names nobody), unless its solution cells are the released notebook's (a student who did nothing).
  Likeness proves nothing by itself: judging it is the instructor's business.
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
from .fingerprint import Base, Likeness, NotebookPrints, base_of, cell_prints, likeness, notebook_prints
from .readfile import Unreadable, read_bytes
from .results import PartResult

_ = i18n.message
SOURCE_COPY = _("{name} is byte for byte the instructor's source notebook (source/{assignment}/{name}), not a "
                "student's work: it was not graded (0 for its parts)")
TWIN_NOTE = _("{name} is much the same code as another student's {name} (comments, spacing and names set aside): it "
              "was graded as usual, and flagged for your instructor to compare the two by hand")
TWIN_REVIEW = _("{name}: {percent}% the same code as {student}'s (cells alike, this notebook's ~ theirs: {cells})")


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
    """Why the readable notebook `source` is not the student's own work (a Message): byte for byte the source
    notebook; else None."""
    name = Path(source.path).name
    if not source.digest or not name.endswith(".ipynb") or originals.source is None:
        return None
    if digest_of(originals.source / name) == source.digest:
        return SOURCE_COPY.format(name=name, assignment=originals.assignment)
    return None


@functools.lru_cache(maxsize=64)
def _base(released: tuple[str, ...]) -> Base:
    return base_of(released)


@functools.lru_cache(maxsize=1024)
def _own_prints(cells: tuple[str, ...], numbers: tuple[int, ...], base: Base) -> NotebookPrints:
    return notebook_prints(cell_prints(cells, numbers, base))


def prints_of_file(path: Path, base: Base, inside: Path | None = None) -> NotebookPrints | None:
    """The solution cells of the notebook `path` as fingerprints (fingerprint.cell_prints), None when it cannot be read;
    computed once per process while the file is unchanged (as digest_of: every student is compared with every other)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _file_prints(str(path), base, None if inside is None else str(inside), st.st_dev, st.st_ino,
                        st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8192)
def _file_prints(path: str, base: Base, inside: str | None, _dev: int, _ino: int, _size: int,
                 _mtime_ns: int) -> NotebookPrints | None:
    read = read_notebook(Path(path), inside=None if inside is None else Path(inside))
    return None if read.error is not None else _own_prints(read.cells, read.numbers, base)


def same_as(source: Source, originals: Originals) -> tuple[Likeness, ...]:
    """The other students (their folder's parent's name) whose notebook of the same name says much the same as the
    readable notebook `source` (fingerprint.likeness), in name order; () when there are none, or when its solution
    cells are the released notebook's (untouched: alike by design) or there is no release to tell."""
    name = Path(source.path).name
    if source.error is not None or not name.endswith(".ipynb") or not originals.others or originals.release is None:
        return ()
    released = released_cells(originals.release / name)
    if released is None or released == source.cells:
        return ()
    base = _base(released)
    mine = _own_prints(source.cells, source.numbers, base)
    found = (likeness(folder.parent.name, mine, theirs) for folder in originals.others
             if (theirs := prints_of_file(folder / name, base, inside=folder)) is not None)
    return tuple(sorted((f for f in found if f is not None), key=lambda f: f.student))


def compare_copies(extracted: Extracted, originals: Originals) -> Extracted:
    """`extracted` with every copy of the source notebook marked unreadable, with the reason, and every notebook
    that other students' notebooks are much like marked with them (Source.same_as: fingerprint.Likeness)."""
    def compared(s: Source) -> Source:
        if s.error is not None:
            return s
        if why := why_copied(s, originals):
            return dataclasses.replace(s, cells=(), error=why)
        twins = same_as(s, originals)
        return dataclasses.replace(s, same_as=twins) if twins else s

    return dataclasses.replace(extracted, sources=tuple(compared(s) for s in extracted.sources))


def flag_twins(part: PartResult, notebook: str, alike: tuple[Likeness, ...], lang: str) -> PartResult:
    """`part`, of the notebook `notebook` (a file name) that other students' notebooks are much like (`alike`): its
    points kept, a note for the student (naming nobody) and, for the instructor, in `review` each other student with
    the similarity and the cells alike."""
    if not alike:
        return part
    note = TWIN_NOTE.format(name=notebook).render(lang)
    why = tuple(TWIN_REVIEW.format(name=notebook, percent=round(100 * a.similarity), student=a.student,
                                   cells=", ".join(f"{mine} ~ {theirs}" for mine, theirs in a.cells) or "-").render(lang)
                for a in alike)
    return dataclasses.replace(part, notes=part.notes + (note,), review=part.review + why)
