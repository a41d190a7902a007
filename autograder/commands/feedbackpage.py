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
  source.
"""
from __future__ import annotations

import copy
import re
from urllib.parse import urlsplit

import bleach
from bs4 import BeautifulSoup
from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune

CSP = ("default-src 'none'; script-src 'none'; object-src 'none'; frame-src 'none'; style-src 'unsafe-inline'; "
       "img-src data:; font-src data:; base-uri 'none'; form-action 'none'")
TAGS = frozenset(bleach.sanitizer.ALLOWED_TAGS) | {
    "p", "div", "span", "pre", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr",
    "th", "td", "img", "sub", "sup", "del", "s", "u", "kbd", "details", "summary", "dl", "dt", "dd"}
GLOBAL_ATTRIBUTES = frozenset({"class", "id", "title"})
TAG_ATTRIBUTES = {"td": {"align", "colspan", "rowspan"}, "th": {"align", "colspan", "rowspan"}, "ol": {"start"},
                  "img": {"alt", "width", "height"}}
LINK_SCHEMES = frozenset({"", "http", "https", "mailto"})
INLINE_IMAGE = re.compile(r"data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*\Z")
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")  # (the template puts image data inside an attribute as it is)
GRADE_ID = re.compile(r"[A-Za-z0-9_-]+\Z")  # what nbgrader accepts as a grade_id


def allowed_attribute(tag: str, name: str, value: str) -> bool:
    """bleach's attribute filter: no event handler, no style; links and images only where they cannot run code."""
    if name in GLOBAL_ATTRIBUTES or name in TAG_ATTRIBUTES.get(tag, ()):
        return True
    if tag == "a" and name == "href":
        return urlsplit(value.strip()).scheme.lower() in LINK_SCHEMES
    if tag == "img" and name == "src":
        return bool(INLINE_IMAGE.match(value.strip()))
    return False


def clean_html(text: str) -> str:
    """`text` (HTML a student wrote or made) with every tag and attribute outside the allow-list escaped or
    dropped: what is left cannot run a script (bleach: html5lib parses it as a browser would)."""
    return bleach.clean(text, tags=TAGS, attributes=allowed_attribute, protocols=["http", "https", "mailto", "data"],
                        strip_comments=True)


def clean_output(output: dict) -> dict:
    """An output with only the kinds of data the page can show without running anything, and no metadata."""
    output = dict(output)
    if "data" in output:
        data = {}
        for mime, value in (output.get("data") or {}).items():
            text = "".join(value) if isinstance(value, list) else value
            if not isinstance(text, str):
                continue
            if mime == "text/plain" or (mime in ("image/png", "image/jpeg") and BASE64.match(text)):
                data[mime] = text
            elif mime == "text/html":
                data[mime] = clean_html(text)
        markdown = (output.get("data") or {}).get("text/markdown")
        if "text/html" not in data and isinstance(markdown, str):
            data["text/html"] = clean_html(markdown2html_mistune(markdown))
        output["data"] = data or {"text/plain": ""}
    if "metadata" in output:
        output["metadata"] = {}
    return output


def clean_nbgrader_metadata(meta) -> dict:
    """The cell's nbgrader metadata, with a grade_id only where nbgrader would accept it (the template writes it
    into the page as it is)."""
    meta = dict(meta) if isinstance(meta, dict) else {}
    if not (isinstance(meta.get("grade_id"), str) and GRADE_ID.match(meta["grade_id"])):
        meta.pop("grade_id", None)
    return meta


def clean_notebook(nb):
    """A copy of `nb` (an autograded notebook) that the feedback template renders without a student's script."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        nbgrader = cell.metadata.get("nbgrader")
        cell.metadata = type(cell.metadata)()
        if nbgrader is not None:
            cell.metadata["nbgrader"] = type(nbgrader)(clean_nbgrader_metadata(nbgrader))
        if cell.cell_type == "raw":
            cell.source = clean_html(cell.source)
        if "outputs" in cell:
            cell.outputs = [type(o)(clean_output(o)) for o in cell.outputs]
    return nb


def with_policy(page: str) -> str:
    """The page with the CSP as the first thing its head says after its charset, and without scripts."""
    soup = BeautifulSoup(page, features="html.parser")
    for script in soup.find_all("script"):
        script.decompose()
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


class FeedbackExporter(HTMLExporter):
    """nbgrader's HTML exporter for generate_feedback (its feedback template), with every student-made piece
    sanitized and a CSP that forbids scripts (the module's docstring)."""

    @pass_context
    def markdown2html(self, context, source):
        return clean_html(super().markdown2html(context, source))

    def from_notebook_node(self, nb, resources=None, **kw):
        page, resources = super().from_notebook_node(clean_notebook(nb), resources, **kw)
        return with_policy(page), resources
