"""Lending other parts' functions to the part being graded (checks/lent.py, worker/borrowed.py, sandbox/lender.py).

A part whose code calls another part's functions (DecoderAttention calls apply_rope) is graded with stand-ins for
the student's wrong ones: each call is answered by the trusted side with the reference's result, so no code of the
grader is ever in the worker. The stand-ins must run in place of the student's, take only what a reply may hold,
never reach a worker that grades another part, and the probe of the student's own pieces must cost the borrowing
part nothing.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

import solutions as attention_ref
from solutions import generation as generation_ref
from autograder.foundation import spec
from autograder.foundation.extract import Source
from autograder.foundation.failures import StudentRaised
from autograder.foundation.limits import Limits
from autograder.sandbox.lender import Lender
from autograder.sandbox.session import Session
from autograder.sandbox.student import Student

CODE = ("def apply_rope(x, positions, base=10000.0):\n    return x\n\n\n"
        "def rope_of_a_module(x):\n    return apply_rope(torch.nn.Linear(2, 2), x)\n\n\n"
        "class DecoderAttention:\n    pass\n")
ROOT = Path(__file__).resolve().parent.parent


def _session(grader, folder, code: str = CODE, assignment=spec.GENERATION, limits: Limits | None = None) -> Session:
    path = folder / "lent.py"
    path.write_text(code, encoding="utf-8")
    session = Session(grader.zygote, (Source("lent", str(path), (code,)),), limits or Limits(), assignment=assignment)
    session.start()
    return session


def _decoder(session: Session) -> Student:
    """A student in part decoder, whose stand-ins are answered by the reference."""
    student = Student(session)
    session.enter_part("decoder")
    session.lenders["decoder"] = Lender(generation_ref, frozenset(spec.GENERATION.part("decoder").borrows)).answer
    return student


def test_a_stand_in_is_answered_with_the_references_result_and_no_other_part_reaches_it(grader, private_tmp):
    """after a lend in decoder, the student's namespace calls the stand-in, whose result is the reference's; the next
    part (positions) gets a fresh worker, not counted as a restart, where apply_rope is the student's own again"""
    session = _session(grader, private_tmp)
    try:
        student = _decoder(session)
        x, positions = torch.randn(1, 2, 3, 4), torch.arange(3)
        job = student.job()
        lent = job.lend("DecoderAttention", ["apply_rope"], ["apply_rope"])
        called = job.call("apply_rope", x, positions)
        [result] = student.run([job])
        assert result[lent] == ["apply_rope"]
        assert torch.equal(result[called], generation_ref.apply_rope(x, positions))
        assert not torch.equal(result[called], x)
        lent_pid = session.worker.pid
        session.enter_part("positions")
        assert torch.equal(student.call("apply_rope", x, positions), x)
        assert session.worker.pid != lent_pid and session.restarts == 0
    finally:
        session.close()


def test_a_lend_without_stand_ins_gives_the_students_own_pieces_back(grader, private_tmp):
    """a lend with no stand-ins puts the student's own apply_rope back in the same worker"""
    session = _session(grader, private_tmp)
    try:
        student = _decoder(session)
        x = torch.randn(1, 2, 3, 4)
        job = student.job()
        job.lend("DecoderAttention", ["apply_rope"], ["apply_rope"])
        job.lend("DecoderAttention", ["apply_rope"])
        called = job.call("apply_rope", x, torch.arange(3))
        [result] = student.run([job])
        assert torch.equal(result[called], x)
    finally:
        session.close()


def test_a_stand_in_refuses_what_a_reply_may_not_hold(grader, private_tmp):
    """a module passed to a stand-in is refused by the trusted side (nothing but tensors and plain values): the
    student's call raises, naming the refusal, and the reference never runs on it"""
    session = _session(grader, private_tmp)
    try:
        student = _decoder(session)
        job = student.job()
        job.lend("DecoderAttention", ["apply_rope"], ["apply_rope"])
        called = job.call("rope_of_a_module", torch.arange(3))
        [result] = student.run([job])
        try:
            result[called]
            raise AssertionError("the stand-in should have refused a module")
        except StudentRaised as exc:
            assert "refused its arguments" in str(exc.message) and "cannot leave the worker" in str(exc.message)
    finally:
        session.close()


def test_the_lender_refuses_a_result_over_the_wire_limit_without_computing_it():
    """causal_mask(100000) would be 10^10 booleans: refused from its shape on the meta device, in milliseconds"""
    lender = Lender(attention_ref, frozenset({"causal_mask"}))
    started = time.perf_counter()
    answer = lender.answer({"kind": "piece", "name": "causal_mask", "args": [100000], "kwargs": {"__dict__": []}})
    assert answer["ok"] is False and "far more than" in answer["error"], answer
    assert time.perf_counter() - started < 1.0


