"""The efficient checks' trusted re-computations (autograder/checks/efficient/common.py) equal the reference without
mistakes and differ from it with each mistake; the memory bounds sit far below what the memory-only mistakes hold;
a student's FlexAttention mod runs through flex_attention in the worker, traced by dynamo (the student's module is
importable there)."""
from __future__ import annotations

import re

import pytest
import torch

from autograder.foundation import spec
from autograder.sandbox.batch import Call
from autograder.checks.efficient import common as C
from autograder.checks.efficient import test_flash, test_linear, test_sliding_window
from autograder.foundation.extract import Source
from autograder.foundation.failures import CheckFailure
from autograder.foundation.limits import Limits
from autograder.sandbox.session import Session
from autograder.sandbox.student import MeasuredCall, Student
from solutions import efficient as E


def _qkv(S_q=C.S_Q, S_k=C.S_K):
    return C.qkv(torch.Generator().manual_seed(3), S_q, S_k)


def test_flash_variant_is_exact_attention_and_the_reference_and_each_mistake_differs():
    q, k, v = _qkv()
    for causal in (False, True):
        out, lse = C.dense_attention(q, k, v, causal)
        ref_out, ref_lse = E.flash_attention(q, k, v, causal, C.BLOCK_Q, C.BLOCK_K)
        var_out, var_lse = C.flash_variant(q, k, v, causal)
        assert torch.allclose(ref_out, out, atol=1e-5) and torch.allclose(ref_lse, lse, atol=1e-5)
        assert torch.allclose(var_out, out, atol=1e-5) and torch.allclose(var_lse, lse, atol=1e-5)
        mistakes = [{"rescale_sum": False}, {"rescale_out": False}, {"lse_max": False}, {"normalise": False}]
        mistakes += [{"align": "top_left"}, {"skip": "first"}] if causal else []
        for kw in mistakes:
            bad_out, bad_lse = C.flash_variant(q, k, v, causal, **kw)
            assert not (torch.allclose(bad_out, out, atol=1e-3) and torch.allclose(bad_lse, lse, atol=1e-3)), kw


def test_merge_variant_of_two_halves_is_attention_over_all_keys_and_each_mistake_differs():
    q, k, v = _qkv()
    a, b = C.dense_attention(q, k[:, :, :7], v[:, :, :7]), C.dense_attention(q, k[:, :, 7:], v[:, :, 7:])
    out, lse = C.dense_attention(q, k, v)
    got_out, got_lse = C.merge_variant(*a, *b)
    assert torch.allclose(got_out, out, atol=1e-5) and torch.allclose(got_lse, lse, atol=1e-5)
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(E.merge_attention(*a, *b), (out, lse)))
    for kind in ("max", "unnormalised", "average"):
        bad_out, bad_lse = C.merge_variant(*a, *b, kind=kind)
        assert not (torch.allclose(bad_out, out, atol=1e-3) and torch.allclose(bad_lse, lse, atol=1e-3)), kind
    big = (a[0], a[1] + 100, b[0], b[1] + 100)
    assert not torch.isfinite(C.merge_variant(*big, kind="naive")[0]).all()
    empty = (a[0], torch.full_like(a[1], float("-inf")), b[0], b[1])
    assert torch.isnan(C.merge_variant(*empty, kind="asymmetric")[1]).all()
    assert torch.allclose(C.merge_variant(*empty)[0], b[0]) and torch.equal(C.merge_variant(*empty)[1], b[1])


def test_window_variants_are_the_reference_and_each_mistake_differs():
    for S, window in ((9, 4), (5, 1), (4, 9)):
        assert torch.equal(C.window_mask_variant(S, window), E.sliding_window_mask(S, window))
    for kind in ("wide", "narrow", "two_sided", "transposed"):
        assert not torch.equal(C.window_mask_variant(9, 4, kind), E.sliding_window_mask(9, 4)), kind
    q, k, v = C.qkv(torch.Generator().manual_seed(4), 13, 13)
    want = E.sliding_window_attention(q, k, v, 4, chunk_size=3)
    assert torch.allclose(C.sliding_variant(q, k, v, 4, 3), want, atol=1e-5)
    for kind in ("own_chunk", "wide", "narrow", "two_sided"):
        assert not torch.allclose(C.sliding_variant(q, k, v, 4, 3, kind), want, atol=1e-3), kind


