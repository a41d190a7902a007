"""The mistake catalogues, graded: each wrong submission loses exactly the parts it should, with reasons.

One catalogue per assignment: tests/catalogue/build.py builds self_attention's cases from
solutions/attention.py, tests/catalogue/generation.py builds generation's from
solutions/generation.py, tests/catalogue/efficient.py efficient's from solutions/efficient.py, tests/catalogue/real_models.py
real_models' from solutions/real_models.py, one textual edit each. One Grader (the session's warm worker pool) grades them all.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from autograder.foundation import spec

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, file: str):
    if name not in sys.modules:
        module_spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "catalogue" / file)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses look their module up there
        module_spec.loader.exec_module(module)
    return sys.modules[name]


build = _load("catalogue_build", "build.py")
# assignment id -> (its catalogue module, the least numbers of wrong and correct cases it must hold)
CATALOGUES = {"self_attention": (build, 25, 6), "generation": (_load("catalogue_generation", "generation.py"), 15, 4),
              "efficient": (_load("catalogue_efficient", "efficient.py"), 15, 4),
              "real_models": (_load("catalogue_real_models", "real_models.py"), 12, 3),
              "serving": (_load("catalogue_serving", "serving.py"), 20, 4)}
CASES = {(a, case.name): case for a, (catalogue, _, _) in CATALOGUES.items() for case in catalogue.CASES}
WRONG = [key for key, case in CASES.items() if not case.correct]
CORRECT = [key for key, case in CASES.items() if case.correct]


def _ids(keys):
    return [f"{a}/{name}" for a, name in keys]


@pytest.fixture(scope="module")
def graded(grader):
    """Grade each case once (lazily), shared by every test of this module."""
    cache = {}

    def get(key):
        if key not in cache:
            a, name = key
            cache[key] = grader.grade(CATALOGUES[a][0].OUT / f"{name}.py", assignment=spec.assignment(a))
        return cache[key]

    return get


@pytest.mark.parametrize("assignment", list(CATALOGUES))
def test_catalogue_is_large_enough(assignment):
    catalogue, wrong, correct = CATALOGUES[assignment]
    assert sum(not c.correct for c in catalogue.CASES) >= wrong and sum(c.correct for c in catalogue.CASES) >= correct
    part_ids = {p.id for p in spec.assignment(assignment).parts}
    for case in catalogue.CASES:
        assert set(case.lose + case.zero) <= part_ids, case.name


@pytest.mark.parametrize("assignment", list(CATALOGUES))
def test_written_cases_match_the_generator(assignment):
    """the written submissions are exactly what the catalogue makes from the current reference"""
    catalogue = CATALOGUES[assignment][0]
    expected = catalogue.sources()
    on_disk = {p.stem: p.read_text(encoding="utf-8") for p in catalogue.OUT.glob("*.py")}
    stale = sorted(n for n in expected if on_disk.get(n) != expected[n]) + sorted(set(on_disk) - set(expected))
    assert not stale, f"run `.venv/bin/python {Path(catalogue.__file__).relative_to(ROOT)}`: out of date: {stale}"


@pytest.mark.parametrize("assignment", list(CATALOGUES))
def test_reference_scores_full_marks(grader, assignment):
    result = grader.grade(CATALOGUES[assignment][0].REFERENCE, assignment=spec.assignment(assignment))
    failed = [(p.id, c.name, c.message) for p in result.parts for c in p.checks if not c.passed]
    assert result.max_score == spec.assignment(assignment).max_score == 100
    assert result.score == pytest.approx(100), failed


@pytest.mark.parametrize("key", CORRECT, ids=_ids(CORRECT))
def test_correct_variant_scores_full_marks(graded, key):
    result = graded(key)
    failed = [(p.id, c.name, c.message) for p in result.parts for c in p.checks if not c.passed]
    assert result.score == pytest.approx(100), failed


@pytest.mark.parametrize("key", WRONG, ids=_ids(WRONG))
def test_wrong_case_loses_exactly_its_parts(graded, key):
    case, result, name = CASES[key], graded(key), key[1]
    lost = set(case.lose + case.zero)
    for part in result.parts:
        failed = [(c.name, c.message) for c in part.checks if not c.passed]
        if part.id in case.zero:
            assert part.score == 0, (part.id, part.score)
        if part.id in lost:
            assert part.score < part.max_score, f"{name}: {part.id} should lose points ({case.what})"
        else:
            assert part.score == pytest.approx(part.max_score), f"{name}: {part.id} should keep full marks: {failed}"


@pytest.mark.parametrize("key", WRONG, ids=_ids(WRONG))
def test_every_failed_check_says_why(graded, key):
    """every failed check has a message (never the largest float as a difference), and one of the lost parts names
    the case's mistake"""
    case, result, name = CASES[key], graded(key), key[1]
    said = []
    for part in result.parts:
        for check in part.checks:
            if not check.passed:
                assert check.message.strip(), f"{name}: {part.id}: '{check.name}' failed without a message"
                assert "e+308" not in check.message, f"{name}: a float-max artefact: {check.message}"
                if part.id in case.lose + case.zero:
                    said.append(check.message)
        if part.id in case.lose + case.zero:
            said.extend(part.notes)
    assert case.says, f"{name} declares no words that its failure messages must contain"
    assert any(case.says in message for message in said), f"{name}: no message mentions {case.says!r}: {said}"


