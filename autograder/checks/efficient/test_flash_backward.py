"""Hidden checks for part flash_backward (assignment efficient): flash_attention_backward, FlashAttentionFunction.

flash_attention_backward gets exact attention's out and lse and is compared with autograd through dense attention
in float64: S_q != S_k both ways, blocks that divide neither length, causal (bottom-right) and not, D != D_v,
float64 and float16 inputs, its default blocks, queries that see no key (zero gradient, no NaN), and a sweep from
the smallest case. Skipping the tiles a causal query block cannot see saves work and is not graded, as in part
flash (a loop that computes and masks every tile gives the same gradients: catalogue case ok_bwd_no_skipping).
The memory meter holds it to a few (block_q x block_k) tiles, as flash_attention. FlashAttentionFunction runs as
training runs it (apply, then backward, in the worker: standins.autograd_function_gradients): its out and
gradients must be those of the student's own flash_attention and flash_attention_backward (so that a mistake of
part flash costs points there only), and what its forward keeps for backward must be linear in S.
"""
import functools

import pytest
import torch

from autograder.foundation import i18n
from autograder.sandbox.batch import Call, Outcome
from autograder.checks import expect
from autograder.checks.cases import Ran, seeded, smallest_failure
from autograder.checks.efficient.backward import (GRADIENTS, arguments, backward_mistakes, backward_what,
                                                  exact_gradients, triple, within_float16_error)
from autograder.checks.efficient.common import (BLOCK_K, BLOCK_Q, NEG_INF, S_K, S_Q, dense_attention, mib, qkv,
                                                randn, within_memory)
from autograder.worker.meter import LiveMemoryMeter
from solutions import efficient as ref

_ = i18n.message

# (S_q, S_k, block_q, block_k), smallest first: one query and one key, blocks of 1, blocks that divide nothing,
# blocks larger than the sequence, S_q > S_k and S_q < S_k
SWEEP = ((1, 1, 1, 1), (1, 3, 1, 2), (2, 3, 1, 1), (3, 2, 2, 1), (3, 5, 2, 2), (5, 7, 2, 3), (6, 4, 4, 3),
         (9, 9, 16, 16), (6, 13, 5, 4))
HALF_S_Q, HALF_S_K, HALF_BLOCK_K = 9, 300, 33  # long rows: float16 sums over 300 keys lose digits
# many query blocks per key block: grad_k and grad_v summed over 128 of them; a float16 running sum there is about
# 10 times further from the truth than the reference's float32 sum, cast once at the end
MANY_S_Q, MANY_S_K, MANY_BLOCK_Q, MANY_BLOCK_K = 512, 16, 4, 16
DEFAULT_S_Q, DEFAULT_S_K = 70, 150  # more than one default block (64) on each axis


def backward_call(g, causal: bool, dtype=torch.float32, S_q: int = S_Q, S_k: int = S_K, block_q: int | None = BLOCK_Q,
                  block_k: int | None = BLOCK_K, b: int = 2, h: int = 3, scale: float = 1.0) -> Call:
    """flash_attention_backward on q, k, v, the exact (out, lse) and a random grad_out; blocks None: the defaults."""
    q, k, v = qkv(g, S_q, S_k, dtype=dtype, b=b, h=h, scale=scale)
    out, lse = dense_attention(q, k, v, causal)
    grad_out = randn(g, *out.shape, dtype=dtype)
    blocks = {} if block_q is None else {"block_q": block_q, "block_k": block_k}
    return Call("flash_attention_backward", q, k, v, out, lse, grad_out, causal=causal, **blocks)


TABLE = {
    "plain": lambda g: backward_call(g, False),
    "causal": lambda g: backward_call(g, True),
    "plain more queries": lambda g: backward_call(g, False, S_q=S_K, S_k=S_Q),
    "causal more queries": lambda g: backward_call(g, True, S_q=S_K, S_k=S_Q),
    "half": lambda g: backward_call(g, False, torch.float16, HALF_S_Q, HALF_S_K, 4, HALF_BLOCK_K, scale=0.3),
    "half many queries": lambda g: backward_call(g, False, torch.float16, MANY_S_Q, MANY_S_K, MANY_BLOCK_Q,
                                                 MANY_BLOCK_K, scale=0.3),
    "defaults": lambda g: backward_call(g, True, torch.float64, DEFAULT_S_Q, DEFAULT_S_K, None, None),
    **{("sweep", case, causal): (lambda g, c=case, causal=causal: backward_call(
        g, causal, S_q=c[0], S_k=c[1], block_q=c[2], block_k=c[3], b=2, h=2))
       for case in SWEEP for causal in (False, True)},
}


