"""The grader's shape, read from its source: a tree of imports from the CLI down, private names that
stay private, no state that functions keep in module globals, the worker apart, modules of a size to read;
and the course's (outside course/content/): no import cycle, private names private, modules of a size to read.

Every import counts, also one inside a function: a cycle that only works because an import was
moved into a function is still a cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autograder"
MAX_LINES = 400
# Process-wide resources a module may rebind with `global`, each for a reason that is not a check's business.
GLOBALS_ALLOWED = {
    "autograder.sandbox.prestart": {"_started"},  # the zygote started before torch is imported, taken once
    "autograder.nbgrader_plugin": {"_CHILD"},  # nbgrader's process's grading process (classworker)
    # the worker's unwatched fused kernel and flex_attention; its way to ask the trusted side (serving's remote cache)
    "autograder.worker.standins": {"_sdpa", "_flex_attention", "_ask"},
}
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "clear", "remove", "discard"}


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = modules()
TREES = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in MODULES.items()}


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported module, name taken from it or None, line) for every import in `module`, at any depth."""
    out = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            out += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub, None, node.lineno) if sub in MODULES else (base, alias.name, node.lineno))
    return [(m, n, line) for m, n, line in out if m.split(".")[0] == "autograder"]


def _empty(module: str) -> bool:
    """A module with nothing but its docstring (a package's __init__): importing it runs nothing."""
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in TREES[module].body)


def graph() -> dict[str, set[str]]:
    """Module -> the autograder modules it imports."""
    return {m: {t for t, _, _ in imports(m) if t in MODULES and t != m and not _empty(t)} for m in MODULES}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges[v]:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle_through_an_import_inside_a_function():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_grader_counting_imports_inside_functions():
    edges = graph()
    assert len(edges) > 30 and any(edges.values())
    assert cycles(edges) == []


def test_no_private_name_crosses_a_module_boundary():
    found = []
    for module in MODULES:
        bound = {}  # local name -> autograder module, from `import autograder.x as y` / `from . import x`
        for target, name, line in imports(module):
            if name is not None and name.startswith("_") and not name.startswith("__"):
                found.append(f"{module}:{line} imports {target}.{name}")
        for node in ast.walk(TREES[module]):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(module, node)
                for alias in node.names:
                    if f"{base}.{alias.name}" in MODULES:
                        bound[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in MODULES and alias.asname:
                        bound[alias.asname] = alias.name
        for node in ast.walk(TREES[module]):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{module}:{node.lineno} uses {bound[node.value.id]}.{node.attr}")
    assert found == []


def test_the_worker_imports_nothing_of_the_trusted_grader():
    """The zygote forks every worker: nothing of the grader, the checks or the solutions may be in its memory."""
    found = [f"{m}:{line} imports {t}" for m in MODULES if m.startswith("autograder.worker")
             for t, _, line in imports(m) if not t.startswith("autograder.worker")]
    assert found == []


def test_no_function_keeps_state_in_module_globals():
    """Neither a `global` rebinding (except the process-wide resources listed above) nor a module-level
    dict, list or set that a function changes: the checks get what they grade from the check runner."""
    found = []
    for module, tree in TREES.items():
        containers = set()
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) and node.value is not None else []
            value = getattr(node, "value", None)
            mutable = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
                isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id in ("dict", "list", "set", "defaultdict", "OrderedDict"))
            containers |= {t.id for t in targets if isinstance(t, ast.Name) and mutable}
        for func in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(func):
                if isinstance(node, ast.Global):
                    found += [f"{module}:{node.lineno} global {n}" for n in node.names
                              if n not in GLOBALS_ALLOWED.get(module, set())]
                elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                    for t in getattr(node, "targets", None) or [node.target]:
                        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in containers:
                            found.append(f"{module}:{node.lineno} changes {t.value.id}[...]")
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and isinstance(node.func.value, ast.Name) and node.func.value.id in containers
                      and node.func.attr in MUTATORS):
                    found.append(f"{module}:{node.lineno} {node.func.value.id}.{node.func.attr}(...)")
    assert found == []


def test_every_grader_module_is_at_most_400_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


# --------------------------------------------------------------------------- #
# course/: the same rules, outside course/content/ (whose cells are long text by nature). The files shipped
# beside the notebooks (check_harness.py, graded_cells.py, ...) import each other by their bare names.
# --------------------------------------------------------------------------- #

