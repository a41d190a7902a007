"""The mutants of a reference solution: every small edit of its functions' code, made on the syntax tree.

Each mutant is the reference with one node changed (an operator, a constant, an axis, a call or a
keyword dropped, two arguments swapped, a condition flipped), written back as Python with
`ast.unparse`, so the whole module stays a submission the grader can read. A mutant's `key`
names it in words that survive unrelated edits of the reference: the file, the definition it is
in, and its changed line before and after (`equivalent.toml` is keyed by it).
"""
from __future__ import annotations

import ast
import copy
import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BINOP_SWAPS = {ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.Div, ast.Add), ast.Div: (ast.Mult, ast.FloorDiv),
               ast.FloorDiv: (ast.Div, ast.Mult), ast.Mod: (ast.FloorDiv,), ast.Pow: (ast.Mult,),
               ast.MatMult: (ast.Mult,), ast.BitAnd: (ast.BitOr,), ast.BitOr: (ast.BitAnd,)}
CMP_SWAPS = {ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.GtE), ast.Gt: (ast.GtE, ast.Lt), ast.GtE: (ast.Gt, ast.LtE),
             ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,)}
AXIS_KEYWORDS = frozenset({"dim", "diagonal", "axis"})
STRING_SWAPS = {"-inf": "inf", "inf": "-inf"}
NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.MatMult, ast.Pow, ast.Mod)


@dataclass(frozen=True)
class Mutant:
    module: str  # the reference's stem: attention, generation
    scope: str  # the top-level definition the edit is in (a function or a class)
    operator: str  # arithmetic, comparison, constant, axis, drop-call, drop-keyword, swap-arguments, condition
    before: str  # the changed line(s) of the reference (as ast.unparse writes them)
    after: str  # the same line(s) in the mutant
    source: str  # the whole mutant, a submission

    @property
    def key(self) -> str:
        return f"{self.module}:{self.scope}: {self.before} => {self.after}"

    @property
    def diff(self) -> str:
        return f"-    {self.before}\n+    {self.after}"


def _with(node: ast.AST, **fields) -> ast.AST:
    new = copy.copy(node)
    for name, value in fields.items():
        setattr(new, name, value)
    return new


def _int_edits(value: int) -> list[int]:
    return sorted({value + 1, value - 1, 0, -value} - {value})[:3] if value in (0, 1, -1, 2, -2) else [value + 1,
                                                                                                       value - 1]


def _constant_edits(node: ast.Constant, axis: bool) -> Iterator[tuple[str, ast.AST]]:
    op = "axis" if axis else "constant"
    value = node.value
    if isinstance(value, bool):
        yield "constant", _with(node, value=not value)
    elif isinstance(value, int):
        for v in _int_edits(value):
            yield op, _with(node, value=v)
    elif isinstance(value, float):
        for v in (value + 1.0, value / 10.0 if value else 1.0):
            yield "constant", _with(node, value=v)
    elif isinstance(value, str) and value in STRING_SWAPS:
        yield "constant", _with(node, value=STRING_SWAPS[value])


def _call_edits(node: ast.Call) -> Iterator[tuple[str, ast.AST]]:
    """Drop the call (keep its receiver or its first argument), drop one keyword, swap two adjacent arguments."""
    if isinstance(node.func, ast.Attribute) and not isinstance(node.func.value, ast.Name | ast.Attribute) or (
            isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id not in ("torch", "nn", "F", "math", "self")):
        yield "drop-call", node.func.value  # x.transpose(1, 2) -> x, t.float() -> t
    elif node.args and not isinstance(node.args[0], ast.Starred):
        yield "drop-call", node.args[0]  # torch.softmax(s, dim=-1) -> s, self.dropout(w) -> w
    for i in range(len(node.keywords)):
        if node.keywords[i].arg is not None:
            yield "drop-keyword", _with(node, keywords=node.keywords[:i] + node.keywords[i + 1:])
    for i in range(len(node.args) - 1):
        a, b = node.args[i], node.args[i + 1]
        if not isinstance(a, ast.Starred) and not isinstance(b, ast.Starred) and ast.dump(a) != ast.dump(b):
            args = list(node.args)
            args[i], args[i + 1] = b, a
            yield "swap-arguments", _with(node, args=args)


def edits(node: ast.AST, parent: ast.AST | None) -> Iterator[tuple[str, ast.AST]]:
    """(operator, replacement node) for each mutation of `node` itself."""
    if isinstance(node, ast.BinOp):
        for new in BINOP_SWAPS.get(type(node.op), ()):
            yield "arithmetic", _with(node, op=new())
        if isinstance(node.op, NON_COMMUTATIVE):
            yield "swap-arguments", _with(node, left=node.right, right=node.left)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert | ast.Not):
        yield "condition", node.operand
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        axis = isinstance(parent, ast.keyword) and parent.arg in AXIS_KEYWORDS or isinstance(parent, ast.Call)
        for op, new in _constant_edits(ast.Constant(value=-node.operand.value), axis):
            yield op, new
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        for new in CMP_SWAPS.get(type(node.ops[0]), ()):
            yield "comparison", _with(node, ops=[new()])
    elif isinstance(node, ast.Constant) and not (isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.USub)):
        axis = isinstance(parent, ast.keyword) and parent.arg in AXIS_KEYWORDS or isinstance(parent, ast.Call)
        yield from _constant_edits(node, axis)
    elif isinstance(node, ast.Call):
        yield from _call_edits(node)
    elif isinstance(node, ast.BoolOp):
        yield "condition", _with(node, op=ast.Or() if isinstance(node.op, ast.And) else ast.And())
    if isinstance(parent, ast.If | ast.IfExp | ast.While) and node is parent.test:
        yield "condition", ast.UnaryOp(op=ast.Not(), operand=node)


