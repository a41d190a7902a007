"""Hidden checks for part linear (assignment efficient): elu_feature_map, linear_attention, linear_attention_step.

linear_attention is compared with the formula written through the [S, S] weights phi(q) phi(k)^T
(in this trusted process, at small S), causal and not; linear_attention_step is run over a whole
sequence, each step given the state the previous one returned, and must equal causal linear
attention with a state that does not grow; the memory meter holds linear_attention far below one
[S, S] matrix.
"""
import functools

import pytest
import torch
import torch.nn.functional as F

from autograder.foundation import i18n
from autograder.sandbox.batch import Call
from autograder.checks import expect
from autograder.checks.cases import Cases, seeded, send, smallest_failure
from autograder.checks.efficient.common import FEATURES, D, D_V, S, B, H, linear_variant, mib, qkv, recurrent_variant, \
    within_memory
from autograder.worker import wire
from autograder.worker.meter import LiveMemoryMeter
from solutions import efficient as ref

_ = i18n.message

STEPS = 9  # the recurrence's sequence length
EPS = 0.5  # an eps that shows: the normaliser of a few keys is of order 1
SWEEP = ((1, 1, 1), (2, 1, 1), (3, 2, 1), (4, 2, 3), (6, 3, 2), (9, 4, 5))  # (S, D, D_v), smallest first
# causal over many chunks: longer than the chunks students choose (a chunkwise form that does not carry its running
# sums from chunk to chunk is right up to its chunk size, so S = 13 alone cannot see it)
LONG_S = 300
CHUNKS = (8, 16, 32, 50, 64, 100, 128, 256)  # the chunk sizes a mistake is looked for at


def _linear(g, causal: bool, S_: int = S, d: int = D, d_v: int = D_V, b: int = B, h: int = H):
    q, k, v = qkv(g, S_, S_, b=b, h=h, d=d, d_v=d_v, scale=1.5)
    return Call("linear_attention", q, k, v, causal=causal)


# Every call of this part but the recurrence and the measured ones, in the order of the checks below.
CALLS = Cases("efficient linear", {
    "phi": lambda g: Call("elu_feature_map", torch.linspace(-6, 6, 2 * 3 * 25).view(2, 3, 25)),
    "plain": lambda g: _linear(g, False),
    "causal": lambda g: _linear(g, True),
    "causal long": lambda g: _linear(g, True, LONG_S, b=1, h=2),
    "eps": lambda g: Call("linear_attention", *qkv(g, S, S, scale=1.5), causal=True, eps=EPS),
    **{("sweep", case, causal): (lambda g, c=case, causal=causal: _linear(g, causal, *c, b=2, h=2))
       for case in SWEEP for causal in (False, True)},
})


@pytest.mark.points(2)
def test_elu_feature_map(student):
    """elu_feature_map(x) is elu(x) + 1: positive everywhere, x + 1 for x > 0"""
    call, outcome = CALLS.get(student, "phi")
    [x] = call.args
    got = expect.value(outcome)
    want = FEATURES["elu1"](x)
    mistakes = {
        _("the feature map must be positive, so that every weight phi(q) . phi(k) is too: elu(x) is negative for x "
          "< 0, add 1"): lambda: FEATURES["elu"](x),
        _("the feature map must be positive: relu(x) is 0 for every x <= 0 (a query could then see nothing); use "
          "elu(x) + 1"): lambda: FEATURES["relu"](x),
        _("relu(x) + 1 is positive too, but the course's feature map is elu(x) + 1 (Katharopoulos et al.)"):
            lambda: FEATURES["relu"](x) + 1,
    }
    expect.close(got, want, "elu_feature_map(x), x from -6 to 6", mistakes=mistakes)


def restart_mistakes(q, k, v) -> dict:
    """{hint: causal linear attention in chunks that each start from zero sums}, for the chunks shorter than S."""
    return {_("your chunks of {chunk} positions each start from zero sums: a query sees only the keys of its own "
              "chunk. Carry the running sums sum_j phi(k_j) v_j^T and sum_j phi(k_j) from chunk to chunk: each chunk "
              "starts from the running sums of every chunk before it and adds its own keys after").format(chunk=chunk):
            lambda chunk=chunk: linear_variant(q, k, v, True, restart=chunk)
            for chunk in CHUNKS if chunk < q.shape[-2]}


