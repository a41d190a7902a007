"""Hostile submissions (tests/hostile/*.py) earn nothing beyond their honest work, cannot
break grading, and leave nothing behind.

Every case is graded by one shared warm grader, in a sentinel course tree whose files are
world-writable (only the sandbox can protect them), and is checked for: points per part
no higher than the honest twin's, grading time within the limits, every file of the
course, the reference solutions and the hidden checks unchanged, no live process left
from the worker, and no trace of code run in the trusted process.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
import _kit as kit

from autograder.foundation import spec
from autograder.foundation.spec import PARTS

ALL = [p.id for p in PARTS]
# The cheap parts, enough to show that an attack on one function leaves the others intact.
SUBSET = [p for p in ("qkv_projection", "scaled_scores", "masks") if p in ALL]
POINTS = {p.id: p.points for p in PARTS}


@pytest.fixture(scope="module")
def course():
    return kit.make_course()


@pytest.fixture(scope="module")
def reference(course):
    """The reference solutions graded as a submission: what an honest student earns."""
    return kit.baseline(course, kit.REFERENCE, SUBSET)


def attack(course, name, part_ids, limits=None, known_limit=(), assignment="self_attention"):
    """Grade tests/hostile/<name>.py (a case of `assignment`) and assert the invariants every attack must respect
    (the parts in `known_limit` may earn more than the honest twin: a limit docs/security.md states, tested on its
    own)."""
    kit.PWNED.unlink(missing_ok=True)
    code, honest_code = kit.case_sources(name, course, assignment)
    honest = kit.baseline(course, honest_code, part_ids, assignment)
    path = kit.write_submission(course, name, code, assignment)
    before = kit.snapshot(*kit.protected_trees(course))
    limits = limits or kit.LIMITS
    result, seconds = kit.grade(path, limits, part_ids, assignment)
    for part in result.parts:
        if part.id not in known_limit:
            assert part.score <= honest.part(part.id).score + 1e-9, (name, part.id, part.checks)
    budget = len(part_ids) * limits.part_seconds + 2 * limits.load_seconds + 10
    assert seconds < budget, f"{name}: grading took {seconds:.1f} s, over its {budget:.0f} s bound"
    assert kit.snapshot(*kit.protected_trees(course)) == before, f"{name} changed files outside the sandbox"
    assert kit.leftovers() == [], f"{name} left processes behind"
    assert not kit.PWNED.exists(), f"{name} ran code in the trusted grader"
    assert kit.planted_key() in (None, kit.KEY[1]), f"{name} changed the instructor's key"
    print(f"ATTACK {name}: {result.score:g} (honest {honest.score:g}) in {seconds:.1f} s")
    return result, honest


def test_patched_comparisons_do_not_turn_wrong_answers_into_points(course):
    result, honest = attack(course, "patch_comparisons", ["scaled_scores"])
    assert kit.scores(result) == kit.scores(honest)
    assert result.part("scaled_scores").score < POINTS["scaled_scores"]


def test_disk_search_finds_no_solutions_checks_or_gradebook(course):
    result, _ = attack(course, "find_solutions", ["scaled_scores"])
    text = kit.messages(result, "scaled_scores")
    assert "searched the disk, found []" in text, text
    assert result.part("scaled_scores").score < POINTS["scaled_scores"]


def test_unmounting_every_cover_fails_and_reads_nothing(course):
    result, _ = attack(course, "unmount_covers", ["scaled_scores"])
    text = kit.messages(result, "scaled_scores")
    assert "unmounted [], read []" in text, text
    assert "tried 0 unmounts" not in text, text


def test_os_exit_at_import_scores_nothing_and_says_why(course):
    result, _ = attack(course, "exit_at_import", SUBSET)
    assert result.score == 0
    for part in result.parts:  # every check says why, none says "not defined"
        for check in part.checks:
            assert "ended the grading process while it was being loaded" in check.message, check


def test_system_exit_at_import_keeps_only_the_definitions_before_it(course, reference):
    result, _ = attack(course, "system_exit_at_import", SUBSET)
    assert kit.scores(result) == kit.scores(reference)
    assert any("SystemExit" in n for n in result.notes), result.notes


def test_exit_inside_a_function_fails_that_function_only(course, reference):
    result, _ = attack(course, "exit_in_function", SUBSET)
    assert result.part("qkv_projection").score == reference.part("qkv_projection").score
    assert "attend called exit()" in kit.messages(result, "scaled_scores")
    assert "padding_mask called exit()" in kit.messages(result, "masks")


def test_endless_loop_costs_only_the_part_that_calls_it(course, reference):
    limits = kit.replace(kit.LIMITS, part_seconds=3.0)
    started = time.perf_counter()
    result, _ = attack(course, "endless_loop", SUBSET, limits)
    assert time.perf_counter() - started < 3 * 3.0 + 2 * limits.load_seconds
    for part in ("qkv_projection", "masks"):
        assert result.part(part).score == reference.part(part).score, part
    assert "did not return within the part's 3 s limit" in kit.messages(result, "scaled_scores")
    assert result.part("scaled_scores").score < reference.part("scaled_scores").score


def test_allocating_gigabytes_fails_inside_the_worker_only(course, reference):
    result, _ = attack(course, "memory_hog", ["qkv_projection", "scaled_scores"],
                       kit.replace(kit.LIMITS, memory_bytes=2 * 2**30))
    assert result.part("qkv_projection").score == reference.part("qkv_projection").score
    assert result.part("scaled_scores").score == 0
    text = kit.messages(result, "scaled_scores")
    assert "memory" in text.lower(), text


def test_unpicklable_tricks_subclasses_and_absurd_outputs_are_refused(course, reference):
    result, _ = attack(course, "pickle_tricks", ["scaled_scores", "masks"])
    assert result.part("scaled_scores").score == 0
    text = kit.messages(result, "scaled_scores")
    assert "tensor subclass" in text, text
    assert result.part("masks").score < reference.part("masks").score


def _peak_growth_mib(run):
    """run() and how far the peak resident memory of this process (the trusted grader) rose above where it was."""
    Path("/proc/self/clear_refs").write_text("5")  # (the kernel resets VmHWM to the current resident size)
    before = _status_kib("VmRSS")
    value = run()
    return value, (_status_kib("VmHWM") - before) / 1024


def _status_kib(field: str) -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1])


def test_replies_of_millions_of_json_values_are_refused_unread_small_and_fast(course, reference):
    """A reply costs the grader what its JSON holds: millions of `[]` in a 12 MiB (or a 3 MiB) frame took the
    trusted grader to gigabytes and tens of seconds. Both are refused before json.loads: the parts score 0 with
    the reason, the grader's memory grows by little, the other part is untouched."""
    started = time.perf_counter()
    (result, _), growth = _peak_growth_mib(lambda: attack(course, "json_flood", SUBSET))
    seconds = time.perf_counter() - started
    assert result.part("qkv_projection").score == reference.part("qkv_projection").score
    assert result.part("scaled_scores").score == 0 and result.part("masks").score == 0
    assert "over the 4194304-byte limit" in kit.messages(result, "scaled_scores")
    assert "refused a message of more than 262144 values" in kit.messages(result, "masks")
    assert growth < 150, f"the trusted grader's peak memory rose by {growth:.0f} MiB"
    assert seconds < 30, f"{seconds:.1f} s"


