"""The nastiest malformed submissions, made on demand in a folder: what tests/test_malformed_input.py
grades, and what scripts can replay against another checkout (before/after counts).

Each maker takes an empty folder and returns the path to give `python -m autograder grade`.
Not a test module (pytest collects only test_*.py).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ASSIGNMENT = "self_attention"
RELEASE = REPO / "assignments" / ASSIGNMENT
SOLVED = REPO / "solutions" / "notebooks"
DEEP = 100_000


def notebook(name: str = "02_masks", solved: bool = True) -> dict:
    return json.loads(((SOLVED if solved else RELEASE) / f"{name}.ipynb").read_text(encoding="utf-8"))


def nbgrader_meta(cell: dict) -> dict:
    meta = cell.get("metadata") or {}
    return meta.get("nbgrader") if isinstance(meta.get("nbgrader"), dict) else {}


def write_nb(folder: Path, nb, name: str = "02_masks") -> Path:
    path = folder / f"{name}.ipynb"
    path.write_text(nb if isinstance(nb, str) else json.dumps(nb), encoding="utf-8")
    return path


def _released_with(mutate, folder: Path) -> Path:
    nb = notebook()
    mutate(nb)
    return write_nb(folder, nb)


def _every_cell(key_value):
    def mutate(nb):
        for cell in nb["cells"]:
            cell.setdefault("metadata", {})["nbgrader"] = key_value
    return mutate


def _first_solution(field, value):
    def mutate(nb):
        cell = next(c for c in nb["cells"] if nbgrader_meta(c).get("solution"))
        cell[field] = value
    return mutate


def _graded_ids(value):
    def mutate(nb):
        for cell in nb["cells"]:
            if nbgrader_meta(cell).get("grade"):
                cell["metadata"]["nbgrader"]["grade_id"] = value
    return mutate


def folder_with(special):
    """A folder: a good 01_scores.ipynb, and 02_masks.ipynb made by special(path)."""
    def make(folder: Path) -> Path:
        write_nb(folder, notebook("01_scores"), "01_scores")
        special(folder / "02_masks.ipynb")
        return folder
    return make


def _bytes(data: bytes, name: str = "02_masks.ipynb"):
    def make(folder: Path) -> Path:
        (folder / name).write_bytes(data)
        return folder / name
    return make


def _link(target: str, name: str = "02_masks.ipynb"):
    def make(folder: Path) -> Path:
        os.symlink(target, folder / name)
        return folder / name
    return make


# name -> maker. The first sixteen are the ones the issue found broken (plus their relatives after).
CORPUS = {
    "solution_source_a_list_of_numbers": lambda f: _released_with(_first_solution("source", [1, 2, 3]), f),
    "nbgrader_metadata_null": lambda f: _released_with(_every_cell(None), f),
    "nbgrader_metadata_a_string": lambda f: _released_with(_every_cell("solution"), f),
    "nbgrader_metadata_a_list": lambda f: _released_with(_every_cell([1, 2]), f),
    "grade_id_a_list": lambda f: _released_with(_graded_ids(["masks"]), f),
    "json_nested_100k_deep": _bytes(b"[" * DEEP + b"]" * DEEP),
    "cells_nested_100k_deep": _bytes(b'{"cells": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
    "py_of_100k_nested_unary_minus": _bytes(b"x = " + b"-" * DEEP + b"1\n", "attention.py"),
    "symlink_loop": _link("02_masks.ipynb"),
    "dangling_symlink": _link("nowhere.ipynb"),
    "folder_with_a_link_to_dev_zero": folder_with(lambda p: os.symlink("/dev/zero", p)),
    "folder_with_a_fifo_named_ipynb": folder_with(os.mkfifo),
    "folder_with_a_link_loop": folder_with(lambda p: os.symlink(p.name, p)),
    "folder_with_a_dangling_link": folder_with(lambda p: os.symlink("nowhere", p)),
    "utf8_bom_notebook": lambda f: _bytes(b"\xef\xbb\xbf" + (SOLVED / "02_masks.ipynb").read_bytes())(f),
    # relatives
    "a_fifo_named_ipynb": lambda f: (os.mkfifo(f / "02_masks.ipynb"), f / "02_masks.ipynb")[1],
    "a_link_to_dev_zero": _link("/dev/zero"),
    "empty_file": _bytes(b""),
    "not_utf8": _bytes(b'{"cells": ["\xff\xfe"]}'),
    "binary_junk": _bytes(bytes(range(256)) * 4),
    "truncated": lambda f: write_nb(f, json.dumps(notebook())[:5000]),
    "notebook_is_a_list": lambda f: write_nb(f, [notebook()]),
    "cells_is_a_dict": lambda f: write_nb(f, {"cells": {"0": {}}}),
    "cells_of_numbers_and_nulls": lambda f: write_nb(f, {"cells": [1, None, "x", [], {}]}),
    "cell_metadata_a_list": lambda f: _released_with(lambda nb: [c.__setitem__("metadata", [1]) for c in nb["cells"]], f),
    "solution_source_a_dict": lambda f: _released_with(_first_solution("source", {"a": 1}), f),
    "cell_type_a_number": lambda f: _released_with(lambda nb: [c.__setitem__("cell_type", 3) for c in nb["cells"]], f),
    "an_integer_of_100k_digits": _bytes(b'{"cells": [], "x": ' + b"7" * DEEP + b"}"),
    "grade_id_with_a_newline": lambda f: _released_with(_graded_ids("line\nbreak"), f),
    "py_with_a_null_byte": _bytes(b"def f():\n    return 1\x00\n", "attention.py"),
    "py_not_utf8": _bytes(b"x = '\xff'\n", "attention.py"),
    "py_empty": _bytes(b"", "attention.py"),
    "a_text_file": _bytes(b"hello", "notes.txt"),
    "folder_of_junk_only": lambda f: (_bytes(b"x", "notes.txt")(f), f)[1],
    "folder_with_a_folder_loop": folder_with(lambda p: os.symlink(".", p.parent / "loop")
                                             or p.write_text(json.dumps(notebook()))),
    "missing": lambda f: f / "nothing-here.ipynb",
}