def linear_mistakes(q, k, v, causal: bool) -> dict:
    def variant(**kw):
        return lambda: linear_variant(q, k, v, causal, **kw)

    mistakes = {
        _("the feature map must be positive: with phi = elu (without + 1) some weights phi(q) . phi(k) are negative "
          "and the normaliser can vanish; use elu_feature_map"): variant(feature="elu"),
        _("you used q and k themselves: apply the feature map phi = elu_feature_map to both first"):
            variant(feature="identity"),
        _("no normaliser: divide each output by phi(q_i) . sum_j phi(k_j) (+ eps), the sum of its weights"):
            variant(normalise=False),
        _("linear attention has no 1/sqrt(D): phi(q) . phi(k) takes the place of exp(q . k / sqrt(D)); apply phi to "
          "q and k themselves"): lambda: linear_variant(q / q.shape[-1] ** 0.5, k, v, causal),
    }
    if causal:
        mistakes = {
            _("causal=True: query i may only use keys j <= i; your sums run over every key (use running sums, "
              "torch.cumsum over the sequence)"): lambda: linear_variant(q, k, v, False),
            _("causal: query i also sees its own key, j <= i (an inclusive running sum)"): variant(diagonal=False),
        } | restart_mistakes(q, k, v) | mistakes
    else:
        mistakes[_("causal=False: every query sees every key; you applied a causal mask")] = \
            lambda: linear_variant(q, k, v, True)
    return mistakes


def check_linear(call, outcome, hint: str = "") -> None:
    q, k, v = call.args
    causal, eps = call.kwargs["causal"], call.kwargs.get("eps", 1e-6)
    what = "linear_attention(q, k [{qs}], v [{vs}], causal={c}, eps={eps})".format(
        qs=", ".join(map(str, q.shape)), vs=", ".join(map(str, v.shape)), c=causal, eps=eps)
    mistakes = linear_mistakes(q, k, v, causal)
    if eps != 1e-6:
        mistakes = {_("eps is added to the normaliser: phi(q_i) . sum_j phi(k_j) + eps"): lambda: linear_variant(
            q, k, v, causal),
                    _("you added eps to every entry of sum_j phi(k_j) (Performer's normaliser phi(q_i) . (sum_j phi(k_j) "
                      "+ eps)), which adds eps once per feature of phi(q_i): add it once, after the dot product, "
                      "phi(q_i) . sum_j phi(k_j) + eps"): lambda: linear_variant(q, k, v, causal, eps=eps,
                                                                                  eps_in_keys=True)} | mistakes
    expect.close(expect.value(outcome), linear_variant(q, k, v, causal, eps=eps), what, hint=hint, atol=1e-5,
                 rtol=1e-4, mistakes=mistakes)


@pytest.mark.points(3)
@pytest.mark.parametrize("case", ["plain", "causal"])
def test_linear_attention_equals_the_formula(student, case):
    """linear_attention equals phi(q_i) . sum_j phi(k_j) v_j^T / (phi(q_i) . sum_j phi(k_j) + eps), D != D_v; causal at S = 13 and S = 300 (many chunks)"""
    check_linear(*CALLS.get(student, case))
    if case == "causal":
        check_linear(*CALLS.get(student, "causal long"), hint=_(
            "right at S = {short} but not at S = {long}: over a long sequence, does each chunk start from the running "
            "sums of every chunk before it, and add its own keys to them afterwards?").format(short=S, long=LONG_S))


@pytest.mark.points(1)
def test_linear_attention_adds_eps_to_the_normaliser(student):
    """linear_attention(..., eps=0.5) adds eps to each normaliser phi(q_i) . sum_j phi(k_j)"""
    check_linear(*CALLS.get(student, "eps"))


