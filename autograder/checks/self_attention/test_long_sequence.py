"""Hidden checks for part long_sequence: attention_matrix_bytes, sdpa_attention, chunked_attention."""
import functools

import pytest
import torch
import torch.nn.functional as F

import solutions as ref
from autograder.foundation import i18n, spec
from autograder.sandbox.batch import Call
from autograder.checks import expect, lent
from autograder.checks.cases import Cases, seeded, smallest_failure
from autograder.checks.self_attention.common import PIECE_PROBES, attention, attention_mistakes, lengths_mask, randn
from autograder.worker.meter import LiveMemoryMeter

_ = i18n.message


@pytest.fixture(autouse=True)
def lent_pieces_long_sequence(student):
    """chunked_attention is graded with the reference scaled_scores, attention_weights, attend and masks in place of
    the student's (each costs points in its own part only); the part's note names the student's wrong ones."""
    lent.lending(student, "chunked_attention", spec.SELF_ATTENTION.part("long_sequence"), ref, PIECE_PROBES)

DTYPES = (torch.float32, torch.float16, torch.float64, torch.bfloat16)
LB, LH, LS, LD = 2, 3, 7, 4  # S = 7: a chunk size of 3 does not divide it
LONG_LENGTHS = (7, 4)
Bm, Hm, Sm = 2, 3, 7  # attention_matrix_bytes's arguments


def qkv(gen, dtype=torch.float32):
    return tuple(randn(gen, LB, LH, LS, LD, dtype=dtype) for _ in range(3))


CASES = {"no mask": (False, False), "padding mask": (True, False), "causal": (False, True),
         "padding mask and causal": (True, True)}


def kwargs_for(case):
    use_mask, causal = CASES[case]
    mask = lengths_mask(LONG_LENGTHS, LS) if use_mask else None
    return mask, causal, ({"mask": mask} if use_mask else {}) | ({"causal": True} if causal else {})


# chunk sizes over lengths, smallest first: (S, chunk_size), with a padded second sequence and the causal mask;
# chunks that divide S and chunks that do not, one query per chunk, one chunk for all
CHUNK_CASES = ((1, 1), (2, 1), (3, 2), (4, 4), (5, 2), (6, 4), (7, 3), (9, 4), (10, 16))


