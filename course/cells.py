"""Cell helpers for the notebook content, and the extraction of solution code.

Every notebook is a list of cells built with the helpers below. Solution cells are never
retyped: `solution(name)` takes the definition of `name` from its assignment's reference
(solutions/attention.py, generation.py or efficient.py) with
`ast`, keeps its signature and docstring, and puts each body between
`### BEGIN SOLUTION` / `### END SOLUTION`, so nbgrader's release keeps the signature and
the docstring and replaces the body with a stub.
"""
from __future__ import annotations

import ast
import functools
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from autograder.foundation.spec import ASSIGNMENTS

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "solutions" / "attention.py"
# Every assignment's reference (spec.py's `solutions` modules); an API name is defined in exactly one of them.
REFERENCES = tuple(REPO / f"{a.solutions.replace('.', '/')}.py" for a in ASSIGNMENTS.values())

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"


@dataclass
class Cell:
    kind: str  # "markdown" | "code"
    source: str  # the English edition's text (code cells: the code, shared by every edition)
    role: str = "demo"  # demo | setup | solution | check | graded | markdown
    nbgrader: dict | None = None
    tags: list[str] = field(default_factory=list)
    zh: str | None = None  # the Chinese edition's text of a markdown, setup or solution cell


# A hint in both languages: (English, Chinese). Content modules keep HINTS = {name: Hint}.
Hint = tuple[str, str]


def md(text: str, zh: str | None = None) -> Cell:
    """A markdown cell: its English text, then its Chinese text (the same content, written for Chinese readers)."""
    return Cell("markdown", textwrap.dedent(text).strip("\n"), role="markdown",
                zh=None if zh is None else textwrap.dedent(zh).strip("\n"))


def hint_text(hint: str | Hint | None, lang: str = "en") -> str | None:
    """The text of a hint in `lang` ("en" or "zh"); a plain string is English only."""
    if hint is None or isinstance(hint, str):
        return hint if lang == "en" else None
    english, chinese = hint
    return english if lang == "en" else chinese


def recipe(name: str, recipes: dict[str, Hint]) -> Cell:
    """The second hint of the stub `name`, folded (`<details>`): the recipe, for a student whom the first
    hint (in the stub, naming the idea) did not get going. A markdown cell, placed right above the stub."""
    english, chinese = recipes[name]
    return md(
        f"<details><summary>Second hint for <code>{name}</code>, the recipe: open it only if the first hint "
        f"(in the cell below) is not enough</summary>\n\n{textwrap.dedent(english).strip()}\n\n</details>",
        f"<details><summary><code>{name}</code> 的第二个提示，具体做法：下面单元格里的第一个提示不够用时再打开"
        f"</summary>\n\n{textwrap.dedent(chinese).strip()}\n\n</details>",
    )


def demo(code: str) -> Cell:
    """A code cell students may edit and rerun freely (no nbgrader metadata)."""
    return Cell("code", textwrap.dedent(code).strip("\n"))


def _locked(grade_id: str) -> dict:
    return {"grade": False, "solution": False, "locked": True, "grade_id": grade_id, "schema_version": 3}


# The comments of the setup cell in each language: its first line, and the one after the visible checks' import.
SETUP_COMMENTS = {
    "en": ("# Setup (read-only). The autograder gives your code exactly these four imports.",
           "# quick self-checks (see visible_checks.py), graded_part and uses_your_code"),
    "zh": ("# 环境设置（只读）。自动评分器给你的代码提供的正是这四个导入。",
           "# 快速自查（见 visible_checks.py）、graded_part 和 uses_your_code"),
}


def setup_source(extra: str = "", lang: str = "en") -> str:
    """The setup cell's code; an edition in another language than English tells the visible checks which."""
    first, after_checks = SETUP_COMMENTS[lang]
    checks = f"from visible_checks import *  {after_checks}"
    code = (
        f"{first}\n"
        "import math\n\n"
        "import torch\n"
        "import torch.nn as nn\n"
        "import torch.nn.functional as F\n\n"
        "torch.manual_seed(0)\n"
        f"{checks}\n"
    )
    if lang != "en":
        code += f'use_language("{lang}")  # 可见检查和图表使用本版本的语言\n'
    if extra:
        code += textwrap.dedent(extra).strip("\n") + "\n"
    return code.rstrip("\n")


def setup(extra: str = "", lang: str = "en") -> Cell:
    """The locked setup cell in `lang`; its `zh` is the Chinese edition's (with `use_language("zh")`)."""
    return Cell("code", setup_source(extra, lang), role="setup", nbgrader=_locked("setup"),
                zh=setup_source(extra, "zh"))


def check(call: str, grade_id: str) -> Cell:
    """A locked, ungraded cell that runs one visible check."""
    return Cell("code", call, role="check", nbgrader=_locked(grade_id))


