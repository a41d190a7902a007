"""The cells of a notebook in one language (an edition), from the bilingual content modules.

English is the content as written. Another language takes, cell by cell, the text the content gives
for it: markdown cells, the setup cell and the graded cells from `Cell.zh`, solution cells from `Cell.zh`
(the reference code with the hints in that language) with every docstring replaced by the module's
DOCSTRINGS_ZH, and demo cells with the module's label table DEMO_ZH applied (English text of the code,
its printed labels, plot titles and comments -> the Chinese text; the code itself is shared). A missing
text is never filled in with English: `missing_texts` lists it, and a label that matches no demo cell
any more, and the build stops.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect

from course.cells import Cell, hint_text

LANG_METADATA_KEY = "course"  # notebook metadata of an edition in another language: {"course": {"lang": "zh"}}


def docstring_owners(source: str) -> dict[str, ast.Expr]:
    """Name ("fn", "Class", "Class.method") -> docstring expression of each definition in `source` that has one."""
    out = {}

    def visit(body, prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                name = prefix + node.name
                first = node.body[0] if node.body else None
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                    out[name] = first
                if isinstance(node, ast.ClassDef):
                    visit(node.body, name + ".")

    visit(ast.parse(source).body, "")
    return out


def _docstring_lines(text: str, indent: str) -> list[str]:
    lines = text.strip("\n").splitlines()
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    body = [f"{indent}{line}".rstrip() for line in lines[1:]]
    return [f'{indent}"""{lines[0]}', *body, f'{indent}"""']


def with_docstrings(source: str, docstrings: dict[str, str]) -> str:
    """`source` with the docstring of each definition named in `docstrings` replaced by its text."""
    for name, text in docstrings.items():
        if '"""' in text or "\\" in text:
            raise ValueError(f"the docstring of {name} may not hold a triple quote or a backslash")
    owners = docstring_owners(source)
    lines = source.split("\n")
    for name, expr in sorted(owners.items(), key=lambda item: -item[1].lineno):
        if name in docstrings:
            indent = " " * expr.col_offset
            lines[expr.lineno - 1 : expr.end_lineno] = _docstring_lines(docstrings[name], indent)
    out = "\n".join(lines)
    for name, expr in docstring_owners(out).items():
        if name in docstrings and inspect.cleandoc(expr.value.value) != inspect.cleandoc(docstrings[name]):
            raise ValueError(f"the docstring of {name} does not survive as Python text")
    return out


def demo_labels(module, lang: str) -> dict[str, str]:
    """The module's label table for `lang` (DEMO_ZH): English text in its demo cells -> the text in `lang`."""
    return {} if lang == "en" else getattr(module, f"DEMO_{lang.upper()}", {})


def translated_demo(source: str, labels: dict[str, str]) -> str:
    """A demo cell's code with every label of the table replaced (longest first, so that a label inside a
    longer one does not cut it); it must still be Python."""
    for english in sorted(labels, key=len, reverse=True):
        source = source.replace(english, labels[english])
    ast.parse(source)
    return source


def missing_texts(module, lang: str) -> list[str]:
    """What `module` lacks for an edition in `lang`: markdown cells, hints and docstrings without a text."""
    if lang == "en":
        return []
    where = f"course/content/{module.__name__.rpartition('content.')[2].replace('.', '/')}.py"
    missing = []
    for index, cell in enumerate(module.cells()):
        if cell.kind == "markdown" and not (cell.zh or "").strip():
            first = cell.source.splitlines()[0] if cell.source else ""
            missing.append(f"{where}: markdown cell {index} ({first[:60]!r}) has no {lang} text")
    for name, hint in getattr(module, "HINTS", {}).items():
        if not (hint_text(hint, lang) or "").strip():
            missing.append(f"{where}: hint {name!r} has no {lang} text")
    demos = [cell.source for cell in module.cells() if cell.role == "demo"]
    for english in demo_labels(module, lang):
        if not any(english in code for code in demos):
            missing.append(f"{where}: the label {english[:60]!r} of DEMO_{lang.upper()} is in no demo cell")
    docstrings = getattr(module, f"DOCSTRINGS_{lang.upper()}", {})
    for cell in module.cells():
        if cell.role == "solution":
            for name in docstring_owners(cell.source):
                if not docstrings.get(name, "").strip():
                    missing.append(f"{where}: the docstring of {name} has no {lang} text in DOCSTRINGS_{lang.upper()}")
    return missing


def edition_cells(module, lang: str) -> list[Cell]:
    """The module's cells in `lang` (call missing_texts first: a missing text raises here)."""
    cells = module.cells()
    if lang == "en":
        return cells
    docstrings = getattr(module, f"DOCSTRINGS_{lang.upper()}", {})
    labels = demo_labels(module, lang)
    out = []
    for cell in cells:
        if cell.role == "demo" and labels:
            cell = dataclasses.replace(cell, source=translated_demo(cell.source, labels))
        elif cell.kind == "markdown" or cell.role in ("setup", "solution", "graded"):
            if not cell.zh:
                raise ValueError(f"{module.NAME}: a {cell.role} cell has no {lang} text")
            text = with_docstrings(cell.zh, docstrings) if cell.role == "solution" else cell.zh
            cell = dataclasses.replace(cell, source=text)
        out.append(cell)
    return out
