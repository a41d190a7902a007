"""The mistake catalogue of the second assignment, graded: each wrong submission loses exactly its parts,
with a message that names its mistake; each correct variant scores full marks.

The cases are built by tests/catalogue/generation.py from solutions/generation.py. The session's one
warm grader (tests/conftest.py) grades them.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from autograder.spec import PART_BY_ID

ROOT = Path(__file__).resolve().parent.parent
PART_IDS = ["positions", "kv_cache", "cross_attention"]


def _load():
    spec = importlib.util.spec_from_file_location("catalogue_generation", ROOT / "tests" / "catalogue" / "generation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


catalogue = _load()
CASES = {case.name: case for case in catalogue.CASES}
WRONG = [c.name for c in catalogue.CASES if not c.correct]
CORRECT = [c.name for c in catalogue.CASES if c.correct]
MAX_SCORE = sum(PART_BY_ID[p].points for p in PART_IDS)


@pytest.fixture(scope="module")
def graded(grader):
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = grader.grade(catalogue.OUT / f"{name}.py", part_ids=PART_IDS)
        return cache[name]

    return get


def test_generation_catalogue_has_15_wrong_and_4_correct_cases_on_known_parts():
    assert len(WRONG) >= 15 and len(CORRECT) >= 4
    for case in catalogue.CASES:
        assert set(case.lose + case.zero) <= set(PART_IDS), case.name
        assert case.correct or case.says, case.name


def test_written_generation_cases_match_the_generator():
    expected = catalogue.sources()
    on_disk = {p.stem: p.read_text(encoding="utf-8") for p in catalogue.OUT.glob("*.py")}
    stale = sorted(n for n in expected if on_disk.get(n) != expected[n]) + sorted(set(on_disk) - set(expected))
    assert not stale, f"run `.venv/bin/python tests/catalogue/generation.py`: out of date: {stale}"


def test_generation_reference_scores_full_marks(grader):
    result = grader.grade(catalogue.REFERENCE, part_ids=PART_IDS)
    failed = [(p.id, c.name, c.message) for p in result.parts for c in p.checks if not c.passed]
    assert result.max_score == MAX_SCORE == 100
    assert result.score == pytest.approx(MAX_SCORE), failed


@pytest.mark.parametrize("name", CORRECT)
def test_correct_generation_variant_scores_full_marks(graded, name):
    result = graded(name)
    failed = [(p.id, c.name, c.message) for p in result.parts for c in p.checks if not c.passed]
    assert result.score == pytest.approx(MAX_SCORE), failed


@pytest.mark.parametrize("name", WRONG)
def test_wrong_generation_case_loses_exactly_its_parts_and_names_its_mistake(graded, name):
    case, result = CASES[name], graded(name)
    lost, said = set(case.lose + case.zero), []
    for part in result.parts:
        failed = [(c.name, c.message) for c in part.checks if not c.passed]
        assert all(message.strip() for _, message in failed), f"{name}: {part.id}: a check failed without a message"
        if part.id in case.zero:
            assert part.score == 0, (part.id, part.score)
        if part.id in lost:
            assert part.score < part.max_score, f"{name}: {part.id} should lose points ({case.what})"
            said.extend(message for _, message in failed)
            said.extend(part.notes)
        else:
            assert part.score == pytest.approx(part.max_score), f"{name}: {part.id} should keep full marks: {failed}"
    assert any(case.says in message for message in said), f"{name}: no message mentions {case.says!r}: {said}"
