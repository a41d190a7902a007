"""Copies are found by what the code says (autograder/foundation/fingerprint.py, copies.py), measured on a fixture.

The originals are the reference's solution cells, notebook by notebook (source/<assignment>/*.ipynb, the markers are
comments). A copy made with trivial edits (spacing, comments, renamed locals, helpers in another order) is flagged,
with the pairs of cells; independent solutions (tests/real_code/'s adaptations of public code, the catalogue's ok_*
rewrites of a function) are not; a one-line answer never makes a pair (the threshold, measured on the four
assignments' references); and comparing a class of 200 is cheap.
"""
from __future__ import annotations

import ast
import difflib
import functools
import json
import random
import re
import time
import tokenize
from pathlib import Path

import pytest

from autograder.foundation import copies, fingerprint
from autograder.foundation.copies import Originals
from autograder.foundation.extract import read_notebook
from autograder.foundation.fingerprint import ALIKE, MIN_CELL, base_of, cell_prints, likeness, notebook_prints

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ("self_attention", "generation", "efficient", "real_models")
REFERENCES = {"self_attention": ROOT / "solutions" / "attention.py", "generation": ROOT / "solutions" / "generation.py"}
CORPUS = {"annotated_transformer": "self_attention", "d2l": "self_attention", "mingpt": "self_attention",
          "nanogpt": "self_attention", "timm_attention": "self_attention",
          "annotated_transformer_generation": "generation", "hf_llama": "generation", "llama3": "generation",
          "nanochat": "generation"}
# The catalogue's correct variants that rewrite a function (not a one-line edit of it).
REWRITES = ("ok_einsum", "ok_where_masks", "ok_reshape_permute", "ok_long_variants")


@functools.lru_cache(maxsize=None)
def solution_cells(path: Path) -> tuple[str, ...]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return tuple("".join(c["source"]) for c in nb["cells"]
                 if c["cell_type"] == "code" and (c.get("metadata") or {}).get("nbgrader", {}).get("solution"))


@functools.lru_cache(maxsize=None)
def released(assignment: str, notebook: str) -> tuple[str, ...]:
    return read_notebook(ROOT / "assignments" / assignment / notebook).cells


def notebooks(assignment: str) -> list[str]:
    return sorted(p.name for p in (ROOT / "source" / assignment).glob("*.ipynb"))


@functools.lru_cache(maxsize=None)
def notebook_base(assignment: str, notebook: str):
    return base_of(released(assignment, notebook))


def prints(cells, base, numbers=None):
    return cell_prints(tuple(cells), tuple(numbers or range(1, len(cells) + 1)), base)


def alike(mine, theirs, student="ada"):
    """fingerprint.likeness of two notebooks' CellPrints."""
    return likeness(student, notebook_prints(tuple(mine)), notebook_prints(tuple(theirs)))


# --------------------------------------------------------------------------- trivial edits
def spaced(code: str) -> str:
    return re.sub(r"\breturn ", "return  ", code).replace("\n", "\n\n") + "\n"


def commented(code: str) -> str:
    kept = [line.split("  #")[0] for line in code.splitlines() if not line.strip().startswith("#")]
    return "# my own work\n" + "\n".join(f"{line}  # mine" if line.strip() else line for line in kept)


