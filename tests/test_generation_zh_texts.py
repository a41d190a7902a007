"""The `generation` notebooks' source carries Chinese next to every English text (issue 11)."""
import ast
import re

import pytest

from course.cells import REPO
from course.content.generation import MODULES

CJK = re.compile(r"[\u4e00-\u9fff]")
REFERENCE = REPO / "solutions" / "generation.py"


def documented_names() -> set[str]:
    """Every function, class and method of solutions/generation.py that has a docstring ("Class.method")."""
    names = set()
    for node in ast.parse(REFERENCE.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{item.name}" for item in node.body
                      if isinstance(item, ast.FunctionDef) and ast.get_docstring(item)}
    return names


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.NAME)
def test_every_markdown_cell_has_chinese_text(module):
    for number, cell in enumerate(module.cells()):
        if cell.kind == "markdown":
            assert cell.zh and CJK.search(cell.zh), f"{module.NAME}: markdown cell {number} has no Chinese text"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.NAME)
def test_every_hint_is_an_english_chinese_pair(module):
    for name, hint in module.HINTS.items():
        assert isinstance(hint, tuple) and len(hint) == 2, f"{module.NAME}: hint {name} is not (English, Chinese)"
        english, chinese = hint
        assert english.strip() and CJK.search(chinese), f"{module.NAME}: hint {name} lacks a text"
        assert english.count("\n") == chinese.count("\n"), f"{module.NAME}: hint {name}: line counts differ"


def test_chinese_docstrings_cover_every_documented_solution_name():
    chinese = {}
    for module in MODULES:
        # (04_decoder's solution cell repeats pieces of 01 and 02: the same translation, never another one)
        overlap = {name for name in chinese.keys() & module.DOCSTRINGS_ZH.keys()
                   if chinese[name] != module.DOCSTRINGS_ZH[name]}
        assert not overlap, f"{module.NAME}: {sorted(overlap)} translated twice, differently"
        chinese.update(module.DOCSTRINGS_ZH)
    assert chinese.keys() == documented_names()
    assert all(CJK.search(text) for text in chinese.values())
