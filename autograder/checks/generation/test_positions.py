"""Hidden checks for part positions (assignment generation): sinusoidal_positions, apply_rope.

RoPE is checked three ways: values against the reference on positions 0, 1, 2, ...; values
on unsorted positions that do not start at 0 (a decoder's positions after a cache); and the
property that defines it: a query's score against a key depends only on their offset. Then what
a decoder needs of it: its own `base` (Llama 3: 500000) and, for a left-padded batch, one row of
positions per sequence [B, S].
"""
import pytest
import torch

from autograder.foundation import i18n
from autograder.sandbox.batch import Call
from autograder.checks import expect
from autograder.checks.cases import Cases
from autograder.checks.generation.common import (B, H, ROPE_BASE, ROPE_DIM, ROPE_DIRECTION, ROPE_HALF_SPLIT,
                                                 rope_differs, rope_variant, sinusoidal_variant)
from solutions import generation as ref

_ = i18n.message

PE_LEN, PE_DIM = 50, 16  # long enough that a wrong frequency shows in every pair
PAIRS = [(3, 1), (10, 8), (40, 38), (1, 3), (21, 23), (5, 5), (17, 17)]  # (m, n): query and key positions
POSITIONS = torch.tensor([7, 3, 12, 0, 29])
PER_ROW = torch.tensor([[0, 1, 2, 3, 4], [9, 4, 17, 2, 30]])  # [B, 5]: rows neither equal nor shifts of each other
BASES = (100.0, 500000.0)  # a small base (every pair turns fast), and Llama 3's
HEAD_AXIS = _("with positions [B, S] and x [B, H, S, head_dim], the angles [B, S, head_dim/2] need a head axis: "
              "angle[:, None] is [B, 1, S, head_dim/2], the same positions for every head of a sequence")


def _rope_x4(g):
    return torch.randn(B, H, 5, ROPE_DIM, generator=g, dtype=torch.float64)


def _rope_x3(g):
    _rope_x4(g)  # (drawn after the 4-D input, from the same generator)
    return torch.randn(B, 5, ROPE_DIM, generator=g)


def _rotated(g, which: int):
    """apply_rope of q (which=0) or k (which=1) [7, head_dim] at the positions m or n of PAIRS."""
    q = torch.randn(1, ROPE_DIM, generator=g, dtype=torch.float64)
    k = torch.randn(1, ROPE_DIM, generator=g, dtype=torch.float64)
    t, positions = (q, [a for a, _ in PAIRS]) if which == 0 else (k, [b for _, b in PAIRS])
    return Call("apply_rope", t.expand(len(PAIRS), ROPE_DIM).contiguous(), torch.tensor(positions))


# Every call of this part, in the order of the checks below: one round trip for all of them.
CALLS = Cases("generation positions", {
    "pe shape": lambda g: Call("sinusoidal_positions", 7, 12),
    "pe values": lambda g: Call("sinusoidal_positions", PE_LEN, PE_DIM),
    "rope 4-D": lambda g: Call("apply_rope", _rope_x4(g), torch.arange(5)),
    "rope 3-D": lambda g: Call("apply_rope", _rope_x3(g), torch.arange(5)),
    "rope values": lambda g: Call("apply_rope", torch.randn(B, H, 6, ROPE_DIM, generator=g), torch.arange(6)),
    "rope positions": lambda g: Call("apply_rope", torch.randn(B, 5, ROPE_DIM, generator=g),
                                     POSITIONS),
    "rope q": lambda g: _rotated(g, 0),
    "rope k": lambda g: _rotated(g, 1),
    "rope half": lambda g: Call("apply_rope", torch.randn(B, 5, ROPE_DIM, generator=g).half(), POSITIONS),
    **{f"base {base}": (lambda g, base=base: Call("apply_rope", torch.randn(B, 5, ROPE_DIM, generator=g, dtype=torch.float64),
                                                   POSITIONS, base=base)) for base in BASES},
    "per row 3-D": lambda g: Call("apply_rope", torch.randn(B, 5, ROPE_DIM, generator=g, dtype=torch.float64), PER_ROW),
    "per row 4-D": lambda g: Call("apply_rope", torch.randn(B, H, 5, ROPE_DIM, generator=g, dtype=torch.float64),
                                  PER_ROW),
})


def sinusoidal_mistakes(seq_len, d_model):
    def v(**kw):
        return lambda: sinusoidal_variant(seq_len, d_model, **kw)

    return {
        _("sin and cos are swapped: PE[p, 2i] = sin(angle) on the even features, PE[p, 2i + 1] = "
          "cos(angle) on the odd ones"): v(swap=True),
        _("you put all the sines first and all the cosines after them: interleave them, sin on feature 2i "
          "and cos on feature 2i + 1"): v(layout="halves"),
        _("feature 2i + 1 must use the same angle as feature 2i (p / 10000^(2i / d_model)); you gave each "
          "feature j its own exponent j / d_model"): v(exponent="j"),
        _("the exponent is 2i / d_model, where i counts the pairs; you used i / d_model"): v(exponent="i"),
        _("the base is 10000"): v(base=1000.0),
    }