def test_the_lender_answers_only_the_names_it_lends():
    """a stand-in's message for a function the part does not borrow is refused"""
    lender = Lender(attention_ref, frozenset({"causal_mask"}))
    answer = lender.answer({"kind": "piece", "name": "SelfAttention", "args": [], "kwargs": {"__dict__": []}})
    assert answer["ok"] is False and "not lent" in answer["error"]


def test_a_part_that_borrows_the_same_pieces_keeps_the_lent_worker(grader, private_tmp):
    """module then official_parity (both borrow scaled_scores, ...): one worker; a part that borrows nothing
    (qkv_projection) gets a fresh one"""
    code = "def attend(weights, V):\n    return V\n\n\nclass SelfAttention:\n    pass\n\n\ndef parity_error(m, x):\n    return 0.0\n"
    session = _session(grader, private_tmp, code, spec.SELF_ATTENTION)
    try:
        student = Student(session)
        session.enter_part("module")
        job = student.job()
        job.lend("SelfAttention", ["attend"], ["attend"])
        student.run([job])[0].check()
        pid = session.worker.pid
        session.enter_part("official_parity")
        assert session.worker.pid == pid
        session.enter_part("qkv_projection")
        assert torch.equal(student.call("attend", torch.eye(2), torch.ones(2, 2) * 3), torch.ones(2, 2) * 3)
        assert session.worker.pid != pid
    finally:
        session.close()


def test_a_piece_that_never_returns_costs_the_borrowing_part_neither_time_nor_points(grader, private_tmp):
    """scaled_scores loops forever, everything else is the reference: its probe stops after its own deadline, module
    keeps its 20 points with time to spare, and the note names scaled_scores alone, as a piece that did not return"""
    code = (ROOT / "solutions" / "attention.py").read_text(encoding="utf-8").replace(
        "def scaled_scores(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:\n",
        "def scaled_scores(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:\n    while True:\n        pass\n")
    path = private_tmp / "hangs.py"
    path.write_text(code, encoding="utf-8")
    limits = dataclasses.replace(grader.limits, part_seconds=4.0)
    grader.limits, saved = limits, grader.limits
    try:
        result = grader.grade(path, part_ids=["module"], assignment=spec.SELF_ATTENTION)
    finally:
        grader.limits = saved
    module = result.part("module")
    assert module.score == module.max_score, [(c.name, c.message) for c in module.checks if not c.passed]
    notes = " ".join(module.notes)
    assert "did not return in time or ended the grading process: scaled_scores (" in notes, notes
    assert "gave wrong results" not in notes, notes


def test_a_piece_wrong_only_on_the_borrowing_parts_inputs_costs_its_own_part_only(grader, private_tmp):
    """scaled_scores wrong only on per-head inputs of 5 positions passes its probes; MultiHeadSelfAttention, which
    calls it on exactly those, fails with it: its failed checks run again with the grader's pieces, the student's own
    beside them as witnesses, and pass, the note naming scaled_scores; scaled_scores' own part charges the mistake"""
    import importlib.util
    import sys

    if "catalogue_build" not in sys.modules:  # (its dataclasses look their module up there)
        spec_ = importlib.util.spec_from_file_location("catalogue_build", ROOT / "tests" / "catalogue" / "build.py")
        sys.modules["catalogue_build"] = importlib.util.module_from_spec(spec_)
        spec_.loader.exec_module(sys.modules["catalogue_build"])
    build = sys.modules["catalogue_build"]
    code = (ROOT / "solutions" / "attention.py").read_text(encoding="utf-8")
    code = build.apply_edit(code, "scaled_scores", "return Q @ K.transpose(-2, -1) / math.sqrt(d_k)",
                            "scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)\n"
                            "    return scores * 1.5 if Q.dim() == 4 and Q.shape[-2] == 5 else scores")
    code = build.apply_edit(code, "MultiHeadSelfAttention", "scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])",
                            "scores = scaled_scores(Q, K)")
    path = private_tmp / "witness.py"
    path.write_text(code, encoding="utf-8")
    result = grader.grade(path, part_ids=["scaled_scores", "multihead"], assignment=spec.SELF_ATTENTION)
    multihead = result.part("multihead")
    assert multihead.score == multihead.max_score, [c.message for c in multihead.checks if not c.passed]
    assert any("your scaled_scores gave other results" in n for n in multihead.notes), multihead.notes
    assert result.part("scaled_scores").score < result.part("scaled_scores").max_score
