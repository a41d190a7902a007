"""The visible checks of notebook 04_flex (`efficient`): FlexAttention's mask_mod and score_mod functions.

visible_checks.py (course/visible_checks_efficient.py) builds them on its harness with `flex_checks`, so that they
speak the notebook's language and name the student's line like the others; they live here to keep each file short.
Pure torch: a mask_mod is seen through flex_attention's own `create_mask` (vmap, as flex_attention calls it), a
score_mod on whole grids of indices (tensors, as flex_attention hands them over).
"""
from __future__ import annotations

import math

import torch

# The start of the errors vmap raises when a mod decides in Python on a tensor (`if`, `and`, `or`, `.item()`).
_VMAP_ERRORS = ("vmap: It looks like you're attempting to use a Tensor in some data-dependent control flow",
                "vmap: It looks like you're calling .item() on a Tensor")


def _grid(H: int, S: int):
    """Index tensors h [H, 1, 1], q_idx [1, S, 1], kv_idx [1, 1, S]: every (head, query, key) at once."""
    return torch.arange(H)[:, None, None], torch.arange(S)[None, :, None], torch.arange(S)[None, None, :]


def flex_checks(harness, close, ok, NotReady, plain):
    """(check_document_causal_mask_mod, check_prefix_lm_mask_mod, check_sliding_window_mask_mod,
    check_alibi_score_mod, check_softcap_score_mod) on `harness` (plain: check_harness.plain, one sentence)."""
    _ = harness.gettext

    def mask_of(mask_mod, B: int, S: int, name: str) -> torch.Tensor:
        try:
            from torch.nn.attention.flex_attention import create_mask
        except ImportError:
            raise NotReady(_("this PyTorch has no torch.nn.attention.flex_attention (it needs 2.5 or later)")) from None
        try:
            return create_mask(mask_mod, B, None, S, S, device="cpu")[:, 0]  # [B, S, S]
        except RuntimeError as error:
            if not str(error).startswith(_VMAP_ERRORS):
                raise
            line = harness.student_line(error)
            raise plain(_(
                "your `{name}` decides in Python on a tensor{where}: a mask_mod receives tensors and runs under vmap, "
                "where `if`, `and`, `or` and `.item()` cannot decide; combine the conditions with `&` and `|`, or "
                "choose with `torch.where`").format(
                name=name, where=_(", in the line `{line}`").format(line=line) if line else "")) from None

    def same(got, want_row, what):
        """One row of a mask, as 0/1 in the message."""
        assert got.tolist() == want_row, _("{what}: got {got}, expected {want}").format(
            what=what, got=[int(x) for x in got.tolist()], want=[int(x) for x in want_row])

    @harness.check("document_causal_mask_mod")
    def check_document_causal_mask_mod(document_causal_mask_mod) -> None:
        ids = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 0, 1]])
        mask = mask_of(harness.watch(document_causal_mask_mod, "document_causal_mask_mod")(ids), 2, 5,
                       "document_causal_mask_mod")
        assert not mask[0, 2, :2].any(), _("token 2 of sample 0 starts document 1: it may not see document 0's tokens 0 "
                                           "and 1")
        assert not mask.triu(1).any(), _("within a document the mask is causal: no key after the query")
        same(mask[1, 3], [True, True, True, True, False], _("sample 1, query 3 (documents are per sample: "
                                                            "document_ids[b])"))
        same(mask[0, 4], [False, False, True, True, True], _("sample 0, query 4"))
        ok(_("document_causal_mask_mod: causal within each document, nothing across, per sample"))

    @harness.check("prefix_lm_mask_mod")
    def check_prefix_lm_mask_mod(prefix_lm_mask_mod) -> None:
        mask = mask_of(harness.watch(prefix_lm_mask_mod, "prefix_lm_mask_mod")(torch.tensor([3, 1])), 2, 5,
                       "prefix_lm_mask_mod")
        same(mask[0, 0], [True, True, True, False, False], _("sample 0 (prefix 3), query 0: it sees the whole prefix"))
        same(mask[0, 4], [True, True, True, True, True], _("sample 0, query 4"))
        same(mask[1, 1], [True, True, False, False, False], _("sample 1 (prefix 1), query 1: causal after the prefix"))
        ok(_("prefix_lm_mask_mod: the whole prefix for every query, causal after it, per sample"))

    @harness.check("sliding_window_mask_mod")
    def check_sliding_window_mask_mod(sliding_window_mask_mod) -> None:
        mask = mask_of(harness.watch(sliding_window_mask_mod, "sliding_window_mask_mod")(3), 1, 6,
                       "sliding_window_mask_mod")[0]
        same(mask[4], [False, False, True, True, True, False], _("window 3, query 4 (itself and the 2 keys before it)"))
        assert not mask.triu(1).any(), _("a query may not see keys after it")
        ok(_("sliding_window_mask_mod: the band of sliding_window_mask, through create_mask"))

    def on_grid(score_mod, H: int, S: int) -> torch.Tensor:
        """The score_mod on a zero score for every (head, query, key) at once: [H, S, S]."""
        h, q_idx, kv_idx = _grid(H, S)
        try:
            return score_mod(torch.zeros(H, S, S), torch.tensor(0), h, q_idx, kv_idx)
        except (TypeError, IndexError, RuntimeError, ValueError) as error:
            if isinstance(error, (RuntimeError, ValueError)) and "converted to" not in str(error):
                raise  # not a list or .item() indexed by a tensor: the harness names it as it is
            raise harness.raised("alibi_score_mod", error, advice=_(
                "flex_attention hands the score_mod tensors of indices (here h of shape [{H}, 1, 1], every head at "
                "once): keep the slopes in a tensor, torch.tensor(slopes), and index it with h itself; neither a "
                "Python list nor .item() takes more than one index").format(H=H)) from None

    @harness.check("alibi_score_mod")
    def check_alibi_score_mod(alibi_score_mod) -> None:
        score_mod = harness.watch(alibi_score_mod, "alibi_score_mod")(4)
        bias = harness.expect_shape(on_grid(score_mod, 4, 6), [4, 6, 6], "alibi_score_mod(4) on h [4, 1, 1], q_idx "
                                                                         "[1, 6, 1], kv_idx [1, 1, 6]")
        got = bias[:, 5, 2].tolist()  # query 5, key 2, score 0, heads 0..3
        slopes = [2 ** (-8 * (h + 1) / 4) for h in range(4)]
        if all(math.isclose(x, 3 * s, rel_tol=1e-4) for x, s in zip(got, slopes)):
            raise AssertionError(_("a key 3 positions back got a bonus of +3 x slope: ALiBi penalises distance, "
                                   "slope_h * (kv_idx - q_idx) is negative for past keys"))
        if all(math.isclose(x, -3 * s, rel_tol=1e-4) for x, s in zip(got, reversed(slopes))):
            raise AssertionError(_("the slopes come in reverse order: head 0 has the steepest slope, 2^(-8 / num_heads)"))
        want = [-3 * s for s in slopes]
        assert all(math.isclose(x, w, rel_tol=1e-4) for x, w in zip(got, want)), _(
            "query 5, key 2, score 0: heads 0..3 got {got}, expected {want} (slope_h = 2^(-8 (h + 1) / num_heads))"
        ).format(got=[round(x, 4) for x in got], want=[round(w, 4) for w in want])
        got = (-on_grid(harness.watch(alibi_score_mod, "alibi_score_mod")(12), 12, 2)[:, 1, 0]).tolist()
        paper = [2 ** -(h + 1) for h in range(8)] + [2 ** -(h + 0.5) for h in range(4)]  # the paper's get_slopes(12)
        if all(math.isclose(x, 2 ** (-8 * (h + 1) / 12), rel_tol=1e-4) for h, x in enumerate(got)):
            raise AssertionError(_("12 heads: the formula 2^(-8 (h + 1) / H) for every H matches the paper's slopes "
                                   "only when H is a power of two: take the 8 slopes of 8 heads, then the first 4 of "
                                   "the slopes of 16 heads at even indices (slopes_16[0::2])"))
        assert all(math.isclose(x, w, rel_tol=1e-4) for x, w in zip(got, paper)), _(
            "12 heads: the slopes are {got}, expected the paper's {want}").format(
            got=[round(x, 4) for x in got], want=[round(w, 4) for w in paper])
        got = (-on_grid(harness.watch(alibi_score_mod, "alibi_score_mod")(7), 7, 2)[:, 1, 0]).tolist()
        paper = [2 ** (-2 * (h + 1)) for h in range(4)] + [2 ** -(h + 1) for h in range(0, 8, 2)][:3]
        assert all(math.isclose(x, w, rel_tol=1e-4) for x, w in zip(got, paper)) and len(got) == 7, _(
            "7 heads: the slopes are {got}, expected the paper's {want} (the 4 slopes of 4 heads, then the first 3 of "
            "the slopes of 8 heads at even indices)").format(got=[round(x, 4) for x in got], want=[round(w, 4) for w in paper])
        ok(_("alibi_score_mod: score + slope_h * (kv_idx - q_idx), the paper's slopes for 4, 7 and 12 heads"))

    @harness.check("softcap_score_mod")
    def check_softcap_score_mod(softcap_score_mod) -> None:
        score_mod = harness.watch(softcap_score_mod, "softcap_score_mod")(20.0)
        scores = torch.tensor([-100.0, -10.0, 0.0, 1.0, 19.0, 100.0])
        index = torch.tensor(0)
        got = harness.expect_shape(score_mod(scores, index, index, index, index), [6],
                                   "softcap_score_mod(20.0)(scores, ...)")
        if close(got, scores.clamp(-20, 20), 1e-5):
            raise AssertionError(_("the scores are clamped to [-cap, cap]: soft-capping is cap * tanh(score / cap), "
                                   "smooth, with a gradient everywhere"))
        assert close(got, 20 * torch.tanh(scores / 20), 1e-5), _(
            "softcap should give cap * tanh(score / cap), got {got}").format(got=[round(x, 3) for x in got.tolist()])
        ok(_("softcap_score_mod: cap * tanh(score / cap), never beyond +-cap"))

    return (check_document_causal_mask_mod, check_prefix_lm_mask_mod, check_sliding_window_mask_mod,
            check_alibi_score_mod, check_softcap_score_mod)
