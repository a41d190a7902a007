"""nbgrader autograde's sanitizing pass: a cell pasted twice costs that cell, never the rest of the class.

A cell copied and pasted in JupyterLab keeps its nbgrader metadata (a new cell id, the same grade_id); an edited
file can give two cells one grade_id. nbgrader's DeduplicateIds keeps the last of them and sets the others' nbgrader
metadata to {}, which CheckCellMetadata then reads as schema version 0: SchemaTooOldError, and `nbgrader autograde`
stops there, so that no student after that one is graded, on every run. `DropDuplicateCells` takes its place in the
sanitizing preprocessors (`sanitize_preprocessors()`, set by nbgrader_plugin.configure):

* of the cells that share a grade_id it keeps the real one: the cell whose id is the released notebook's cell of
  that grade_id, else the first; each other one loses its nbgrader metadata (an ordinary cell: it earns nothing, and
  nbgrader's checks pass);
* a copy of a solution code cell is marked (`COPY_KEY`), so that its code is still graded where it stands, as
  `python -m autograder grade` grades the submitted file: pasting a cell changes neither which code is graded nor
  the points;
* the instructor's log names each copy, and the notebook's metadata (`DUPLICATES_KEY`) carries them to the
  autograding pass, which says so in the student's feedback (`duplicate_notes`).

A student's own file never sets either key: both are removed from every submitted notebook first.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nbgrader.preprocessors import DeduplicateIds, NbGraderPreprocessor

from ..foundation import i18n
from ..foundation.readfile import Unreadable, read_bytes

_ = i18n.message

COPY_KEY = "autograder_copy_of"  # cell metadata of a copy of a solution cell: the grade_id of the cell it copies
DUPLICATES_KEY = "autograder_duplicates"  # notebook metadata: [{"cell": position from 1, "grade_id": ...}, ...]
DUPLICATE = _("{name}: cell {cell} repeats the grade_id {grade_id} of another cell (a copy pasted in the notebook?): "
              "it stays in the notebook as an ordinary cell, and only the original is graded as {grade_id}")


@dataclass(frozen=True)
class Copy:
    """A cell that repeats another cell's grade_id: its position (from 1), the grade_id, and whether it is a
    solution cell of code (its code is then graded where it stands)."""
    cell: int
    grade_id: str
    code_solution: bool


def nbgrader_id(cell) -> str | None:
    """The grade_id of a cell nbgrader checks for uniqueness (a grade, solution or locked cell), else None."""
    meta = (cell.get("metadata") or {}).get("nbgrader") if isinstance(cell, dict) else None
    if not isinstance(meta, dict) or not (meta.get("grade") or meta.get("solution") or meta.get("locked")):
        return None
    grade_id = meta.get("grade_id")
    return grade_id if isinstance(grade_id, str) else None


def copies(cells: list, released: dict[str, str]) -> tuple[Copy, ...]:
    """The cells of `cells` that repeat a grade_id: of each grade_id's cells, all but the one whose id is
    `released[grade_id]` (the released notebook's cell), or all but the first when none is."""
    positions: dict[str, list[int]] = {}
    for index, cell in enumerate(cells):
        if (grade_id := nbgrader_id(cell)) is not None:
            positions.setdefault(grade_id, []).append(index)
    found = []
    for grade_id, where in positions.items():
        real = next((i for i in where if grade_id in released and cells[i].get("id") == released[grade_id]), where[0])
        found += [Copy(i + 1, grade_id, cells[i].get("cell_type") == "code"
                       and bool(cells[i]["metadata"]["nbgrader"].get("solution")))
                  for i in where if i != real]
    return tuple(sorted(found, key=lambda c: c.cell))


def released_ids(path: Path) -> dict[str, str]:
    """{grade_id: cell id} of the released notebook `path`; {} when it cannot be read."""
    try:
        nb = json.loads(read_bytes(path).decode("utf-8-sig"))
        cells = nb.get("cells") if isinstance(nb, dict) else None
    except (Unreadable, ValueError):
        return {}
    return {gid: c["id"] for c in cells if (gid := nbgrader_id(c)) is not None and isinstance(c.get("id"), str)
            } if isinstance(cells, list) else {}


def duplicate_notes(nb, name: str) -> list[i18n.Message]:
    """The student's notes on the copies DropDuplicateCells found in the notebook `name` (taken out of its metadata)."""
    found = nb.metadata.pop(DUPLICATES_KEY, None)
    return [DUPLICATE.format(name=name, cell=c.get("cell"), grade_id=c.get("grade_id"))
            for c in (found if isinstance(found, list) else []) if isinstance(c, dict)]


class DropDuplicateCells(NbGraderPreprocessor):
    """nbgrader's DeduplicateIds, without stopping the class (the module's docstring): a copy becomes an ordinary
    cell (a copy of a solution code cell keeps its code graded), the original keeps its grade_id."""

    def preprocess(self, nb, resources):
        nb.metadata.pop(DUPLICATES_KEY, None)  # (only this preprocessor says which cells are copies)
        for cell in nb.cells:
            cell.get("metadata", {}).pop(COPY_KEY, None)
        release = self.release(resources)
        found = copies(nb.cells, released_ids(release) if release else {})
        info = resources.get("nbgrader") or {}
        for copy in found:
            cell = nb.cells[copy.cell - 1]
            del cell.metadata["nbgrader"]
            if copy.code_solution:
                cell.metadata[COPY_KEY] = copy.grade_id
            self.log.warning("autograder: student %s: %s", info.get("student"), DUPLICATE.format(
                name=f"{info.get('notebook')}.ipynb", cell=copy.cell, grade_id=copy.grade_id))
        if found:
            nb.metadata[DUPLICATES_KEY] = [{"cell": c.cell, "grade_id": c.grade_id} for c in found]
        return nb, resources

    def release(self, resources) -> Path | None:
        """The released notebook of the one being sanitized, where nbgrader's course directory names one."""
        info = resources.get("nbgrader") or {}
        coursedir = getattr(getattr(self.parent, "parent", None), "coursedir", None)
        if coursedir is None or not info.get("assignment") or not info.get("notebook"):
            return None
        return Path(coursedir.format_path(coursedir.release_directory, ".", info["assignment"])) / (
            f"{info['notebook']}.ipynb")


def sanitize_preprocessors() -> list:
    """nbgrader autograde's sanitizing preprocessors (its default list, the same in nbgrader 0.9.5 and 0.9.6) with
    DeduplicateIds replaced by DropDuplicateCells."""
    from nbgrader.converters.autograde import Autograde  # noqa: PLC0415 - the stock list

    stock = Autograde.class_traits()["sanitize_preprocessors"].make_dynamic_default()
    return [DropDuplicateCells if pp is DeduplicateIds else pp for pp in stock]
