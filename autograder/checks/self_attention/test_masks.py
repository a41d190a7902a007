"""Hidden checks for part masks: padding_mask, causal_mask, apply_padding_mask, apply_causal_mask."""
import pytest
import torch

import solutions as ref
from autograder.foundation import i18n
from autograder.sandbox.batch import Call
from autograder.checks import expect
from autograder.checks.cases import Cases, smallest_failure
from autograder.checks.self_attention.common import B, H, LENGTHS, NEG_INF, S, lengths_mask, mask_scores, randn

_ = i18n.message

# padding_mask over batches of lengths, smallest first (a full, a padded and an empty sequence among them)
LENGTH_CASES = (([1], 1), ([1], 2), ([2, 1], 2), ([0, 3], 3), ([4, 2, 1], 4), ([5, 0], 6), ([3, 7, 1, 5], 8))

NON_SQUARE = (2, 3, 5)  # [B, S_q, S_k] scores: fewer queries than keys (the contract: top-left aligned)

PAD_4D_HINT = _("for [B, H, S_q, S_k] scores a [B, S] mask must become [B, 1, 1, S_k] (mask[:, None, None, :])")

# Every call of this part, in the order of the checks below: one round trip for all of them.
CALLS = Cases("masks", {
    "padding_mask": lambda g: Call("padding_mask", torch.tensor([4, 1, 6]), 6),
    "causal_mask": lambda g: Call("causal_mask", S),
    "padding 3-D": lambda g: Call("apply_padding_mask", randn(g, B, S, S), lengths_mask()),
    "padding 4-D": lambda g: Call("apply_padding_mask", randn(g, B, H, S, S), lengths_mask()),
    "causal 3-D": lambda g: Call("apply_causal_mask", randn(g, B, S, S, dtype=torch.float64)),
    "causal 4-D": lambda g: Call("apply_causal_mask", randn(g, B, H, S, S)),
    "causal non-square": lambda g: Call("apply_causal_mask", randn(g, *NON_SQUARE)),
    **{("lengths", i): (lambda g, c=case: Call("padding_mask", torch.tensor(c[0]), c[1]))
       for i, case in enumerate(LENGTH_CASES)},
})


def bool_result(value, expected, what: str, mistakes: dict):
    value = expect.shape(value, expected.shape, what, mistakes,
                         hints={tuple(reversed(expected.shape)): _("your mask is transposed")})
    if value.dtype != torch.bool:
        raise expect.CheckFailure(_("{what} returned dtype {dtype}: return a torch.bool mask (a comparison such as positions < "
                                    "lengths gives one)").format(what=what, dtype=value.dtype))
    if not torch.equal(value, expected):
        hint = expect.diagnose(value, mistakes)
        wrong = int((value != expected).sum())
        raise expect.CheckFailure(expect.hinted_message(_("{what} is wrong in {wrong} of {numel} places").format(
            what=what, wrong=wrong, numel=expected.numel()), hint))


def check_padding_mask(call, outcome):
    lengths, seq_len = call.args
    want = ref.padding_mask(lengths, seq_len)
    positions = torch.arange(seq_len)[None, :]
    mistakes = {
        _("your mask is inverted: True must mark the real tokens (position < length), False the padding"): ~want,
        _("off by one: position < length is a real token, position == length is already padding"):
            positions <= lengths[:, None],
        _("off by one: the first `length` positions are real tokens (position < length)"): positions < lengths[:, None] - 1,
    }
    bool_result(outcome.value, want, f"padding_mask({lengths.tolist()}, {seq_len})", mistakes)


@pytest.mark.points(3)
def test_padding_mask_marks_real_tokens(student):
    """padding_mask(lengths, seq_len) is True exactly where position < length"""
    check_padding_mask(*CALLS.get(student, "padding_mask"))


@pytest.mark.points(1)
def test_padding_mask_for_every_batch_of_lengths(student):
    """padding_mask is right for batches of 1 to 4 sequences, full, padded and empty (the smallest failing case named)"""
    cases = [("B={B}, S={S}, lengths={lengths}".format(B=len(lengths), S=seq_len, lengths=lengths), i)
             for i, (lengths, seq_len) in enumerate(LENGTH_CASES)]
    smallest_failure(cases, lambda i: check_padding_mask(*CALLS.get(student, ("lengths", i))))


@pytest.mark.points(2)
def test_causal_mask_is_lower_triangle(student):
    """causal_mask(S) is True where key j <= query i, diagonal included"""
    want = ref.causal_mask(S)
    mistakes = {
        _("your mask hides the diagonal: a token may attend to itself, key j <= query i (tril(), not "
          "tril(-1))"):
            torch.ones(S, S, dtype=torch.bool).tril(-1),
        _("your mask is transposed: row i is query i, and it may see the keys j <= i (the lower triangle, "
          "tril)"):
            torch.ones(S, S, dtype=torch.bool).triu(),
        _("your mask is inverted: True means 'may attend' (the past and the present), False the future"):
            torch.ones(S, S, dtype=torch.bool).triu(1),
    }
    bool_result(CALLS.get(student, "causal_mask")[1].value, want, f"causal_mask({S})", mistakes)


def padding_mistakes(scores, mask):
    return {
        _("your padding mask hides queries, not keys: padded positions must be masked along the last axis "
          "of the scores"):
            mask_scores(scores, mask, on="queries"),
        _("your mask is inverted: True marks a real token, so fill -inf where the mask is False "
          "(masked_fill(~mask, ...))"):
            mask_scores(scores, mask, invert=True),
        _("nothing was masked"): scores,
    }


