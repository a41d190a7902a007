"""Mutation testing of the hidden checks (tests/mutation/): the mutator, the reviewed list of equivalent mutants,
a sampled, seeded run in which every drawn mutant must lose points (`make mutation` grades them all), and the
visible checks' agreement: a mutant meets its notebook's check cells, a killed mutant they let pass is a split."""
from __future__ import annotations

import random

import pytest

from tests.mutation.mutants import Mutant
from tests.mutation.run import (
    REFERENCES, Outcome, all_mutants, equivalents, grade_one, hidden_only, parts_of, summarise, visible_only,
)
from tests.mutation.visible import Seen, check_cells

SAMPLE, SEED = 10, 17
UNIVERSE = all_mutants()
LISTED = equivalents()
HIDDEN = hidden_only()
KEYS = {m.key: m for m in UNIVERSE}
SCALED = "attention:scaled_scores: return Q @ K.transpose(-2, -1) / math.sqrt(d_k) => return Q @ K.transpose(-2, -1) "


def test_every_operator_makes_mutants_of_both_references():
    """the mutator edits operators, constants, axes, calls, keywords, arguments and conditions in both files"""
    operators = {"arithmetic", "comparison", "constant", "axis", "drop-call", "drop-keyword", "swap-arguments",
                 "condition"}
    for module in REFERENCES:
        made = {m.operator for m in UNIVERSE if m.module == module}
        assert made == operators, (module, operators - made)


def test_mutant_keys_are_unique_and_each_mutant_differs_from_the_reference():
    assert len({m.key for m in UNIVERSE}) == len(UNIVERSE)
    assert all(m.before != m.after for m in UNIVERSE)


def test_a_mutant_changes_one_line_of_the_reference():
    """the transpose of K in scaled_scores, its axes swapped, is one mutant, named by its changed line"""
    keys = {m.key: m for m in UNIVERSE}
    key = ("attention:scaled_scores: return Q @ K.transpose(-2, -1) / math.sqrt(d_k) => "
           "return Q @ K.transpose(-1, -2) / math.sqrt(d_k)")
    assert isinstance(keys[key], Mutant) and keys[key].operator == "swap-arguments"
    assert "K.transpose(-1, -2)" in keys[key].source and "K.transpose(-2, -1)" not in keys[key].source.split(
        "def scaled_scores")[1].split("def ")[0]


def test_every_listed_equivalent_mutant_exists_and_has_a_reason():
    """equivalent.toml is up to date: each key is a mutant of the current references, each with its reason"""
    keys = {m.key for m in UNIVERSE}
    stale = [k for k in LISTED if k not in keys]
    assert not stale, f"remove from tests/mutation/equivalent.toml (no such mutant any more): {stale}"
    assert all(len(reason) > 20 for reason in LISTED.values())


DRAWN = random.Random(SEED).sample([m for m in UNIVERSE if m.key not in LISTED], SAMPLE)


@pytest.mark.parametrize("mutant", DRAWN, ids=[f"{m.module}:{m.scope}:{m.operator}" for m in DRAWN])
def test_a_sampled_mutant_loses_points(grader, private_tmp, mutant):
    """a drawn non-equivalent mutant of a reference scores below full marks on the parts of what it edits"""
    outcome = grade_one(grader, mutant, private_tmp)
    assert outcome.killed, f"survived (graded on {', '.join(outcome.parts)}):\n{mutant.diff}"


def test_every_listed_hidden_only_mutant_exists_is_not_equivalent_and_has_a_reason():
    """hidden_only.toml is up to date: each key a non-equivalent mutant of the current references, with its reason"""
    stale = [k for k in HIDDEN if k not in KEYS or k in LISTED]
    assert not stale, f"remove from tests/mutation/hidden_only.toml: {stale}"
    assert all(len(reason) > 20 for reason in HIDDEN.values())


def test_a_mutant_meets_every_check_cell_of_the_notebook_that_owns_it():
    """scaled_scores is graded in 01_scores: its mutant meets that notebook's check cells, projections included"""
    mutant = KEYS[SCALED + "* math.sqrt(d_k)"]
    assert check_cells(mutant, parts_of(mutant)) == (
        "check_make_projections(make_projections)", "check_project_qkv(project_qkv)",
        "check_scaled_scores(scaled_scores)", "check_attention_weights(attention_weights)", "check_attend(attend)")


@pytest.mark.parametrize(("after", "caught"), [("* math.sqrt(d_k)", True), ("/ d_k", True),
                                               ("transpose(-1, -2) / math.sqrt(d_k)", False)])
def test_the_visible_checks_catch_a_wrong_scale_and_pass_an_equivalent_mutant(after, caught):
    """scores scaled by sqrt(d_k) or d_k fail check_scaled_scores in their notebook; the same axes swapped pass"""
    key = SCALED + after if not after.startswith("transpose") else SCALED.replace(
        "=> return Q @ K.transpose(-2, -1) ", "=> return Q @ K.") + after
    outcome = visible_only(KEYS[key])
    assert outcome.visible.notebook == "self_attention/01_scores"
    assert outcome.visible.caught is caught, outcome.visible.message
    assert not caught or outcome.visible.message.startswith("scaled_scores:")


def _outcome(mutant, score: float, caught: bool) -> Outcome:
    return Outcome(mutant, parts_of(mutant), score, 1.0, "", Seen("self_attention/01_scores", caught, ""))


def test_a_killed_mutant_that_passes_every_visible_check_fails_the_run_unless_listed_with_its_reason():
    """the agreement per notebook counts the splits; an unlisted split fails, a listed one passes, and a listed one
    that the visible checks catch (or the grader does not kill) is out of date"""
    split, caught = KEYS[SCALED + "/ d_k"], KEYS[SCALED + "* math.sqrt(d_k)"]
    universe = [split, caught]
    outcomes = [_outcome(split, 0.5, False), _outcome(caught, 0.0, True)]
    plain = summarise(outcomes, {}, universe)
    assert [o.mutant.key for o in plain.splits] == [split.key] and not plain.ok
    assert (plain.agreement[0].killed, plain.agreement[0].caught, plain.visible_share) == (2, 1, 0.5)
    listed = summarise(outcomes, {}, universe, {split.key: "a reason long enough to be read"})
    assert listed.ok and listed.agreement[0].listed == 1
    stale = summarise(outcomes, {}, universe, {caught.key: "a reason long enough to be read"})
    assert stale.stale_hidden == (caught.key,) and not stale.ok
    survivor = summarise([_outcome(split, 1.0, False)], {}, [split], {split.key: "a reason long enough to be read"})
    assert survivor.stale_hidden == (split.key,)
