"""formgrader's grading page, safe to open: no script of a student's runs in it.

formgrader (nbgrader's server extension, in the instructor's lab) shows a submission with nbconvert's stock
HTMLExporter and its `formgrade` template, which put a student's markdown and outputs in the page as they
are. The page is the instructor's own, logged in to the lab: an `<img src=x onerror=...>` at the end of a
written answer could read the `_xsrf` cookie, write files through `/api/contents` and save grades through
formgrader's API. formgrader makes its exporter from the course's configuration (`HTMLExporter(config=...)`,
nbgrader_config.py), so `nbgrader_plugin.configure` gives it (`configure`):

* `StudentPieces`, a preprocessor that runs after nbconvert's own: every cell and output cut to what a page
  shows (pagecap.py), raw cells and outputs sanitized, cell metadata reduced to nbgrader's, with a grade_id
  nbgrader accepts, the notebook's widget state dropped (pageclean.clean_notebook, as the feedback page);
* the template's `strip_files_prefix` filter, the last rewrite of a markdown cell's HTML, replaced by
  pageclean.strip_files_prefix: the stock rewrite, then the sanitizer and the final pass over what it made.

formgrader's page needs its own scripts (the grading fields, the keyboard shortcuts) and inline handlers, so
it gets no Content-Security-Policy that forbids scripts: what holds is that none of the student's pieces can
run one.
"""
from __future__ import annotations

from nbconvert.preprocessors import Preprocessor

from . import pageclean


class StudentPieces(Preprocessor):
    """The notebook formgrader renders, with every student piece cut and cleaned (pageclean.clean_notebook)."""

    def preprocess(self, nb, resources):
        return pageclean.clean_notebook(nb), resources


def configure(c) -> None:
    """Clean the student pieces of every page an HTMLExporter made from the configuration `c` renders (the module's
    docstring). FeedbackExporter, a subclass, cleans its notebook itself: not twice (the cut would be cut again)."""
    c.HTMLExporter.preprocessors = [f"{StudentPieces.__module__}.{StudentPieces.__name__}"]
    c.HTMLExporter.filters = {"strip_files_prefix": f"{pageclean.__name__}.strip_files_prefix"}
    c.FeedbackExporter.preprocessors = []
