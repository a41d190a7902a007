"""How nbgrader autograde reads a submitted notebook for this course, and what of it the grading process reads.

nbgrader's autograde reads each notebook twice through its exporter (`c.Autograde.exporter_class`, set by
nbgrader_plugin.configure): its sanitizing pass reads the submitted file and writes its own copy of it into the
autograded folder (nbformat's rewrite: cell ids added, every text split into a list of lines); its autograding pass
reads that copy back. `TolerantNotebookExporter` makes every check on the submitted bytes, in the first pass: the JSON
bounds of extract.parse_json (MAX_NOTEBOOK_VALUES counted on what the student submitted, as `python -m autograder
grade` counts them), the solution markers, a copy of another's work. nbgrader's own copy is not counted again (it
holds more values than the file it was made from); the autograding pass names, in the resources, the other students
whose notebook is much the same code (copies.same_as: graded as usual, flagged for the instructor's review by
the AutograderPreprocessor). `gradable(nb)` is what the grading process is given of the notebook: only what extract
reads, so that it never holds more values than the submitted file either.
"""
from __future__ import annotations

import glob
import os
from pathlib import Path

import nbformat
from nbconvert.exporters import NotebookExporter

from ..foundation import i18n, spec
from ..foundation.copies import Originals, same_as, why_copied
from ..foundation.extract import MARKED, notebook_language, parse_json, parse_notebook, read_notebook
from ..foundation.readfile import Unreadable, read_bytes
from .duplicates import COPY_KEY


UNREADABLE_KEY = "autograder_unreadable"  # notebook metadata: why the submitted file could not be read
SAME_AS_KEY = "autograder_same_as"  # the resources: the other students whose notebook is much like it


