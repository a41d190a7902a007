"""The hidden checks' trusted re-computations agree with torch's own modules and the reference."""
from __future__ import annotations

import torch

import solutions as ref
from autograder.checks import expect
from autograder.checks.self_attention import common
from autograder.checks.self_attention.common import mh_variant, official_output


def test_multihead_recomputation_equals_nn_multihead_attention():
    g = torch.Generator().manual_seed(0)
    w_qkv, w_o = torch.randn(3 * common.D_MODEL, common.D_MODEL, generator=g), torch.randn(
        common.D_MODEL, common.D_MODEL, generator=g)
    x = torch.randn(common.B, common.S, common.D_MODEL, generator=g)
    for mask, causal in ((None, False), (common.lengths_mask(), False), (common.lengths_mask(), True)):
        assert torch.allclose(mh_variant(w_qkv, w_o, x, mask, causal), official_output(w_qkv, w_o, x, mask, causal),
                              atol=1e-4)
        # and a mistake really differs from it
        assert not torch.allclose(mh_variant(w_qkv, w_o, x, mask, causal, order=(1, 0, 2)),
                                  official_output(w_qkv, w_o, x, mask, causal), atol=1e-4)


def test_module_recomputation_equals_reference_module():
    torch.manual_seed(0)
    module = ref.SelfAttention(common.D_MODEL, common.D_K, common.D_V).eval()
    x = torch.randn(common.B, common.S, common.D_MODEL)
    for mask, causal in ((None, False), (common.lengths_mask(), True)):
        with torch.no_grad():
            assert torch.allclose(common.module_forward(module.state_dict(), x, mask, causal), module(x, mask, causal),
                                  atol=1e-6)


def test_diagnose_names_the_matching_mistake_only():
    g = torch.Generator().manual_seed(1)
    Q, K, V = (torch.randn(2, 5, 4, generator=g) for _ in range(3))
    mask = common.lengths_mask()
    mistakes = common.attention_mistakes(Q, K, V, mask, True)
    wrong = common.attention(Q, K, V, mask, True, on="queries")
    assert "hides queries" in str(expect.diagnose(wrong, mistakes))
    assert expect.diagnose(common.attention(Q, K, V, mask, True), mistakes) == ""


def test_ref_mask_helpers_agree_with_reference_masks():
    scores = torch.randn(2, 3, 5, 5)
    mask = common.lengths_mask()
    assert torch.equal(common.mask_scores(scores, mask, True),
                       ref.apply_causal_mask(ref.apply_padding_mask(scores, mask)))


def test_memory_check_bound_sits_between_the_reference_peak_and_one_score_matrix():
    """The long_sequence memory check can pass the reference and must fail whatever holds a whole [B, H, S, S]."""
    from autograder.checks.self_attention import test_long_sequence as ls

    peak = ls.reference_peak()
    bound = ls.ROOM * peak
    assert 0 < peak < bound < ref.attention_matrix_bytes(ls.MEM_B, ls.MEM_H, ls.MEM_S), (peak, bound)


def test_a_mistake_is_named_at_the_checks_own_tolerance():
    """a float16 result that matches a known mistake within the check's 2e-3 (not within 1e-4) is named"""
    from autograder.checks import expect as E

    want = torch.zeros(4, dtype=torch.float16)
    mistake = torch.ones(4, dtype=torch.float16)
    got = (mistake.float() + 3e-3).half()
    try:
        E.close(got, want, "out", atol=2e-3, rtol=2e-3, mistakes={"one key too wide": mistake})
        raise AssertionError("should fail")
    except E.CheckFailure as exc:
        assert "one key too wide" in str(exc.message)


def test_off_by_never_shows_the_largest_float():
    """-inf against -1e10 is off by inf, the same infinity on both sides by 0: never 1.8e+308"""
    from autograder.checks import expect as E

    inf = float("inf")
    assert E.largest_difference(torch.tensor([-1e10, 0.0]), torch.tensor([-inf, 0.0])) == inf
    assert E.largest_difference(torch.tensor([-inf, 1.0]), torch.tensor([-inf, 1.5])) == 0.5
    try:
        E.close(torch.tensor([-1e10, 0.0]), torch.tensor([-inf, 0.0]), "lse")
        raise AssertionError("should fail")
    except E.CheckFailure as exc:
        assert "e+308" not in str(exc.message)
