"""Mutation testing of the hidden checks (tests/mutation/): the mutator, the reviewed list of equivalent mutants,
and a sampled, seeded run in which every drawn mutant must lose points (`make mutation` grades them all)."""
from __future__ import annotations

import random

import pytest

from tests.mutation.mutants import Mutant
from tests.mutation.run import REFERENCES, all_mutants, equivalents, grade_one

SAMPLE, SEED = 10, 17
UNIVERSE = all_mutants()
LISTED = equivalents()


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