@pytest.mark.points(3)
def test_sinusoidal_shape_and_dtype(student):
    """sinusoidal_positions(S, d_model) is a float32 tensor [S, d_model]"""
    got = expect.shape(CALLS.get(student, "pe shape")[1].value, (7, 12), "sinusoidal_positions(7, 12)",
                       hints={(12, 7): _("the rows are positions: [seq_len, d_model]")})
    if got.dtype != torch.float32:
        raise expect.CheckFailure(_("sinusoidal_positions(7, 12) returned dtype {dtype}, expected torch.float32 (start from "
                                    "torch.arange(..., dtype=torch.float32) or convert with .float())").format(dtype=got.dtype))


@pytest.mark.points(7)
def test_sinusoidal_values(student):
    """PE[p, 2i] = sin(p / 10000^(2i / d_model)) and PE[p, 2i + 1] = cos of the same angle"""
    got = CALLS.get(student, "pe values")[1].value
    want = ref.sinusoidal_positions(PE_LEN, PE_DIM)
    expect.close(got, want, f"sinusoidal_positions({PE_LEN}, {PE_DIM})", atol=1e-4, rtol=1e-4,
                 mistakes=sinusoidal_mistakes(PE_LEN, PE_DIM))


OTHER_BASES = (500000.0, 100000.0, 1000000.0, 1000.0)  # Llama 3, nanochat (and Code Llama), 10^6, a typo


def rope_mistakes(x, positions):
    def v(**kw):
        return lambda: rope_variant(x, positions, **kw)

    mistakes = {
        _("the angle of pair i is position * 10000^(-2i / head_dim); you used 10000^(-i / head_dim)"): v(exponent="i"),
        _("you ignored `positions` and used 0, 1, 2, ...: rotate each row by the position you were given "
          "(after a cache, the new tokens are at positions len(cache), len(cache) + 1, ...)"): v(use_positions=False),
    }
    # every combination of the differences a public RoPE may have (pairing, direction, base), each one named
    for base in (ref_base := 10000.0,) + OTHER_BASES:
        for pairs in ("interleaved", "halves"):
            for direction in (1, -1):
                named = ([ROPE_HALF_SPLIT] if pairs == "halves" else []) + \
                        ([ROPE_DIRECTION] if direction == -1 else []) + \
                        ([ROPE_BASE.format(base=base)] if base != ref_base else [])
                if named:
                    mistakes[rope_differs(*named)] = v(pairs=pairs, direction=direction, base=base)
    return mistakes


@pytest.mark.points(4)
def test_rope_shape_and_dtype(student):
    """apply_rope keeps the shape ([B, H, S, head_dim] or [B, S, head_dim]) and the dtype of x"""
    call, outcome = CALLS.get(student, "rope 4-D")
    x4 = call.args[0]
    got = expect.shape(outcome.value, x4.shape,
                       f"apply_rope(x [{B}, {H}, 5, {ROPE_DIM}], positions [5])")
    if got.dtype != torch.float64:
        raise expect.CheckFailure(_("apply_rope on a float64 x returned {dtype}: return x's dtype (compute the angles in float32 or "
                                    "float64, then .to(x.dtype))").format(dtype=got.dtype))
    call, outcome = CALLS.get(student, "rope 3-D")
    x3 = call.args[0]
    got3 = expect.shape(outcome.value, x3.shape,
                        _("apply_rope(x [{b}, 5, {rope_dim}], positions [5]): x may have any leading axes").format(b=B, rope_dim=ROPE_DIM))
    if got3.dtype != torch.float32:
        raise expect.CheckFailure(_("apply_rope on a float32 x returned {dtype}: return x's dtype").format(
            dtype=got3.dtype))
    call, outcome = CALLS.get(student, "rope half")
    got_half = expect.shape(outcome.value, call.args[0].shape,
                            "apply_rope(x [{B}, 5, {d}] float16, positions [5])".format(B=B, d=ROPE_DIM))
    if got_half.dtype != torch.float16:
        raise expect.CheckFailure(_("apply_rope on a float16 x returned {dtype}: return x's dtype (compute the angles "
                                    "in float32, then .to(x.dtype))").format(dtype=got_half.dtype))


@pytest.mark.points(5)
def test_rope_values(student):
    """apply_rope(x, 0..S-1) rotates each pair (x[2i], x[2i+1]) by position * 10000^(-2i / head_dim)"""
    call, outcome = CALLS.get(student, "rope values")
    x, positions = call.args
    got = outcome.value
    expect.close(got, ref.apply_rope(x, positions), f"apply_rope(x [{B}, {H}, 6, {ROPE_DIM}], positions 0..5)",
                 atol=1e-5, rtol=1e-4, mistakes=rope_mistakes(x, positions))