def test_daemon_forked_at_import_dies_with_grading(course, reference):
    result, _ = attack(course, "daemon", ["qkv_projection"])
    assert result.part("qkv_projection").score == reference.part("qkv_projection").score


def test_callers_frames_and_gc_hold_no_expected_values(course):
    result, honest = attack(course, "frames_gc", ["scaled_scores"])
    assert kit.scores(result) == kit.scores(honest)


def test_switching_the_watch_off_through_gc_earns_the_points_but_is_flagged_for_review_never_vouched_for(course):
    """A KNOWN LIMIT (docs/security.md): ten lines of gc silence the call watch, which runs in the student's
    process, and the fused kernel's call is not seen: the part keeps its points. What holds: the note does not
    say the call did not run, the part is flagged for review, and the class report lists it."""
    from autograder.commands import classpage, classreport, document

    result, honest = attack(course, "watch_off_gc", ["module"], known_limit=("module",))
    assert honest.part("module").score == 0  # the same code, watch on: the call is seen
    part = result.part("module")
    assert part.score == POINTS["module"]  # the known limit: if this fails, the watch got sounder; update the docs
    assert part.review == ("SelfAttention (scaled_dot_product_attention)",), part.review
    note = " ".join(part.notes)
    assert "flagged for your instructor's review" in note and "did not see it called" in note, note
    assert "did not run" not in note and "no points are lost" not in note, note
    from autograder.grading.scoring import zeros

    saved = document.from_json(document.to_json(result), "mallory")  # (as grade-class reads its reports back)
    saved = kit.replace(saved, parts=tuple(zeros([p for p in PARTS if p.id != "module"], "not graded here"))
                        + saved.parts)
    report = classreport.summarize("self_attention", [saved])
    assert [(f.student, f.part, f.why) for f in report.review] == [("mallory", "module", part.review)]
    page = classpage.page(report, {})
    table = page.split("<table id=review>")[1].split("</table>")[0]
    assert "mallory" in table and "SelfAttention (scaled_dot_product_attention)" in table, table


