"""Lending the reference versions of other parts' functions to the part being graded (checks/lent.py).

A part whose code calls another part's functions (DecoderAttention calls apply_rope) is graded with the
reference versions in their place, sent to the worker as text: the lent code must run in place of the
student's, show in no traceback, and never reach a worker that grades another part.
"""
from __future__ import annotations

import torch

from autograder.foundation import spec
from autograder.foundation.extract import Source
from autograder.foundation.failures import StudentRaised
from autograder.foundation.limits import Limits
from autograder.sandbox.session import Session
from autograder.sandbox.student import Student

CODE = ("def apply_rope(x, positions, base=10000.0):\n    return x\n\n\n"
        "class DecoderAttention:\n    pass\n")
LENT = "def apply_rope(x, positions, base=10000.0):\n    secret_line = x + 1\n    return secret_line\n"


def _session(grader, folder) -> Session:
    path = folder / "lent.py"
    path.write_text(CODE, encoding="utf-8")
    session = Session(grader.zygote, (Source("lent", str(path), (CODE,)),), Limits(), assignment=spec.GENERATION)
    session.start()
    return session


def test_lent_code_runs_in_place_of_the_students_and_no_other_part_reaches_it(grader, private_tmp):
    """after a lend in decoder, the student's namespace calls the lent apply_rope; the next part (positions) gets a
    fresh worker, not counted as a restart, where apply_rope is the student's own again"""
    session = _session(grader, private_tmp)
    try:
        student = Student(session)
        session.enter_part("decoder")
        job = student.job()
        lent = job.lend("DecoderAttention", LENT, ["apply_rope"])
        called = job.call("apply_rope", torch.zeros(3), torch.arange(3))
        [result] = student.run([job])
        assert result[lent] == ["apply_rope"]
        assert torch.equal(result[called], torch.ones(3))
        lent_pid = session.worker.pid
        session.enter_part("positions")
        assert torch.equal(student.call("apply_rope", torch.zeros(3), torch.arange(3)), torch.zeros(3))
        assert session.worker.pid != lent_pid and session.restarts == 0
    finally:
        session.close()


def test_a_failure_inside_lent_code_shows_none_of_it(grader, private_tmp):
    """an error raised inside the lent function names the student's call, never a line of the lent code"""
    session = _session(grader, private_tmp)
    try:
        student = Student(session)
        session.enter_part("decoder")
        job = student.job()
        job.lend("DecoderAttention", LENT, ["apply_rope"])
        called = job.call("apply_rope", "not a tensor", torch.arange(3))
        [result] = student.run([job])
        try:
            result[called]
            raise AssertionError("the lent apply_rope should have raised")
        except StudentRaised as exc:
            assert "secret_line" not in str(exc.message)
    finally:
        session.close()


def test_a_part_that_borrows_the_same_pieces_keeps_the_lent_worker(grader, private_tmp):
    """module then official_parity (both borrow scaled_scores, ...): one worker; a part that borrows nothing
    (qkv_projection) gets a fresh one"""
    path = private_tmp / "pieces.py"
    code = "def attend(weights, V):\n    return V\n\n\nclass SelfAttention:\n    pass\n\n\ndef parity_error(m, x):\n    return 0.0\n"
    path.write_text(code, encoding="utf-8")
    session = Session(grader.zygote, (Source("pieces", str(path), (code,)),), Limits(), assignment=spec.SELF_ATTENTION)
    session.start()
    try:
        student = Student(session)
        session.enter_part("module")
        job = student.job()
        job.lend("SelfAttention", "def attend(weights, V):\n    return weights @ V\n", ["attend"])
        student.run([job])[0].check()
        pid = session.worker.pid
        session.enter_part("official_parity")
        assert session.worker.pid == pid
        session.enter_part("qkv_projection")
        assert torch.equal(student.call("attend", torch.eye(2), torch.ones(2, 2) * 3), torch.ones(2, 2) * 3)
        assert session.worker.pid != pid
    finally:
        session.close()