COURSE = PACKAGE.parent / "course"
COURSE_MODULES = {f"course.{path.stem}": path for path in sorted(COURSE.glob("*.py")) if path.stem != "__init__"}
COURSE_TREES = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in COURSE_MODULES.items()}


def _course_module(name: str) -> str:
    """`course.x` for `course.x` or for the bare name `x` of a course module (as a shipped file imports it)."""
    return f"course.{name}" if f"course.{name}" in COURSE_MODULES else name


def course_imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported course module, name taken from it or None, line) for every import in `module`, at any depth."""
    out = []
    for node in ast.walk(COURSE_TREES[module]):
        if isinstance(node, ast.Import):
            out += [(_course_module(alias.name), None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{module}:{node.lineno}: a relative import (the shipped files cannot use one)"
            base = _course_module(node.module or "")
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub, None, node.lineno) if sub in COURSE_MODULES else (base, alias.name, node.lineno))
    return [(m, n, line) for m, n, line in out if m in COURSE_MODULES]


def course_graph() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in course_imports(m) if t != m} for m in COURSE_MODULES}


def test_the_course_import_reader_sees_the_bare_name_imports_of_the_shipped_files():
    edges = course_graph()
    assert "course.graded_cells" in edges["course.check_harness"]
    assert "course.check_harness" in edges["course.visible_checks_generation"]
    assert "course.visible_checks_scores_masks" in edges["course.visible_checks"]
    assert "course.targets" in edges["course.build"]


def test_no_import_cycle_in_the_course_counting_imports_inside_functions():
    edges = course_graph()
    assert len(edges) > 10
    assert cycles(edges) == []


def test_no_private_name_crosses_a_course_module_boundary():
    found = []
    for module, tree in COURSE_TREES.items():
        found += [f"{module}:{line} imports {target}.{name}" for target, name, line in course_imports(module)
                  if name is not None and name.startswith("_") and not name.startswith("__")]
        bound = {alias.asname or alias.name: f"course.{alias.name}" for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module == "course" for alias in node.names
                 if f"course.{alias.name}" in COURSE_MODULES}
        bound |= {alias.asname or alias.name: _course_module(alias.name) for node in ast.walk(tree)
                  if isinstance(node, ast.Import) for alias in node.names if _course_module(alias.name) in COURSE_MODULES}
        found += [f"{module}:{node.lineno} uses {bound[node.value.id]}.{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                  and node.attr.startswith("_") and not node.attr.startswith("__")]
    assert found == []


def test_every_course_module_outside_the_content_is_at_most_400_lines():
    long = {m: n for m, p in COURSE_MODULES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert len(COURSE_MODULES) > 10 and long == {}


# --------------------------------------------------------------------------- #
# The layers, top to bottom (README's package map): a module imports only its own layer and those below.
# The hidden checks, which only pytest loads, sit with the grading pipeline; the worker is at the bottom.
# --------------------------------------------------------------------------- #
LAYERS = [
    ("entry points", ("autograder", "autograder.__main__", "autograder.nbgrader_plugin")),
    ("commands", ("autograder.commands",)),
    ("grading", ("autograder.grading", "autograder.checks")),
    ("sandbox", ("autograder.sandbox",)),
    ("foundation", ("autograder.foundation",)),
    ("worker", ("autograder.worker",)),
]


def layer(module: str) -> int | None:
    """The index in LAYERS of the layer `module` belongs to (the longest matching prefix), or None."""
    best = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best[1]:
                best = i, len(p)
    return best[0]


def test_every_grader_module_belongs_to_a_layer_and_no_layer_folder_is_missing():
    assert [m for m in MODULES if layer(m) is None] == []
    assert all(any(m == p for m in MODULES) for _, prefixes in LAYERS for p in prefixes)


def test_the_layer_of_a_module_is_its_longest_prefix():
    assert layer("autograder") == 0 and layer("autograder.commands.cli") == 1
    assert layer("autograder.checks.self_attention.common") == 2 and layer("autograder.worker.names") == 5


def test_no_lower_layer_imports_a_higher_one():
    found = [f"{m}:{line} ({LAYERS[layer(m)][0]}) imports {t} ({LAYERS[layer(t)][0]})"
             for m in MODULES for t, _, line in imports(m) if t in MODULES and layer(t) < layer(m)]
    assert found == []
