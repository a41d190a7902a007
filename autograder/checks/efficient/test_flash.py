"""Hidden checks for part flash (assignment efficient): flash_attention, merge_attention.

flash_attention is compared with exact dense attention (float64) at S_q != S_k, block sizes that
divide neither length, causal (bottom-right) and not, half-precision inputs, and its default
blocks; a sweep from the smallest case names the smallest failing one; the memory meter holds it
to a few (block_q x block_k) tiles. merge_attention is compared with attention over the union of
two sets of keys, with scores near 100 and with a side that sees no key (lse = -inf).
"""
import functools

import pytest
import torch

from autograder.foundation import i18n
from autograder.sandbox.batch import Call
from autograder.checks import expect
from autograder.checks.cases import Cases, smallest_failure
from autograder.checks.efficient.common import (BLOCK_K, BLOCK_Q, D_V, NEG_INF, S_K, S_Q, B, H, dense_attention,
                                                flash_variant, merge_variant, mib, qkv, randn, within_memory)
from autograder.worker.meter import LiveMemoryMeter
from solutions import efficient as ref

_ = i18n.message

# (S_q, S_k, block_q, block_k), smallest first: one query, one key, blocks of 1, blocks that divide nothing,
# blocks larger than the sequence, S_q > S_k and S_q < S_k
SWEEP = ((1, 1, 1, 1), (1, 3, 1, 2), (2, 3, 1, 1), (3, 2, 2, 1), (3, 5, 2, 2), (4, 4, 3, 3), (5, 7, 2, 3),
         (6, 4, 4, 3), (7, 9, 4, 2), (9, 9, 16, 16), (6, 13, 5, 4))
HALF_S_Q, HALF_S_K, HALF_BLOCK_K = 9, 300, 33  # long rows: a float16 running sum loses digits
DEFAULT_S_Q, DEFAULT_S_K = 70, 150  # more than one default block (64) on each axis
SPLIT = 7  # merge: keys [0, SPLIT) on side a, the rest on side b


def _flash(g, causal: bool, dtype=torch.float32, S_q: int = S_Q, S_k: int = S_K, block_q: int = BLOCK_Q,
           block_k: int = BLOCK_K, b: int = B, h: int = H, scale: float = 1.0):
    q, k, v = qkv(g, S_q, S_k, dtype=dtype, b=b, h=h, scale=scale)
    return Call("flash_attention", q, k, v, causal=causal, block_q=block_q, block_k=block_k)


def _sides(g, S_q: int = S_Q, shift_a: float = 0.0, shift_b: float = 0.0, empty_a: tuple = (), empty_b: tuple = ()):
    """(out_a, lse_a, out_b, lse_b) of exact attention over keys [0, SPLIT) and [SPLIT, S_K), each side's lse raised
    by its shift (scores near 100: as if that side's scores were shifted), the rows `empty_a` of side a and
    `empty_b` of side b seeing no key there (lse -inf, out anything finite)."""
    q, k, v = qkv(g, S_q, S_K)
    out_a, lse_a = dense_attention(q, k[:, :, :SPLIT], v[:, :, :SPLIT])
    out_b, lse_b = dense_attention(q, k[:, :, SPLIT:], v[:, :, SPLIT:])
    lse_a, lse_b = lse_a + shift_a, lse_b + shift_b
    for rows, out, lse in ((empty_a, out_a, lse_a), (empty_b, out_b, lse_b)):
        for row in rows:
            lse[:, :, row] = NEG_INF
            out[:, :, row] = randn(g, B, H, D_V)  # whatever it holds, it must add nothing
    return (q, k, v), (out_a, lse_a, out_b, lse_b)


def _large(g):
    """q, k, v whose scores reach +-300 in head 0 of the first sequence and stay near 0 elsewhere: one maximum
    shared by every row, or exp without the maximum, underflows or overflows."""
    q, k, v = qkv(g)
    q[0, 0] *= 100.0
    return q, k, v


def _merge(g, **kwargs):
    (q, k, v), sides = _sides(g, **kwargs)
    return Call("merge_attention", *sides)