def check_gradients(call, value, what, atol: float = 1e-4, rtol: float = 1e-4):
    """The student's (grad_q, grad_k, grad_v) against autograd through exact attention, each mistake named."""
    args = arguments(call)
    q, k, v, out, lse, grad_out, causal = args[:7]
    got = triple(value, what)
    want = exact_gradients(q, k, v, grad_out, causal)
    blind = lse == NEG_INF  # [B, H, S_q]: queries that see no key
    for item, (name, grad, truth, like) in enumerate(zip(GRADIENTS, got, want, (q, k, v))):
        label = _("{what}: {name}").format(what=what, name=name)
        grad = expect.tensor(grad, label)
        if grad.shape == like.shape and grad.is_floating_point() and torch.isnan(grad).any():
            raise expect.CheckFailure(nan_message(label, grad, blind, item))
        expect.close(grad, truth.to(like.dtype), label, atol=atol, rtol=rtol,
                     mistakes=backward_mistakes(args, item))


def nan_message(label: str, grad: torch.Tensor, blind: torch.Tensor, item: int) -> str:
    """Why a gradient holds NaN: at the queries that see no key (lse = -inf) when that is where they are."""
    if blind.any() and not torch.isnan(grad.transpose(0, 2)[~blind.transpose(0, 2)] if item == 0 else grad[:0]).any():
        return _("{label} holds NaN: a query that sees no key has lse = -inf, and exp(-inf - (-inf)) is NaN; such "
                 "a query contributes zero to every gradient (replace its lse by +inf, or skip it)").format(
            label=label)
    return _("{label} holds NaN").format(label=label)


@pytest.mark.points(3)
@pytest.mark.parametrize("case", ["plain", "causal"])
def test_backward_equals_autograd_through_exact_attention(student, case):
    """flash_attention_backward's gradients equal autograd through exact attention at S_q != S_k and D != D_v, with blocks that divide neither length"""
    call, outcome = case_of(student, case)
    check_gradients(call, expect.value(outcome), backward_what(call))


@pytest.mark.points(1)
def test_backward_with_more_queries_than_keys(student):
    """flash_attention_backward with S_q > S_k, plain and causal: a query that sees no key has grad_q 0 and adds nothing (no NaN)"""
    for case in ("plain more queries", "causal more queries"):
        call, outcome = case_of(student, case)
        check_gradients(call, expect.value(outcome), backward_what(call))


def gradients_in_dtype(call, outcome, dtype: torch.dtype) -> tuple:
    """The three gradients of a backward call, each checked to be in its inputs' `dtype`."""
    got = triple(expect.value(outcome), backward_what(call))
    for name, grad in zip(GRADIENTS, got):
        if isinstance(grad, torch.Tensor) and grad.dtype != dtype:
            raise expect.CheckFailure(_("{what}: {name} has dtype {dtype}, expected {expected} (each gradient in its "
                                        "input's dtype)").format(what=backward_what(call), name=name,
                                                                 dtype=grad.dtype, expected=dtype))
    return got


@pytest.mark.points(2)
def test_backward_accumulates_half_inputs_in_float32(student):
    """flash_attention_backward on float16 inputs returns float16 gradients, accumulated in float32"""
    call, outcome = case_of(student, "half")
    got = gradients_in_dtype(call, outcome, torch.float16)
    check_gradients(call, got, backward_what(call), atol=4e-5, rtol=2e-3)  # float16 sums lose 1e-4 here
    call, outcome = case_of(student, "half many queries")
    within_float16_error(call, gradients_in_dtype(call, outcome, torch.float16))


@pytest.mark.points(1)
def test_backward_with_its_default_blocks(student):
    """flash_attention_backward(..., causal=True) with the default blocks of 64 matches autograd on float64 inputs to 1e-5 (the lse is float32) when S spans several blocks"""
    call, outcome = case_of(student, "defaults")
    got = gradients_in_dtype(call, outcome, torch.float64)
    check_gradients(call, got, backward_what(call), atol=1e-5, rtol=1e-5)


@pytest.mark.points(2)
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_backward_for_every_shape_and_block(student, causal):
    """flash_attention_backward is exact from one query and one key up, for blocks of every size (the smallest failing case named)"""
    def check(case):
        call, outcome = case_of(student, ("sweep", case, causal))
        check_gradients(call, expect.value(outcome), backward_what(call))

    smallest_failure([("S_q={}, S_k={}, block_q={}, block_k={}".format(*case), case) for case in SWEEP], check)


# The memory check's sizes, those of flash_attention's: one [B, H, S_q, S_k] float32 matrix is 6 MiB, one block of
# queries against every key 2 MiB, one (block_q x block_k) tile 128 KiB.
MEM_B, MEM_H, MEM_S_Q, MEM_S_K, MEM_D, MEM_BLOCK_Q, MEM_BLOCK_K = 2, 4, 192, 1024, 8, 64, 64
ROOM = 8  # the bound is the reference's peak plus ROOM tiles