def _skipped(node: ast.AST) -> set[int]:
    """Nodes never mutated: docstrings, annotations, default values, the messages of raise statements."""
    skip: set[int] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.body and isinstance(n.body[0], ast.Expr) and \
                isinstance(n.body[0].value, ast.Constant) and isinstance(n.body[0].value.value, str):
            skip.add(id(n.body[0].value))
        if isinstance(n, ast.Raise) and n.exc is not None:
            skip.update(id(m) for m in ast.walk(n.exc))
        if isinstance(n, ast.arg) and n.annotation is not None:
            skip.update(id(m) for m in ast.walk(n.annotation))
        if isinstance(n, ast.FunctionDef):
            for m in (n.returns, *n.args.defaults, *n.args.kw_defaults):
                if m is not None:
                    skip.update(id(k) for k in ast.walk(m))
        if isinstance(n, ast.AnnAssign):
            skip.update(id(m) for m in ast.walk(n.annotation))
        if isinstance(n, ast.JoinedStr):
            skip.update(id(m) for m in ast.walk(n))
    return skip


def _children(node: ast.AST) -> Iterator[tuple[str, int | None, ast.AST]]:
    for name, value in ast.iter_fields(node):
        if isinstance(value, ast.AST):
            yield name, None, value
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield name, i, item


def _replace(parent: ast.AST, field: str, index: int | None, new: ast.AST) -> ast.AST:
    if index is None:
        return _with(parent, **{field: new})
    items = list(getattr(parent, field))
    items[index] = new
    return _with(parent, **{field: items})


def _variants(node: ast.AST, parent: ast.AST | None, skip: set[int]) -> Iterator[tuple[str, ast.AST]]:
    """Every mutant of the subtree `node`, as (operator, new subtree), sharing the unchanged nodes."""
    if id(node) in skip:
        return
    yield from edits(node, parent)
    for field, index, child in _children(node):
        for op, new_child in _variants(child, node, skip):
            yield op, _replace(node, field, index, new_child)


def _changed_lines(old: str, new: str) -> tuple[str, str] | None:
    a, b = old.splitlines(), new.splitlines()
    removed, added = [], []
    for line in difflib.unified_diff(a, b, n=0, lineterm=""):
        if line.startswith("-") and not line.startswith("---"):
            removed.append(line[1:].strip())
        elif line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:].strip())
    if not removed and not added:
        return None
    return " / ".join(removed), " / ".join(added)


def _top_spans(tree: ast.Module, original: str) -> dict[int, tuple[int, int]]:
    """Where each top-level definition's own unparsed text sits in `original` (the whole module unparsed)."""
    spans, cursor = {}, 0
    for i, top in enumerate(tree.body):
        if isinstance(top, ast.FunctionDef | ast.ClassDef):
            text = ast.unparse(top)
            start = original.index(text, cursor)
            cursor = start + len(text)
            spans[i] = (start, cursor)
    return spans


def mutants(path: Path, scopes: frozenset[str] | None = None) -> list[Mutant]:
    """Every mutant of the reference at `path` that differs from it as code, in source order, keys unique; with
    `scopes`, of those top-level definitions only. Each mutant's source is the module's with its one definition
    unparsed anew (the module is unparsed once: a test run collects every mutant in each of its processes)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    original = ast.unparse(tree)
    spans = _top_spans(tree, original)
    out: dict[str, Mutant] = {}
    for i, top in enumerate(tree.body):
        if not isinstance(top, ast.FunctionDef | ast.ClassDef) or (scopes is not None and top.name not in scopes):
            continue
        skip = _skipped(top)
        start, end = spans[i]
        for op, new_top in _variants(top, None, skip):
            try:
                piece = ast.unparse(new_top)
                compile(piece, str(path), "exec")
            except (SyntaxError, ValueError, TypeError):
                continue
            changed = _changed_lines(original[start:end], piece)
            if changed is None:
                continue
            source = original[:start] + piece + original[end:]
            mutant = Mutant(path.stem, top.name, op, changed[0], changed[1], source)
            key, n = mutant.key, 2
            while key in out:  # the same edit of the same line elsewhere in the definition
                mutant = Mutant(path.stem, top.name, op, changed[0], f"{changed[1]} #{n}", source)
                key, n = mutant.key, n + 1
            out[key] = mutant
    return list(out.values())
