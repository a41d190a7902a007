"""The submitted notebook as nbgrader's autograde reads it (`c.Autograde.exporter_class`, nbgrader_plugin.configure).

TolerantNotebookExporter reads the file as `grade` does (readfile.py: no FIFO or device is opened, no link out of the
submission's folder is followed, a BOM is accepted, the JSON bounded before parsing: extract.parse_json), puts the
released notebook, marked with the reason, in place of a file that is no notebook or no work of the student's
(copies.why_copied), and names in the resources the other students who submitted the same bytes
(copies.same_as: graded as usual, flagged for the instructor's review by the AutograderPreprocessor).
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


UNREADABLE_KEY = "autograder_unreadable"  # notebook metadata: why the submitted file could not be read
SAME_AS_KEY = "autograder_same_as"  # the exporter's resources: the other students who submitted the same bytes


class TolerantNotebookExporter(NotebookExporter):
    """nbgrader's exporter, reading the submitted file as grade does (readfile.py: no FIFO or device is
    opened, a BOM is accepted). A file that is no notebook does not fail the student's whole submission
    (stock nbgrader then grades none of the notebooks after it): in its place goes the released notebook,
    marked with the reason, whose graded cells then score 0 with that reason in the feedback."""

    def from_filename(self, filename, resources=None, **kw):
        resources = resources if resources is not None else {}
        path = Path(filename)
        try:
            data = read_bytes(path, inside=path.parent)  # (a link out of the submission's folder: refused)
            parse_json(data, path.name)  # (JSON nested too deeply is refused here, with its sentence)
            nb = nbformat.reads(data.decode("utf-8-sig"), as_version=4)
            if why := self.not_own_work(data, path, resources):
                nb = self.placeholder(resources, i18n.render(why, notebook_language(nb) or spec.DEFAULT_LANGUAGE))
            else:  # (autograde reads the notebook twice, the second time from autograded/: the submitted file decides)
                resources[SAME_AS_KEY] = self.twins(path.name, resources)
        except (Unreadable, ValueError) as exc:  # (in the language the assignment's id says: self_attention_zh)
            lang = spec.split_edition((resources.get("nbgrader") or {}).get("assignment") or "")[1]
            why = exc.args[0] if exc.args and isinstance(exc.args[0], i18n.Message) else str(exc)
            nb = self.placeholder(resources, i18n.render(why, lang or spec.DEFAULT_LANGUAGE))
        except Exception as exc:  # noqa: BLE001 - nbformat's reader refuses in many ways; each is a reason
            nb = self.placeholder(resources, f"{path.name} is not a notebook nbformat can read "
                                             f"({type(exc).__name__}: {str(exc)[:80]})")
        meta = resources.setdefault("metadata", {}) or {}
        resources["metadata"] = meta
        meta.update(name=path.stem, path=str(path.parent))
        return self.from_notebook_node(nb, resources, **kw)

    def not_own_work(self, data: bytes, path: Path, resources: dict) -> i18n.Message | None:
        """Why the submitted notebook is not the student's own work (the source's markers, the source's bytes:
        copies.py), or None."""
        source = parse_notebook(data, path)
        if source.error is not None:  # (the solution markers; a notebook that does not parse is nbformat's to say)
            return source.error if getattr(source.error, "msgid", None) == MARKED.msgid else None
        originals = self.originals(path.parent, resources)
        return why_copied(source, originals) if originals else None

    def twins(self, name: str, resources: dict) -> tuple[str, ...]:
        """The other students who submitted byte for byte the same notebook `name` as this one (copies.same_as)."""
        info, coursedir = resources.get("nbgrader") or {}, getattr(self.parent, "coursedir", None)
        if coursedir is None or not info.get("assignment") or not info.get("student"):
            return ()
        folder = Path(coursedir.format_path(coursedir.submitted_directory, info["student"], info["assignment"]))
        originals = self.originals(folder, resources)
        return same_as(read_notebook(folder / name, inside=folder), originals) if originals else ()

    def originals(self, folder: Path, resources: dict) -> Originals | None:
        """What the notebooks of the student's folder `folder` are compared with (copies.Originals), or None
        outside a course."""
        info, coursedir = resources.get("nbgrader") or {}, getattr(self.parent, "coursedir", None)
        assignment, student = info.get("assignment"), info.get("student")
        if coursedir is None or not assignment:
            return None
        own = os.path.realpath(folder)
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
