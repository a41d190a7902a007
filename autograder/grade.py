"""The grading pipeline: extract -> run (sandboxed worker) -> check (trusted) -> results.

`Grader` keeps a zygote warm, so that grading many submissions in one process pays the
price of importing torch only once.
"""
from __future__ import annotations

import ast
import time
from dataclasses import replace

from . import check
from .extract import Extracted, extract
from .results import GradeResult, Limits, PartResult, CheckResult
from .run import Zygote
from .session import Session
from .spec import FROM_SCRATCH, GPU_PART, PARTS, is_forbidden_name


TORCH_ROOTS = frozenset({"torch", "nn", "F"})  # the worker's preamble binds these in every namespace


def _torch_bindings(cells) -> tuple[set[str], dict[str, str]]:
    """(names bound to torch modules, {local name: torch's name} imported from torch), from the imports."""
    roots, imported = set(TORCH_ROOTS), {}
    for cell in cells:
        try:
            tree = ast.parse(cell)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
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


def _forbidden_use(node: ast.AST, roots: set[str], imported: dict[str, str], defs) -> str | None:
    """The forbidden torch name this node uses, if any: torch.X / F.X / torch.ops.aten.X, a name
    imported from torch (under any alias), or getattr(torch-thing, "X"). A name the student
    defined is their own."""
    if isinstance(node, ast.Attribute) and is_forbidden_name(node.attr):
        root = _root_name(node.value)
        if root in roots or root in imported:
            return node.attr
    if isinstance(node, ast.Name) and node.id in imported and node.id not in defs \
            and is_forbidden_name(imported[node.id]):
        return imported[node.id]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
            and is_forbidden_name(node.args[1].value) and _root_name(node.args[0]) in roots | set(imported)):
        return node.args[1].value[:80]
    return None


def forbidden_in_source(extracted: Extracted) -> dict[str, set[str]]:
    """Static look at the student's code: which from-scratch parts use torch's fused attention.

    For each from-scratch part, the definitions of its names and of every helper they refer
    to (transitively) are searched for torch's fused kernel or official module, public or
    private. A helper of the student's own is followed, never flagged for its name: a
    from-scratch function may well be called scaled_dot_product_attention.
    """
    found: dict[str, set[str]] = {}
    for source in extracted.sources:
        roots, imported = _torch_bindings(source.cells)
        defs: dict[str, ast.AST] = {}
        for cell in source.cells:
            try:
                tree = ast.parse(cell)
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    defs[node.name] = node
                elif isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            defs[target.id] = node
        imported = {k: v for k, v in imported.items() if k not in defs}  # redefined by the student: their own
        for part in PARTS:
            if part.id not in FROM_SCRATCH:
                continue
            seen, todo = set(), [n for n in part.names if n in defs]
            while todo:
                name = todo.pop()
                if name in seen:
                    continue
                seen.add(name)
                for node in ast.walk(defs[name]):
                    use = _forbidden_use(node, roots, imported, defs)
                    if use:
                        found.setdefault(part.id, set()).add(use)
                    else:
                        ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(
                            node, ast.Attribute) else None
                        if ident in defs and ident not in seen:
                            todo.append(ident)  # a helper of the student's: look inside it
    return found


def _apply_static(part: PartResult, names: set[str]) -> PartResult:
    if not names or not part.checks:
        return part
    note = (f"this part must compute attention from scratch, but your code uses {', '.join(sorted(names))}: "
            "its checks earn nothing")
    checks = tuple(replace(c, passed=False, points=0.0,
                           message=c.message or f"correct result, but computed with {', '.join(sorted(names))}")
                   for c in part.checks)
    notes = part.notes if any("from scratch" in n for n in part.notes) else part.notes + (note,)
    return replace(part, checks=checks, notes=notes)


def _unreadable(extracted: Extracted, part_ids: list[str]) -> list[PartResult]:
    """Every part scores 0 with the reason, when no file of the submission could be read."""
    reason = "; ".join(s.error for s in extracted.sources if s.error) or "no code found"
    out = []
    for pid in part_ids:
        part = next(p for p in PARTS + (GPU_PART,) if p.id == pid)
        out.append(PartResult(pid, part.points, (CheckResult("your submission can be read", False, 0.0, part.points,
                                                             reason),), (reason,)))
    return out


class Grader:
    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self._zygote: Zygote | None = None

    @property
    def zygote(self) -> Zygote:
        if self._zygote is None:
            self._zygote = Zygote()
        return self._zygote

    def warm(self) -> "Grader":
        """Start the worker pool now (it imports torch in parallel with whatever comes next)."""
        _ = self.zygote
        return self

    def close(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def __enter__(self) -> "Grader":
        return self.warm()

    def __exit__(self, *exc) -> None:
        self.close()

    def grade(self, path, gpu: bool = False, part_ids: list[str] | None = None) -> GradeResult:
        started = time.perf_counter()
        extracted = extract(path)
        part_ids = part_ids or [p.id for p in PARTS]
        notes = list(extracted.notes)
        for source in extracted.sources:
            notes.extend(f"{source.name}: {n}" for n in source.notes)
            if source.error:
                notes.append(source.error)
        readable = [s for s in extracted.sources if s.error is None]
        protections_off: tuple[str, ...] = ()
        if not readable:
            parts = _unreadable(extracted, part_ids)
        else:
            session = Session(self.zygote, extracted.sources, self.limits)
            try:
                session.start()
                notes.extend(_load_notes(session))
                parts = check.run_checks(session, part_ids)
                protections_off = tuple(f"{k}: {v}" for k, v in sorted(session.protections.get("off", {}).items()))
            finally:
                session.close()
            static = forbidden_in_source(extracted)
            parts = [_apply_static(p, static.get(p.id, set())) for p in parts]
        gpu_result = None
        if gpu:
            from .gpu import grade_gpu  # noqa: PLC0415 - only the GPU stage needs it

            gpu_result = grade_gpu(self, extracted)
        return GradeResult(str(path), tuple(parts), gpu_result, tuple(dict.fromkeys(notes)), protections_off,
                           round(time.perf_counter() - started, 3))


def _load_notes(session: Session) -> list[str]:
    notes = []
    if session.load_failure:
        notes.append(session.load_failure)
    for src, info in session.load_report.items():
        for err in info.get("errors", ()):
            where = f" ({err['where']})" if err.get("where") else ""
            notes.append(f"{src}: cell {err['cell'] + 1} raised {err['type']}: {err['message']}{where}")
    return notes


def grade(path, gpu: bool = False, limits: Limits | None = None) -> GradeResult:
    """Grade one submission (a notebook, a folder of notebooks or a .py file)."""
    extract(path)  # a path that is no submission fails here, before the worker pool starts
    with Grader(limits) as grader:
        return grader.grade(path, gpu=gpu)