# Every call of this part but the measured one, in the order of the checks below: one round trip.
CALLS = Cases("efficient flash", {
    "plain": lambda g: _flash(g, False),
    "causal": lambda g: _flash(g, True),
    "causal more queries": lambda g: _flash(g, True, S_q=S_K, S_k=S_Q),
    "half": lambda g: _flash(g, False, torch.float16, HALF_S_Q, HALF_S_K, 4, HALF_BLOCK_K, scale=0.3),
    "defaults": lambda g: Call("flash_attention", *qkv(g, DEFAULT_S_Q, DEFAULT_S_K, dtype=torch.float64), causal=True),
    "large scores": lambda g: Call("flash_attention", *_large(g), causal=True, block_q=BLOCK_Q, block_k=BLOCK_K),
    **{("sweep", case, causal): (lambda g, c=case, causal=causal: _flash(g, causal, S_q=c[0], S_k=c[1], block_q=c[2],
                                                                         block_k=c[3], b=2, h=2))
       for case in SWEEP for causal in (False, True)},
    "merge": lambda g: _merge(g),
    "merge large": lambda g: _merge(g, shift_a=10.0, shift_b=100.0),
    "merge empty side": lambda g: _merge(g, empty_a=(0, 3, 6), empty_b=(4, 6)),
})


def pair(value, what) -> tuple[torch.Tensor, torch.Tensor]:
    """The (out, lse) a function returned, or a failure that says what came back instead."""
    if not (isinstance(value, tuple) and len(value) == 2):
        kind = type(value).__name__ + (f" of {len(value)}" if isinstance(value, (tuple, list)) else "")
        raise expect.CheckFailure(_("{what} should return a tuple (out, lse), got {kind}").format(what=what, kind=kind))
    return value


def flash_mistakes(q, k, v, causal, block_q, block_k, item: int) -> dict:
    """{hint: the student's out (item 0) or lse (item 1) had they made that mistake}."""
    def variant(**kw):
        return lambda: flash_variant(q, k, v, causal, block_q, block_k, **kw)[item]

    mistakes = {
        _("when the running maximum grows, the running sum of exponentials must be rescaled by exp(m_old - "
          "m_new), as the output is: you did not rescale the running sum"): variant(rescale_sum=False),
        _("when the running maximum grows, the unnormalised output must be rescaled by exp(m_old - m_new): "
          "you did not rescale the running output"): variant(rescale_out=False),
        _("neither the running sum nor the output is rescaled by exp(m_old - m_new) when the running maximum "
          "grows"): variant(rescale_sum=False, rescale_out=False),
        _("lse is the log-sum-exp of the scores, m + log(sum of exp(s - m)): you returned log(sum) without "
          "adding the running maximum m back"): variant(lse_max=False),
        _("the output is the running output divided by the running sum, at the end of the key blocks: you "
          "did not divide"): variant(normalise=False),
        _("you accumulated in float16: keep the running maximum, sum and output in float32 (q.float()) and "
          "cast only the output back to q's dtype"): variant(acc=torch.float16),
        _("the scores are scaled by 1 / sqrt(D), D = q.shape[-1]"): lambda: dense_attention(q, k, v, causal,
                                                                                           scale=1.0)[item],
    }
    if causal:
        mistakes = {
            _("your causal mask is top-left aligned (key j <= query i): with S_q != S_k the queries are the last "
              "S_q of S_k positions, so query i sees keys j <= i + S_k - S_q (bottom-right)"):
                variant(align="top_left"),
            _("you skipped key blocks that later queries of the block can see: a query block [i0, i1) sees keys up "
              "to i1 - 1 + S_k - S_q; skip only the blocks after that"): variant(skip="first"),
            _("each query must also see its own position: j <= i + S_k - S_q, not <"):
                lambda: dense_attention(q, k, v, True, diagonal=False)[item],
        } | mistakes
    return mistakes


def telling(mistakes: dict, want: torch.Tensor) -> dict:
    """The mistakes whose result differs from the right one: a mistake that changes out but not lse (or the
    reverse) cannot explain a wrong lse (or out)."""
    def unless_right(produce):
        def produced():
            value = produce()
            return None if expect.same(value, want, atol=1e-5, rtol=1e-5) else value
        return produced

    return {hint: unless_right(produce) for hint, produce in mistakes.items()}


