"""A student's day in JupyterLab, in a real browser (headless Chromium driven by selenium).

`make lab`'s server on a fresh workspace; Run All on the first released notebook of each assignment, with the
notes the check, demo and graded cells print; nbgrader's Validate on an untouched notebook, and on a finished
one after a `scaled_scores` typed into the cell editor, wrong then right; the plots of finished
notebooks, saved as build/browser-test/01_scores-heatmap.png and
build/browser-test/05_long_sequence-memory.png. One browser and one server for the module; each
notebook on a fresh kernel (about 2 minutes).

Run it alone: .venv/bin/python -m pytest -q tests/browser
"""
from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import nbformat
import pytest
from labpage import LabPage

from autograder.foundation.spec import ASSIGNMENTS
from examples.make_class import student_notebooks

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENT = "self_attention"
RELEASE = REPO / "assignments" / ASSIGNMENT

# --------------------------------------------------------------------------- #
# What the student sees (kept in one place: the course's wording may change)
# --------------------------------------------------------------------------- #

DEMO_NOTE = "which is not implemented yet"  # a demo (`with uses_your_code():`) that needs an unwritten function
CHECK_NOTES = ("not implemented yet", "first:")  # a check cell of an untouched notebook: "...: write SelfAttention first: ..."
GRADED_NOTE = "hidden autograder"  # every graded cell
TYPED = {  # one line each: the editor's auto-indent cannot change them
    "right": "def scaled_scores(Q, K): return Q @ K.transpose(-2, -1) / math.sqrt(K.shape[-1])",
    "no_sqrt": "def scaled_scores(Q, K): return Q @ K.transpose(-2, -1)",
    "k_dot_t": "def scaled_scores(Q, K): return Q @ K.T / math.sqrt(K.shape[-1])",
}
TICK = "✓ scaled_scores:"
NO_SQRT_MESSAGE = "scores are not scaled: divide the dot products by sqrt(d_k)"
K_DOT_T_SHOWS = "`.T` reverses every axis"  # a plain sentence naming the mistake, not torch's raw error
CHECKS_FILE = "visible_checks.py"  # a failing check shows none of its frames, only the student's


def notebook_cells(path: Path) -> list:
    return nbformat.read(path, as_version=4).cells


def index_of(cells: list, predicate) -> int:
    return next(i for i, cell in enumerate(cells) if predicate(cell))