@pytest.mark.points(1.5)
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_linear_attention_for_every_shape(student, causal):
    """linear_attention is right from S = 1 up, for every D and D_v (the smallest failing case named)"""
    smallest_failure([("S={}, D={}, D_v={}".format(*case), case) for case in SWEEP],
                     lambda case: check_linear(*CALLS.get(student, ("sweep", case, causal))))


# --------------------------------------------------------------------------- #
# the recurrence
# --------------------------------------------------------------------------- #


def recurrence_inputs():
    return qkv(seeded(5), STEPS, STEPS, scale=1.5)


def recurrence_job(student):
    """linear_attention_step over the sequence: state None first, then whatever the previous step returned."""
    q, k, v = recurrence_inputs()
    job = student.job()
    steps, state = [], None
    for t in range(STEPS):
        step = job.call("linear_attention_step", state, q[:, :, t], k[:, :, t], v[:, :, t], eps=EPS)
        steps.append(step)
        state = step[1]
    return job, {t: s for t, s in enumerate(steps)}, (q, k, v)


def tensor_elements(value) -> int | None:
    """The number of tensor elements in a state (a tensor or nested tuples, lists and dicts); None when some
    part of it stayed in the worker as an object the grader cannot weigh."""
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, wire.Handle):
        return None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    sizes = [tensor_elements(v) for v in items]
    return None if None in sizes else sum(sizes)


def step_pair(ran, t: int) -> tuple:
    """What step t of the recurrence returned, (out_t, state), or a failure that says what came back instead."""
    value = ran.value(t)
    if not (isinstance(value, tuple) and len(value) == 2):
        raise expect.CheckFailure(_("linear_attention_step should return a tuple (out_t, state), got {kind}").format(
            kind=type(value).__name__))
    return value


def ran_recurrence(student):
    return student.once("efficient linear recurrence",
                        lambda: send(student, {"recurrence": recurrence_job(student)})["recurrence"])


@pytest.mark.points(3)
def test_linear_attention_step_equals_causal_linear_attention(student):
    """linear_attention_step, fed its own state back at every step, gives causal linear attention's outputs (eps = 0.5)"""
    ran = ran_recurrence(student)
    q, k, v = ran.inputs
    outs = []
    for t in range(STEPS):
        out_t, _state = step_pair(ran, t)
        outs.append(expect.shape(out_t, (B, H, D_V), _("linear_attention_step's out_t at step {t}").format(t=t)))
    got = torch.stack(outs, dim=2)  # [B, H, STEPS, D_V]
    mistakes = {
        _("your recurrence forgets its state: each step must add phi(k_t) v_t^T and phi(k_t) to the state it was "
          "given (None only at the first step) and return the new sums"): lambda: recurrent_variant(q, k, v, "forgets",
                                                                                                    EPS),
        _("return the UPDATED state: the next step must see the sums including this step's key"):
            lambda: recurrent_variant(q, k, v, "stale", EPS),
        _("eps is added to the normaliser: phi(q_t) . z + eps"): lambda: recurrent_variant(q, k, v),
        _("your out_t reads the state before this step's key is added: query t sees key t too (j <= t); add phi(k_t) "
          "v_t^T and phi(k_t) to the state first, then read it with phi(q_t)"):
            lambda: linear_variant(q, k, v, True, diagonal=False, eps=EPS),
    }
    expect.close(got, linear_variant(q, k, v, True, eps=EPS), "linear_attention_step over {n} steps, eps={eps}".format(
        n=STEPS, eps=EPS),
                 atol=1e-5, rtol=1e-4, mistakes=mistakes)


@pytest.mark.points(1)
def test_linear_attention_step_state_does_not_grow(student):
    """linear_attention_step's state holds as many numbers after 9 steps as after 1: it does not grow with the sequence"""
    ran = ran_recurrence(student)
    sizes = [tensor_elements(step_pair(ran, t)[1]) for t in (0, STEPS - 1)]
    if None not in sizes and sizes[1] > sizes[0]:  # (a state kept in the worker as an object cannot be weighed)
        raise expect.CheckFailure(_("your state grew from {a} numbers after one step to {b} after {n}: keep only the "
                                    "running sums sum_j phi(k_j) v_j^T [B, H, D, D_v] and sum_j phi(k_j) [B, H, D], "
                                    "not the keys and values (that is a KV cache)").format(a=sizes[0], b=sizes[1],
                                                                                           n=STEPS))