def renamed(code: str, given: frozenset[str] = frozenset()) -> str:
    """Every name the cell assigns to (a local) renamed, but those the release gave (`given`: W_q, d_k, ...)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    for name in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - given:
        code = re.sub(rf"\b{re.escape(name)}\b", f"my_{name}_renamed", code)
    return code


EDITS = {"spacing": lambda cells, given: [spaced(c) for c in cells],
         "comments": lambda cells, given: [commented(c) for c in cells],
         "renamed locals": lambda cells, given: [renamed(c, given) for c in cells],
         "helpers reordered": lambda cells, given: cells[::-1],
         "all four": lambda cells, given: [renamed(commented(spaced(c)), given) for c in cells[::-1]]}
COPIED = [(a, nb, edit) for a in ASSIGNMENTS for nb in notebooks(a) for edit in EDITS]


@pytest.mark.parametrize("assignment,notebook,edit", COPIED, ids=[f"{a}/{n}/{e}" for a, n, e in COPIED])
def test_a_copy_with_trivial_edits_is_flagged_with_its_cells(assignment, notebook, edit):
    original = solution_cells(ROOT / "source" / assignment / notebook)
    base = notebook_base(assignment, notebook)
    theirs = prints(original, base)
    if not [c for c in theirs if len(c.prints) >= MIN_CELL]:
        pytest.fail(f"{assignment}/{notebook}: no solution cell of {MIN_CELL} fingerprints: nothing to compare")
    copy = EDITS[edit](list(original), base.given)
    numbers = list(range(1, len(copy) + 1))[::-1] if "reordered" in edit or edit == "all four" else None
    found = alike(prints(copy, base, numbers), theirs)
    assert found is not None, f"{assignment}/{notebook}: a copy ({edit}) was not flagged"
    assert found.similarity >= 0.9, found
    big = {c.number for c in theirs if len(c.prints) >= MIN_CELL}
    assert {(n, n) for n in big} <= set(found.cells), ("each cell pairs with the one it was copied from", found.cells)


# --------------------------------------------------------------------------- independent work
def top_level_cells(path: Path) -> list[str]:
    """A .py file as a notebook: one cell per top-level function or class."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    return ["\n".join(lines[n.lineno - 1 - len(n.decorator_list):n.end_lineno]) for n in ast.parse(text).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))]


@functools.lru_cache(maxsize=None)
def assignment_base(assignment: str):
    return base_of(tuple(c for nb in notebooks(assignment) for c in released(assignment, nb)))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_an_adaptation_of_public_code_is_not_flagged_against_the_reference(name):
    base = assignment_base(CORPUS[name])
    mine = prints(top_level_cells(ROOT / "tests" / "real_code" / f"{name}.py"), base)
    reference = prints(top_level_cells(REFERENCES[CORPUS[name]]), base)
    assert alike(mine, reference) is None


def test_independent_public_implementations_are_not_flagged_and_nanogpt_is_mingpts_attention():
    """The corpus's files pairwise: only nanoGPT and minGPT are flagged (nanoGPT's attention class is minGPT's, by
    the same author: a true copy); no other pair is."""
    flagged = set()
    for assignment in ("self_attention", "generation"):
        base = assignment_base(assignment)
        files = sorted(n for n, a in CORPUS.items() if a == assignment)
        printed = {n: prints(top_level_cells(ROOT / "tests" / "real_code" / f"{n}.py"), base) for n in files}
        for i, x in enumerate(files):
            for y in files[i + 1:]:
                if alike(printed[x], printed[y]):
                    flagged.add((x, y))
    assert flagged == {("mingpt", "nanogpt")}, flagged


