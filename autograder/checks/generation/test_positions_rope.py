"""Hidden checks for part positions, continued: apply_rope's `base` and per-sequence positions [B, S].

A decoder calls apply_rope with its own base (Llama 3: 500000) and, for a left-padded batch,
with one row of positions per sequence. test_positions.py imports these checks, so they run
(and score) with the rest of part positions.
"""
import pytest
import torch

from autograder import i18n
from autograder.batch import Call
from autograder.checks import expect
from autograder.checks.cases import Cases
from autograder.checks.generation.common import B, H, ROPE_DIM
from autograder.checks.generation.decoder_variants import rope
from solutions import generation as ref

_ = i18n.message

POSITIONS = torch.tensor([7, 3, 12, 0, 29])
PER_ROW = torch.tensor([[0, 1, 2, 3, 4], [9, 4, 17, 2, 30]])  # [B, 5]: rows neither equal nor shifts of each other
BASES = (100.0, 500000.0)  # a small base (every pair turns fast), and Llama 3's

HALF_SPLIT = _("you rotated the pairs (x[i], x[i + head_dim/2]) (the half-split pairing of Hugging Face's rotate_half): "
               "the spec pairs neighbours, (x[2i], x[2i + 1]) (x[..., 0::2] with x[..., 1::2]), as Meta's Llama code does")
HEAD_AXIS = _("with positions [B, S] and x [B, H, S, head_dim], the angles [B, S, head_dim/2] need a head axis: "
              "angle[:, None] is [B, 1, S, head_dim/2], the same positions for every head of a sequence")

CALLS = Cases("generation positions rope", {
    **{f"base {base}": (lambda g, base=base: Call("apply_rope", torch.randn(B, 5, ROPE_DIM, generator=g, dtype=torch.float64),
                                                   POSITIONS, base=base)) for base in BASES},
    "per row 3-D": lambda g: Call("apply_rope", torch.randn(B, 5, ROPE_DIM, generator=g, dtype=torch.float64), PER_ROW),
    "per row 4-D": lambda g: Call("apply_rope", torch.randn(B, H, 5, ROPE_DIM, generator=g, dtype=torch.float64),
                                  PER_ROW),
})


def base_mistakes(x, positions, base):
    return {
        _("the base argument was ignored: the angle of pair i is position * base^(-2i / head_dim), with the base "
          "you were given (10000 only by default)"): rope(x, positions, 10000.0),
        HALF_SPLIT: rope(x, positions, base, pairs="halves"),
    }


def row_mistakes(x, positions):
    return {
        _("every sequence was rotated at the first row of positions: with positions [B, S], row b holds the "
          "positions of sequence b"): rope(x, positions[:1].expand_as(positions)),
        _("the positions were ignored: rotate each token at the position you were given, row b of positions "
          "[B, S] for sequence b"): rope(x, torch.arange(x.shape[-2])),
        HALF_SPLIT: rope(x, positions, pairs="halves"),
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
