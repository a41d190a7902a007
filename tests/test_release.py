"""The generated notebooks match course/, the release hides the solutions, and the cells follow spec.py."""
from __future__ import annotations

import ast
import json

import nbformat
import pytest

import solutions
from autograder.spec import API_NAMES, NOTEBOOKS, PARTS
from course import build
from course.cells import reference_body_lines, solution_source
from course.content import MODULES

REPO = build.REPO
SETUP_IMPORTS = {"math", "torch", "torch.nn", "torch.nn.functional"}
GENERIC_LINES = {"with torch.no_grad():"}  # plain syntax, not a give-away


def notebook(kind: str, name: str) -> nbformat.NotebookNode:
    folder = {"source": build.SOURCE_DIR, "release": build.RELEASE_DIR, "solved": build.SOLVED_DIR}[kind]
    return nbformat.read(REPO / folder / f"{name}.ipynb", as_version=4)


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


def test_release_contains_no_line_of_any_reference_body():
    released = "\n".join(
        p.read_text(encoding="utf-8") for p in sorted((REPO / build.RELEASE_DIR).rglob("*")) if p.is_file()
    )
    released_lines = set()
    for path in sorted((REPO / build.RELEASE_DIR).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            released_lines.update(line.strip() for line in cell.source.splitlines())
    for path in sorted((REPO / build.RELEASE_DIR).glob("*.py")):
        released_lines.update(line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    leaks = {name: [line for line in reference_body_lines(name) if len(line) > 12 and line not in GENERIC_LINES and line in released_lines] for name in API_NAMES}
    leaks = {name: lines for name, lines in leaks.items() if lines}
    assert not leaks, f"solution code in assignments/: {leaks}"
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in released, f"{marker!r} found in assignments/"


def test_leak_detector_finds_a_reference_line_when_there_is_one():
    lines = reference_body_lines("chunked_attention")
    assert "stop = min(start + chunk_size, S)" in lines
    assert all(not line.startswith("#") for line in lines)


@pytest.mark.parametrize("part", PARTS, ids=[p.id for p in PARTS])
def test_every_spec_name_has_a_stub_in_its_release_notebook_and_a_definition_in_solutions(part):
    cells = solution_cells(notebook("release", part.notebook))
    defined = {name: cell.source for cell in cells for name in top_level_names(cell.source)}
    for name in part.names:
        assert hasattr(solutions, name), f"solutions does not define {name}"
        assert name in defined, f"{part.notebook} has no solution cell defining {name}"
        assert 'raise NotImplementedError("not implemented yet' in defined[name], f"{name}'s stub has no friendly hint"
        for other in NOTEBOOKS:
            if other != part.notebook:
                others = {n for c in solution_cells(notebook("release", other)) for n in top_level_names(c.source)}
                assert name not in others, f"{name} is also a solution in {other}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_solution_cells_hold_only_imports_and_definitions(name):
    for kind in ("source", "release"):
        for cell in solution_cells(notebook(kind, name)):
            for node in ast.parse(cell.source).body:
                assert isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)), (
                    f"{kind} {name} cell {cell.id}: {ast.dump(node)[:80]}"
                )
            meta = nbgrader_meta(cell)
            assert meta["grade"] is False and meta["locked"] is False and meta["schema_version"] == 3


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_source_solution_cells_are_the_reference_code(name):
    """Same syntax tree as solutions/attention.py (comments and solution markers aside)."""
    reference = {n.name: n for n in ast.parse((REPO / "solutions" / "attention.py").read_text()).body if hasattr(n, "name")}
    for cell in solution_cells(notebook("source", name)):
        for node in ast.parse(cell.source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                assert ast.dump(node) == ast.dump(reference[node.name]), f"{name}: {node.name} differs from the reference"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_release_stubs_keep_signatures_and_raise_not_implemented(name):
    import torch

    namespace = {"math": __import__("math"), "torch": torch, "nn": torch.nn, "F": torch.nn.functional}
    for cell in solution_cells(notebook("release", name)):
        exec(compile(cell.source, f"<{name}:{cell.id}>", "exec"), namespace)
    reference_nodes = {n.name: n for n in ast.parse((REPO / "solutions" / "attention.py").read_text()).body if hasattr(n, "name")}
    for part in (p for p in PARTS if p.notebook == name):
        for api in part.names:
            obj = namespace[api]
            node = reference_nodes[api]
            if isinstance(node, ast.ClassDef):
                with pytest.raises(NotImplementedError):
                    obj(8, 2) if api == "MultiHeadSelfAttention" else obj(8)
            else:
                with pytest.raises(NotImplementedError):
                    obj(*[None] * len(node.args.args))
            assert (obj.__doc__ or "").strip(), f"{api} lost its docstring"


@pytest.mark.parametrize("part", PARTS, ids=[p.id for p in PARTS])
def test_each_part_has_exactly_one_graded_cell_with_the_spec_points(part):
    for kind in ("source", "release"):
        graded = [c for c in notebook(kind, part.notebook).cells if nbgrader_meta(c).get("grade")]
        mine = [c for c in graded if nbgrader_meta(c)["grade_id"] == part.id]
        assert len(mine) == 1, f"{kind} {part.notebook}: {len(mine)} graded cells for {part.id}"
        meta = nbgrader_meta(mine[0])
        assert meta["points"] == part.points and meta["locked"] is True and meta["solution"] is False
        assert "BEGIN HIDDEN TESTS" not in mine[0].source
        assert f'graded_part("{part.id}")' in mine[0].source
    all_graded = {nbgrader_meta(c)["grade_id"] for n in NOTEBOOKS for c in notebook("source", n).cells if nbgrader_meta(c).get("grade")}
    assert all_graded == {p.id for p in PARTS}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_first_code_cell_is_a_locked_setup_with_the_four_imports_a_seed_and_the_checks(name):
    first = next(c for c in notebook("release", name).cells if c.cell_type == "code")
    meta = nbgrader_meta(first)
    assert meta.get("locked") is True and not meta.get("grade") and not meta.get("solution")
    imported = set()
    for node in ast.parse(first.source).body:
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert SETUP_IMPORTS <= imported
    assert "torch.manual_seed(" in first.source and "from visible_checks import" in first.source


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_stub_is_followed_by_a_locked_visible_check(name):
    cells = [c for c in notebook("release", name).cells if c.cell_type == "code"]
    for i, cell in enumerate(cells):
        if nbgrader_meta(cell).get("solution"):
            after = cells[i + 1]
            meta = nbgrader_meta(after)
            assert meta.get("locked") and meta["grade_id"].startswith("check_") and after.source.startswith("check_")


def test_support_files_are_copies_of_their_origin_with_a_generated_header():
    for folder in (build.SOURCE_DIR, build.RELEASE_DIR, build.SOLVED_DIR):
        for name, origin in build.SUPPORT_FILES.items():
            text = (REPO / folder / name).read_text(encoding="utf-8")
            header, body = text.split("\n", 1)
            assert header.startswith("# Generated by `python -m course.build`")
            assert body == origin.read_text(encoding="utf-8")


def test_content_modules_follow_spec_notebook_order():
    assert tuple(m.NAME for m in MODULES) == NOTEBOOKS


def test_solution_source_wraps_every_method_body_in_its_own_region():
    src = solution_source("MultiHeadSelfAttention")
    assert src.count("### BEGIN SOLUTION") == 2 and src.count("### END SOLUTION") == 2
    assert src.index("super().__init__()") < src.index("### BEGIN SOLUTION")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_solved_notebooks_have_no_solution_markers_or_hidden_tests(name):
    text = "\n".join(c.source for c in notebook("solved", name).cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
        assert marker not in text
    assert [c.id for c in notebook("solved", name).cells] == [c.id for c in notebook("source", name).cells]
