"""The static look at a submission's code: does a part's code MENTION a torch function it may not call?

Read from the source, never run: the definitions of each part's API names, and of every helper
they refer to, are searched for the torch functions the part forbids (worker/names.py, spec.py)
under any name or alias. What costs points is a CALL while the part is graded, which the worker
sees (worker/watch.py); a mention that never ran (nanoGPT's `if self.flash:` with the flag off)
gets a note, not a loss (the contract's "What from scratch means").
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import replace

from ..foundation import i18n
from ..foundation.extract import Extracted
from ..foundation.results import PartResult
from ..foundation.spec import DEFAULT, DEFAULT_LANGUAGE, Part
from ..worker.names import is_forbidden_name

_ = i18n.message

TORCH_ROOTS = frozenset({"torch", "nn", "F"})  # the worker's preamble binds these in every namespace
GRADER = "autograder"  # the grader's package: code that reaches into it is flagged (grader_reach_in_source)


def _parsed(cell: str) -> ast.Module | None:
    """The cell's syntax tree; None when Python cannot read it (a syntax error, a null byte, nesting
    too deep for the parser): the worker reports that cell's error to the student."""
    try:
        return ast.parse(cell)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _torch_bindings(trees) -> tuple[set[str], dict[str, str]]:
    """(names bound to torch modules, {local name: torch's name} imported from torch), from the imports."""
    roots, imported = set(TORCH_ROOTS), {}
    for tree in trees:
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "torch":
                        roots.add(alias.asname or "torch")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
                for alias in node.names:
                    imported[alias.asname or alias.name] = alias.name
    return roots, imported


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _forbidden_use(node: ast.AST, roots: set[str], imported: dict[str, str], defs, patterns) -> str | None:
    """The forbidden torch name this node uses, if any: torch.X / F.X / torch.ops.aten.X, a name
    imported from torch (under any alias), or getattr(torch-thing, "X"). A name the student
    defined is their own."""
    if isinstance(node, ast.Attribute) and is_forbidden_name(node.attr, patterns):
        root = _root_name(node.value)
        if root in roots or root in imported:
            return node.attr
    if isinstance(node, ast.Name) and node.id in imported and node.id not in defs \
            and is_forbidden_name(imported[node.id], patterns):
        return imported[node.id]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
            and is_forbidden_name(node.args[1].value, patterns) and _root_name(node.args[0]) in roots | set(imported)):
        return node.args[1].value[:80]
    return None


def forbidden_in_source(extracted: Extracted, parts: Iterable[Part] = DEFAULT.parts) -> dict[str, set[str]]:
    """The forbidden torch names each part's code mentions (mentions_in_source without the where)."""
    return {part: {use for _, use in found} for part, found in mentions_in_source(extracted, parts).items()}


def mentions_in_source(extracted: Extracted, parts: Iterable[Part] = DEFAULT.parts) -> dict[str, set[tuple[str, str]]]:
    """Static look at the student's code: which parts mention a torch function they may not call, and where
    ({part: {(the student's definition, torch's name)}}).

    For each part that forbids torch functions (spec.Part.forbidden), the definitions of its names and of every
    helper they refer to (transitively) are searched for them, public or private. A helper of the student's own is
    followed, never flagged for its name: a from-scratch function may well be called scaled_dot_product_attention.
    """
    found: dict[str, set[tuple[str, str]]] = {}
    for source in extracted.sources:
        trees = [_parsed(cell) for cell in source.cells]  # (each cell parsed once)
        roots, imported = _torch_bindings(trees)
        defs = _definitions(trees)
        imported = {k: v for k, v in imported.items() if k not in defs}  # redefined by the student: their own
        for part in (p for p in parts if p.forbidden):
            for name, node in _part_nodes(defs, part.names):
                use = _forbidden_use(node, roots, imported, defs, part.forbidden)
                if use:
                    found.setdefault(part.id, set()).add((name, use))
    return found