def test_parity_error_that_peeks_at_the_stand_in_earns_nothing_more(course):
    result, honest = attack(course, "parity_peek", ["official_parity"])
    assert kit.scores(result) == kit.scores(honest)
    assert "the largest absolute difference of the two outputs is" in kit.messages(result, "official_parity")


@pytest.mark.parametrize("case", ["meter_evasion", "meter_evasion_fork"])
def test_full_matrix_hidden_from_the_tensor_meter_still_fails_the_memory_check(course, case):
    """Switching the live-tensor meter off, or building the matrix in a child process, is seen
    by the grader's outside count of resident memory."""
    result, honest = attack(course, case, ["long_sequence"])
    memory = [c for c in result.part("long_sequence").checks if c.name.startswith("chunked_attention never holds")]
    assert memory and not memory[0].passed, memory
    assert "where the meter cannot see it" in memory[0].message, memory[0].message
    assert result.part("long_sequence").score < honest.part("long_sequence").score


def test_writes_to_course_gradebook_other_students_and_solutions_fail(course, reference):
    result, _ = attack(course, "write_outside", ["qkv_projection"])
    assert result.part("qkv_projection").score == reference.part("qkv_projection").score


def test_fake_output_leaves_the_cli_json_a_single_true_document(course, reference, capfd, monkeypatch):
    """Through the CLI's own code path (with the shared warm grader), capturing the real fds 1 and 2."""
    from autograder.commands import cli
    from autograder.grading import grade as grade_module

    code, _ = kit.case_sources("fake_output", course)
    path = kit.write_submission(course, "fake_output", code)
    before = kit.snapshot(*kit.protected_trees(course))
    monkeypatch.setattr(grade_module, "grade", lambda p, gpu=False, limits=None, assignment=None, lang=None, part_ids=None: kit.grade(p, part_ids=SUBSET)[0])
    capfd.readouterr()
    started = time.perf_counter()
    status = cli.main(["grade", str(path), "--json"])
    seconds = time.perf_counter() - started
    out, err = capfd.readouterr()
    assert status == 0
    doc = json.loads(out)  # exactly one document: json.loads refuses any text around it
    assert '"score": 100' not in out + err
    for part in doc["parts"]:  # writing to its own socket cost scaled_scores its points, nothing else moved
        want = reference.part(part["id"]).score
        assert part["score"] == want or (part["id"] == "scaled_scores" and part["score"] < want), part["id"]
    assert kit.snapshot(*kit.protected_trees(course)) == before
    assert kit.leftovers() == []
    print(f"ATTACK fake_output: {doc['score']:g} (honest {reference.score:g}) in {seconds:.1f} s")


def test_the_graders_keyrings_are_neither_read_nor_changed_nor_shared(course):
    """The worker no longer holds the grader's session keyring (the kit planted the instructor's token there
    before the zygote started) and cannot reach any keyring: nothing seen, nothing overwritten, nothing left
    for the next student in the user keyring that every process of the same uid shares."""
    result, _ = attack(course, "keyring", ["scaled_scores"])
    text = kit.messages(result, "scaled_scores")
    assert "keys seen [], changed [], added to []" in text, text
    assert kit.planted_key() in (None, kit.KEY[1])


def test_io_uring_perf_events_userfaultfd_bpf_and_user_namespaces_are_refused(course):
    result, _ = attack(course, "kernel_surface", ["scaled_scores"])
    text = kit.messages(result, "scaled_scores")
    assert "the kernel gave: []" in text, text


def test_files_in_tmp_stop_at_the_inode_cap_not_at_the_kernels_memory(course):
    result, _ = attack(course, "tmp_inodes", ["scaled_scores"])
    text = kit.messages(result, "scaled_scores")
    made = int(text.split("made ", 1)[1].split()[0])
    assert made <= 64 * 2**20 // 4096 and "stopped by No space left on device" in text, text


