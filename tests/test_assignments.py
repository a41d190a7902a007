"""The grader is driven by the assignments in autograder/foundation/spec.py: each registered assignment is
complete, a name the grader does not know is refused in one line, and a part added the way
docs/adding-a-part.md says is graded without a change to the grader's code."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.foundation import spec
from autograder.nbgrader_plugin import grade_notebook_file
from autograder.grading.scoring import RULES

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("assignment", list(spec.ASSIGNMENTS.values()), ids=list(spec.ASSIGNMENTS))
def test_every_registered_assignment_has_its_checks_and_its_reference_solutions(assignment):
    assert assignment.max_score == 100
    for part in assignment.all_parts:
        assert assignment.check_file(part).is_file(), part.id
    reference = importlib.import_module(assignment.solutions)
    missing = [name for name in assignment.api_names if not hasattr(reference, name)]
    assert missing == []
    assert len({p.id for p in assignment.all_parts}) == len(assignment.all_parts)


@pytest.mark.parametrize("assignment", list(spec.ASSIGNMENTS.values()), ids=list(spec.ASSIGNMENTS))
def test_every_part_that_forbids_torch_functions_has_a_rule_the_student_reads(assignment):
    assert [p.id for p in assignment.all_parts if p.forbidden and p.forbidden not in RULES] == []


def test_points_that_do_not_sum_to_100_are_refused():
    with pytest.raises(ValueError, match="sum to 90"):
        spec.Assignment("broken", (spec.Part("a", ("f",), 90, "01_a"),), checks="broken", solutions="x")


@pytest.mark.parametrize("command", [["grade", "x.py"], ["grade-class", "course"], ["grade-gpu", "course"],
                                     ["gradescope-bundle", "out.zip"]])
def test_an_unknown_assignment_exits_2_with_one_line_naming_the_known_ones(command):
    proc = subprocess.run([sys.executable, "-m", "autograder", *command, "--assignment", "nope"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "unknown assignment 'nope'" in proc.stderr and all(name in proc.stderr for name in spec.ASSIGNMENTS)


def test_the_plugin_knows_the_assignment_from_nbgrader_or_else_from_the_notebook_name():
    assert spec.assignment_of_notebook("02_masks", "self_attention") is spec.SELF_ATTENTION
    assert spec.assignment_of_notebook("02_masks", "homework_7") is spec.SELF_ATTENTION  # renamed in the course
    assert spec.assignment_of_notebook("homework3", None) is None


# --------------------------------------------------------------------------- docs/adding-a-part.md, done once
REFERENCE = '''
def attention_entropy(weights):
    """The entropy of each query's attention row, [..., S_q, S_k] -> [..., S_q] (0 log 0 = 0)."""
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))
    return -(weights * logs).sum(dim=-1)
'''

CHECKS = '''
"""Hidden checks for part entropy: attention_entropy."""
import pytest
import torch

import throwaway_solutions as ref
from autograder.checks import expect


@pytest.mark.points(1)
def test_uniform_rows(student):
    """a uniform row over n keys has entropy log(n)"""
    weights = torch.full((2, 3, 4), 0.25)
    expect.close(student.call("attention_entropy", weights), ref.attention_entropy(weights), "attention_entropy")


@pytest.mark.points(2)
def test_masked_keys_count_as_zero(student):
    """keys with weight 0 (masked) add nothing: 0 log 0 = 0, not NaN"""
    weights = torch.softmax(torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0)).masked_fill(
        torch.arange(5) >= 3, float("-inf")), dim=-1)
    got = student.call("attention_entropy", weights)
    if isinstance(got, torch.Tensor) and torch.isnan(got).any():
        raise expect.CheckFailure("attention_entropy returned NaN for rows with masked keys: 0 * log(0) is NaN in "
                                  "floating point; leave the zero weights out (torch.where) or use torch.special.xlogy")
    expect.close(got, ref.attention_entropy(weights), "attention_entropy")
'''


@pytest.fixture(scope="module")
def throwaway(private_tmp):
    """An assignment of one new part, `entropy`, set up by the guide's steps: the part in the spec,
    its reference solution, its hidden checks; the notebook that teaches it is 06_entropy."""
    (private_tmp / "checks").mkdir()
    (private_tmp / "checks" / "test_entropy.py").write_text(textwrap.dedent(CHECKS))
    (private_tmp / "throwaway_solutions.py").write_text("import torch\n" + textwrap.dedent(REFERENCE))
    sys.path.insert(0, str(private_tmp))
    part = spec.Part("entropy", ("attention_entropy",), 100, "06_entropy", from_scratch=True)
    yield spec.Assignment("throwaway", (part,), checks=str(private_tmp / "checks"), solutions="throwaway_solutions")
    sys.path.remove(str(private_tmp))
    sys.modules.pop("throwaway_solutions", None)


def _notebook(path: Path, code: str) -> Path:
    cell = {"cell_type": "code", "metadata": {"nbgrader": {"solution": True, "grade": False, "grade_id": "ent",
                                                           "locked": False}}, "source": code, "outputs": [],
            "execution_count": None}
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_part_added_as_the_guide_says_is_graded_with_its_points_and_messages(grader, throwaway, private_tmp):
    right = private_tmp / "right.py"
    right.write_text(textwrap.dedent(REFERENCE))
    result = grader.grade(right, assignment=throwaway)
    assert [p.id for p in result.parts] == ["entropy"] and result.score == result.max_score == 100
    wrong = private_tmp / "wrong.py"
    wrong.write_text(textwrap.dedent(REFERENCE).replace("torch.where(weights > 0, weights.log(), "
                                                        "torch.zeros_like(weights))", "weights.log()"))
    part = grader.grade(wrong, assignment=throwaway).part("entropy")
    assert part.score == pytest.approx(100 / 3, abs=1e-3)  # the two checks weigh 1 and 2
    assert [c.message for c in part.checks if not c.passed][0].startswith("attention_entropy returned NaN")


def test_the_added_part_goes_through_the_nbgrader_plugin_and_the_from_scratch_rule(grader, throwaway, private_tmp):
    notebook = _notebook(private_tmp / "06_entropy.ipynb", textwrap.dedent(REFERENCE))
    parts, notes = grade_notebook_file(notebook, grader, assignment=throwaway)
    assert set(parts) == {"entropy"} and parts["entropy"].score == 100, notes
    fused = private_tmp / "fused.py"
    fused.write_text(textwrap.dedent(REFERENCE).replace(
        "    return -(weights * logs)", "    F.scaled_dot_product_attention(weights, weights, weights)\n"
        "    return -(weights * logs)"))
    part = grader.grade(fused, assignment=throwaway).part("entropy")
    assert part.score == 0 and any("from scratch" in n for n in part.notes)


def test_grade_recognises_the_assignment_of_nbgrader_notebooks_by_their_graded_cells():
    """`grade` without --assignment grades generation notebooks as generation; a .py file stays the default's"""
    from autograder.foundation.extract import extract, recognise

    generation = REPO / "assignments" / "generation"
    assert recognise(extract(generation)) is spec.GENERATION
    assert recognise(extract(generation / "02_kv_cache.ipynb")) is spec.GENERATION
    assert recognise(extract(REPO / "assignments" / "self_attention" / "03_module.ipynb")) is spec.SELF_ATTENTION
    assert recognise(extract(REPO / "solutions" / "generation.py")) is None
    notes = extract(generation / "02_kv_cache.ipynb").sources[0].notes_against(spec.DEFAULT)  # graded as the default
    assert any("notebook of assignment generation" in str(n) and "--assignment generation" in str(n) for n in notes), notes
