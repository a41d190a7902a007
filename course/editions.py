"""The cells of a notebook in one language (an edition), from the bilingual content modules.

English is the content as written. Another language takes, cell by cell, the text the content gives
for it: markdown cells and the setup cell from `Cell.zh`, solution cells from `Cell.zh` (the reference
code with the hints in that language) with every docstring replaced by the module's DOCSTRINGS_ZH.
Code cells are shared. A missing text is never filled in with English: `missing_texts` lists it and
the build stops.
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
    out = []
    for cell in cells:
        if cell.kind == "markdown" or cell.role in ("setup", "solution"):
            if not cell.zh:
                raise ValueError(f"{module.NAME}: a {cell.role} cell has no {lang} text")
            text = with_docstrings(cell.zh, docstrings) if cell.role == "solution" else cell.zh
            cell = dataclasses.replace(cell, source=text)
        out.append(cell)
    return out
