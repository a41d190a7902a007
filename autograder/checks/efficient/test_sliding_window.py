"""Hidden checks for part sliding_window (assignment efficient): sliding_window_mask, sliding_window_attention.

The mask is compared with i - window < j <= i over lengths and windows from the smallest up (a
window of 1, a window longer than the sequence); the attention with dense attention under that
mask, for chunk sizes that divide S and that do not, windows that cross chunk boundaries, and
float16 inputs; the memory meter holds it to S x window, not S^2.
"""
import functools

import pytest
import torch

from autograder.foundation import i18n, spec
from autograder.sandbox.batch import Call
from autograder.checks import expect, lent
from autograder.checks.cases import Cases, smallest_failure
from autograder.checks.efficient.common import S, B, H, masked_attention, mib, qkv, sliding_variant, \
    window_mask_variant, within_memory
from autograder.worker.meter import LiveMemoryMeter
from solutions import efficient as ref

_ = i18n.message

# (S, window), smallest first: a window of 1 (each query alone), of 2, longer than the sequence
MASK_SWEEP = ((1, 1), (2, 1), (2, 2), (3, 2), (4, 3), (5, 1), (5, 9), (7, 3), (9, 4))
# (S, window, chunk_size), smallest first: chunks of 1, chunks that divide S and that do not, windows shorter,
# equal to and longer than a chunk, one chunk for the whole sequence
ATTENTION_SWEEP = ((1, 1, 1), (2, 1, 1), (3, 2, 1), (4, 2, 2), (5, 3, 2), (6, 4, 3), (7, 2, 3), (9, 5, 4),
                   (10, 3, 16), (13, 6, 4), (13, 20, 5))
WINDOW, CHUNK = 4, 3  # the main case: S = 13 is no multiple of 3, and a window of 4 reaches into the previous chunk


def _attention(g, S_: int = S, window: int = WINDOW, chunk: int = CHUNK, dtype=torch.float32, b: int = B,
               h: int = H):
    q, k, v = qkv(g, S_, S_, dtype=dtype, b=b, h=h)
    return Call("sliding_window_attention", q, k, v, window, chunk_size=chunk)


# The mask's calls, in the order of its checks below: one round trip, sent before anything is lent (the mask's checks
# come first in this file, so that they call the student's own mask).
MASK_CALLS = Cases("efficient sliding_window mask", {
    "mask": lambda g: Call("sliding_window_mask", 9, 4),
    **{("mask sweep", case): (lambda g, c=case: Call("sliding_window_mask", *c)) for case in MASK_SWEEP},
})

PART = spec.EFFICIENT.part("sliding_window")


def lend_the_mask(student) -> None:
    """From now on in this part, the attention runs with the grader's sliding_window_mask in place of a wrong one
    (Part.borrows): an off-by-one mask that the attention reuses costs the mask's checks, not the attention's. The
    mask's own checks already called it (MASK_CALLS): their results are the verdict, no probe is sent."""
    def judged():
        calls = [MASK_CALLS.get(student, key) for key in ["mask", *(("mask sweep", case) for case in MASK_SWEEP)]]
        return lent.judged_from({"sliding_window_mask": calls}, ref)

    lent.lending(student, "sliding_window_attention", PART, ref, {}, judged=judged)


# The attention's calls but the measured one, in the order of the checks below: one round trip.
CALLS = Cases("efficient sliding_window", {
    "attention": lambda g: _attention(g),
    "half": lambda g: _attention(g, dtype=torch.float16),
    "default chunk": lambda g: Call("sliding_window_attention", *qkv(g, 300, 300, d=4, d_v=3, b=1, h=2), 100),
    **{("sweep", case): (lambda g, c=case: _attention(g, *c, b=2, h=2)) for case in ATTENTION_SWEEP},
})


def mask_mistakes(S_: int, window: int) -> dict:
    def variant(kind):
        return lambda: window_mask_variant(S_, window, kind)

    return {
        _("your window is one key too wide: query i sees itself and the window - 1 keys before it, "
          "i - window < j <= i"): variant("wide"),
        _("your window is one key too narrow: query i sees itself and the window - 1 keys before it, "
          "i - window < j <= i"): variant("narrow"),
        _("your window also looks ahead: it must be causal, j <= i, with i - window < j"): variant("two_sided"),
        _("your mask is transposed: rows are queries i, columns keys j, True where i - window < j <= i"):
            variant("transposed"),
    }


def check_mask(outcome, S_: int, window: int) -> None:
    what = "sliding_window_mask({S}, {w})".format(S=S_, w=window)
    got = expect.shape(expect.value(outcome), (S_, S_), what)
    if got.dtype != torch.bool:
        raise expect.CheckFailure(_("{what} returned dtype {dtype}, expected torch.bool (True = may attend)").format(
            what=what, dtype=got.dtype))
    expect.close(got, window_mask_variant(S_, window), what, mistakes=mask_mistakes(S_, window))


@pytest.mark.points(2)
def test_sliding_window_mask(student):
    """sliding_window_mask(9, 4) is a [9, 9] bool mask, True where i - 4 < j <= i"""
    check_mask(MASK_CALLS.get(student, "mask")[1], 9, 4)


@pytest.mark.points(1)
def test_sliding_window_mask_for_every_length_and_window(student):
    """sliding_window_mask is right from S = 1 up, for windows of 1 and windows longer than S (the smallest failing case named)"""
    smallest_failure([("S={}, window={}".format(*case), case) for case in MASK_SWEEP],
                     lambda case: check_mask(MASK_CALLS.get(student, ("mask sweep", case))[1], *case))