def memory_call():
    g = torch.Generator().manual_seed(7)
    q, k, v = qkv(g, MEM_S_Q, MEM_S_K, b=MEM_B, h=MEM_H, d=MEM_D, d_v=MEM_D)
    out, lse = dense_attention(q, k, v, causal=True)
    grad_out = randn(g, *out.shape)
    return (q, k, v, out, lse, grad_out), {"causal": True, "block_q": MEM_BLOCK_Q, "block_k": MEM_BLOCK_K}


@functools.lru_cache(maxsize=1)
def reference_peak() -> int:
    args, kwargs = memory_call()
    with torch.no_grad(), LiveMemoryMeter() as meter:
        ref.flash_attention_backward(*args, **kwargs)
    return meter.peak_bytes


@functools.lru_cache(maxsize=1)
def expected_gradients():
    (q, k, v, out, lse, grad_out), _kwargs = memory_call()
    return exact_gradients(q, k, v, grad_out, True)


# FlashAttentionFunction: B, H, S, D of the run through autograd; what its forward may keep is ROOM_SAVED x what
# q, k, v, out and lse take (the probabilities [B, H, S, S] are 16 times that at S = 512)
FN_B, FN_H, FN_S, FN_D = 1, 2, 512, 8
ROOM_SAVED = 2


def prepare() -> None:
    """The memory check's reference figures, once per grading process (check.Checks.prepare)."""
    reference_peak()
    expected_gradients()


@pytest.mark.points(3)
def test_backward_memory(student):
    """flash_attention_backward holds a few (block_q x block_k) tiles of probabilities at once, as the forward does, never a block of queries against every key"""
    args, kwargs = memory_call()
    run = student.call_measured("flash_attention_backward", *args, **kwargs)
    what = ("flash_attention_backward at B={b}, H={h}, S_q={sq}, S_k={sk}, block_q={bq}, block_k={bk}, "
            "causal=True").format(b=MEM_B, h=MEM_H, sq=MEM_S_Q, sk=MEM_S_K, bq=MEM_BLOCK_Q, bk=MEM_BLOCK_K)
    got = triple(run.value, what)
    call = Call("flash_attention_backward", *args, **kwargs)
    for item, (name, grad, truth) in enumerate(zip(GRADIENTS, got, expected_gradients())):
        expect.close(grad, truth.float(), _("{what}: {name}").format(what=what, name=name), atol=1e-4, rtol=1e-3,
                     mistakes=backward_mistakes(arguments(call), item))
    tile = MEM_B * MEM_H * MEM_BLOCK_Q * MEM_BLOCK_K * 4
    rows = MEM_B * MEM_H * MEM_BLOCK_Q * MEM_S_K * 4
    full = MEM_B * MEM_H * MEM_S_Q * MEM_S_K * 4
    bound = reference_peak() + ROOM * tile
    sizes = _("the bound is {bound} (a tiled implementation's {peak}, its gradients included, plus {room} tiles); "
              "one float32 tile of probabilities [B, H, block_q, block_k] is {tile}, a block of queries against "
              "every key [B, H, block_q, S_k] {rows}, the whole matrix [B, H, S_q, S_k] {full}").format(
        bound=mib(bound), room=ROOM, peak=mib(reference_peak()), tile=mib(tile), rows=mib(rows), full=mib(full))
    within_memory(run, what, "flash_attention_backward", bound, sizes, _(
        "recompute P = exp(s - lse), s = q k^T * scale, one (block_q x block_k) tile at a time, inside the loop over key "
        "blocks, and never build the full matrix of scores or probabilities"))


def function_job(student, g, causal: bool):
    """FlashAttentionFunction run as training runs it, then the student's own flash_attention and
    flash_attention_backward on the same inputs (what its out and gradients must equal)."""
    q, k, v = qkv(g, FN_S, FN_S + 3, b=FN_B, h=FN_H, d=FN_D, d_v=FN_D - 3)
    grad_out = randn(g, FN_B, FN_H, FN_S, FN_D - 3)
    job = student.job()
    function = job.fetch("FlashAttentionFunction")
    ran = job.builtin_value("autograd_function_gradients", function, q, k, v, causal, grad_out,
                            label="FlashAttentionFunction.apply(q, k, v, causal={c}).backward(grad_out)".format(
                                c=causal))
    forward = job.call("flash_attention", q, k, v, causal=causal)
    backward = job.call("flash_attention_backward", q, k, v, forward[0], forward[1], grad_out, causal=causal)
    return job, {"function": function, "ran": ran, "forward": forward, "backward": backward}, (q, k, v, grad_out)