def check_flash(call, value, what, atol: float = 1e-5, rtol: float = 1e-4, lse_atol: float = 1e-4) -> None:
    """The student's (out, lse) against exact attention, each mistake named."""
    q, k, v = call.args
    causal, block_q, block_k = (call.kwargs.get(n, d) for n, d in (("causal", False), ("block_q", 64),
                                                                   ("block_k", 64)))
    out, lse = pair(value, what)
    want_out, want_lse = dense_attention(q, k, v, causal)
    seen = want_lse > NEG_INF  # a query that sees no key: its out is not graded
    out = expect.tensor(out, _("{what}: out").format(what=what))
    if out.shape == want_out.shape and out.dtype == want_out.dtype:
        out = torch.where(seen[..., None], out, want_out)
    expect.close(out, want_out, _("{what}: out").format(what=what), atol=atol, rtol=rtol,
                 mistakes=telling(flash_mistakes(q, k, v, causal, block_q, block_k, 0), want_out))
    lse = expect.tensor(lse, _("{what}: lse").format(what=what))
    if lse.dtype != torch.float32:
        raise expect.CheckFailure(_("{what}: lse has dtype {dtype}, expected torch.float32 (the log-sum-exp is kept "
                                    "in float32 whatever the inputs' dtype)").format(what=what, dtype=lse.dtype))
    blind = ~seen & (lse > NEG_INF) if lse.shape == want_lse.shape else torch.zeros((), dtype=torch.bool)
    if blind.any():
        raise expect.CheckFailure(_("{what}: lse: a query that sees no key must have lse -inf (the log of an empty "
                                    "sum), got {got}: a large negative constant such as -1e10 is not -inf").format(
            what=what, got=f"{lse[blind][0].item():.3g}"))
    expect.close(lse, want_lse, _("{what}: lse").format(what=what), atol=lse_atol, rtol=1e-4,
                 mistakes=telling(flash_mistakes(q, k, v, causal, block_q, block_k, 1), want_lse))


def flash_what(call) -> str:
    q, k, v = call.args
    return "flash_attention(q [{q}], k [{k}], v [{v}], causal={c}, block_q={bq}, block_k={bk})".format(
        q=", ".join(map(str, q.shape)), k=", ".join(map(str, k.shape)), v=", ".join(map(str, v.shape)),
        c=call.kwargs.get("causal", False), bq=call.kwargs.get("block_q", 64), bk=call.kwargs.get("block_k", 64))


@pytest.mark.points(3)
@pytest.mark.parametrize("case", ["plain", "causal"])
def test_flash_attention_equals_exact_attention(student, case):
    """flash_attention's out and lse equal exact attention at S_q != S_k, with blocks that divide neither length"""
    call, outcome = CALLS.get(student, case)
    check_flash(call, expect.value(outcome), flash_what(call))


@pytest.mark.points(1)
def test_flash_attention_with_more_queries_than_keys(student):
    """causal flash_attention with S_q > S_k: the first S_q - S_k queries see no key (lse -inf), the others are exact"""
    call, outcome = CALLS.get(student, "causal more queries")
    what = flash_what(call)
    out, lse = pair(expect.value(outcome), what)
    lse = expect.tensor(lse, _("{what}: lse").format(what=what))
    blind = S_K - S_Q  # the queries before the first key (the call swaps the lengths: S_q = S_K, S_k = S_Q)
    if lse.shape == (B, H, S_K) and not torch.all(lse[..., :blind] == NEG_INF):
        raise expect.CheckFailure(_("{what}: the first {n} queries see no key, so their lse must be -inf (log of an "
                                    "empty sum), got {got}").format(what=what, n=blind,
                                                                    got=lse[0, 0, :blind].tolist()))
    check_flash(call, (out, lse), what)


@pytest.mark.points(2)
def test_flash_attention_accumulates_half_inputs_in_float32(student):
    """flash_attention on float16 inputs returns out in float16 and lse in float32, accumulated in float32"""
    call, outcome = CALLS.get(student, "half")
    check_flash(call, expect.value(outcome), flash_what(call), atol=2e-3, rtol=2e-3, lse_atol=1e-3)