def test_linear_variants_are_the_reference_and_each_mistake_differs():
    q, k, v = C.qkv(torch.Generator().manual_seed(5), 9, 9, scale=1.5)
    for causal in (False, True):
        want = E.linear_attention(q, k, v, causal)
        assert torch.allclose(C.linear_variant(q, k, v, causal), want, atol=1e-5)
        for kw in ({"feature": "elu"}, {"feature": "identity"}, {"normalise": False}):
            assert not torch.allclose(C.linear_variant(q, k, v, causal, **kw), want, atol=1e-3), kw
    state, outs = None, []
    for t in range(9):
        out, state = E.linear_attention_step(state, q[:, :, t], k[:, :, t], v[:, :, t])
        outs.append(out)
    want = E.linear_attention(q, k, v, causal=True)
    assert torch.allclose(torch.stack(outs, 2), want, atol=1e-5)
    assert torch.allclose(C.recurrent_variant(q, k, v), want, atol=1e-5)
    for kind in ("forgets", "stale"):
        assert not torch.allclose(C.recurrent_variant(q, k, v, kind), want, atol=1e-3), kind


def _on_grid(mod, B, H, S, score=None):
    """A reference mod evaluated on broadcast index grids (the reference's mods need no vmap)."""
    b, h, q_idx, kv_idx = C.grid(B, H, S, S)
    return mod(b, h, q_idx, kv_idx) if score is None else mod(score, b, h, q_idx, kv_idx)


def test_mod_variants_are_the_reference_mods_and_each_mistake_differs():
    ids, lengths, S = torch.tensor([[0, 0, 1, 1, 1, 2], [0, 1, 1, 1, 1, 1]]), torch.tensor([2, 4]), 6
    want = _on_grid(E.document_causal_mask_mod(ids), 2, 1, S).expand(2, 1, S, S)
    assert torch.equal(C.document_mask_variant(ids), want)
    for kind in ("not_causal", "no_documents"):
        assert not torch.equal(C.document_mask_variant(ids, kind), want), kind
    want = _on_grid(E.prefix_lm_mask_mod(lengths), 2, 1, S).expand(2, 1, S, S)
    assert torch.equal(C.prefix_mask_variant(lengths, S).expand(2, 1, S, S), want)
    for kind in ("inclusive", "first_row", "prefix_only"):
        assert not torch.equal(C.prefix_mask_variant(lengths, S, kind).expand(2, 1, S, S), want), kind
    assert torch.equal(_on_grid(E.sliding_window_mask_mod(3), 1, 1, S)[0, 0], E.sliding_window_mask(S, 3))
    q, k, v = C.qkv(torch.Generator().manual_seed(6), S, S, h=4)
    scores = q.double() @ k.double().transpose(-2, -1) / q.shape[-1] ** 0.5
    want = (torch.softmax(_on_grid(E.alibi_score_mod(4), 1, 4, S, scores), -1) @ v.double()).float()
    assert torch.allclose(C.alibi_variant(q, k, v), want, atol=1e-5)
    for kind in ("sign", "reversed", "from_zero"):
        assert not torch.allclose(C.alibi_variant(q, k, v, kind), want, atol=1e-3), kind
    want = (torch.softmax(_on_grid(E.softcap_score_mod(0.5), 1, 4, S, scores), -1) @ v.double()).float()
    assert torch.allclose(C.softcap_variant(q, k, v, 0.5), want, atol=1e-5)
    for kind in ("clamp", "no_divide", "none"):
        assert not torch.allclose(C.softcap_variant(q, k, v, 0.5, kind), want, atol=1e-3), kind