def chunk_lengths(seq_len: int) -> list[int]:
    return [seq_len, max(1, seq_len // 2)]


def _sweep_call(g, seq_len: int, chunk: int):
    q, k, v = (randn(g, 2, 2, seq_len, LD) for _ in range(3))
    return Call("chunked_attention", q, k, v, mask=lengths_mask(chunk_lengths(seq_len), seq_len), causal=True,
                chunk_size=chunk)


def _sdpa_call(g, case):
    return Call("sdpa_attention", *qkv(g, torch.float64 if case == "causal" else torch.float32), **kwargs_for(case)[2])


# Every call of this part but the measured one, in the order of the checks below: one round trip.
CALLS = Cases("long_sequence", {
    "bytes": lambda g: Call("attention_matrix_bytes", Bm, Hm, Sm),
    **{f"bytes {dtype}": (lambda g, d=dtype: Call("attention_matrix_bytes", Bm, Hm, Sm, d)) for dtype in DTYPES},
    **{f"sdpa {case}": (lambda g, c=case: _sdpa_call(g, c)) for case in CASES},
    "sdpa watched": lambda g: Call("sdpa_attention", *qkv(g), mask=lengths_mask(LONG_LENGTHS, LS), causal=True),
    **{f"chunked {case}": (lambda g, c=case: Call("chunked_attention", *qkv(g), chunk_size=3, **kwargs_for(c)[2]))
       for case in CASES},
    "chunked larger": lambda g: Call("chunked_attention", *qkv(g), chunk_size=16,
                                     **kwargs_for("padding mask and causal")[2]),
    **{("sweep", case): (lambda g, c=case: _sweep_call(g, *c)) for case in CHUNK_CASES},
})


@pytest.mark.points(2)
def test_attention_matrix_bytes(student):
    """attention_matrix_bytes(B, H, S, dtype) is B * H * S^2 * the element size of dtype"""
    got = CALLS.get(student, "bytes")[1].value
    if got != ref.attention_matrix_bytes(Bm, Hm, Sm):
        elements = Bm * Hm * Sm * Sm
        hint = (_(": that is the number of elements; multiply by the element size (4 bytes for float32)")
                if got == elements else _(": a [B, H, S, S] float32 matrix holds {elements} elements of 4 bytes each").format(elements=elements))
        raise expect.CheckFailure(_("attention_matrix_bytes({b}, {h}, {s}) returned {got!r}{hint}").format(
            b=Bm, h=Hm, s=Sm, got=got, hint=hint))
    for dtype in DTYPES:
        want = ref.attention_matrix_bytes(Bm, Hm, Sm, dtype)
        got = CALLS.get(student, f"bytes {dtype}")[1].value
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if got != want:
            size = torch.empty((), dtype=dtype).element_size()
            if got == Bm * Hm * Sm * Sm * 4:
                hint = _("you ignored the dtype: a {dtype} element takes {size} bytes (torch.empty((), "
                         "dtype=dtype).element_size())").format(dtype=dtype, size=size)
            elif got == Bm * Hm * Sm * Sm * size * 8:
                hint = _("that is bits, not bytes")
            else:
                hint = _("a {dtype} element takes {size} bytes").format(dtype=dtype, size=size)
            raise expect.CheckFailure(_("attention_matrix_bytes({b}, {h}, {s}, {dtype}) returned {got!r}, expected "
                                        "{want}: {hint}").format(b=Bm, h=Hm, s=Sm, dtype=dtype, got=got, want=want,
                                                                 hint=hint))


def inverted_sdpa(q, k, v, mask, causal):
    allowed = mask[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(LS, LS, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~allowed)


def sdpa_mistakes(q, k, v, mask, causal):
    out = {}
    if mask is not None:
        out[_("F.scaled_dot_product_attention's boolean attn_mask is True where attention is ALLOWED, the "
              "same sense as our mask: pass mask[:, None, None, :], not its inverse")] = lambda: inverted_sdpa(q, k, v, mask, causal)
    out.update(attention_mistakes(q, k, v, mask, causal))
    return out


@pytest.mark.points(0.75)
@pytest.mark.parametrize("case", list(CASES))
def test_sdpa_attention_matches_plain_attention(student, case):
    """sdpa_attention(q, k, v, mask, causal) equals plain attention"""
    mask, causal, __ = kwargs_for(case)
    call, outcome = CALLS.get(student, f"sdpa {case}")
    q, k, v = call.args
    got = outcome.value
    expect.close(got, attention(q, k, v, mask, causal), _("sdpa_attention [{case}], lengths {lengths}").format(
        case=case, lengths=list(LONG_LENGTHS)),
                 mistakes=sdpa_mistakes(q, k, v, mask, causal))


@pytest.mark.points(1)
def test_sdpa_attention_uses_the_fused_kernel(student):
    """sdpa_attention calls F.scaled_dot_product_attention"""
    used = CALLS.get(student, "sdpa watched")[1].forbidden
    if "F.scaled_dot_product_attention" not in used:
        raise expect.CheckFailure(_("sdpa_attention did not call F.scaled_dot_product_attention: this exercise is about the fused "
                                    "kernel"))


@pytest.mark.points(0.75)
@pytest.mark.parametrize("case", list(CASES))
def test_chunked_attention_matches_plain_attention(student, case):
    """chunked_attention(..., chunk_size=3) equals plain attention at S = 7 (the last chunk is shorter)"""
    mask, causal, __ = kwargs_for(case)
    call, outcome = CALLS.get(student, f"chunked {case}")
    q, k, v = call.args
    want = attention(q, k, v, mask, causal)
    mistakes = attention_mistakes(q, k, v, mask, causal)
    if causal:
        def restarted_causal():  # each chunk numbered its queries from 0
            out = torch.empty_like(q)
            for start in range(0, LS, 3):
                stop = min(start + 3, LS)
                scores = q[:, :, start:stop] @ k.transpose(-2, -1) / LD ** 0.5
                if mask is not None:
                    scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
                hide = torch.arange(LS)[None, :] > torch.arange(stop - start)[:, None]
                out[:, :, start:stop] = torch.softmax(scores.masked_fill(hide, float("-inf")), -1) @ v
            return out
        mistakes = {_("inside a chunk, query i is at position start + i: compare key positions with the chunk's "
                      "absolute query positions for the causal mask"): restarted_causal} | mistakes
    expect.close(outcome.value, want, _("chunked_attention [{case}], chunk_size=3, lengths {lengths}").format(
        case=case, lengths=list(LONG_LENGTHS)),
                 mistakes=mistakes)


@pytest.mark.points(0.5)
def test_chunked_attention_with_chunk_larger_than_sequence(student):
    """chunked_attention works when chunk_size is larger than S"""
    mask, causal, __ = kwargs_for("padding mask and causal")
    call, outcome = CALLS.get(student, "chunked larger")
    q, k, v = call.args
    expect.close(outcome.value, attention(q, k, v, mask, causal), _("chunked_attention with chunk_size=16 > S=7"),
                 mistakes=attention_mistakes(q, k, v, mask, causal))


def chunked_into_input(x: torch.Tensor, chunk: int = 3) -> torch.Tensor:
    """Causal chunked attention that writes each chunk's output into its input (out = q), q, k, v all x."""
    t = x.clone()
    for start in range(0, LS, chunk):
        stop = min(start + chunk, LS)
        scores = t[:, :, start:stop] @ t.transpose(-2, -1) / LD ** 0.5
        hide = torch.arange(LS)[None, :] > torch.arange(start, stop)[:, None]
        t[:, :, start:stop] = torch.softmax(scores.masked_fill(hide, float("-inf")), -1) @ t
    return t


@pytest.mark.points(0.5)
def test_chunked_attention_with_one_tensor_as_q_k_and_v(student):
    """chunked_attention(x, x, x) is right when q, k and v are one tensor (it writes into none of its inputs)"""
    job, x, step = part_shared(student)
    [result] = student.run([job])
    into_input = _("your function writes its output into q (out = q): with q, k and v one tensor, as in "
                   "self-attention, the later chunks read overwritten keys and values; write the output into a new "
                   "tensor, torch.empty_like(q)")
    expect.close(result[step], attention(x, x, x, None, True), "chunked_attention(x, x, x, causal=True, chunk_size=3) "
                 "with q, k and v the same tensor", mistakes={into_input: lambda: chunked_into_input(x)})


def part_shared(student):
    """A job that makes one tensor x [B, H, S, d] in the worker (an identity layer's output) and passes it as q, k
    and v: the worker's arguments are then one tensor, as in self-attention."""
    x = randn(seeded(), LB, LH, LS, LD)
    job = student.job()
    layer = job.linear(LD, LD)
    job.load_state_dict(layer, {"weight": torch.eye(LD)})
    shared = job.forward(layer, x)
    return job, x, job.call("chunked_attention", shared, shared, shared, causal=True, chunk_size=3)


@pytest.mark.points(0.5)
def test_chunked_attention_for_every_chunk_size_and_length(student):
    """chunked_attention is exact for chunk sizes that divide S and that do not, from S = 1 up (the smallest failing case named)"""
    def check(case):
        call, outcome = CALLS.get(student, ("sweep", case))
        q, k, v = call.args
        mask = call.kwargs["mask"]
        what = "chunked_attention(q, k, v [2, 2, {S}, {d}], mask, causal=True, chunk_size={c})".format(
            S=case[0], d=LD, c=case[1])
        expect.close(expect.value(outcome), attention(q, k, v, mask, True), what,
                     mistakes=attention_mistakes(q, k, v, mask, True))

    smallest_failure([("S={S}, chunk_size={c}, lengths={lengths}".format(S=S, c=c, lengths=chunk_lengths(S)), (S, c))
                      for S, c in CHUNK_CASES], check)


# The memory check's sizes: one full [B, H, S, S] float32 matrix is 16 MiB at these.
MEM_B, MEM_H, MEM_S, MEM_D, CHUNK = 1, 4, 1024, 8, 32
ROOM = 4  # the bound is ROOM x the reference's peak


def memory_inputs():
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(MEM_B, MEM_H, MEM_S, MEM_D, generator=g) for _ in range(3))
    return q, k, v, lengths_mask((MEM_S * 3 // 4,), MEM_S)


@functools.lru_cache(maxsize=1)
def reference_peak() -> int:
    q, k, v, mask = memory_inputs()
    with torch.no_grad(), LiveMemoryMeter() as meter:
        ref.chunked_attention(q, k, v, mask=mask, causal=True, chunk_size=CHUNK)
    return meter.peak_bytes


@functools.lru_cache(maxsize=1)
def expected_output() -> torch.Tensor:
    """Exact attention on the memory check's inputs (the same for every submission: computed once)."""
    q, k, v, mask = memory_inputs()
    return attention(q, k, v, mask, True)


def prepare() -> None:
    """The memory check's reference figures, once per grading process (check.Checks.prepare)."""
    reference_peak()
    expected_output()


def mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


@pytest.mark.points(2.5)
def test_chunked_attention_memory(student):
    """chunked_attention never holds much more than chunk_size x S scores per head at once"""
    q, k, v, mask = memory_inputs()
    run = student.call_measured("chunked_attention", q, k, v, mask=mask, causal=True, chunk_size=CHUNK)
    expect.close(run.value, expected_output(), _("chunked_attention at S={s}, chunk_size={chunk}").format(
        s=MEM_S, chunk=CHUNK),
                 atol=1e-4, rtol=1e-3)
    bound = ROOM * reference_peak()
    full = ref.attention_matrix_bytes(MEM_B, MEM_H, MEM_S)  # the bound is below it: tests/test_checks_helpers.py
    sizes = (_("the bound is {mib} ({room} x a {chunk}-query-block implementation's {mib2}), and one full [B, "
               "H, S, S] float32 score matrix is {mib3}").format(mib=mib(bound), room=ROOM, chunk=CHUNK, mib2=mib(reference_peak()), mib3=mib(full)))
    at = _("at B={b}, H={h}, S={s}, chunk_size={chunk}").format(b=MEM_B, h=MEM_H, s=MEM_S, chunk=CHUNK)
    if run.peak_bytes is None or run.peak_bytes > bound:
        raise expect.CheckFailure(
            _("{at} your chunked_attention held {mib} of tensors at once; {sizes}: compute the scores, the "
              "masks and the softmax for one block of chunk_size queries at a time, and never build the whole "
              "[B, H, S, S] matrix").format(at=at, mib=mib(run.peak_bytes or 0), sizes=sizes))
    if run.resident_growth is not None and run.resident_growth > bound:
        raise expect.CheckFailure(
            _("{at} the tensor meter saw only {mib}, but the memory your process (and any process it started) "
              "held grew by {mib2} while chunked_attention ran; {sizes}: the memory was taken where the meter "
              "cannot see it (a switched-off dispatch mode, a child process, ...); the grader counts it all").format(at=at, mib=mib(run.peak_bytes), mib2=mib(run.resident_growth), sizes=sizes))