def graded(part_id: str, points: float) -> Cell:
    meta = {
        "grade": True,
        "solution": False,
        "locked": True,
        "grade_id": part_id,
        "points": points,
        "schema_version": 3,
    }
    source = (
        f"# Graded part `{part_id}`, {points:g} points: the hidden autograder scores it.\n"
        "# nbgrader's Validate reruns the visible checks above here and names what fails.\n"
        f'graded_part("{part_id}")'
    )
    chinese = (
        f"# 评分部分 `{part_id}`，{points:g} 分：由隐藏的自动评分器打分。\n"
        "# nbgrader 的 Validate 会在这里重新运行上面的可见检查，并指出哪一项没有通过。\n"
        f'graded_part("{part_id}")'
    )
    return Cell("code", source, role="graded", nbgrader=meta, zh=chinese)


# --------------------------------------------------------------------------- #
# Solution cells from the reference implementation
# --------------------------------------------------------------------------- #


@functools.lru_cache(maxsize=32)
def _definitions(path: Path, mtime_ns: int, size: int) -> tuple[list[str], dict[str, ast.FunctionDef | ast.ClassDef]]:
    """The lines of a reference file and its top-level definitions by name, parsed once per version of the file
    (a build asks for about 900 definitions of a few files)."""
    text = path.read_text()
    nodes = [n for n in ast.parse(text).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return text.splitlines(), {n.name: n for n in reversed(nodes)}  # (the first definition of a name, as before)


def _reference_node(name: str, reference: Path | None = None) -> tuple[list[str], ast.FunctionDef | ast.ClassDef]:
    """The lines of the reference that defines `name` at its top level, and that definition (`reference`, when
    given, is read first: an assignment whose reference repeats another's pieces, as real_models repeats generation's)."""
    for path in ([reference] if reference else []) + [p for p in REFERENCES if p != reference]:
        stat = path.stat()
        lines, definitions = _definitions(path, stat.st_mtime_ns, stat.st_size)
        if name in definitions:
            return lines, definitions[name]
    raise KeyError(f"{name} is not defined at the top level of {', '.join(p.name for p in REFERENCES)}")


def _has_docstring(node: ast.AST) -> bool:
    body = node.body
    return bool(body) and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str)


def _is_super_init(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr == "__init__"
        and isinstance(stmt.value.func.value, ast.Call)
        and getattr(stmt.value.func.value.func, "id", None) == "super"
    )


# The label of a hint comment, and the indent of its next lines (the label's width on screen).
HINT_LABELS = {"en": ("Hint:", " " * 5), "zh": ("提示：", " " * 6)}


def _function_lines(lines: list[str], fn: ast.FunctionDef, hint: str | None, lang: str = "en") -> list[str]:
    """The function with its body (after the docstring / super().__init__()) in a solution region."""
    start = (fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno) - 1
    body = list(fn.body)
    keep_until = body[0].lineno - 1  # first body line index
    kept_stmts = []
    if _has_docstring(fn):
        kept_stmts.append(body.pop(0))
    if body and _is_super_init(body[0]):
        kept_stmts.append(body.pop(0))
    if kept_stmts:
        keep_until = kept_stmts[-1].end_lineno
    if not body:
        raise ValueError(f"{fn.name} has no body to hide")
    head = lines[start:keep_until]
    region_start = body[0].lineno - 1
    # comments directly above the first hidden statement belong to the hidden part too
    while region_start > keep_until and lines[region_start - 1].strip().startswith("#"):
        region_start -= 1
    region = lines[region_start : fn.end_lineno]
    indent = " " * body[0].col_offset
    out = list(head)
    if hint:
        label, indent_next = HINT_LABELS[lang]
        for number, hint_line in enumerate(hint.strip().splitlines()):
            out.append(f"{indent}# {label if number == 0 else indent_next} {hint_line}".rstrip())
    out.append(indent + BEGIN)
    out.extend(region)
    out.append(indent + END)
    return out


def solution_source(name: str, hints: dict[str, str | Hint] | None = None, lang: str = "en",
                    reference: Path | None = None) -> str:
    """Source of a solution cell for the top-level function or class `name` (its hints in `lang`; `reference`: the
    reference file read first, see _reference_node)."""
    hints = {key: hint_text(value, lang) for key, value in (hints or {}).items()}
    lines, node = _reference_node(name, reference)
    if isinstance(node, ast.FunctionDef):
        return "\n".join(_function_lines(lines, node, hints.get(name), lang))
    # a class: keep everything outside the methods, hide each method body
    out: list[str] = []
    cursor = node.lineno - 1
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            start = (item.decorator_list[0].lineno if item.decorator_list else item.lineno) - 1
            out.extend(lines[cursor:start])
            out.extend(_function_lines(lines, item, hints.get(f"{name}.{item.name}"), lang))
            cursor = item.end_lineno
    out.extend(lines[cursor : node.end_lineno])
    return "\n".join(out)