def test_memory_bounds_are_below_the_memory_only_mistakes():
    """the bound of each memory check is below the scores of a block of queries against every key (flash: what any
    implementation that is not tiled holds, yet room for a copy of q, k and v), the scores and weights of a chunk
    against every key (sliding window), and under half of one [S, S] matrix (linear)"""
    F, W, L = test_flash, test_sliding_window, test_linear
    flash_bound = F.reference_peak() + F.ROOM * F.MEM_B * F.MEM_H * F.MEM_BLOCK_Q * F.MEM_BLOCK_K * 4
    assert flash_bound < F.MEM_B * F.MEM_H * F.MEM_BLOCK_Q * F.MEM_S_K * 4
    assert flash_bound - F.reference_peak() > sum(x.nbytes for x in F.memory_inputs())
    window_bound = W.reference_peak() + W.ROOM * W.MEM_B * W.MEM_H * W.MEM_CHUNK * (W.MEM_CHUNK + W.MEM_WINDOW - 1) * 4
    assert window_bound < 2 * W.MEM_B * W.MEM_H * W.MEM_CHUNK * W.MEM_S * 4
    for causal in (False, True):
        assert 2 * L.ROOM * L.reference_peak(causal) < L.MEM_B * L.MEM_H * L.MEM_S * L.MEM_S * 4


def test_the_memory_checks_fail_past_the_bound_then_past_resident_room_times_it():
    """within the meter's bound, a resident growth up to RESIDENT_ROOM x the bound passes (the allocator's own pages);
    beyond it, or past the bound on the meter, the check fails and names the function"""
    bound = 2**20

    def check(peak, growth):
        C.within_memory(MeasuredCall(None, peak, growth), "f at S=9", "f", bound, "sizes", "how")

    check(bound, C.RESIDENT_ROOM * bound)
    check(bound, None)  # no resident figure (a GPU run): the meter alone decides
    for peak, growth, said in ((bound + 1, 0, "your f held 1.00 MiB of tensors at once"), (None, 0, "held 0.00 MiB"),
                               (bound, C.RESIDENT_ROOM * bound + 1, "grew by 3.00 MiB while f ran")):
        with pytest.raises(CheckFailure, match=re.escape(said)):
            check(peak, growth)


SUBMISSION = '''
def softcap_score_mod(cap):
    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return score_mod
'''


def test_a_students_score_mod_runs_through_traced_flex_attention_in_the_worker(grader, private_tmp):
    """dynamo imports the module that defines a mod: the worker registers the student's (no ModuleNotFoundError)"""
    path = private_tmp / "mods.py"
    path.write_text(SUBMISSION)
    session = Session(grader.zygote, (Source("mods", str(path), (SUBMISSION,)),), Limits(),
                      assignment=spec.assignment("efficient"))
    try:
        session.start()
        session.enter_part("flex")
        student = Student(session)
        q, k, v = C.qkv(torch.Generator().manual_seed(8), 5, 5, scale=3.0)
        job = student.job()
        mod = job.call("softcap_score_mod", 2.0)
        out = job.builtin_value("flex_attend", q, k, v, score_mod=mod, traced=True)
        [result] = student.run([job])
        assert torch.allclose(result[out], C.softcap_variant(q, k, v, 2.0), atol=1e-5)
        assert student.call_each([Call("softcap_score_mod", 2.0)])[0].value.type == "function"
    finally:
        session.close()


@pytest.mark.parametrize("heads", [3, 8, 12])
def test_alibi_slopes_are_the_papers_for_every_head_count(heads):
    """the checks' ALiBi slopes and the reference's are the paper's get_slopes (12 heads: 2^-1 .. 2^-8, then
    2^-0.5 .. 2^-3.5; 3 heads: 2^-4, 2^-8, then 2^-2); the formula 2^(-8 (h + 1) / H) is the same only for 8"""
    paper = {3: [2 ** -4, 2 ** -8, 2 ** -2], 8: [2.0 ** -(h + 1) for h in range(8)],
             12: [2.0 ** -(h + 1) for h in range(8)] + [2 ** -(h + 0.5) for h in range(4)]}[heads]
    assert torch.allclose(C.alibi_slopes(heads), torch.tensor(paper, dtype=torch.float64))
    S = 6
    bias = _on_grid(E.alibi_score_mod(heads), 1, heads, S, torch.zeros(1, heads, S, S))  # slope_h * (kv - q)
    assert torch.allclose(bias[0, :, 1, 0].double(), -torch.tensor(paper, dtype=torch.float64))
    assert torch.equal(C.alibi_slopes(heads, "formula"), C.alibi_slopes(heads)) == (heads == 8)
