"""The Chinese edition: every text of the source in both languages, the same cells and points in both
editions, Chinese where a student reads prose, the same code everywhere else, and a release that runs.

The editions' notebooks are read from the committed build (tests/test_release.py checks it has not
drifted); the untouched Chinese release of the first assignment is executed once. The solved Chinese
notebooks are not run again: the build executed them (it stops on any error or stderr; their committed
outputs are checked below) and their code is the English edition's, which tests/test_notebooks.py runs.
"""
from __future__ import annotations

import ast
import re
import shutil
import types
import unicodedata

import nbformat
import pytest

from autograder.foundation import spec
from course import build, catalogs, content
from course.cells import hint_text, md
from course.content import efficient, generation, serving
from course.editions import LANG_METADATA_KEY, docstring_owners, missing_texts, with_docstrings

REPO = build.REPO
CJK = re.compile(r"[\u4e00-\u9fff]")
MODULES = content.MODULES + generation.MODULES + efficient.MODULES + serving.MODULES
MODULE_IDS = [m.__name__.rpartition("content.")[2] for m in MODULES]
# (English edition, Chinese edition) of each assignment.
PAIRS = [(build.TARGET_BY_ID[a], build.TARGET_BY_ID[spec.edition_id(a, "zh")]) for a in spec.ASSIGNMENTS]
PAIR_IDS = [en.id for en, _ in PAIRS]
NOTEBOOKS = [(en, zh, name) for en, zh in PAIRS for name in spec.assignment(en.id).notebooks]
NOTEBOOK_IDS = [f"{zh.id}/{name}" for _, zh, name in NOTEBOOKS]
# The English edition's only cells with Chinese in them (notebook 01): the glossary and the seed article's map.
BILINGUAL_CELLS = ("### Glossary", "### Where the seed article's sections are taught")


def read(folder, name: str) -> nbformat.NotebookNode:
    return nbformat.read(REPO / folder / f"{name}.ipynb", as_version=4)


def grading(cell) -> dict:
    """A cell's nbgrader metadata apart from the checksum of its text (which differs between languages)."""
    return {k: v for k, v in cell.metadata.get("nbgrader", {}).items() if k != "checksum"}


def without_texts(source: str) -> str:
    """The code of a cell without what an edition translates: docstrings, comments and the text of strings
    (labels a demo prints, plot titles; the order of an f-string's fields), so that two editions compare
    equal when they run the same code."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # a translation may put an f-string's fields in another order
            node.values = sorted((v for v in node.values if isinstance(v, ast.FormattedValue)), key=ast.dump)
    return ast.dump(tree)


# --------------------------------------------------------------------------- #
# The source: both texts, everywhere
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
def test_every_markdown_cell_hint_and_docstring_of_the_content_has_a_chinese_text(module):
    assert missing_texts(module, "zh") == []


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
def test_the_chinese_texts_are_chinese_and_the_english_ones_are_not_empty(module):
    cells = module.cells()
    for index, cell in enumerate(cells):
        if cell.kind == "markdown":
            assert cell.source.strip(), f"{module.NAME} cell {index}: empty English text"
            assert CJK.search(cell.zh or ""), f"{module.NAME} cell {index}: the Chinese text has no Chinese in it"
    for name, hint in module.HINTS.items():
        assert isinstance(hint, tuple) and hint_text(hint, "en").strip(), f"{module.NAME} hint {name}: no English text"
        assert CJK.search(hint_text(hint, "zh")), f"{module.NAME} hint {name}: the Chinese text has no Chinese in it"
    for name, text in getattr(module, "DOCSTRINGS_ZH", {}).items():
        assert CJK.search(text), f"{module.NAME} docstring {name}: no Chinese in it"
        assert any(name in docstring_owners(c.source) for c in cells if c.role == "solution"), (
            f"{module.NAME}: DOCSTRINGS_ZH names {name}, which no solution cell defines")


def test_a_missing_chinese_text_stops_the_build_with_a_line_per_missing_text():
    module = types.ModuleType("course.content.n99_fake")
    module.NAME = "99_fake"
    module.HINTS = {"padding_mask": "English only"}
    module.cells = lambda: [md("# Only English"), md("# Both", "# 两种语言都有")]
    target = build.Target("self_attention_zh", (module,), lang="zh")
    with pytest.raises(SystemExit) as stopped:
        build.source_notebooks(target)
    message = str(stopped.value)
    assert "self_attention_zh: 2 text(s) have no zh version" in message
    assert "course/content/n99_fake.py: markdown cell 0 ('# Only English') has no zh text" in message
    assert "hint 'padding_mask' has no zh text" in message
    assert "# Both" not in message


def test_the_chinese_docstrings_replace_the_english_ones_and_a_quote_that_would_break_them_is_refused():
    source = 'class A:\n    """One line."""\n\n    def f(self):\n        """Two\n\n        lines."""\n        return 1'
    out = with_docstrings(source, {"A": "一行。", "A.f": "两行\n\n第二行。"})
    tree = ast.parse(out)
    assert ast.get_docstring(tree.body[0]) == "一行。" and ast.get_docstring(tree.body[0].body[1]) == "两行\n\n第二行。"
    assert out.endswith("        return 1")
    with pytest.raises(ValueError, match="A"):
        with_docstrings(source, {"A": 'a """ quote'})