def part_batch(student) -> tuple[dict, dict]:
    """Every call of this part but the measured one, and both FlashAttentionFunction jobs, in one round trip:
    ({case: (call, outcome)}, {causal: Ran})."""
    calls = {case: build(seeded()) for case, build in TABLE.items()}
    call_jobs = [student.job() for _ in calls]
    steps = [job.call(c.name, *c.args, **c.kwargs) for job, c in zip(call_jobs, calls.values())]
    function_jobs = {causal: function_job(student, seeded(), causal) for causal in (False, True)}
    results = student.run(call_jobs + [job for job, _, _ in function_jobs.values()])
    outcomes = {case: (call, Outcome(result, step)) for (case, call), result, step in zip(calls.items(), results, steps)}
    runs = {causal: Ran(result, named, inputs)
            for (causal, (_, named, inputs)), result in zip(function_jobs.items(), results[len(calls):])}
    return outcomes, runs


def batch(student) -> tuple[dict, dict]:
    return student.once("efficient flash_backward", lambda: part_batch(student))


def case_of(student, case):
    return batch(student)[0][case]


def function_runs(student) -> dict:
    return batch(student)[1]


@pytest.mark.points(3)
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_autograd_function_gives_your_flash_gradients(student, causal):
    """FlashAttentionFunction.apply(q, k, v, causal) returns flash_attention's out, and out.backward(grad_out) gives flash_attention_backward's gradients"""
    run = function_runs(student)[causal]
    ran = run.value("ran")
    what = "FlashAttentionFunction.apply(q, k, v, causal={c})".format(c=causal)
    if not (isinstance(ran, tuple) and len(ran) == 5):
        raise expect.CheckFailure(_("{what} could not be run through autograd").format(what=what))
    out, *grads, _saved = ran
    for name, grad in zip(GRADIENTS, grads):
        if grad is None:
            raise expect.CheckFailure(_("{what}: out.backward(grad_out) gave q, k or v no gradient ({name} is None): "
                                        "backward returns (grad_q, grad_k, grad_v, None), one per input of forward")
                                      .format(what=what, name=name))
    try:
        own_out, _own_lse = run.value("forward")
        own_grads = triple(run.value("backward"), "flash_attention_backward")
    except expect.CheckFailure:  # (your own pieces failed: their checks charge it; here the exact values judge)
        exact_against_truth(run, what, causal, out, grads)
        return
    expect.close(out, own_out, _("{what}: out, against your flash_attention's").format(what=what), atol=1e-6,
                 rtol=1e-6)
    for name, grad, own in zip(GRADIENTS, grads, own_grads):
        expect.close(grad, own, _("{what}: {name}, against your flash_attention_backward's (given your "
                                  "flash_attention's out and lse)").format(what=what, name=name), atol=1e-6,
                     rtol=1e-6)


def exact_against_truth(run, what: str, causal: bool, out, grads) -> None:
    """FlashAttentionFunction's out and gradients against exact attention's, where the student's own flash_attention
    or flash_attention_backward failed on these inputs: a mistake there is charged in its own checks only."""
    q, k, v, grad_out = run.inputs
    truths = (dense_attention(q, k, v, causal)[0], *exact_gradients(q, k, v, grad_out, causal))
    for name, got, truth in zip(("out",) + GRADIENTS, (out, *grads), truths):
        expect.close(got, truth.to(got.dtype), _("{what}: {name}, against exact attention's (your own "
                                                 "flash_attention or flash_attention_backward failed on these inputs)"
                                                 ).format(what=what, name=name), atol=1e-4, rtol=1e-3)


@pytest.mark.points(2)
def test_autograd_function_saves_memory_linear_in_S(student):
    """FlashAttentionFunction's forward keeps for backward only what grows linearly in S (q, k, v, out, lse), never the [S_q, S_k] probabilities"""
    run = function_runs(student)[True]
    ran = run.value("ran")
    saved = ran[4] if isinstance(ran, tuple) and len(ran) == 5 and isinstance(ran[4], int) else None
    q, k, v, grad_out = run.inputs
    linear = sum(t.numel() * 4 for t in (q, k, v, grad_out)) + FN_B * FN_H * FN_S * 4  # q, k, v, out, lse
    full = FN_B * FN_H * FN_S * k.shape[-2] * 4
    if saved is None or saved > ROOM_SAVED * linear:
        said = _("you kept the [S_q, S_k] probabilities (or scores) for backward") if (saved or 0) >= full else \
            _("you kept more than q, k, v, out and lse")
        raise expect.CheckFailure(_(
            "FlashAttentionFunction at B={b}, H={h}, S_q={s}, S_k={sk}: its forward kept {saved} for backward; q, k, "
            "v, out and lse take {linear} and the probabilities [B, H, S_q, S_k] alone {full}: {said}. Save only "
            "ctx.save_for_backward(q, k, v, out, lse): backward recomputes P tile by tile from them").format(
            b=FN_B, h=FN_H, s=FN_S, sk=k.shape[-2], saved=mib(saved), linear=mib(linear), full=mib(full), said=said))