@pytest.mark.points(1)
def test_flash_attention_with_large_scores_in_one_head(student):
    """flash_attention is exact when one head's scores reach +-300 and the others' stay small (a maximum per query row)"""
    call, outcome = CALLS.get(student, "large scores")
    check_flash(call, expect.value(outcome), flash_what(call), atol=1e-4, rtol=1e-4, lse_atol=1e-3)


@pytest.mark.points(1)
def test_flash_attention_with_its_default_blocks(student):
    """flash_attention(q, k, v, causal=True) with the default blocks of 64 is exact in float64 when S spans several blocks, lse in float32"""
    call, outcome = CALLS.get(student, "defaults")
    check_flash(call, expect.value(outcome), flash_what(call))


@pytest.mark.points(2)
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_flash_attention_for_every_shape_and_block(student, causal):
    """flash_attention is exact from one query and one key up, for blocks of every size (the smallest failing case named)"""
    def check(case):
        call, outcome = CALLS.get(student, ("sweep", case, causal))
        check_flash(call, expect.value(outcome), flash_what(call))

    smallest_failure([("S_q={}, S_k={}, block_q={}, block_k={}".format(*case), case) for case in SWEEP], check)


# The memory check's sizes: one [B, H, S_q, S_k] float32 score matrix is 6 MiB, one block of queries against
# every key 2 MiB, one (block_q x block_k) tile 128 KiB, q, k and v together 0.55 MiB. The meter counts only new
# storage (not the inputs, nor views of them): the reference holds 0.58 MiB (its output, lse and about four tiles),
# so the bound, 1.58 MiB, lets a student copy q, k and v once and hold twice the reference's tiles, yet stays below
# the scores of one block of queries against every key, which any implementation that is not tiled must hold.
MEM_B, MEM_H, MEM_S_Q, MEM_S_K, MEM_D, MEM_BLOCK_Q, MEM_BLOCK_K = 2, 4, 192, 1024, 8, 64, 64
ROOM = 8  # the bound is the reference's peak plus ROOM tiles of scores


def memory_inputs():
    g = torch.Generator().manual_seed(7)
    return qkv(g, MEM_S_Q, MEM_S_K, b=MEM_B, h=MEM_H, d=MEM_D, d_v=MEM_D)


def memory_call(q, k, v) -> tuple:
    return (q, k, v), {"causal": True, "block_q": MEM_BLOCK_Q, "block_k": MEM_BLOCK_K}


@functools.lru_cache(maxsize=1)
def reference_peak() -> int:
    args, kwargs = memory_call(*memory_inputs())
    with torch.no_grad(), LiveMemoryMeter() as meter:
        ref.flash_attention(*args, **kwargs)
    return meter.peak_bytes


@functools.lru_cache(maxsize=1)
def expected_output():
    return dense_attention(*memory_inputs(), causal=True)


def prepare() -> None:
    """The memory check's reference figures, once per grading process (check.Checks.prepare)."""
    reference_peak()
    expected_output()


@pytest.mark.points(4)
def test_flash_attention_memory(student):
    """flash_attention holds a few (block_q x block_k) tiles of scores at once, never a block of queries against every key"""
    args, kwargs = memory_call(*memory_inputs())
    run = student.call_measured("flash_attention", *args, **kwargs)
    what = "flash_attention at B={b}, H={h}, S_q={sq}, S_k={sk}, block_q={bq}, block_k={bk}, causal=True".format(
        b=MEM_B, h=MEM_H, sq=MEM_S_Q, sk=MEM_S_K, bq=MEM_BLOCK_Q, bk=MEM_BLOCK_K)
    out, lse = pair(run.value, what)
    want_out, want_lse = expected_output()
    expect.close(out, want_out, _("{what}: out").format(what=what), atol=1e-4, rtol=1e-3)
    tile = MEM_B * MEM_H * MEM_BLOCK_Q * MEM_BLOCK_K * 4
    rows = MEM_B * MEM_H * MEM_BLOCK_Q * MEM_S_K * 4
    full = MEM_B * MEM_H * MEM_S_Q * MEM_S_K * 4
    bound = reference_peak() + ROOM * tile  # below `rows`: tests/test_efficient_checks_helpers.py
    sizes = _("the bound is {bound} (a tiled implementation's {peak}, its output included, plus {room} tiles); "
              "one float32 tile of scores [B, H, block_q, block_k] is {tile}, a block of queries against every key "
              "[B, H, block_q, S_k] {rows}, the whole score matrix [B, H, S_q, S_k] {full}").format(
        bound=mib(bound), room=ROOM, peak=mib(reference_peak()), tile=mib(tile), rows=mib(rows), full=mib(full))
    within_memory(run, what, "flash_attention", bound, sizes, _(
        "loop over key blocks inside each query block and keep only a running maximum, sum and output per query"))