# --------------------------------------------------------------------------- #
# The committed editions
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("english,chinese", PAIRS, ids=PAIR_IDS)
def test_both_editions_are_built_and_checked_for_drift_in_their_own_folders(english, chinese):
    assert chinese.lang == "zh" and english.lang == "en"
    assert chinese.source == build.Path("source") / chinese.id and chinese.release == build.Path("assignments") / chinese.id
    assert chinese.solved == english.solved / "zh"
    assert set(chinese.outputs) <= set(build.OUTPUT_DIRS) and set(english.outputs) <= set(build.OUTPUT_DIRS)
    assert spec.split_edition(chinese.id) == (english.id, "zh")


@pytest.mark.parametrize("english,chinese,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_both_editions_have_the_same_notebooks_cell_ids_grade_ids_and_points(english, chinese, name):
    for kind in ("source", "release", "solved"):
        en, zh = read(getattr(english, kind), name), read(getattr(chinese, kind), name)
        assert [c.id for c in en.cells] == [c.id for c in zh.cells], f"{kind} {name}: cell ids differ"
        assert [c.cell_type for c in en.cells] == [c.cell_type for c in zh.cells]
        assert [grading(c) for c in en.cells] == [grading(c) for c in zh.cells], f"{kind} {name}: nbgrader metadata differ"
    assert sorted(p.name for p in (REPO / english.release).glob("*.ipynb")) == sorted(
        p.name for p in (REPO / chinese.release).glob("*.ipynb"))


@pytest.mark.parametrize("english,chinese,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_chinese_notebooks_say_zh_in_their_metadata_and_english_ones_say_nothing(english, chinese, name):
    for kind in ("source", "release", "solved"):
        assert read(getattr(chinese, kind), name).metadata[LANG_METADATA_KEY] == {"lang": "zh"}
        assert LANG_METADATA_KEY not in read(getattr(english, kind), name).metadata


@pytest.mark.parametrize("english,chinese,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_the_chinese_release_reads_chinese_and_runs_the_same_code(english, chinese, name):
    en, zh = read(english.release, name), read(chinese.release, name)
    for a, b in zip(en.cells, zh.cells):
        role = a.metadata.get("nbgrader", {}).get("grade_id", "")
        if a.cell_type == "markdown":
            assert CJK.search(b.source), f"{name} {b.id}: no Chinese in the Chinese edition's markdown"
            if not b.source.startswith(BILINGUAL_CELLS) and not a.source.startswith(BILINGUAL_CELLS):
                assert not CJK.search(a.source), f"{name} {a.id}: Chinese in the English edition"
        elif role == "setup":
            lines = b.source.splitlines()
            at = next(i for i, line in enumerate(lines) if line.startswith("from visible_checks import *"))
            assert lines[at + 1].startswith('use_language("zh")')
            assert without_texts("\n".join(lines[: at + 1] + lines[at + 2:])) == without_texts(a.source)
            assert "use_language" not in a.source and CJK.search(b.source), "the Chinese setup cell speaks Chinese"
        else:
            assert without_texts(a.source) == without_texts(b.source), (
                f"{name} {a.id}: the code differs between the editions")
            if role.startswith("solution_"):
                assert all(CJK.search(e.value.value) for e in docstring_owners(b.source).values()), (
                    f"{name} {b.id}: a stub's docstring is not in Chinese")
                assert ("# 提示：" in b.source) == ("# Hint:" in a.source) and "# Hint:" not in b.source
                assert 'raise NotImplementedError("还没有实现' in b.source, f"{name} {b.id}: the stub is not in Chinese"
                assert "YOUR CODE HERE" in a.source and "YOUR CODE HERE" not in b.source
            if role in {part.id for part in spec.assignment(english.id).parts}:
                assert CJK.search(b.source), f"{name} {b.id}: the graded cell's comment is not in Chinese"


@pytest.mark.parametrize("english,chinese", PAIRS, ids=PAIR_IDS)
def test_the_chinese_editions_support_files_are_the_english_ones(english, chinese):
    for folder in chinese.outputs:
        for name in chinese.support:
            assert (REPO / folder / name).read_bytes() == (REPO / english.release / name).read_bytes()


def test_the_drift_check_notices_a_changed_chinese_notebook(tmp_path):
    _, chinese = PAIRS[0]
    for sub in chinese.outputs:
        shutil.copytree(REPO / sub, tmp_path / sub, dirs_exist_ok=True)
    path = tmp_path / chinese.release / "03_module.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source = "# 手工改过\n"
    nbformat.write(nb, path)
    problems = build.diff_trees(tmp_path, REPO, (chinese,))
    assert problems == [f"{chinese.release.as_posix()}/03_module.ipynb: differs from a fresh build"]


# --------------------------------------------------------------------------- #
# The Chinese release runs
# --------------------------------------------------------------------------- #

RELEASED = spec.assignment(spec.ASSIGNMENT).notebooks


@pytest.fixture(scope="module")
def executed(private_tmp):
    """The untouched Chinese release (all five notebooks), run in a copy."""
    _, chinese = PAIRS[0]
    shutil.copytree(REPO / chinese.release, private_tmp / "released")
    results = build.execute_notebooks([private_tmp / "released" / f"{name}.ipynb" for name in RELEASED],
                                      allow_errors=True, timeout=300)
    return {p.stem: nb for p, nb in results.items()}


@pytest.mark.parametrize("name", RELEASED)
def test_the_untouched_chinese_release_runs_to_the_last_cell_and_each_check_says_so_in_one_chinese_line(executed, name):
    nb = executed[name]
    assert build.problems_in_outputs(nb) == []
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{name} stopped early"
    checks = ["".join(o.get("text", "") for o in c.outputs).strip() for c in code
              if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("check_")]
    assert checks and all(len(text.splitlines()) == 1 and CJK.search(text) for text in checks), checks


@pytest.mark.parametrize("english,chinese,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_the_committed_solved_chinese_notebook_holds_executed_outputs_without_errors(english, chinese, name):
    nb = read(chinese.solved, name)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{name} was committed unexecuted (run `make release`)"
    assert build.problems_in_outputs(nb) == []


def _printing_cells(nb) -> list:
    """The code cells of an executed notebook that print something (stdout, stderr or an error)."""
    return [c for c in nb.cells if c.cell_type == "code"
            and any(o.output_type in ("stream", "error") for o in c.outputs)]


def _printed(cell) -> str:
    return "".join(o.get("text", "") + o.get("evalue", "") for o in cell.outputs)


_WORD = re.compile(r"(?<![\w.])[A-Za-z]{3,}(?!\w)")  # a word, not a piece of a dotted or snake_case name
_REPR_WORDS = {"tensor", "dtype", "True", "False", "None", "nan", "inf"}


def _words_not_from_the_code(cell) -> set[str]:
    """The words a cell printed that are not names of its own code (variables, attributes, keywords) nor
    words of a tensor's repr: English that a reader has to read."""
    names = set(_REPR_WORDS)
    for node in ast.walk(ast.parse(cell.source)):
        names.add(getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "arg", None)
                  or getattr(node, "name", None))
    return set(_WORD.findall(_printed(cell))) - names


def _untranslated(folder, name) -> dict[str, list[str]]:
    """cell id -> the English words of each printing cell without a Chinese character in its output."""
    return {c.id: sorted(_words_not_from_the_code(c)) for c in _printing_cells(read(folder, name))
            if not CJK.search(_printed(c)) and _words_not_from_the_code(c)}


def test_every_printing_cell_of_the_chinese_edition_prints_chinese_unless_it_prints_only_code_names_and_numbers():
    """Measured on the committed solved Chinese notebooks of every assignment (executed by the build)."""
    printing = sum(len(_printing_cells(read(zh.solved, name))) for _, zh, name in NOTEBOOKS)
    untranslated = {f"{zh.id}/{name}": cells for _, zh, name in NOTEBOOKS if (cells := _untranslated(zh.solved, name))}
    assert printing > 100 and untranslated == {}, untranslated


def test_the_measure_of_untranslated_output_flags_the_english_editions_printing_cells():
    """(the check above can fail: on the English notebooks it finds English in nearly every printing cell)"""
    printing = sum(len(_printing_cells(read(en.solved, name))) for en, _, name in NOTEBOOKS)
    flagged = sum(len(_untranslated(en.solved, name)) for en, _, name in NOTEBOOKS)
    assert flagged > 0.9 * printing, (flagged, printing)


# --------------------------------------------------------------------------- #
# Printed tables: a column that lines up in English lines up in Chinese too, on screen
# --------------------------------------------------------------------------- #

# The assignments whose Chinese tables are held to it (English edition ids): all five.
TABLE_ALIGNED = {"generation", "self_attention", "efficient", "real_models", "serving"}
_FIELD = re.compile(r"(?:(?<=\S) {2,}|[:：] *)(?=\S)")  # what a column of a printed table starts after: a gap, a colon


def display_width(text: str) -> int:
    """The columns `text` takes in a terminal or a notebook's monospace output: a CJK character (East Asian
    width W or F) takes two; Python's format widths count it as one, which is how Chinese tables break."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 0 if unicodedata.combining(ch) else 1 for ch in text)


def _starts(line: str) -> set[int]:
    """The display columns where a field of `line` starts: after a gap of two spaces or more, or after a colon."""
    return {display_width(line[:m.end()]) for m in _FIELD.finditer(line)}


def _tables(lines: list[str]) -> list[tuple[range, int]]:
    """(lines, how many columns they share) of every run of two or more consecutive lines with a column in common."""
    found, start, starts = [], 0, [_starts(line) for line in lines]
    while start < len(lines):
        common, end = starts[start], start + 1
        while end < len(lines) and common & starts[end]:
            common, end = common & starts[end], end + 1
        if end - start > 1:
            found.append((range(start, end), len(common)))
        start = end
    return found


def _misaligned(english: list[str], chinese: list[str]) -> list[str]:
    """The runs of lines whose columns line up in the English output and not all, on screen, in the Chinese one."""
    bad = []
    for rows, columns in _tables(english):
        shared = set.intersection(*(_starts(chinese[i]) for i in rows))
        if len(shared) < columns:
            bad.append(" / ".join(chinese[i].strip() for i in rows))
    return bad


def _printed_lines(cell) -> list[str]:
    """The lines a cell printed, with an empty line where a figure or another display came between them (lines
    on either side of a plot are not one table)."""
    text = "".join(o.get("text", "") + o.get("evalue", "") if "text" in o or "evalue" in o else "\n\n"
                   for o in cell.outputs)
    return text.splitlines()


def _table_report(english_nb, chinese_nb) -> tuple[int, dict[str, list[str]]]:
    """(the number of columns compared, cell id -> the Chinese lines whose columns do not line up)."""
    compared, bad = 0, {}
    chinese_cells = {c.id: c for c in _printing_cells(chinese_nb)}
    for cell in _printing_cells(english_nb):
        en_lines, zh_lines = _printed_lines(cell), _printed_lines(chinese_cells.get(cell.id, cell))
        if len(en_lines) != len(zh_lines):
            continue  # (a cell that prints another number of lines in Chinese has no table in common)
        compared += len(_tables(en_lines))
        if broken := _misaligned(en_lines, zh_lines):
            bad[cell.id] = broken
    return compared, bad


@pytest.mark.parametrize("english,chinese,name", [n for n in NOTEBOOKS if n[0].id in TABLE_ALIGNED],
                         ids=[i for n, i in zip(NOTEBOOKS, NOTEBOOK_IDS) if n[0].id in TABLE_ALIGNED])
def test_a_column_that_lines_up_in_the_english_output_lines_up_in_the_chinese_output_on_screen(english, chinese, name):
    """Measured in display width (a CJK character takes two columns), on the committed solved notebooks."""
    _, bad = _table_report(read(english.solved, name), read(chinese.solved, name))
    assert bad == {}, bad


def test_the_table_alignment_measure_finds_tables_and_flags_a_chinese_label_padded_by_characters():
    compared = sum(_table_report(read(en.solved, name), read(zh.solved, name))[0] for en, zh, name in NOTEBOOKS
                   if en.id in TABLE_ALIGNED)
    assert compared > 10, compared
    english = [f"{label:>12}: {value:.2f}" for label, value in (("top-left", 1.0), ("bottom-right", 2.0))]
    chinese = [f"{label:>6}：{value:.2f}" for label, value in (("左上对齐", 1.0), ("右下对齐的掩码", 2.0))]
    assert _misaligned(english, chinese) == ["左上对齐：1.00 / 右下对齐的掩码：2.00"]
    assert _misaligned(english, ["      左上对齐：1.00", "右下对齐的掩码：2.00"]) == []  # padded by display width
    assert display_width("左上对齐：") == 10 and display_width("top-left:") == 9


# A plot's title, axis label or legend label: a string literal (translated in the Chinese cell's source) or
# say("English") (translated at run time by the visible checks' catalog).
_PLOT_TEXT = re.compile(r"""\b(title|xlabel|ylabel|suptitle|label)\s*[=(]\s*(say\(\s*)?f?(["'])(.*?)\3""")


@pytest.mark.parametrize("english,chinese,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_every_plot_of_the_chinese_edition_has_chinese_titles_and_axis_labels(english, chinese, name):
    translations = {m.id: m.string for m in catalogs.read_catalog(catalogs.po_path("zh")) if m.id}
    plots = [c for c in read(chinese.solved, name).cells if c.cell_type == "code"
             and any("image/png" in o.get("data", {}) for o in c.outputs)]
    shown = [(translations.get(m.group(4)) or m.group(4) if m.group(2) else m.group(4))  # untranslated: English shows
             for cell in plots for m in _PLOT_TEXT.finditer(cell.source)]
    english_texts = [t for t in shown if not CJK.search(t) and _WORD.search(t)]  # ("B = 1, D = 32, float32" is no English)
    assert not english_texts, f"{name}: plot text in English: {english_texts}"
    assert bool(shown) == bool(plots), f"{name}: {len(plots)} plot cell(s), {len(shown)} title(s) or label(s) found"


# --------------------------------------------------------------------------- #
# The visible checks' catalog in the Chinese release
# --------------------------------------------------------------------------- #


def test_the_chinese_editions_ship_the_visible_checks_catalog_compiled_from_course_locale():
    for _, chinese in PAIRS:
        assert chinese.catalogs == {"locale/zh_CN/LC_MESSAGES/visible_checks.mo":
                                    REPO / "course" / "locale" / "zh_CN" / "LC_MESSAGES" / "visible_checks.po"}


def test_a_compiled_catalog_translates_and_is_the_same_bytes_every_time(tmp_path):
    import gettext

    po = tmp_path / "visible_checks.po"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n"Language: zh_CN\\n"\n\n'
                  'msgid "not implemented yet"\nmsgstr "尚未实现"\n', encoding="utf-8")
    first, second = tmp_path / "a" / "zh_CN" / "LC_MESSAGES" / "visible_checks.mo", tmp_path / "b.mo"
    build.compile_catalog(po, first)
    build.compile_catalog(po, second)
    assert first.read_bytes() == second.read_bytes()
    catalog = gettext.translation("visible_checks", tmp_path / "a", languages=["zh_CN"])
    assert catalog.gettext("not implemented yet") == "尚未实现"