def grader_reach_in_source(extracted: Extracted, parts: Iterable[Part] = DEFAULT.parts) -> dict[str, set[tuple[str, str]]]:
    """Which parts' code reaches into the grader's own modules ({part: {(the student's definition, the module)}}):
    a module imported from `autograder` and used there, or a string that names one (`sys.modules["autograder..."]`).
    Nothing of the grader's in the worker does graded work (worker/standins.py); this is for the instructor's eyes."""
    found: dict[str, set[tuple[str, str]]] = {}
    for source in extracted.sources:
        trees = [_parsed(cell) for cell in source.cells]
        bound = _grader_bindings(trees)
        defs = _definitions(trees)
        for part in parts:
            for name, node in _part_nodes(defs, part.names):
                reached = _grader_module(node, {k: v for k, v in bound.items() if k not in defs})
                if reached:
                    found.setdefault(part.id, set()).add((name, reached))
    return found


def _definitions(trees) -> dict[str, ast.AST]:
    """The top-level functions, classes and assigned names of the source, by name (the last one wins)."""
    defs: dict[str, ast.AST] = {}
    for tree in trees:
        for node in tree.body if tree else ():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        defs[target.id] = node
    return defs


def _part_nodes(defs: dict[str, ast.AST], names):
    """(definition, node) for every node of the definitions of `names` and of every helper they refer to."""
    seen, todo = set(), [n for n in names if n in defs]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(defs[name]):
            yield name, node
            ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if ident in defs and ident not in seen:
                todo.append(ident)  # a helper of the student's: look inside it


def _grader_bindings(trees) -> dict[str, str]:
    """{local name: the grader's module} bound by the source's imports from `autograder`."""
    bound = {}
    for tree in trees:
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _is_grader(alias.name):
                        bound[alias.asname or alias.name.split(".")[0]] = alias.name
            elif isinstance(node, ast.ImportFrom) and not node.level and _is_grader(node.module or ""):
                for alias in node.names:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _is_grader(name: str) -> bool:
    """Does `name` name the grader's package or one of its modules ("autograder", "autograder.worker.x")?"""
    return re.fullmatch(GRADER + r"(\.[A-Za-z_]\w*)*", name.strip()) is not None


def _grader_module(node: ast.AST, bound: dict[str, str]) -> str | None:
    """The grader's module `node` reaches: a name bound to one, an import of one, or a string naming one."""
    if isinstance(node, ast.Name) and node.id in bound:
        return bound[node.id]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_grader(node.value):
        return node.value.strip()[:80]
    if isinstance(node, ast.Import):
        return next((a.name for a in node.names if _is_grader(a.name)), None)
    if isinstance(node, ast.ImportFrom) and not node.level and _is_grader(node.module or ""):
        return node.module
    return None


def note_mentions(part: PartResult, mentioned: set[tuple[str, str]], called: bool,
                  lang: str = DEFAULT_LANGUAGE) -> PartResult:
    """A part whose code mentions a forbidden torch function that the watch did not see called while it was graded:
    no loss (the contract: a mention is not a call), a note that vouches for nothing, and the mentions in
    `review`, for the instructor (the class report lists them). The watch runs in the student's process: code that
    switched it off is not seen either (docs/security.md), so "not seen" is never said as "did not run"."""
    if not mentioned or called:
        return part
    where = tuple(f"{name} ({use})" for name, use in sorted(mentioned))
    note = _("your code mentions a function this part may not call: {where}; the grader's watch did not see it "
             "called while the part was graded, so it costs no points here, and this part is flagged for your "
             "instructor's review (calling it here earns nothing)").format(where=", ".join(where)).render(lang)
    return replace(part, notes=part.notes + (note,), review=part.review + where)


def note_grader_reach(part: PartResult, reached: set[tuple[str, str]], lang: str = DEFAULT_LANGUAGE) -> PartResult:
    """A part whose code reaches into the grader's own modules: no loss by itself (what the grader keeps in the
    worker does no graded work), a note, and the reach in `review` for the instructor (the class report lists it)."""
    if not reached:
        return part
    where = tuple(f"{name} ({module})" for name, module in sorted(reached))
    note = _("your code reaches into the grader's own modules: {where}; nothing of the grader's computes your "
             "answers, and this part is flagged for your instructor's review").format(where=", ".join(where)).render(lang)
    return replace(part, notes=part.notes + (note,), review=part.review + where)