def grade_id(cell) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def release_digest() -> dict[str, str]:
    release = REPO / "assignments"
    return {str(p.relative_to(release)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(release.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def repo_files():
    """The tracked release before the module: the lab must never write there."""
    return release_digest()


@pytest.fixture(scope="module")
def page(lab_server, driver, repo_files):
    url, token, _, _ = lab_server
    return LabPage(driver, url, token)


@pytest.fixture(scope="module")
def filled(lab_server, repo_course):
    """Correct versions of notebooks, as a student who finished them: filled_<name>.ipynb in the workspace."""
    workspace = lab_server[2]

    def write(name: str) -> str:
        path = f"{ASSIGNMENT}/filled_{name}.ipynb"
        (workspace / path).write_text(student_notebooks(repo_course, "correct")[name])
        return path

    return write


# Run All in the page on the first notebook of each assignment (its imports, helper files and notes shown by
# JupyterLab itself). Every untouched notebook also runs top to bottom under nbclient, with the same checks of its
# notes: tests/test_notebooks.py, test_generation_notebooks.py, test_efficient_notebooks.py (all 14 in the page cost
# 190 s of the suite's 10 minutes).
RELEASED = [f"{a.id}/{a.notebooks[0]}" for a in ASSIGNMENTS.values()]


@pytest.mark.parametrize("name", RELEASED)
def test_run_all_on_an_untouched_notebook_reaches_the_last_cell_with_every_note(page, lab_server, name):
    cells = notebook_cells(REPO / "assignments" / f"{name}.ipynb")
    page.open(f"{name}.ipynb", len(cells))
    shown = page.run_all()
    last = max(i for i, cell in enumerate(cells) if cell.cell_type == "code")
    assert shown[last].executed, f"{name}: Run All did not reach the last cell ({shown[last]})"
    for i, (cell, view) in enumerate(zip(cells, shown)):
        if cell.cell_type != "code":
            continue
        assert view.executed, f"{name}: cell {i} did not run: {view}"
        assert not view.stderr, f"{name}: cell {i} shows an error or stderr: {view.output[:300]}"
        if grade_id(cell).startswith("check_"):
            assert any(note in view.output for note in CHECK_NOTES), f"{name}: check cell {i}: {view.output!r}"
        if cell.metadata.get("nbgrader", {}).get("grade"):
            assert GRADED_NOTE in view.output, f"{name}: graded cell {i}: {view.output!r}"
        if "uses_your_code()" in cell.source:
            assert DEMO_NOTE in view.output, f"{name}: demo cell {i}: {view.output!r}"


def test_the_lab_offers_validate_not_instructor_tools_and_validate_fails_on_an_untouched_notebook(page, driver):
    page.open(f"{ASSIGNMENT}/03_module.ipynb", len(notebook_cells(RELEASE / "03_module.ipynb")))  # the quickest to run
    menus = driver.execute_script("return [...document.querySelectorAll('.lm-MenuBar-item')].map(m => m.textContent.trim());")
    assert "Run" in menus and "Nbgrader" not in menus, menus
    body = driver.execute_script("return document.body.textContent;")
    assert "Create Assignment" not in body and "Formgrader" not in body and "Assignment List" not in body
    kind, text = page.validate()
    assert kind == "validation-failed", text
    assert 'graded_part("module")' in text and 'graded_part("official_parity")' in text, text
    assert "SelfAttention: not implemented yet" in text and "to_official: not implemented yet" in text, text


def test_a_finished_notebook_runs_to_the_end_answers_typed_code_and_passes_validate(page, filled, artifacts):
    cells = notebook_cells(RELEASE / "01_scores.ipynb")
    page.open(filled("01_scores"), len(cells))
    shown = page.run_all()
    assert all(view.executed and not view.stderr for cell, view in zip(cells, shown) if cell.cell_type == "code"), shown
    assert all(shown[i].output.strip().startswith("✓") for i, c in enumerate(cells) if grade_id(c).startswith("check_"))
    page.screenshot_output(index_of(cells, lambda c: "ax.imshow(" in c.source), artifacts / "01_scores-heatmap.png")

    solution = index_of(cells, lambda c: grade_id(c) == "solution_scaled_scores")
    assert grade_id(cells[solution + 1]) == "check_scaled_scores"
    page.type_into(solution, TYPED["no_sqrt"])
    check = page.run_cell_and_next(solution)[solution + 1]
    assert NO_SQRT_MESSAGE in check.output and CHECKS_FILE not in check.output, check
    page.type_into(solution, TYPED["k_dot_t"])
    check = page.run_cell_and_next(solution)[solution + 1]
    assert K_DOT_T_SHOWS in check.output and CHECKS_FILE not in check.output, check
    page.type_into(solution, TYPED["right"])
    check = page.run_cell_and_next(solution)[solution + 1]
    assert check.output.strip().startswith(TICK) and not check.stderr, check

    kind, text = page.validate()  # saves the notebook, with the typed scaled_scores, and validates it
    assert kind == "validation-success" and "Success!" in text, text


def test_the_memory_plot_of_a_finished_long_sequence_notebook(page, filled, artifacts):
    cells = notebook_cells(RELEASE / "05_long_sequence.ipynb")
    page.open(filled("05_long_sequence"), len(cells))
    plot = index_of(cells, lambda c: "peak live memory" in c.source)
    shown = page.run_through(plot)  # the cells below measure other things, for seconds
    assert all(view.executed and not view.stderr for cell, view in zip(cells[: plot + 1], shown) if cell.cell_type == "code")
    assert "chunked (128)" in shown[plot].output and "nan" not in shown[plot].output, shown[plot]
    page.screenshot_output(plot, artifacts / "05_long_sequence-memory.png")


def test_the_release_is_untouched_and_the_lab_log_has_no_nbgrader_warning(page, lab_server, repo_files):
    _, _, workspace, log = lab_server
    page.shut_down_kernels()
    assert release_digest() == repo_files
    assert (workspace / ASSIGNMENT / "03_module.ipynb").exists()
    text = log.read_text()
    assert "validate_assignment | extension was successfully loaded" in text
    complaints = [line for line in text.splitlines()
                  if (re.match(r"\[(W|E|C) |\[\w+ \| (WARNING|ERROR|CRITICAL)\]", line) and "nbgrader" in line.lower())
                  or "course directory root" in line or "Traceback" in line]
    assert not complaints, complaints
    tracked = subprocess.run(["git", "status", "--porcelain", "--", "assignments"], cwd=REPO, capture_output=True, text=True)
    assert tracked.stdout == ""