def solution(name: str, hints: dict[str, str | Hint] | None = None) -> Cell:
    """A solution cell; its Chinese version (`zh`) has the Chinese hints. Chinese docstrings are the
    content module's DOCSTRINGS_ZH (see course/content/__init__.py), applied by the build."""
    meta = {"solution": True, "grade": False, "locked": False, "grade_id": f"solution_{name}", "schema_version": 3}
    return Cell("code", solution_source(name, hints), role="solution", nbgrader=meta,
                zh=solution_source(name, hints, lang="zh"))


def reference_body_lines(name: str) -> list[str]:
    """The stripped, non-trivial lines that the release must not contain (used by the tests)."""
    lines, node = _reference_node(name)
    fns = [node] if isinstance(node, ast.FunctionDef) else [n for n in node.body if isinstance(n, ast.FunctionDef)]
    found = []
    for fn in fns:
        body = list(fn.body)
        if _has_docstring(fn):
            body.pop(0)
        if body and _is_super_init(body[0]):
            body.pop(0)
        for stmt in body:
            for line in lines[stmt.lineno - 1 : stmt.end_lineno]:
                s = line.strip()
                if s and not s.startswith("#") and s not in {"try:", "finally:", "else:", "return out", ")"}:
                    found.append(s)
    return found


def graded_cell(part_id: str) -> Cell:
    """The graded cell of a part (of any assignment); its points come from autograder/foundation/spec.py."""
    part = next(p for a in ASSIGNMENTS.values() for p in a.parts if p.id == part_id)
    return graded(part_id, part.points)


# --------------------------------------------------------------------------- #
# Written questions: graded by hand in formgrader
# --------------------------------------------------------------------------- #

# The headings of an answer cell's hidden region, in the source only (nbgrader's release replaces the region
# between BEGIN and END SOLUTION with its text stub): the model answer, then the rubric.
WRITTEN_HEADINGS = {"en": ("**Model answer.**", "**Rubric** (instructor only: `nbgrader generate_assignment` "
                                                "replaces this cell's text with the answer stub)."),
                    "zh": ("**参考答案。**", "**评分标准**（仅供教师：`nbgrader generate_assignment` 会把本单元格的"
                                            "内容换成答题提示）。")}
CREDIT_LABELS = {"en": ("Full credit, {points:g} points", "Half credit, {points:g} points", "No credit, 0 points"),
                 "zh": ("满分 {points:g} 分", "半数分 {points:g} 分", "不得分 0 分")}


@dataclass(frozen=True)
class Written:
    """One written question in both languages: the question, the model answer, and the rubric's three
    levels (full, half, no credit). `points` are added to the assignment's autograded 100."""
    grade_id: str
    points: float
    question: Hint
    answer: Hint
    full: Hint
    half: Hint
    none: Hint


def flow(text: str, lang: str = "en") -> str:
    """A paragraph written over several indented source lines, as one line: Chinese lines join without a space
    where both sides are Chinese, with one where either side is Latin text, a number or code."""
    out = ""
    for line in (line.strip() for line in text.strip().splitlines()):
        cjk = lang == "zh" and out and not (out[-1].isascii() or line[0].isascii())
        out += line if not out or cjk else " " + line
    return out


def answer_source(q: Written, lang: str = "en") -> str:
    """The source's answer cell: the model answer and the rubric, between the solution markers."""
    pick = 0 if lang == "en" else 1
    answer_heading, rubric_heading = WRITTEN_HEADINGS[lang]
    labels = CREDIT_LABELS[lang]
    levels = zip(labels, (q.points, q.points / 2, 0), (q.full, q.half, q.none))
    colon = "：" if lang == "zh" else ": "
    rubric = "\n".join(f"- {label.format(points=p)}{colon}{flow(text[pick], lang)}" for label, p, text in levels)
    return (f"{BEGIN}\n{answer_heading} {flow(q.answer[pick], lang)}\n\n"
            f"{rubric_heading}\n\n{rubric}\n{END}")


def written(q: Written, number: int) -> list[Cell]:
    """A written question: its text (a markdown cell), then its answer cell, an nbgrader "manually graded
    answer" (a markdown cell that is a solution and a grade cell, with points) whose source holds the model
    answer and the rubric, which the release replaces with the answer stub."""
    en, zh = flow(q.question[0], "en"), flow(q.question[1], "zh")
    question = md(f"**Written question {number}** ({q.points:g} points, graded by hand by your instructor; the "
                  f"autograder and Validate do not read it). {en}\n\nWrite your answer in the cell below.",
                  f"**简答题 {number}**（{q.points:g} 分，由老师人工批改；自动评分器和 Validate 都不读它）。{zh}\n\n"
                  "把答案写在下面的单元格里。")
    meta = {"grade": True, "solution": True, "locked": False, "grade_id": q.grade_id, "points": q.points,
            "schema_version": 3}
    answer = Cell("markdown", answer_source(q, "en"), role="written", nbgrader=meta, zh=answer_source(q, "zh"))
    return [question, answer]