# --------------------------------------------------------------------------- #
# memory
# --------------------------------------------------------------------------- #

# The memory check's sizes: one [B, H, S, S] float32 matrix is 16 MiB; causal running sums [B, H, S, D, D_v] 0.4 MiB.
MEM_B, MEM_H, MEM_S, MEM_D, MEM_D_V = 2, 2, 1024, 4, 6
ROOM = 3


def memory_inputs():
    return qkv(seeded(13), MEM_S, MEM_S, b=MEM_B, h=MEM_H, d=MEM_D, d_v=MEM_D_V)


def running_sums_attention(q, k, v, eps: float = 1e-6) -> torch.Tensor:
    """Causal linear attention through the running sums at every position (torch.cumsum over [B, H, S, D, D_v]): no
    [S, S] tensor and linear in S, but D x D_v numbers per position. The reference goes chunk by chunk and holds
    less; this form meets the contract too, so the causal bound leaves room for it (trusted side)."""
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1  # [B, H, S, D]
    kv = torch.cumsum(phi_k[..., :, None] * v[..., None, :], dim=2)  # [B, H, S, D, D_v]
    z = torch.cumsum(phi_k, dim=2)  # [B, H, S, D]
    numerator = (phi_q[..., :, None] * kv).sum(dim=-2)  # [B, H, S, D_v]
    return numerator / ((phi_q * z).sum(dim=-1)[..., None] + eps)


@functools.lru_cache(maxsize=2)
def reference_peak(causal: bool) -> int:
    """The reference's peak; when causal, the larger of the reference's (chunkwise) and the running-sums form's."""
    q, k, v = memory_inputs()
    forms = [lambda: ref.linear_attention(q, k, v, causal=causal)]
    if causal:
        forms.append(lambda: running_sums_attention(q, k, v))
    peaks = []
    for form in forms:
        with torch.no_grad(), LiveMemoryMeter() as meter:
            form()
        peaks.append(meter.peak_bytes)
    return max(peaks)


@functools.lru_cache(maxsize=2)
def expected_output(causal: bool) -> torch.Tensor:
    q, k, v = memory_inputs()
    return ref.linear_attention(q.double(), k.double(), v.double(), causal=causal).float()


def prepare() -> None:
    """The memory check's reference figures, once per grading process (check.Checks.prepare)."""
    for causal in (False, True):
        reference_peak(causal)
        expected_output(causal)


@pytest.mark.points(2)
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_linear_attention_memory(student, causal):
    """linear_attention builds no [S, S] tensor: its memory grows linearly in S"""
    run = student.call_measured("linear_attention", *memory_inputs(), causal=causal)
    what = "linear_attention at B={b}, H={h}, S={s}, D={d}, D_v={dv}, causal={c}".format(
        b=MEM_B, h=MEM_H, s=MEM_S, d=MEM_D, dv=MEM_D_V, c=causal)
    expect.close(run.value, expected_output(causal), what, atol=1e-4, rtol=1e-3,
                 mistakes=restart_mistakes(*memory_inputs()) if causal else None)
    bound = ROOM * reference_peak(causal)
    full = MEM_B * MEM_H * MEM_S * MEM_S * 4
    sizes = _("the bound is {bound} ({room} x the {peak} of an implementation without [S, S] tensors); one [B, H, "
              "S, S] float32 matrix is {full}").format(bound=mib(bound), room=ROOM, peak=mib(reference_peak(causal)),
                                                       full=mib(full))
    how = (_("go chunk by chunk: inside a chunk a small [chunk, chunk] block of weights phi(q_i) . phi(k_j), for the "
             "keys before it the running sums of phi(k_j) v_j^T and phi(k_j); never mask phi(q) phi(k)^T") if causal else
           _("compute phi(k)^T v [B, H, D, D_v] first, then phi(q) (phi(k)^T v): associativity avoids phi(q) phi(k)^T"))
    within_memory(run, what, "linear_attention", bound, sizes, how)