# --------------------------------------------------------------------------- #
# merge_attention
# --------------------------------------------------------------------------- #


def merge_mistakes(sides, item: int) -> dict:
    def variant(kind):
        return lambda: merge_variant(*sides, kind=kind)[item]

    return {
        _("exp(lse) overflows float32 once lse passes 88: subtract the larger lse before exponentiating (weights "
          "exp(lse_a - lse), exp(lse_b - lse))"): variant("naive"),
        _("the merged lse is log(exp(lse_a) + exp(lse_b)) (torch.logaddexp), not the larger of the two"):
            variant("max"),
        _("each side's output is already normalised: weight it by exp(lse_side - lse), which sum to 1; you did not "
          "divide by the total"): variant("unnormalised"),
        _("the two outputs are not averaged: each side counts as much as its share of the exponentials, "
          "exp(lse_side - lse)"): variant("average"),
        _("lse_a + log1p(exp(lse_b - lse_a)) is NaN when lse_a is -inf (a side that sees no key): take the larger "
          "lse as the reference point, with -inf sides weighted 0"): variant("asymmetric"),
        _("where both sides' lse is -inf (no key on either side) the merged lse must be -inf, the log of an empty "
          "sum: the larger lse is -inf there too, and -inf - (-inf) is NaN; subtract 0 where both are -inf"):
            variant("both_empty_nan"),
    }


def check_merge(call, value, what: str) -> None:
    sides = call.args
    out, lse = pair(value, what)
    want_out, want_lse = merge_variant(*sides)
    out = expect.tensor(out, _("{what}: out").format(what=what))
    if out.shape == want_out.shape and out.dtype == want_out.dtype:  # a query that sees no key at all: out not graded
        out = torch.where((want_lse == NEG_INF)[..., None], want_out, out)
    expect.close(out, want_out, _("{what}: out").format(what=what), atol=1e-5, rtol=1e-4,
                 mistakes=merge_mistakes(sides, 0))
    expect.close(lse, want_lse, _("{what}: lse").format(what=what), atol=1e-5, rtol=1e-5,
                 mistakes=merge_mistakes(sides, 1))


@pytest.mark.points(2)
def test_merge_attention_equals_attention_over_both_sets_of_keys(student):
    """merge_attention of the attention over keys [0, 7) and over the other keys equals attention over all of them"""
    call, outcome = CALLS.get(student, "merge")
    check_merge(call, expect.value(outcome), "merge_attention")


@pytest.mark.points(1.5)
def test_merge_attention_with_scores_near_100(student):
    """merge_attention is exact when one side's lse is near 10 and the other's near 100 (exp(lse) overflows float32)"""
    call, outcome = CALLS.get(student, "merge large")
    check_merge(call, expect.value(outcome), _("merge_attention with lse_a near 10 and lse_b near 100"))


@pytest.mark.points(1.5)
def test_merge_attention_with_a_side_that_sees_no_key(student):
    """merge_attention: a side whose lse is -inf (a query that sees no key there) contributes nothing; lse is -inf where both are"""
    call, outcome = CALLS.get(student, "merge empty side")
    check_merge(call, expect.value(outcome), _("merge_attention with lse_a = -inf on queries 0, 3 and 6, lse_b = -inf on queries 4 and 6"))