def attention_mistakes(q, k, v, window: int, chunk: int) -> dict:
    def variant(kind):
        return lambda: sliding_variant(q, k, v, window, chunk, kind)

    return {
        _("each chunk of queries must also read the window - 1 keys before the chunk starts: you read only the "
          "chunk's own keys"): variant("own_chunk"),
        _("your window is one key too wide: query i sees keys i - window < j <= i"): variant("wide"),
        _("your window is one key too narrow: query i sees itself and the window - 1 keys before it"):
            variant("narrow"),
        _("your window also looks ahead: sliding-window attention is causal, j <= i"): variant("two_sided"),
        _("the scores are scaled by 1 / sqrt(D), D = q.shape[-1]"):
            lambda: masked_attention(q, k, v, window_mask_variant(q.shape[-2], window), scale=1.0)[0],
    }


def check_attention(call, outcome, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    q, k, v, window = call.args
    chunk = call.kwargs.get("chunk_size", 128)
    what = "sliding_window_attention(q, k, v [{shape}], window={w}, chunk_size={c})".format(
        shape=", ".join(map(str, q.shape)), w=window, c=chunk)
    want = sliding_variant(q, k, v, window, chunk)
    expect.close(expect.value(outcome), want, what, atol=atol, rtol=rtol,
                 mistakes=attention_mistakes(q, k, v, window, chunk))


@pytest.mark.points(3)
def test_sliding_window_attention_equals_masked_attention(student):
    """sliding_window_attention equals full attention masked with sliding_window_mask (S = 13, window = 4, chunk_size = 3)"""
    lend_the_mask(student)
    call, outcome = CALLS.get(student, "attention")
    check_attention(call, outcome)


@pytest.mark.points(1)
def test_sliding_window_attention_on_half_inputs(student):
    """sliding_window_attention on float16 inputs returns float16, close to exact attention"""
    lend_the_mask(student)
    call, outcome = CALLS.get(student, "half")
    check_attention(call, outcome, atol=2e-3, rtol=2e-3)


@pytest.mark.points(1)
def test_sliding_window_attention_with_its_default_chunk(student):
    """sliding_window_attention(q, k, v, window=100) with its default chunk_size (128) is exact at S = 300"""
    lend_the_mask(student)
    call, outcome = CALLS.get(student, "default chunk")
    check_attention(call, outcome)


@pytest.mark.points(2)
def test_sliding_window_attention_for_every_shape(student):
    """sliding_window_attention is exact from S = 1 up, for chunks and windows of every size (the smallest failing case named)"""
    lend_the_mask(student)
    def check(case):
        call, outcome = CALLS.get(student, ("sweep", case))
        check_attention(call, outcome)

    smallest_failure([("S={}, window={}, chunk_size={}".format(*case), case) for case in ATTENTION_SWEEP], check)


# The memory check's sizes: [B, H, S, S] float32 scores are 32 MiB; one chunk against every key 1 MiB; one chunk
# against the keys it can see [B, H, chunk, chunk + window - 1] about 80 KiB.
MEM_B, MEM_H, MEM_S, MEM_D, MEM_WINDOW, MEM_CHUNK = 2, 4, 1024, 8, 48, 32
ROOM = 4  # the bound is the reference's peak plus ROOM chunks of scores


def memory_inputs():
    g = torch.Generator().manual_seed(11)
    return qkv(g, MEM_S, MEM_S, b=MEM_B, h=MEM_H, d=MEM_D, d_v=MEM_D)


@functools.lru_cache(maxsize=1)
def reference_peak() -> int:
    with torch.no_grad(), LiveMemoryMeter() as meter:
        ref.sliding_window_attention(*memory_inputs(), MEM_WINDOW, chunk_size=MEM_CHUNK)
    return meter.peak_bytes


@functools.lru_cache(maxsize=1)
def expected_output() -> torch.Tensor:
    q, k, v = memory_inputs()
    return masked_attention(q, k, v, window_mask_variant(MEM_S, MEM_WINDOW))[0]


def prepare() -> None:
    """The memory check's reference figures, once per grading process (check.Checks.prepare)."""
    reference_peak()
    expected_output()


@pytest.mark.points(3)
def test_sliding_window_attention_memory(student):
    """sliding_window_attention reads only the keys each chunk can see: memory grows as S x window, not S^2"""
    lend_the_mask(student)
    run = student.call_measured("sliding_window_attention", *memory_inputs(), MEM_WINDOW, chunk_size=MEM_CHUNK)
    what = "sliding_window_attention at B={b}, H={h}, S={s}, window={w}, chunk_size={c}".format(
        b=MEM_B, h=MEM_H, s=MEM_S, w=MEM_WINDOW, c=MEM_CHUNK)
    expect.close(run.value, expected_output(), what, atol=1e-4, rtol=1e-3)
    seen = MEM_B * MEM_H * MEM_CHUNK * (MEM_CHUNK + MEM_WINDOW - 1) * 4
    every = MEM_B * MEM_H * MEM_CHUNK * MEM_S * 4
    full = MEM_B * MEM_H * MEM_S * MEM_S * 4
    bound = reference_peak() + ROOM * seen  # below 2 x `every`: tests/test_efficient_checks_helpers.py
    sizes = _("the bound is {bound} (a chunked implementation's {peak}, inputs and output included, plus {room} "
              "chunks of scores); the scores of one chunk against the keys it can see [B, H, chunk_size, chunk_size "
              "+ window - 1] are {seen} in float32, one chunk against every key {every}, the whole [B, H, S, S] "
              "matrix {full}").format(bound=mib(bound), room=ROOM, peak=mib(reference_peak()), seen=mib(seen),
                                      every=mib(every), full=mib(full))
    within_memory(run, what, "sliding_window_attention", bound, sizes, _(
        "for the chunk of queries [i0, i1) read only the keys [max(0, i0 - window + 1), i1)"))
