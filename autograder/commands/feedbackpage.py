"""nbgrader's feedback pages, safe to open: no script of a student's runs in them.

`nbgrader generate_feedback` writes one HTML page per notebook (feedback/<student>/<assignment>/), which
the class report links to and the student opens. Stock nbgrader renders a student's markdown and outputs
as they are: a `<script>`, an `<img onerror>`, a `javascript:` link or an `<svg onload>` in a cell runs in
the instructor's browser (its feedback template bypasses nbconvert's `sanitize_html`). FeedbackExporter,
the course's exporter for generate_feedback (nbgrader_plugin.configure), makes every page so:

* every markdown rendering (cells, and nbgrader's comments) and every raw cell goes through an HTML
  sanitizer (bleach, an allow-list of tags and attributes; links http, https, mailto or relative; images
  only inline PNG/JPEG/GIF data). Not only the unlocked cells: a locked cell's source is restored from the
  instructor's copy by autograde, but its metadata and outputs still come from the student's file;
* outputs keep only text/plain, base64 PNG/JPEG, sanitized text/html (text/markdown rendered, then
  sanitized); SVG, JavaScript, LaTeX, widgets and output metadata are dropped; cells keep only their
  nbgrader metadata, with a grade_id nbgrader would accept;
* the page carries a Content-Security-Policy (CSP) that forbids every script and every load from outside
  the page, and the template's own scripts (MathJax, from the network) are removed: math shows as its TeX
  source;
* after the template's last rewrite (its `strip_files_prefix` turns `files/javascript:...` into
  `javascript:...`), the whole page goes through pageclean.defuse_soup: no event handler, no URL that can
  run code;
* each cell's source and each output is cut to what a page shows, with a note (pagecap.py), and each page
  is rendered in a child process with a deadline and a memory limit (pagerender.py): a notebook past them
  gets a short page that says why, and the rest of the class gets its pages.

The cleaning itself is pageclean.py's, which formgrader's grading page shares (formgraderpage.py).
"""
from __future__ import annotations

import html

from bs4 import BeautifulSoup
from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from traitlets import Float, Int

from ..foundation import i18n
from ..foundation.limits import Limits
from . import pagecap, pageclean, pagerender

_ = i18n.message

CSP = ("default-src 'none'; script-src 'none'; object-src 'none'; frame-src 'none'; style-src 'unsafe-inline'; "
       "img-src data:; font-src data:; base-uri 'none'; form-action 'none'")
PAGE_SECONDS = 60.0  # an honest notebook's page renders in about a second
NOT_MADE = {
    "deadline": _("This page was not made: rendering the notebook took longer than {seconds:g} seconds."),
    "memory": _("This page was not made: rendering the notebook needed more than {mib} MiB of memory."),
}
FAILED = _("This page was not made: rendering the notebook failed ({why}).")
NOT_MADE_TITLE = _("Feedback not made")


def with_policy(page: str) -> str:
    """The page with the CSP as the first thing its head says after its charset, without scripts, and with no
    event handler or URL that can run code left anywhere (pageclean.defuse_soup: the last rewrite of the page)."""
    soup = BeautifulSoup(page, features="html.parser")
    for script in soup.find_all("script"):
        script.decompose()
    pageclean.defuse_soup(soup)
    head = soup.head
    if head is None:  # (nbgrader's template always has one)
        head = soup.new_tag("head")
        (soup.html or soup).insert(0, head)
    meta = soup.new_tag("meta", attrs={"http-equiv": "Content-Security-Policy", "content": CSP})
    charset = head.find("meta", attrs={"charset": True})
    if charset is not None:
        charset.insert_after(meta)
    else:
        head.insert(0, meta)
    return str(soup)


def why_page(why: str, seconds: float, memory_bytes: int, lang: str) -> str:
    """A short page, safe as ours are, that says why the notebook's feedback page was not made."""
    message = NOT_MADE.get(why) or FAILED.format(why=why)
    text = message.format(seconds=seconds, mib=memory_bytes // 2**20, why=why).render(lang)
    return with_policy(f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>"
                       f"{html.escape(NOT_MADE_TITLE.render(lang))}</title></head>"
                       f"<body><p class=\"not-made\">{html.escape(text)}</p></body></html>")


class FeedbackExporter(HTMLExporter):
    """nbgrader's HTML exporter for generate_feedback (its feedback template), with every student-made piece
    cut (pagecap.py) and sanitized, a CSP that forbids scripts (the module's docstring), each page rendered in a
    child process of its own with a deadline and a memory limit (pagerender.py): a page that is not made in
    time or memory is replaced by one that says why, and generate_feedback goes on."""

    page_seconds = Float(PAGE_SECONDS, help="Wall-clock limit of rendering one notebook's page.").tag(config=True)
    page_memory_bytes = Int(Limits().grader_memory_bytes,
                            help="RLIMIT_DATA of the process that renders one notebook's page.").tag(config=True)

    def default_filters(self):
        for name, function in super().default_filters():
            yield name, pageclean.strip_files_prefix if name == "strip_files_prefix" else function

    @pass_context
    def markdown2html(self, context, source):
        return pageclean.clean_html(super().markdown2html(context, source))

    def render_page(self, nb, resources, **kw) -> tuple[str, dict]:
        """The page, in this process (render_isolated calls it in a child of its own)."""
        page, resources = super().from_notebook_node(pageclean.clean_notebook(nb), resources, **kw)
        return with_policy(page), resources

    def from_notebook_node(self, nb, resources=None, **kw):
        done = pagerender.render_isolated(lambda: self.render_page(nb, resources, **kw), self.page_seconds,
                                          self.page_memory_bytes)
        resources = dict(resources or {}, output_extension=self.file_extension)
        if done.page is not None:
            return done.page, {**resources, **done.resources}
        lang = pagecap.notebook_language(nb)
        self.log.warning("feedback page not made (%s): a page that says why is written in its place", done.why)
        return why_page(done.why, self.page_seconds, self.page_memory_bytes, lang), resources
