"""The generated notebooks match course/, the release hides the solutions, and the cells follow spec.py,
for every assignment the course builds (self_attention, generation) in each edition (English, Chinese)."""
from __future__ import annotations

import ast
import copy
import importlib
import json

import nbformat
import pytest

from autograder.foundation import spec
from course.content.written import ASSIGNMENT_QUESTIONS
from course import build
from course.cells import reference_body_lines, solution_source
from course.content.efficient import flash_backward
from course.content.generation import decoder
from course.content.serving import attention_sinks, continuous_batching, paged_attention, prefix_sharing

REPO = build.REPO
SETUP_IMPORTS = {"math", "torch", "torch.nn", "torch.nn.functional"}
GENERIC_LINES = {"with torch.no_grad():"}  # plain syntax, not a give-away
ASSIGNMENTS = [t.id for t in build.TARGETS]
NOTEBOOKS = [(a, name) for a in ASSIGNMENTS for name in spec.assignment(a).notebooks]
PARTS = [(a, p) for a in ASSIGNMENTS for p in spec.assignment(a).parts]
NOTEBOOK_IDS = [f"{a}/{name}" for a, name in NOTEBOOKS]
PART_IDS = [f"{a}/{p.id}" for a, p in PARTS]


def notebook(kind: str, name: str, assignment: str = spec.ASSIGNMENT) -> nbformat.NotebookNode:
    target = build.TARGET_BY_ID[assignment]
    folder = {"source": target.source, "release": target.release, "solved": target.solved}[kind]
    return nbformat.read(REPO / folder / f"{name}.ipynb", as_version=4)


def reference(assignment: str):
    return importlib.import_module(spec.assignment(assignment).solutions)


def reference_nodes(assignment: str) -> dict:
    path = REPO / (spec.assignment(assignment).solutions.replace(".", "/") + ".py")
    return {n.name: n for n in ast.parse(path.read_text()).body if hasattr(n, "name")}


def nbgrader_meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def solution_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and nbgrader_meta(c).get("solution")]


def top_level_names(source: str) -> list[str]:
    return [n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]


def test_fresh_build_into_a_temp_dir_matches_the_committed_files():
    problems = build.check(REPO)
    assert not problems, "run `make release`:\n" + "\n".join(problems)


