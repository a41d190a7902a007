"""nbgrader's Validate tells the truth: under Validate each graded cell reruns its part's visible
checks and fails (stderr, which nbgrader scores 0), naming the part and what is wrong, on stubs,
a failing visible check or a syntax error; it passes on correct code. Only visible checks run.

The graded_part logic is tested in-process on the released stubs and the reference; the real
`nbgrader validate` command runs on a failing check and on a syntax error (two kernels at once).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
import torch

from autograder.foundation.spec import ASSIGNMENTS, split_edition
from course.build import REPO, TARGETS
from examples.make_class import student_notebooks
from tests import release_import

VENV_BIN = Path(sys.executable).parent
ALL_PARTS = [(a.id, p) for a in ASSIGNMENTS.values() for p in a.parts]


def released_checks(assignment: str):
    """The assignment's visible_checks.py as released (it imports graded_cells.py from its folder)."""
    return release_import.load(REPO / "assignments" / assignment, f"visible_checks_of_{assignment}")


CHECKS = {a: released_checks(a) for a in ASSIGNMENTS}


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
def test_part_checks_are_the_check_cells_above_each_graded_cell(target):
    found = {}
    for module in target.modules:
        since_last_graded = []
        for cell in module.cells():
            if cell.role == "check":
                since_last_graded.append(cell.source)
            elif cell.role == "graded":
                found[cell.nbgrader["grade_id"]] = tuple(since_last_graded)
                since_last_graded = []
    assignment = split_edition(target.id)[0]  # an edition's released visible_checks.py is its assignment's
    assert found == CHECKS[assignment].PART_CHECKS
    assert set(found) == {p.id for p in ASSIGNMENTS[assignment].parts}


def _setup_namespace(assignment: str) -> dict:
    return {"math": math, "torch": torch, "nn": torch.nn, "F": torch.nn.functional,
            "graded_part": CHECKS[assignment].graded_part}


def _released_stubs(assignment: str) -> dict:
    """A notebook's namespace after running the released solution code cells (a written answer is markdown): the
    stubs, as a student gets them."""
    namespace = _setup_namespace(assignment)
    for name in ASSIGNMENTS[assignment].notebooks:
        for cell in nbformat.read(REPO / "assignments" / assignment / f"{name}.ipynb", as_version=4).cells:
            if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                exec(compile(cell.source, f"<{name}>", "exec"), namespace)
    return namespace


def _reference(assignment: str) -> dict:
    solutions = importlib.import_module(ASSIGNMENTS[assignment].solutions)
    return {**_setup_namespace(assignment), **{n: getattr(solutions, n) for n in ASSIGNMENTS[assignment].api_names}}


def graded_cell(part_id: str, namespace: dict, monkeypatch, mode: str = "validate") -> tuple[str, str]:
    """Run a graded cell's code in `namespace` (as the notebook's kernel does): (stdout, stderr)."""
    monkeypatch.setenv("NBGRADER_EXECUTION", mode)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        exec(f'graded_part("{part_id}")', namespace)
    return out.getvalue(), err.getvalue()


@pytest.mark.parametrize("assignment,part", ALL_PARTS, ids=[p.id for _, p in ALL_PARTS])
def test_validate_passes_each_part_of_the_reference_without_stderr(assignment, part, monkeypatch):
    out, err = graded_cell(part.id, _reference(assignment), monkeypatch)
    assert err == ""
    assert out.startswith(f"✓ {part.id}: the visible checks above pass")


@pytest.mark.parametrize("assignment,part", ALL_PARTS, ids=[p.id for _, p in ALL_PARTS])
def test_validate_fails_each_part_of_the_release_naming_every_unwritten_function(assignment, part, monkeypatch):
    out, err = graded_cell(part.id, _released_stubs(assignment), monkeypatch)
    assert out == ""
    assert err.startswith(f"{part.id}: the visible checks above do not pass yet")
    assert "not implemented yet" in err
    assert "Traceback" not in err