def test_forbidden_call_is_named(graded):
    """a from-scratch part that calls the fused kernel scores 0 and says which of the student's functions called it"""
    for name in ("module_calls_sdpa", "module_calls_sdpa_hidden", "module_calls_sdpa_unwrapped"):
        part = graded(("self_attention", name)).part("module")
        assert part.score == 0
        assert any("your SelfAttention.forward called F.scaled_dot_product_attention" in n for n in part.notes), \
            (name, part.notes)


def test_checks_of_a_part_that_called_the_fused_kernel_say_the_whole_part_earns_nothing(graded):
    """split_heads calls nothing forbidden, yet the part earns nothing: its check says so, and why"""
    part = graded(("self_attention", "multihead_calls_sdpa")).part("multihead")
    split = next(c for c in part.checks if c.name.startswith("split_heads"))
    assert not split.passed and "the part as a whole earns nothing" in split.message
    assert "your MultiHeadSelfAttention.forward called F.scaled_dot_product_attention" in split.message


def test_a_forbidden_name_in_code_that_never_runs_is_a_note_not_a_loss_and_flagged_for_review(graded):
    """nanoGPT's `if self.flash:` with the flag off: full marks, a note that names the mention without vouching
    that it never ran (the watch cannot prove it), and the part flagged for the instructor's review"""
    part = graded(("self_attention", "ok_nanogpt_flash_off")).part("multihead")
    assert part.score == part.max_score
    assert any("scaled_dot_product_attention" in n and "did not see it called" in n and "review" in n
               for n in part.notes), part.notes
    assert not any("did not run" in n or "no points are lost" in n for n in part.notes), part.notes
    assert part.review == ("MultiHeadSelfAttention (scaled_dot_product_attention)",), part.review


@pytest.mark.parametrize("assignment", list(CATALOGUES))
def test_an_empty_submission_says_each_name_is_missing(grader, tmp_path, assignment):
    """every check of an empty file says which name is missing, never an internal error of the check"""
    empty = tmp_path / "empty.py"
    empty.write_text("", encoding="utf-8")
    result = grader.grade(empty, assignment=spec.assignment(assignment))
    for part in result.parts:
        for check in part.checks:
            assert "is not defined in your submission" in check.message, (part.id, check.name, check.message)


@pytest.mark.parametrize("name, part_id, call", [("flash_calls_sdpa", "flash", "scaled_dot_product_attention"),
                                                  ("window_calls_flex_attention", "sliding_window", "flex_attention")])
def test_efficient_forbidden_call_is_named(graded, name, part_id, call):
    """a part of efficient that hands its work to SDPA or flex_attention scores 0 and says which call it was, under
    its own rule (not from scratch, not the official module: torch's fused attention and flex_attention)"""
    part = graded(("efficient", name)).part(part_id)
    assert part.score == 0
    assert any(call in n and "flex_attention" in n and "fused attention" in n for n in part.notes), part.notes