@pytest.mark.points(5)
def test_rope_uses_the_given_positions(student):
    """apply_rope rotates each row by its own position, for positions that are not 0, 1, 2, ... (after a cache)"""
    call, outcome = CALLS.get(student, "rope positions")
    x, positions = call.args
    got = outcome.value
    expect.close(got, ref.apply_rope(x, positions), f"apply_rope(x [{B}, 5, {ROPE_DIM}], positions "
                 f"{positions.tolist()})", atol=1e-5, rtol=1e-4, mistakes=rope_mistakes(x, positions))


@pytest.mark.points(6)
def test_rope_scores_depend_only_on_the_offset(student):
    """after apply_rope, the score of a query at position m and a key at position n depends only on m - n"""
    pairs = PAIRS
    (q_call, q_rotated), (k_call, k_rotated) = CALLS.get(student, "rope q"), CALLS.get(student, "rope k")
    q, k = q_call.args[0][:1], k_call.args[0][:1]
    rq = expect.shape(q_rotated.value, (len(pairs), ROPE_DIM), "apply_rope(q [7, 8], positions [7])")
    rk = expect.shape(k_rotated.value, (len(pairs), ROPE_DIM), "apply_rope(k [7, 8], positions [7])")
    expect.finite(rq, "apply_rope")
    scores = (rq.double() * rk.double()).sum(-1)  # the score of q at m against k at n, for each pair
    if (scores - scores[0]).abs().max() <= 1e-9 * (1 + scores.abs().max()):
        raise expect.CheckFailure(_("the scores do not change with the positions at all: apply_rope must rotate each pair by an "
                                    "angle that grows with the position"))
    for group, offset in ((slice(0, 3), 2), (slice(3, 5), -2), (slice(5, 7), 0)):
        values = scores[group]
        if (values - values[0]).abs().max() > 1e-4 * (1 + values.abs().max()):  # float32 angles are fine
            shown = ", ".join(f"(m={a}, n={b}): {s:.4f}" for (a, b), s in zip(pairs[group], values.tolist()))
            raise expect.CheckFailure(_("with m - n = {offset} the scores should all be equal, got {shown}: each pair (x[2i], x[2i+1]) "
                                        "must be rotated by an angle proportional to its position, the same rotation for queries and "
                                        "keys").format(offset=offset, shown=shown))
    if torch.allclose(scores[0], scores[3]) and not torch.allclose(q, k):
        raise expect.CheckFailure(_("the score for m - n = 2 equals the one for m - n = -2: the rotation must depend on the sign of "
                                    "the offset (rotate (a, b) to (a cos t - b sin t, a sin t + b cos t))"))


def base_mistakes(x, positions, base):
    return {
        _("the base argument was ignored: the angle of pair i is position * base^(-2i / head_dim), with the base "
          "you were given (10000 only by default)"): lambda: rope_variant(x, positions),
        rope_differs(ROPE_HALF_SPLIT): lambda: rope_variant(x, positions, base=base, pairs="halves"),
    }


def row_mistakes(x, positions):
    return {
        _("every sequence was rotated at the first row of positions: with positions [B, S], row b holds the "
          "positions of sequence b"): lambda: rope_variant(x, positions[:1].expand_as(positions)),
        _("the positions were ignored: rotate each token at the position you were given, row b of positions "
          "[B, S] for sequence b"): lambda: rope_variant(x, positions, use_positions=False),
        rope_differs(ROPE_HALF_SPLIT): lambda: rope_variant(x, positions, pairs="halves"),
    }


@pytest.mark.points(3)
def test_rope_uses_the_base(student):
    """apply_rope(x, positions, base) rotates pair i by position * base^(-2i / head_dim), for base 100 and 500000"""
    for base in BASES:
        call, outcome = CALLS.get(student, f"base {base}")
        x, positions = call.args
        what = f"apply_rope(x [{B}, 5, {ROPE_DIM}], positions {positions.tolist()}, base={base:g})"
        got = expect.value(outcome)
        expect.close(got, ref.apply_rope(x, positions, base), what, atol=1e-6, rtol=1e-5,
                     mistakes=base_mistakes(x, positions, base))


@pytest.mark.points(4)
def test_rope_positions_per_sequence(student):
    """apply_rope(x, positions [B, S]) rotates sequence b at row b of positions, for x [B, S, head_dim] and [B, H, S, head_dim]"""
    for case in ("per row 3-D", "per row 4-D"):
        call, outcome = CALLS.get(student, case)
        x, positions = call.args
        shown = "x [" + ", ".join(map(str, x.shape)) + f"], positions {positions.tolist()}"
        got = expect.value(outcome, hint=HEAD_AXIS if x.dim() == 4 else "")
        expect.close(got, ref.apply_rope(x, positions), f"apply_rope({shown})", atol=1e-6, rtol=1e-5,
                     mistakes=row_mistakes(x, positions))