def check_neg_inf(got, want, what):
    hidden = torch.isinf(want)
    if got.shape == want.shape and hidden.any() and torch.isfinite(got[hidden]).all() \
            and (got[hidden] < -1e3).all() and torch.equal(got[~hidden], want[~hidden]):
        raise expect.CheckFailure(_("{what} puts {item:.3g} at the masked places: the course's convention is -inf (float('-inf')), "
                                    "which gives weight exactly 0 in any dtype").format(what=what, item=got[hidden].max().item()))


@pytest.mark.points(3)
def test_padding_mask_on_3d_scores(student):
    """apply_padding_mask puts -inf at padded keys of [B, S, S] scores and keeps the rest"""
    call, outcome = CALLS.get(student, "padding 3-D")
    scores, mask = call.args
    want = ref.apply_padding_mask(scores, mask)
    what = _("apply_padding_mask on [B, S, S] scores with lengths {lengths}").format(lengths=list(LENGTHS))
    got = expect.value(outcome, hint=_("a [B, S] mask needs mask[:, None, :] to line up with [B, S, S] scores"))
    shapes = {(B, B, S, S): _("the mask was broadcast against the batch axis twice: a [B, S] mask needs mask[:, None, :] for "
                              "[B, S, S] scores ([B, 1, 1, S] is for 4-D [B, H, S, S] scores)")}
    expect.shape(got, want.shape, what, hints=shapes)
    check_neg_inf(got, want, what)
    expect.close(got, want, what, mistakes=padding_mistakes(scores, mask))


@pytest.mark.points(3)
def test_padding_mask_on_4d_scores(student):
    """apply_padding_mask works on per-head [B, H, S, S] scores"""
    call, outcome = CALLS.get(student, "padding 4-D")
    scores, mask = call.args
    want = ref.apply_padding_mask(scores, mask)
    what = _("apply_padding_mask on [B, H, S, S] scores with lengths {lengths}").format(lengths=list(LENGTHS))
    got = expect.value(outcome, hint=PAD_4D_HINT)
    expect.shape(got, want.shape, what, hints={tuple(got.shape) if isinstance(got, torch.Tensor) else (): PAD_4D_HINT})
    check_neg_inf(got, want, what)
    expect.close(got, want, what, mistakes=padding_mistakes(scores, mask))


def causal_mistakes(scores):
    return {
        _("your causal mask hides the diagonal: a token may attend to itself (hide key j > query i only)"):
            mask_scores(scores, causal=True, causal_diagonal=0),
        _("your causal mask is transposed: hide the keys after the query (above the diagonal), not before "
          "it"):
            mask_scores(scores, causal=True, causal_transposed=True),
        _("your causal mask is inverted: -inf goes where key j > query i (the future), the rest is kept"):
            scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).tril(), NEG_INF),
        _("nothing was masked"): scores,
    }


@pytest.mark.points(2)
@pytest.mark.parametrize("dims", [3, 4], ids=["3-D", "4-D"])
def test_causal_mask_hides_the_future(student, dims):
    """apply_causal_mask puts -inf wherever key j > query i, for [B, S, S] and [B, H, S, S] scores"""
    call, outcome = CALLS.get(student, f"causal {dims}-D")
    [scores] = call.args
    want = ref.apply_causal_mask(scores)
    what = (_("apply_causal_mask on {dims}-D float64 scores") if dims == 3 else _("apply_causal_mask on {dims}-D scores")
            ).format(dims=dims)
    got = outcome.value
    expect.shape(got, want.shape, what)
    check_neg_inf(got, want, what)
    expect.close(got, want, what, mistakes=causal_mistakes(scores))


@pytest.mark.points(2)
def test_causal_mask_on_non_square_scores(student):
    """apply_causal_mask works on non-square [B, S_q, S_k] scores, top-left aligned: -inf wherever key j > query i"""
    call, outcome = CALLS.get(student, "causal non-square")
    [scores] = call.args
    S_q, S_k = scores.shape[-2:]
    want = ref.apply_causal_mask(scores)
    what = _("apply_causal_mask on non-square [B, S_q, S_k] = {shape} scores").format(shape=list(NON_SQUARE))
    square = _("your mask is square: build it from both scores.shape[-2] (the S_q queries) and scores.shape[-1] (the "
               "S_k keys), e.g. torch.ones(S_q, S_k).triu(1)")
    got = expect.value(outcome, hint=square)
    expect.shape(got, want.shape, what, hints={(B, S_k, S_k): square, (B, S_q, S_q): square})
    check_neg_inf(got, want, what)
    bottom_right = scores.masked_fill(torch.ones(S_q, S_k, dtype=torch.bool).triu(S_k - S_q + 1), NEG_INF)
    expect.close(got, want, what, mistakes={
        _("your mask is bottom-right aligned (query i sees keys j <= i + S_k - S_q, as in decoding with a cache): "
          "apply_causal_mask is top-left aligned, query i sees keys j <= i (the generation assignment's "
          "decode_causal_mask is the other one)"): bottom_right,
        _("your causal mask hides the diagonal: a token may attend to itself (hide key j > query i only)"):
            mask_scores(scores, causal=True, causal_diagonal=0),
        _("nothing was masked"): scores})