def test_a_search_of_the_worker_finds_no_code_of_the_lent_pieces(course):
    """SelfAttention searches its frames, their globals, gc and the worker object for the grader's versions of the
    pieces lent to it (its scaled_scores is wrong): it reaches the stand-ins, which hold no code of the grader, so
    no line of any reference piece reaches the report, and the part earns nothing for the search"""
    import inspect

    import solutions as ref
    from autograder.foundation.spec import PIECES

    result, honest = attack(course, "lent_code_search", ["module"])
    text = kit.messages(result, "module")
    assert "LEAK" in text and "scaled_scores@" in text, text  # the search ran and reached the stand-ins
    pieces = [getattr(ref, name) for name in PIECES]
    lines = {line.strip().strip('"') for piece in pieces for line in inspect.getsource(piece).splitlines()}
    lines |= {line.strip() for piece in pieces for line in inspect.getdoc(piece).splitlines()}  # (as code constants)
    leaked = sorted(line for line in lines if len(line) > 12 and line in text)
    assert not leaked, leaked
    assert result.part("module").score < honest.part("module").score


def test_the_librarys_source_copied_in_at_load_time_finds_no_library_and_earns_nothing(course):
    """`exec(inspect.getsource(modeling_llama.repeat_kv), globals())` (or the library's file read from the disk)
    compiled the library's code under the student's name: llama 30/30. The worker has no library: the files are
    covered, `transformers` is the grader's shell, the import fails at once with the rule (issue 52, item 2)."""
    result, honest = attack(course, "llama_copied_source", ["llama"], assignment="real_models")
    assert honest.part("llama").score == spec.REAL_MODELS.part("llama").points
    assert result.part("llama").score == 0, kit.messages(result, "llama")
    text = kit.messages(result, "llama")
    assert "raised ImportError: transformers.models is not available: the transformers library does not run in the " \
           "grader's sandbox" in text, text


def test_a_self_attention_that_runs_the_graders_stand_in_earns_nothing_and_is_told_why(course):
    """The stand-in SelfAttention that to_official and parity_error receive was a correct attention in the worker:
    a forward that returned `StandInSelfAttention.forward(self, x, mask, causal)` scored module 20/20. Its forward is
    now the trusted side's, answered only in official_parity (issue 52, item 1): the forward earns what a forward
    not written earns, and every check of it names the refusal."""
    result, honest = attack(course, "module_launders_standin", ["module"])
    laundered_earns_nothing(result, honest, "module", "SelfAttention.forward raised TypeError: the grader's stand-in "
                            "SelfAttention computes only where the grader hands it to your code")


def test_a_multihead_attention_that_runs_the_graders_flex_attend_earns_nothing_and_is_told_why(course):
    """flex_attend ran the unwatched flex_attention for any caller: multihead 13.24/15. It now exists only among
    the worker's builtins and runs only inside the grader's own call (issue 52, item 1)."""
    result, honest = attack(course, "multihead_launders_flex", ["multihead"])
    laundered_earns_nothing(result, honest, "multihead", "MultiHeadSelfAttention.forward raised RuntimeError: the "
                            "grader's flex_attend runs only inside the grader's own checks, never for your code")


def test_flash_and_sliding_window_through_the_graders_flex_attend_earn_nothing_and_are_told_why(course):
    result, honest = attack(course, "efficient_launders_flex", ["flash", "sliding_window"], assignment="efficient")
    for part, function in (("flash", "flash_attention"), ("sliding_window", "sliding_window_attention")):
        laundered_earns_nothing(result, honest, part, f"{function} raised RuntimeError: the grader's flex_attend runs "
                                                      "only inside the grader's own checks")


def laundered_earns_nothing(result, honest, part_id: str, cause: str) -> None:
    """The part scores what its honest twin (the laundering function not written) scores, and below full marks; every
    check the twin failed fails with `cause` named."""
    part = result.part(part_id)
    assert part.score == honest.part(part_id).score < part.max_score, (part.score, kit.messages(result, part_id))
    failed = [c for c in honest.part(part_id).checks if not c.passed]
    assert failed, "the twin without the function must fail some check"
    for check in failed:
        got = next(c for c in part.checks if c.name == check.name)
        assert not got.passed and cause in str(got.message), (check.name, got.message)
    assert any("(autograder" in where for where in part.review), part.review  # the reach, for the instructor