@pytest.mark.parametrize("assignment", list(CATALOGUES))
def test_untouched_release_scores_zero(grader, tmp_path, assignment):
    """the released notebooks (or, until they exist, stubs raising NotImplementedError) earn nothing, with a
    message on every check"""
    release = ROOT / "assignments" / assignment
    parts = spec.assignment(assignment).parts
    if release.is_dir() and any(release.glob("*.ipynb")):
        target = release
    else:  # the release is generated by the course build; stubs stand in for it until then
        stub = "\n\n".join(f"def {n}(*args, **kwargs):\n    raise NotImplementedError" for p in parts for n in p.names)
        target = tmp_path / "stubs.py"
        target.write_text(stub + "\n", encoding="utf-8")
    result = grader.grade(target, assignment=spec.assignment(assignment))
    assert result.score == 0, [(p.id, p.score) for p in result.parts]
    for part in result.parts:
        assert part.checks, f"{part.id} ran no check on the release"
        for check in part.checks:
            assert not check.passed and check.message, (part.id, check.name)


@pytest.fixture(scope="module")
def graded_zh(grader):
    """Each case graded once more, its feedback in Chinese (lazily, shared by this module)."""
    cache = {}

    def get(key):
        if key not in cache:
            a, name = key
            cache[key] = grader.grade(CATALOGUES[a][0].OUT / f"{name}.py", assignment=spec.assignment(a), lang="zh")
        return cache[key]

    return get


CHINESE = re.compile(r"[\u4e00-\u9fff]")
# The cases that say something in a way no other case does: a forbidden call named, a lent piece standing in, a
# convention named, a mention flagged for review (every message of the catalog is translated and renders in every
# language by itself, tests/test_i18n.py; what is left to see here is the path from a graded case to its words).
SPOKEN = {("self_attention", n) for n in ("module_calls_sdpa", "multihead_calls_sdpa", "ok_nanogpt_flash_off",
                                           "module_calls_wrong_softmax", "multihead_calls_wrong_padding_mask",
                                           "chunked_calls_wrong_scores")} | {
    ("generation", n) for n in ("rope_half_split", "decode_mask_top_left", "repeat_kv_tiled",
                                 "decoder_inline_half_split")} | {
    ("efficient", n) for n in ("flash_calls_sdpa", "window_calls_flex_attention")}


def in_chinese() -> list[tuple[str, str]]:
    """The cases graded once more in Chinese: the first of each assignment's cases that lose the same parts (every
    part's failure, and full marks, in Chinese), and the cases of SPOKEN."""
    first: dict = {}
    for (assignment, name), case in CASES.items():
        first.setdefault((assignment, frozenset(case.lose + case.zero)), (assignment, name))
    chosen = set(first.values()) | SPOKEN
    return [key for key in CASES if key in chosen]


IN_CHINESE = in_chinese()


def test_every_case_named_to_be_graded_in_chinese_is_in_a_catalogue():
    assert SPOKEN <= set(CASES), f"not in any catalogue (renamed?): {sorted(SPOKEN - set(CASES))}"


@pytest.mark.parametrize("key", IN_CHINESE, ids=_ids(IN_CHINESE))
def test_chinese_feedback_scores_alike_and_speaks_chinese(graded, graded_zh, key):
    """in Chinese, a case scores exactly as in English, check by check and with the same check names; every
    message renders (no format error) and every failed check's message and every note is in Chinese"""
    english, chinese = graded(key), graded_zh(key)
    assert (english.lang, chinese.lang) == ("en", "zh")
    assert [(p.id, p.score, [(c.name, c.passed, c.points) for c in p.checks]) for p in chinese.parts] == \
        [(p.id, p.score, [(c.name, c.passed, c.points) for c in p.checks]) for p in english.parts]
    for part in chinese.parts:
        for check in part.checks:
            assert check.passed or CHINESE.search(check.message), (part.id, check.name, check.message)
        for note in part.notes:
            assert CHINESE.search(note), (part.id, note)