@pytest.mark.parametrize("case", REWRITES)
def test_a_function_the_catalogue_rewrites_does_not_pair_with_the_references(case):
    base = assignment_base("self_attention")
    reference = prints(top_level_cells(REFERENCES["self_attention"]), base)
    variant = prints(top_level_cells(ROOT / "tests" / "catalogue" / "submissions" / f"{case}.py"), base)
    names = [n.name for n in ast.parse((ROOT / "tests" / "catalogue" / "submissions" / f"{case}.py").read_text()).body
             if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    ref_names = [n.name for n in ast.parse(REFERENCES["self_attention"].read_text()).body
                 if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    rewritten = 0
    for name, cell in zip(names, variant):
        if name not in ref_names:
            continue
        theirs = reference[ref_names.index(name)]
        if difflib.SequenceMatcher(None, cell.tokens, theirs.tokens).ratio() < 0.7:  # a rewrite, not an edit
            rewritten += 1
            assert alike((cell,), (theirs,)) is None, name
    assert rewritten, f"{case} rewrites no function of the reference"


# --------------------------------------------------------------------------- the threshold, measured
def solution_lines(cell: str) -> int:
    """The logical lines between a source cell's solution markers."""
    body = cell.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
    return sum(t.type == tokenize.NEWLINE for t in fingerprint.raw_tokens("if 1:\n" + body)) - 1


def test_every_one_line_answer_of_the_references_is_below_the_threshold_and_every_longer_one_above():
    """MIN_CELL's measurement: two students who write the same one-line answer (the reference's, or any) never make a
    pair; an answer of two lines or more can."""
    sizes: dict[bool, list[int]] = {True: [], False: []}
    for assignment in ASSIGNMENTS:
        for nb in notebooks(assignment):
            base = base_of(released(assignment, nb))
            for cell in solution_cells(ROOT / "source" / assignment / nb):
                if "### BEGIN SOLUTION" in cell:
                    size = len(prints([cell], base)[0].prints)
                    sizes[solution_lines(cell) <= 1].append(size)
    assert sizes[True] and sizes[False]
    assert max(sizes[True]) < MIN_CELL <= min(sizes[False]), (sorted(sizes[True]), sorted(sizes[False])[:5])
    print(f"one-line answers: {sorted(sizes[True])} fingerprints; longer ones from {min(sizes[False])}")


# --------------------------------------------------------------------------- a class of 200
def write_notebook(path: Path, cells: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": f"c{i}", "execution_count": None, "outputs": [], "source": code,
         "metadata": {"nbgrader": {"solution": True, "grade": False, "grade_id": f"s{i}"}}}
        for i, code in enumerate(cells)]}))


def own_code(rng: random.Random, lines: int) -> str:
    """A student's own cell: `lines` statements of torch calls, methods, operators and numbers drawn at random."""
    calls, methods, ops = ("softmax", "matmul", "exp", "tril", "ones", "zeros", "where", "einsum", "sqrt", "cat"), \
        ("transpose", "view", "reshape", "sum", "max", "masked_fill", "contiguous", "expand"), ("+", "-", "*", "/", "@")
    body = [f"    {rng.choice('abcdefgh')}{rng.randrange(9)} = torch.{rng.choice(calls)}(x, {rng.randrange(1000)}) "
            f"{rng.choice(ops)} x.{rng.choice(methods)}({rng.randrange(1000)}, {rng.randrange(1000)})"
            for _ in range(lines)]
    return "def forward(self, x, mask=None):\n" + "\n".join(body) + "\n    return x\n"


def test_comparing_a_class_of_200_is_cheap_and_finds_only_the_copy(tmp_path):
    """200 students, one notebook of two cells each of their own code (8 and 16 statements: SelfAttention's size); student 7 copied
    student 3's with a space, comments and renamed locals. Each student is compared with the 199 others, as
    grade-class does."""
    rng = random.Random(52)
    release = tmp_path / "release" / "03_module.ipynb"
    write_notebook(release, ["def forward(self, x, mask=None):\n    raise NotImplementedError\n"] * 2)
    cells, folders = {}, {}
    for i in range(200):
        cells[i] = [own_code(rng, 8), own_code(rng, 16)]
        if i == 7:
            cells[i] = [renamed(commented(spaced(c))) for c in cells[3]]
        folders[i] = tmp_path / "submitted" / f"s{i:03}" / "a"
        write_notebook(folders[i] / "03_module.ipynb", cells[i])
    started, cpu = time.perf_counter(), time.process_time()  # (CPU time: the shared machine's load apart)
    found = {}
    for i, folder in folders.items():
        others = tuple(f for j, f in folders.items() if j != i)
        source = read_notebook(folder / "03_module.ipynb", inside=folder)
        found[i] = copies.same_as(source, Originals("a", None, release.parent, others))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"200 students compared pairwise in {cpu:.2f} s of CPU ({seconds:.2f} s)")
    assert {i: [f.student for f in v] for i, v in found.items() if v} == {3: ["s007"], 7: ["s003"]}
    assert found[7][0].similarity >= ALIKE and found[7][0].cells == ((1, 1), (2, 2))
    assert cpu < 10, f"comparing a class of 200 took {cpu:.1f} s of CPU (grading one student takes seconds)"