def test_validate_names_the_bug_of_a_failing_visible_check(monkeypatch):
    namespace = _reference("self_attention")
    namespace["scaled_scores"] = lambda Q, K: Q @ K.transpose(-2, -1)  # not divided by sqrt(d_k)
    out, err = graded_cell("scaled_scores", namespace, monkeypatch)
    assert "scaled_scores: scores are not scaled: divide the dot products by sqrt(d_k)" in err
    assert "attention_weights" not in err and "attend:" not in err
    assert graded_cell("qkv_projection", namespace, monkeypatch)[1] == ""


def test_validate_says_a_function_whose_cell_failed_is_not_defined(monkeypatch):
    namespace = _reference("self_attention")
    del namespace["causal_mask"]  # its cell had a syntax error, so the name was never defined
    _, err = graded_cell("masks", namespace, monkeypatch)
    assert "causal_mask is not defined" in err and "SyntaxError" in err


def test_validate_says_a_function_whose_cell_was_never_run_is_not_defined_because_of_that(monkeypatch):
    """IPython's `In` (the sources of the cells run) tells a skipped cell from one that raised (issue 47)"""
    namespace = _reference("self_attention")
    del namespace["causal_mask"]
    namespace["In"] = ["", "import torch", "def padding_mask(lengths, seq_len):\n    ..."]  # causal_mask's cell skipped
    _, err = graded_cell("masks", namespace, monkeypatch)
    assert "causal_mask is not defined: the cell that defines it has not been run" in err and "SyntaxError" not in err
    namespace["In"].append("def causal_mask(seq_len)\n    return None\n")  # it ran, and raised a SyntaxError
    _, err = graded_cell("masks", namespace, monkeypatch)
    assert "causal_mask is not defined: its cell raised an error (a SyntaxError?)" in err, err


def test_validate_reports_an_error_raised_by_student_code_in_one_line(monkeypatch):
    namespace = _reference("self_attention")
    namespace["split_heads"] = lambda x, num_heads: x.view(-1, num_heads, 7)
    _, err = graded_cell("multihead", namespace, monkeypatch)
    assert "  - split_heads: " in err and "RuntimeError" in err and "Traceback" not in err


@pytest.mark.parametrize("assignment", list(ASSIGNMENTS))
def test_graded_cell_still_writes_stderr_under_stock_nbgrader_autograde_even_when_correct(assignment, monkeypatch):
    part = ASSIGNMENTS[assignment].parts[0]
    out, err = graded_cell(part.id, _reference(assignment), monkeypatch, mode="autograde")
    assert "hidden autograder" in out and "scores this cell 0" in err


# --------------------------------------------------------------------------- #
# The real command line
# --------------------------------------------------------------------------- #

# The command on a failing check and on a syntax error (one round of two kernels); the browser
# test clicks the button on an untouched and on a correct notebook.
CASES = {
    # file name: (notebook, a student's version), the parts Validate must name, text it must show
    "no_scale.ipynb": ("01_scores", "no_scale", ["scaled_scores"], "divide the dot products by sqrt(d_k)"),
    "syntax_error.ipynb": ("02_masks", "syntax_error", ["masks"], "causal_mask is not defined"),
}


@pytest.fixture(scope="module")
def validated(private_tmp, repo_course):
    """Output of `nbgrader validate` (run from the repository root, as an instructor would) per case."""
    work = private_tmp / "validate"
    work.mkdir()
    for support in TARGETS[0].support:
        (work / support).write_bytes((REPO / TARGETS[0].release / support).read_bytes())
    for file_name, (notebook, mistake, _, _) in CASES.items():
        (work / file_name).write_text(student_notebooks(repo_course, mistake)[notebook])
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    env.pop("NBGRADER_EXECUTION", None)

    def validate(file_name):
        done = subprocess.run([str(VENV_BIN / "nbgrader"), "validate", str(work / file_name)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)
        return done.stdout

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(CASES, pool.map(validate, CASES)))


@pytest.mark.parametrize("file_name", CASES)
def test_nbgrader_validate_command_fails_naming_only_the_broken_part(validated, file_name):
    _, _, parts, text = CASES[file_name]
    out = validated[file_name]
    assert text in out, out
    failed = [p.id for p in ASSIGNMENTS["self_attention"].parts if f'graded_part("{p.id}")' in out]
    assert failed == parts, out
    assert f"VALIDATION FAILED ON {len(parts)} CELL(S)" in out, out