class TolerantNotebookExporter(NotebookExporter):
    """nbgrader's exporter, reading the submitted file as grade does (readfile.py: no FIFO or device is
    opened, a BOM is accepted). A file that is no notebook does not fail the student's whole submission
    (stock nbgrader then grades none of the notebooks after it): in its place goes the released notebook,
    marked with the reason, whose graded cells then score 0 with that reason in the feedback. The checks are the
    submitted file's: nbgrader's own copy of it, which the autograding pass reads, is only parsed."""

    def from_filename(self, filename, resources=None, **kw):
        resources = resources if resources is not None else {}
        path = Path(filename)
        try:
            data = read_bytes(path, inside=path.parent)  # (a link out of the submission's folder: refused)
            copy = self.nbgraders_copy(path, resources)  # (its submitted file was checked when the first pass read it)
            if not copy:  # (JSON nested too deeply or of too many values is refused here, with its sentence)
                parse_json(data, path.name)
            nb = nbformat.reads(data.decode("utf-8-sig"), as_version=4)
            if not copy and (why := self.not_own_work(data, path, resources)):
                nb = self.placeholder(resources, i18n.render(why, notebook_language(nb) or spec.DEFAULT_LANGUAGE))
            if copy and UNREADABLE_KEY not in nb.metadata:  # (the pass that grades: the submitted file decides)
                resources[SAME_AS_KEY] = self.twins(path.name, resources)
        except (Unreadable, ValueError) as exc:  # (in the language the assignment's id says: self_attention_zh)
            lang = spec.split_edition((resources.get("nbgrader") or {}).get("assignment") or "")[1]
            why = exc.args[0] if exc.args and isinstance(exc.args[0], i18n.Message) else str(exc)
            nb = self.placeholder(resources, i18n.render(why, lang or spec.DEFAULT_LANGUAGE))
        except Exception as exc:  # noqa: BLE001 - nbformat's reader refuses in many ways; each is a reason
            nb = self.placeholder(resources, f"{path.name} is not a notebook nbformat can read "
                                             f"({type(exc).__name__}: {str(exc)[:80]})")
        return self.from_notebook_node(nb, self.named(resources, path), **kw)

    @staticmethod
    def named(resources: dict, path: Path) -> dict:
        """`resources` with the notebook's name and folder, as nbconvert's from_filename gives them."""
        meta = resources.setdefault("metadata", {}) or {}
        resources["metadata"] = meta
        meta.update(name=path.stem, path=str(path.parent))
        return resources

    def nbgraders_copy(self, path: Path, resources: dict) -> bool:
        """Whether `path` is the copy nbgrader's sanitizing pass wrote into the student's autograded folder, which its
        autograding pass reads back (the folder's name as nbgrader makes it, links not followed: a submitted file is
        never taken for it)."""
        info, coursedir = resources.get("nbgrader") or {}, getattr(self.parent, "coursedir", None)
        if coursedir is None or not info.get("student") or not info.get("assignment"):
            return False
        own = coursedir.format_path(coursedir.autograded_directory, info["student"], info["assignment"])
        return os.path.normpath(os.path.abspath(path.parent)) == os.path.normpath(os.path.abspath(own))

    def not_own_work(self, data: bytes, path: Path, resources: dict) -> i18n.Message | None:
        """Why the submitted notebook is not the student's own work (the source's markers, the source's bytes:
        copies.py), or None."""
        source = parse_notebook(data, path)
        if source.error is not None:  # (the solution markers; a notebook that does not parse is nbformat's to say)
            return source.error if getattr(source.error, "msgid", None) == MARKED.msgid else None
        originals = self.originals(resources)
        return why_copied(source, originals) if originals else None

    def twins(self, name: str, resources: dict) -> tuple:
        """The other students whose notebook `name` is much the same code as this student's (copies.same_as)."""
        info, coursedir = resources.get("nbgrader") or {}, getattr(self.parent, "coursedir", None)
        originals = self.originals(resources)
        if originals is None or not info.get("student"):
            return ()
        folder = Path(coursedir.format_path(coursedir.submitted_directory, info["student"], info["assignment"]))
        return same_as(read_notebook(folder / name, inside=folder), originals)

    def originals(self, resources: dict) -> Originals | None:
        """What the student's submitted notebooks are compared with (copies.Originals), or None outside a course."""
        info, coursedir = resources.get("nbgrader") or {}, getattr(self.parent, "coursedir", None)
        assignment, student = info.get("assignment"), info.get("student")
        if coursedir is None or not assignment:
            return None
        own = os.path.realpath(coursedir.format_path(coursedir.submitted_directory, student or "", assignment))
        others = tuple(Path(d) for d in sorted(glob.glob(coursedir.format_path(coursedir.submitted_directory, "*",
                                                                               assignment)))
                       if os.path.realpath(d) != own and Path(d).parent.name != student and os.path.isdir(d))
        return Originals(assignment, Path(coursedir.format_path(coursedir.source_directory, ".", assignment)),
                         Path(coursedir.format_path(coursedir.release_directory, ".", assignment)), others)

    def placeholder(self, resources: dict, reason: str):
        """The released notebook (stubs, never solutions), marked unreadable; an empty one without a release."""
        info = resources.get("nbgrader") or {}
        coursedir = getattr(self.parent, "coursedir", None)
        nb = None
        if coursedir is not None and info.get("assignment") and info.get("notebook"):
            release = Path(coursedir.format_path(coursedir.release_directory, ".", info["assignment"]))
            try:
                nb = nbformat.reads(read_bytes(release / f"{info['notebook']}.ipynb").decode("utf-8-sig"),
                                    as_version=4)
            except Exception:  # noqa: BLE001 - no usable release: an empty notebook carries the reason
                nb = None
        nb = nb or nbformat.v4.new_notebook()
        nb.metadata[UNREADABLE_KEY] = reason
        self.log.warning("autograder: %s; its graded cells score 0", reason)
        return nb


def gradable(nb) -> dict:
    """What the grading process is given of the notebook `nb` (as nbgrader read it): each cell's type, and of a code
    cell its source and the nbgrader metadata extract reads (a copy of a solution cell: a solution cell again,
    duplicates.py); the edition's language. Nothing else: it holds no more JSON values than the submitted file did
    (nbformat added the cells' ids, nbgrader the checksums, points and outputs), so that the cap counts the same."""
    doc: dict = {"cells": [gradable_cell(c) for c in nb.get("cells", [])]}
    if lang := notebook_language(nb):
        doc["metadata"] = {"course": {"lang": lang}}
    return doc


def gradable_cell(cell) -> dict:
    """One cell of gradable(): no more keys than the submitted cell had."""
    if not isinstance(cell, dict) or cell.get("cell_type") != "code":
        return {"cell_type": cell.get("cell_type")} if isinstance(cell, dict) else {}
    out = {key: cell[key] for key in ("cell_type", "source") if key in cell}
    meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
    if isinstance(meta.get(COPY_KEY), str):
        out["metadata"] = {"nbgrader": {"solution": True, "grade_id": meta[COPY_KEY]}}
    elif "nbgrader" in meta:
        nbgrader = meta["nbgrader"]
        out["metadata"] = {"nbgrader": {k: nbgrader[k] for k in ("grade", "solution", "grade_id") if k in nbgrader}
                           if isinstance(nbgrader, dict) else nbgrader}
    return out
