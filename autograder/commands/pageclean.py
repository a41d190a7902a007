"""A student's pieces of an HTML page made safe to open: the cleaning that the feedback page (feedbackpage.py) and
formgrader's grading page (formgraderpage.py) share.

Two passes, because the templates rewrite HTML after the exporter's filters ran (`strip_files_prefix` turns
`href="files/javascript:..."`, a relative link when bleach saw it, into a `javascript:` link):

* `clean_html`: bleach (html5lib parses a student's HTML as a browser would), an allow-list of tags and
  attributes; `clean_notebook` applies it, and the output and metadata rules, to every student-made piece;
* `defuse`: the last word on HTML that nothing rewrites any more: every event-handler attribute dropped, and every
  URL attribute (href, src, srcset, action, formaction, xlink:href, ...) whose scheme is not http, https,
  mailto or none (an inline PNG/JPEG/GIF for an image), read as a browser reads it: character references
  decoded, tabs and newlines removed, leading spaces and control characters ignored, and every `files/` prefix
  that a template's rewrite strips (`files/files/javascript:...` is a script to be: it is dropped at once).

Cleaning is a fixed point: cleaning a cleaned piece changes nothing (tests/test_feedback_page.py runs it twice over
the payload corpus), so that no later rewrite, however many times it strips a prefix, makes a link live.
"""
from __future__ import annotations

import copy
import re

import bleach
from bs4 import BeautifulSoup, Doctype, NavigableString
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbconvert.filters.strings import strip_files_prefix as stock_strip_files_prefix

from . import pagecap

TAGS = frozenset(bleach.sanitizer.ALLOWED_TAGS) | {
    "p", "div", "span", "pre", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr",
    "th", "td", "img", "sub", "sup", "del", "s", "u", "kbd", "details", "summary", "dl", "dt", "dd"}
GLOBAL_ATTRIBUTES = frozenset({"class", "id", "title"})
TAG_ATTRIBUTES = {"td": {"align", "colspan", "rowspan"}, "th": {"align", "colspan", "rowspan"}, "ol": {"start"},
                  "img": {"alt", "width", "height"}}
LINK_SCHEMES = frozenset({"", "http", "https", "mailto"})
URL_ATTRIBUTES = frozenset({"href", "src", "srcset", "imagesrcset", "action", "formaction", "xlink:href", "background",
                            "poster", "data", "codebase", "cite", "longdesc", "lowsrc", "dynsrc", "ping", "manifest",
                            "icon", "archive", "profile", "usemap", "itemtype"})
INLINE_IMAGE = re.compile(r"data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*\Z")
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")  # (the template puts image data inside an attribute as it is)
GRADE_ID = re.compile(r"[A-Za-z0-9_-]+\Z")  # what nbgrader accepts as a grade_id
SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
URL_IGNORED = re.compile(r"[\t\n\r]")  # a browser removes them anywhere in a URL
URL_LEADING = "".join(map(chr, range(0x21)))  # ... and C0 controls and spaces before it
FILES_PREFIXES = re.compile(r"(?:/?files/)+")  # what the templates' strip_files_prefix strips, once per rewrite


def url_scheme(value: str) -> str:
    """The scheme a browser reads in a URL attribute's (decoded) value, lower case, once every `files/` prefix is
    stripped (as many rewrites as there may be); "" for a relative URL."""
    url = URL_IGNORED.sub("", value).lstrip(URL_LEADING)
    prefix = FILES_PREFIXES.match(url)
    match = SCHEME.match(url[prefix.end() if prefix else 0:].lstrip(URL_LEADING))
    return match.group(1).lower() if match else ""


def safe_url(tag: str, value: str) -> bool:
    """Whether `value`, a URL in an attribute of `tag`, cannot run code: http, https, mailto or relative, or an
    inline PNG/JPEG/GIF image."""
    if url_scheme(value) in LINK_SCHEMES:
        return True
    return tag == "img" and bool(INLINE_IMAGE.match(URL_IGNORED.sub("", value).lstrip(URL_LEADING)))


def safe_srcset(tag: str, value: str) -> bool:
    """Whether every candidate of a srcset (comma-separated "URL descriptor") is a safe URL."""
    return all(safe_url(tag, candidate.split()[0]) for candidate in value.split(",") if candidate.split())


def safe_attribute(tag: str, name: str, value: str) -> bool:
    """Whether the final pass keeps the attribute: no event handler, and no URL that can run code."""
    name = name.lower()
    if name.startswith("on"):
        return False
    if name in ("srcset", "imagesrcset"):
        return safe_srcset(tag, value)
    if name in URL_ATTRIBUTES or name.endswith(":href"):
        return safe_url(tag, value)
    return True


def defuse_soup(soup: BeautifulSoup) -> None:
    """Drop, in place, every attribute that `safe_attribute` refuses (BeautifulSoup gives values decoded)."""
    for element in soup.find_all(True):
        for name, value in list(element.attrs.items()):
            text = " ".join(value) if isinstance(value, list) else str(value)
            if not safe_attribute(element.name, name, text):
                del element.attrs[name]


def defuse(text: str) -> str:
    """HTML with no event handler and no URL that can run code (the final pass, after every rewrite)."""
    soup = BeautifulSoup(text, features="html.parser")
    defuse_soup(soup)
    for doctype in soup.find_all(string=lambda node: isinstance(node, Doctype)):  # (its own line ends it: no second)
        if isinstance(doctype.next_sibling, NavigableString) and not doctype.next_sibling.strip():
            doctype.next_sibling.extract()
    return str(soup)


def allowed_attribute(tag: str, name: str, value: str) -> bool:
    """bleach's attribute filter: no event handler, no style; links and images only where they cannot run code."""
    if name in GLOBAL_ATTRIBUTES or name in TAG_ATTRIBUTES.get(tag, ()):
        return True
    if tag == "a" and name == "href":
        return url_scheme(value) in LINK_SCHEMES
    if tag == "img" and name == "src":
        return bool(INLINE_IMAGE.match(value.strip()))
    return False


def clean_html(text: str) -> str:
    """`text` (HTML a student wrote or made) with every tag and attribute outside the allow-list escaped or
    dropped, and no URL that can run code: what is left cannot run a script."""
    return defuse(bleach.clean(text, tags=TAGS, attributes=allowed_attribute,
                               protocols=["http", "https", "mailto", "data"], strip_comments=True))


def strip_files_prefix(text: str) -> str:
    """The templates' `strip_files_prefix` filter (the last rewrite of a markdown cell's HTML) until it strips nothing
    more (`files/files/x` is `x`: a second pass changes nothing), then cleaned: the `href="files/javascript:..."`
    that it would turn into a live link is dropped."""
    while (stripped := stock_strip_files_prefix(text)) != text:
        text = stripped
    return clean_html(text)


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
    """The cell's nbgrader metadata, with a grade_id only where nbgrader would accept it (the templates write it
    into the page as it is)."""
    meta = dict(meta) if isinstance(meta, dict) else {}
    if not (isinstance(meta.get("grade_id"), str) and GRADE_ID.match(meta["grade_id"])):
        meta.pop("grade_id", None)
    return meta


def clean_notebook(nb):
    """A copy of `nb` (an autograded notebook), each student piece cut to what a page shows (pagecap.py), that
    a template renders without a student's script: raw cells and outputs cleaned, metadata only nbgrader's."""
    nb = pagecap.cap_notebook(copy.deepcopy(nb))
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