@pytest.mark.parametrize("assignment, name, piece, owner, borrower", [
    ("generation", "rope_half_split", "apply_rope", "positions", "decoder"),
    ("generation", "rope_base_over_d_model", "apply_rope", "positions", "decoder"),
    ("generation", "decode_mask_top_left", "decode_causal_mask", "kv_cache", "decoder"),
    ("generation", "repeat_kv_tiled", "repeat_kv", "kv_cache", "decoder"),
    ("self_attention", "module_calls_wrong_softmax", "attention_weights", "scaled_scores", "module"),
    ("self_attention", "module_calls_wrong_causal_mask", "apply_causal_mask", "masks", "module"),
    ("self_attention", "multihead_calls_wrong_padding_mask", "apply_padding_mask", "masks", "multihead"),
    ("self_attention", "chunked_calls_wrong_scores", "scaled_scores", "scaled_scores", "long_sequence")])
def test_a_wrong_piece_called_by_another_part_costs_points_in_its_own_part_only(graded, assignment, name, piece, owner,
                                                                              borrower):
    """DecoderAttention, SelfAttention or MultiHeadSelfAttention calls the file's own wrong piece: the piece's part
    loses points, the calling part keeps full marks, and its note says the grader's piece stood in and that the
    student's copy is wrong"""
    result = graded((assignment, name))
    assert result.part(owner).score < result.part(owner).max_score
    part = result.part(borrower)
    assert part.score == pytest.approx(part.max_score), [c.message for c in part.checks if not c.passed]
    assert any("stood in for yours" in n and piece in n for n in part.notes), part.notes
    assert any("gave wrong results: " + piece in n for n in part.notes), part.notes


def test_a_layers_own_rope_convention_costs_one_check_only(graded):
    """DecoderAttention with its own rotate_half (the half-split pairing) inline: decoder loses the full-pass check,
    which names the convention; every other check grades the layer under it and passes"""
    decoder = graded(("generation", "decoder_inline_half_split")).part("decoder")
    failed = [c for c in decoder.checks if not c.passed]
    assert len(failed) == 1 and "half-split" in failed[0].message and "costs points here only" in failed[0].message, \
        [(c.name, c.message) for c in failed]


@pytest.mark.parametrize("name", ["decoder_caches_unrotated_keys", "decoder_caches_unrotated_keys_when_cached"])
def test_caching_unrotated_keys_is_named_by_every_check_it_fails(graded, name):
    """keys cached before RoPE, everything the cache returns rotated with arange(S_k) (blog code): every decoder
    check it fails names why (the cache's keys unrotated, the keys at their places in the cache), none only an
    error size"""
    decoder = graded(("generation", name)).part("decoder")
    failed = [c.message for c in decoder.checks if not c.passed]
    said = ("keys that were not rotated", "the keys were rotated at their places in the cache")
    assert failed and all(any(s in message for s in said) for message in failed), failed


def test_the_backward_memory_check_names_a_top_left_causal_mask(graded):
    """flash_backward's memory check compares the gradients first: a top-left mask fails it with the alignment
    named, as the part's other checks name it, not with a bare "off by up to" """
    part = graded(("efficient", "bwd_top_left_causal")).part("flash_backward")
    memory = next(c for c in part.checks if c.name.startswith("flash_attention_backward holds a few"))
    assert not memory.passed and "top-left aligned" in memory.message, memory.message


def test_flash_attention_function_is_judged_against_exact_attention_where_the_students_backward_fails(graded):
    """flash_attention_backward fails every call the checks make (its flag is named is_causal), while
    FlashAttentionFunction passes the flag by position and is right: its checks pass against exact attention, so the
    backward's mistake is charged in its own checks only"""
    part = graded(("efficient", "bwd_causal_named_is_causal")).part("flash_backward")
    function = [c for c in part.checks if c.name.startswith("FlashAttentionFunction.apply(q, k, v, causal) returns")]
    assert len(function) == 2 and all(c.passed for c in function), [(c.name, c.message) for c in function]


def test_a_wrong_window_mask_reused_by_the_attention_costs_the_mask_checks_only(graded):
    """the attention is graded with the grader's mask lent in place of the student's (Part.borrows; issue 47)"""
    result = graded(("efficient", "window_mask_one_too_wide_reused"))
    part = next(p for p in result.parts if p.id == "sliding_window")
    failed = {c.name for c in part.checks if not c.passed}
    assert failed and all(name.startswith("sliding_window_mask") for name in failed), failed
    assert any("sliding_window_mask stood in for yours" in str(note) for note in part.notes), part.notes