def test_drift_check_notices_a_changed_notebook(tmp_path):
    """The drift check itself must be able to fail."""
    import shutil

    for sub in build.OUTPUT_DIRS:
        shutil.copytree(REPO / sub, tmp_path / sub, dirs_exist_ok=True)  # one output folder may hold another
    path = tmp_path / build.RELEASE_DIR / "02_masks.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"][0]["source"] = "# edited by hand\n"
    path.write_text(json.dumps(nb))
    (tmp_path / build.SOLVED_DIR / "visible_checks.py").write_text("# stale\n")
    problems = build.diff_trees(tmp_path, REPO)
    assert any("02_masks.ipynb" in p for p in problems)
    assert any("visible_checks.py" in p for p in problems)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_contains_no_line_of_any_reference_body(assignment):
    release = REPO / build.TARGET_BY_ID[assignment].release
    # every text file (a compiled .mo catalog holds only the visible checks' messages)
    # (a __pycache__ that an import left in a clone is not part of the release: the course build skips it too)
    released = "\n".join(p.read_text(encoding="utf-8") for p in sorted(release.rglob("*"))
                         if p.is_file() and p.suffix != ".mo" and "__pycache__" not in p.parts)
    released_lines = set()
    for path in sorted(release.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            released_lines.update(line.strip() for line in cell.source.splitlines())
    for path in sorted(release.glob("*.py")):
        released_lines.update(line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    leaks = {name: [line for line in reference_body_lines(name) if len(line) > 12 and line not in GENERIC_LINES
                    and line in released_lines] for name in spec.assignment(assignment).api_names}
    leaks = {name: lines for name, lines in leaks.items() if lines}
    assert not leaks, f"solution code in assignments/: {leaks}"
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in released, f"{marker!r} found in assignments/"


def test_leak_detector_finds_a_reference_line_when_there_is_one():
    lines = reference_body_lines("chunked_attention")
    assert "stop = min(start + chunk_size, S)" in lines
    assert all(not line.startswith("#") for line in lines)


FRIENDLY_STUB = {"en": 'raise NotImplementedError("not implemented yet', "zh": 'raise NotImplementedError("还没有实现'}


@pytest.mark.parametrize("assignment,part", PARTS, ids=PART_IDS)
def test_every_spec_name_has_a_stub_in_its_release_notebook_and_a_definition_in_solutions(assignment, part):
    cells = solution_cells(notebook("release", part.notebook, assignment))
    defined = {name: cell.source for cell in cells for name in top_level_names(cell.source)}
    for name in part.names:
        assert hasattr(reference(assignment), name), f"{spec.assignment(assignment).solutions} does not define {name}"
        assert name in defined, f"{part.notebook} has no solution cell defining {name}"
        friendly = FRIENDLY_STUB[build.TARGET_BY_ID[assignment].lang]
        assert friendly in defined[name], f"{name}'s stub has no friendly hint in its edition's language"
        for other in spec.assignment(assignment).notebooks:
            copies = any(other == m.NAME and name in m.PIECES  # (their own copies)
                         for m in (decoder, flash_backward, paged_attention, prefix_sharing, continuous_batching,
                                   attention_sinks))
            # a class two parts grade (serving's PagedKVCache: paging in 02, prefix caching in 04) is in both notebooks
            shared = any(name in p.names for p in spec.assignment(assignment).parts_of(other))
            if other != part.notebook and not copies and not shared:
                others = {n for c in solution_cells(notebook("release", other, assignment))
                          for n in top_level_names(c.source)}
                assert name not in others, f"{name} is also a solution in {other}"


@pytest.mark.parametrize("assignment,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_solution_cells_hold_only_imports_and_definitions(assignment, name):
    for kind in ("source", "release"):
        for cell in solution_cells(notebook(kind, name, assignment)):
            for node in ast.parse(cell.source).body:
                assert isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)), (
                    f"{kind} {name} cell {cell.id}: {ast.dump(node)[:80]}"
                )
            meta = nbgrader_meta(cell)
            assert meta["grade"] is False and meta["locked"] is False and meta["schema_version"] == 3


def without_docstrings(node: ast.AST) -> ast.AST:
    """A copy of `node` whose functions and classes have no docstring (an edition's language is in its docstrings)."""
    node = copy.deepcopy(node)
    for sub in ast.walk(node):
        body = getattr(sub, "body", None)
        if isinstance(sub, (ast.FunctionDef, ast.ClassDef)) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            sub.body = body[1:] or [ast.Pass()]
    return node


@pytest.mark.parametrize("assignment,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_source_solution_cells_are_the_reference_code(assignment, name):
    """Same syntax tree as the assignment's reference (comments and solution markers aside; in an edition in
    another language than English, docstrings aside too: tests/test_editions.py checks those)."""
    nodes = reference_nodes(assignment)
    english = spec.split_edition(assignment)[1] == spec.DEFAULT_LANGUAGE
    same = (lambda n: n) if english else without_docstrings
    for cell in solution_cells(notebook("source", name, assignment)):
        for node in ast.parse(cell.source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                assert ast.dump(same(node)) == ast.dump(same(nodes[node.name])), f"{name}: {node.name} differs from the reference"


@pytest.mark.parametrize("assignment,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_release_stubs_keep_signatures_and_raise_not_implemented(assignment, name):
    import torch

    namespace = {"math": __import__("math"), "torch": torch, "nn": torch.nn, "F": torch.nn.functional}
    for cell in solution_cells(notebook("release", name, assignment)):
        exec(compile(cell.source, f"<{name}:{cell.id}>", "exec"), namespace)
    nodes = reference_nodes(assignment)
    for part in spec.assignment(assignment).parts_of(name):
        for api in part.names:
            obj = namespace[api]
            node = nodes[api]
            if isinstance(node, ast.ClassDef) and issubclass(obj, torch.autograd.Function):
                with pytest.raises(NotImplementedError):  # used through apply, never instantiated
                    obj.apply(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2))
            elif isinstance(node, ast.ClassDef):
                init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
                width = len(init.args.args) - 1 - len(init.args.defaults) if init else 0  # required arguments
                with pytest.raises(NotImplementedError):
                    obj(*[8, 2, 2, 4][:width])  # PagedKVCache needs 4: blocks, block size, kv heads, head_dim
            else:
                with pytest.raises(NotImplementedError):
                    obj(*[None] * len(node.args.args))
            assert (obj.__doc__ or "").strip(), f"{api} lost its docstring"


@pytest.mark.parametrize("assignment,part", PARTS, ids=PART_IDS)
def test_each_part_has_exactly_one_graded_cell_with_the_spec_points(assignment, part):
    for kind in ("source", "release"):
        graded = [c for c in notebook(kind, part.notebook, assignment).cells if nbgrader_meta(c).get("grade")]
        mine = [c for c in graded if nbgrader_meta(c)["grade_id"] == part.id]
        assert len(mine) == 1, f"{kind} {part.notebook}: {len(mine)} graded cells for {part.id}"
        meta = nbgrader_meta(mine[0])
        assert meta["points"] == part.points and meta["locked"] is True and meta["solution"] is False
        assert "BEGIN HIDDEN TESTS" not in mine[0].source
        assert f'graded_part("{part.id}")' in mine[0].source
    cells = [c for n in spec.assignment(assignment).notebooks for c in notebook("source", n, assignment).cells
             if nbgrader_meta(c).get("grade")]
    assert {nbgrader_meta(c)["grade_id"] for c in cells if c.cell_type == "code"} == {
        p.id for p in spec.assignment(assignment).parts}
    # the other graded cells are the written questions, graded by hand (tests/test_written.py)
    assert {nbgrader_meta(c)["grade_id"] for c in cells if c.cell_type != "code"} == set(
        ASSIGNMENT_QUESTIONS[spec.split_edition(assignment)[0]])


@pytest.mark.parametrize("assignment,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_first_code_cell_is_a_locked_setup_with_the_four_imports_a_seed_and_the_checks(assignment, name):
    first = next(c for c in notebook("release", name, assignment).cells if c.cell_type == "code")
    meta = nbgrader_meta(first)
    assert meta.get("locked") is True and not meta.get("grade") and not meta.get("solution")
    imported = set()
    for node in ast.parse(first.source).body:
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert SETUP_IMPORTS <= imported
    assert "torch.manual_seed(" in first.source and "from visible_checks import" in first.source


@pytest.mark.parametrize("assignment,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_every_stub_is_followed_by_a_locked_visible_check(assignment, name):
    cells = [c for c in notebook("release", name, assignment).cells if c.cell_type == "code"]
    for i, cell in enumerate(cells):
        if nbgrader_meta(cell).get("solution"):
            after = cells[i + 1]
            meta = nbgrader_meta(after)
            assert meta.get("locked") and meta["grade_id"].startswith("check_") and after.source.startswith("check_")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_support_files_are_copies_of_their_origin_with_a_generated_header(assignment):
    target = build.TARGET_BY_ID[assignment]
    for folder in target.outputs:
        for name, origin in target.support.items():
            text = (REPO / folder / name).read_text(encoding="utf-8")
            header, body = text.split("\n", 1)
            assert header.startswith("# Generated by `python -m course.build`")
            assert body == origin.read_text(encoding="utf-8")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_content_modules_follow_spec_notebook_order(assignment):
    assert tuple(m.NAME for m in build.TARGET_BY_ID[assignment].modules) == spec.assignment(assignment).notebooks


def test_solution_source_wraps_every_method_body_in_its_own_region():
    src = solution_source("MultiHeadSelfAttention")
    assert src.count("### BEGIN SOLUTION") == 2 and src.count("### END SOLUTION") == 2
    assert src.index("super().__init__()") < src.index("### BEGIN SOLUTION")


@pytest.mark.parametrize("assignment,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_solved_notebooks_have_no_solution_markers_or_hidden_tests(assignment, name):
    text = "\n".join(c.source for c in notebook("solved", name, assignment).cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
        assert marker not in text
    assert [c.id for c in notebook("solved", name, assignment).cells] == [
        c.id for c in notebook("source", name, assignment).cells]


@pytest.mark.parametrize("assignment,name", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_a_released_notebook_holds_the_metadata_jupyterlab_writes_so_closing_it_untouched_asks_nothing(assignment, name):
    from ipykernel.ipkernel import IPythonKernel

    metadata = notebook("release", name, assignment).metadata
    assert metadata["kernelspec"] == build.KERNELSPEC
    assert metadata["language_info"] == IPythonKernel.language_info, "JupyterLab would fill these in and mark it changed"
