"""Each student piece of a page cut to what a page shows, with a note that says how much was cut.

Rendering a notebook into HTML (markdown, bleach, pygments, the templates) costs time and memory in proportion
to its size: a 10 MB written answer took minutes and gigabytes in `nbgrader generate_feedback`. Before the
feedback page (feedbackpage.py) or formgrader's grading page (formgraderpage.py) renders a notebook, every
cell's source and every output's text is cut to `PIECE_LIMIT` characters, and an image's data to
`IMAGE_LIMIT`; what was cut is said in the page, in the notebook's language (metadata course.lang).
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from ..foundation import extract, i18n, spec

_ = i18n.message

PIECE_LIMIT = 20_000  # characters of one cell's source or one output's text (an honest answer: a few thousand)
IMAGE_LIMIT = 4_000_000  # characters of one image's base64 data (a plot is a few hundred thousand)
CUT = _("This is cut here: {dropped} more characters are not shown (a page shows at most {limit} characters of a "
        "cell or an output).")
IMAGE_CUT = _("An image of {size} characters is not shown (a page shows images of at most {limit} characters).")


@dataclass(frozen=True)
class Cut:
    """A text as the page shows it: at most the limit, and how many characters were left out."""

    text: str
    dropped: int


def cut(text: str, limit: int = PIECE_LIMIT) -> Cut:
    return Cut(text, 0) if len(text) <= limit else Cut(text[:limit], len(text) - limit)


def notebook_language(nb) -> str:
    """The notebook's language (metadata course.lang), English when it names none this course knows."""
    return extract.notebook_language(nb) or spec.DEFAULT_LANGUAGE


def note(piece: Cut, lang: str) -> str:
    return CUT.format(dropped=piece.dropped, limit=PIECE_LIMIT).render(lang)


def as_text(value) -> str | None:
    """A notebook's text field (a string, or a list of strings), or None for anything else."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return value if isinstance(value, str) else None


def capped_source(cell, lang: str) -> str:
    """The cell's source cut, the note after it in the cell's own syntax (markdown, a Python comment, text)."""
    piece = cut(as_text(cell.source) or "")
    if not piece.dropped:
        return piece.text
    if cell.cell_type == "markdown":
        return f"{piece.text}\n\n<p>{html.escape(note(piece, lang))}</p>\n"
    if cell.cell_type == "code":
        return f"{piece.text}\n# {note(piece, lang)}\n"
    return f"{piece.text}\n{html.escape(note(piece, lang))}\n"


def capped_data(data: dict, lang: str) -> dict:
    """An output's data: each text cut (the note in its own kind: HTML or text), each image too big dropped."""
    out = {}
    for mime, value in data.items():
        text = as_text(value)
        if text is None:
            out[mime] = value
        elif mime.startswith("image/") and mime != "image/svg+xml":
            if len(text) <= IMAGE_LIMIT:
                out[mime] = text
            else:
                out["text/plain"] = IMAGE_CUT.format(size=len(text), limit=IMAGE_LIMIT).render(lang)
        else:
            piece = cut(text)
            said = note(piece, lang)
            tail = (f"<p>{html.escape(said)}</p>" if mime in ("text/html", "text/markdown") else f"\n{said}")
            out[mime] = piece.text + (tail if piece.dropped else "")
    return out


def capped_output(output: dict, lang: str) -> dict:
    """An output with its stream text, data, error value and traceback cut."""
    output = dict(output)
    if as_text(output.get("text")) is not None:
        piece = cut(as_text(output["text"]))
        output["text"] = piece.text + (f"\n{note(piece, lang)}\n" if piece.dropped else "")
    if isinstance(output.get("data"), dict):
        output["data"] = capped_data(output["data"], lang)
    if isinstance(output.get("evalue"), str):
        output["evalue"] = cut(output["evalue"]).text
    if isinstance(output.get("traceback"), list):
        piece = cut("\n".join(str(line) for line in output["traceback"]))
        output["traceback"] = [piece.text] + ([note(piece, lang)] if piece.dropped else [])
    return output


def cap_notebook(nb):
    """`nb` itself, each cell's source and outputs cut to what a page shows (the module's docstring)."""
    lang = notebook_language(nb)
    for cell in nb.cells:
        cell.source = capped_source(cell, lang)
        if "outputs" in cell:
            cell.outputs = [type(o)(capped_output(o, lang)) for o in cell.outputs]
    return nb
