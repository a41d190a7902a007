"""Hidden checks for part flex (assignment efficient): the mask_mods and score_mods that FlexAttention takes.

A mod is a function that stays in the sandboxed worker: each check asks for it there, then has the
worker run it through FlexAttention itself, `create_mask` for a mask_mod (the whole [B, H, S_q, S_k]
mask) and `flex_attention` for a score_mod (eager on the CPU, traced as the notebook traces it),
and compares the tensors that come back with masks and attention computed here from the
definitions. One round trip for the whole part.
"""
import pytest
import torch

from autograder.foundation import i18n
from autograder.checks import expect
from autograder.checks.cases import seeded, send
from autograder.checks.efficient.common import (alibi_variant, document_mask_variant, masked_attention,
                                                prefix_mask_variant, qkv, softcap_variant, window_mask_variant)

_ = i18n.message

FB, FH, FS = 2, 4, 11  # batch, heads, length of the flex checks
DOCUMENT_IDS = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 3],
                             [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]])  # [B, S]: packed documents of different lengths
PREFIX_LENGTHS = torch.tensor([3, 7])  # [B]
WINDOW = 3
CAP = 2.0  # the scores below reach well past it
# a power of two (one formula), then three that are not (the paper's code interleaves); 7: fewer than 2n/3 of the
# second list used, so that a slice counted from the end ([:n - H]) shows
ALIBI_HEADS = (8, 3, 12, 7)
TRACED = _("mask_mod and score_mod receive tensors and are traced (vmapped): use tensor operations only (&, |, "
           "torch.where, indexing a captured tensor), no Python if, and/or, or .item()")


def _mask_job(student, factory: str, arg, B, H, label: str):
    job = student.job()
    mod = job.call(factory, arg)
    mask = job.builtin_value("flex_mask", mod, B, H, FS, FS, label=label)
    return job, {"mask": mask}, None


def _attend_job(student, factory: str, arg, label: str, kind: str = "score_mod", scale: float = 1.0, heads: int = FH):
    q, k, v = qkv(seeded(21), FS, FS, b=FB, h=heads, d=8, d_v=5, scale=scale)
    job = student.job()
    mod = job.call(factory, arg)
    out = job.builtin_value("flex_attend", q, k, v, label=label, **{kind: mod})
    return job, {"out": out}, (q, k, v)


def jobs(student) -> dict:
    """Every check's job, in the order of the checks below."""
    return {
        "document": _mask_job(student, "document_causal_mask_mod", DOCUMENT_IDS, FB, None,
                              "create_mask(document_causal_mask_mod(document_ids), B=2, H=None, 11, 11)"),
        "document attention": _attend_job(student, "document_causal_mask_mod", DOCUMENT_IDS,
                                          "flex_attention(q, k, v, block_mask=create_block_mask("
                                          "document_causal_mask_mod(document_ids), ...))", kind="mask_mod"),
        "prefix": _mask_job(student, "prefix_lm_mask_mod", PREFIX_LENGTHS, FB, None,
                            "create_mask(prefix_lm_mask_mod(prefix_lengths), B=2, H=None, 11, 11)"),
        "window": _mask_job(student, "sliding_window_mask_mod", WINDOW, None, None,
                            "create_mask(sliding_window_mask_mod(3), None, None, 11, 11)"),
        **{("alibi", heads): _attend_job(student, "alibi_score_mod", heads, "flex_attention(q, k, v, score_mod="
                                         f"alibi_score_mod({heads}))", heads=heads) for heads in ALIBI_HEADS},
        "softcap": _attend_job(student, "softcap_score_mod", CAP,
                               "flex_attention(q, k, v, score_mod=softcap_score_mod(2.0))", scale=3.0),
    }


def ran(student, key: str):
    return student.once("efficient flex", lambda: send(student, jobs(student)))[key]


def check_mask(student, key: str, want: torch.Tensor, what: str, mistakes: dict) -> None:
    got = expect.hinted(lambda: ran(student, key).value("mask"), TRACED)
    expect.close(got, want, what, mistakes=mistakes)


@pytest.mark.points(3)
def test_document_causal_mask_mod(student):
    """document_causal_mask_mod: causal within each packed document, nothing across documents (create_mask)"""
    ids = DOCUMENT_IDS
    check_mask(student, "document", document_mask_variant(ids), "create_mask(document_causal_mask_mod(document_ids))", {
        _("tokens of one document must not see that document's later tokens: add causality, kv_idx <= q_idx"):
            lambda: document_mask_variant(ids, "not_causal"),
        _("a token may not see other documents: compare document_ids[b, q_idx] with document_ids[b, kv_idx]"):
            lambda: document_mask_variant(ids, "no_documents"),
    })


@pytest.mark.points(2)
def test_document_causal_mask_mod_through_flex_attention(student):
    """flex_attention with document_causal_mask_mod's block mask equals attention masked by document and causally"""
    run = ran(student, "document attention")
    q, k, v = run.inputs
    got = expect.hinted(lambda: run.value("out"), TRACED)
    expect.close(got, masked_attention(q, k, v, document_mask_variant(DOCUMENT_IDS))[0],
                 "flex_attention with document_causal_mask_mod", atol=1e-5, rtol=1e-4)


@pytest.mark.points(3)
def test_prefix_lm_mask_mod(student):
    """prefix_lm_mask_mod: every query sees its sequence's whole prefix, and causally after it (create_mask)"""
    lengths = PREFIX_LENGTHS
    check_mask(student, "prefix", prefix_mask_variant(lengths, FS), "create_mask(prefix_lm_mask_mod(prefix_lengths))", {
        _("the prefix is kv_idx < prefix_lengths[b]: your prefix holds one key too many"):
            lambda: prefix_mask_variant(lengths, FS, "inclusive"),
        _("each sequence has its own prefix length: index prefix_lengths with b"):
            lambda: prefix_mask_variant(lengths, FS, "first_row"),
        _("after the prefix the mask is causal: a query also sees keys kv_idx <= q_idx"):
            lambda: prefix_mask_variant(lengths, FS, "prefix_only"),
    })


@pytest.mark.points(2)
def test_sliding_window_mask_mod(student):
    """sliding_window_mask_mod(window) gives the mask of sliding_window_mask: q_idx - window < kv_idx <= q_idx"""
    def variant(kind):
        return lambda: window_mask_variant(FS, WINDOW, kind)[None, None]

    check_mask(student, "window", window_mask_variant(FS, WINDOW)[None, None],
               "create_mask(sliding_window_mask_mod(3))", {
                   _("your window is one key too wide: q_idx - window < kv_idx <= q_idx"): variant("wide"),
                   _("your window is one key too narrow: q_idx - window < kv_idx <= q_idx"): variant("narrow"),
                   _("your window also looks ahead: add kv_idx <= q_idx"): variant("two_sided"),
               })


def check_scored(student, key: str, want, what: str, mistakes: dict) -> None:
    got = expect.hinted(lambda: ran(student, key).value("out"), TRACED)
    expect.close(got, want, what, atol=1e-5, rtol=1e-4, mistakes=mistakes)


def alibi_mistakes(q, k, v, heads: int) -> dict:
    def variant(kind):
        return lambda: alibi_variant(q, k, v, kind)

    return {
        _("ALiBi's sign: the bias is slope_h * (kv_idx - q_idx), negative for keys in the past, so that distant keys "
          "weigh less"): variant("sign"),
        _("ALiBi's slopes are in the wrong head order: the steepest slope goes to head 0"): variant("reversed"),
        _("ALiBi's slope of head h is 2^(-8 (h + 1) / H): heads count from 0, so add 1 to h"): variant("from_zero"),
        _("the formula 2^(-8 (h + 1) / H) for every H matches the paper's slopes only when H is a power of two: for "
          "H = {H}, take the slopes of the largest power of two n below H, then the first H - n of the slopes of 2n "
          "heads at even indices (slopes_2n[0::2]), as the ALiBi paper's get_slopes does").format(H=heads):
            variant("formula"),
    }


@pytest.mark.points(3)
def test_alibi_score_mod(student):
    """alibi_score_mod(H) adds slope_h (kv_idx - q_idx) with the ALiBi paper's slopes, for H = 8, 3, 12 and 7 (flex_attention)"""
    for heads in ALIBI_HEADS:
        q, k, v = ran(student, ("alibi", heads)).inputs
        check_scored(student, ("alibi", heads), alibi_variant(q, k, v), f"flex_attention with alibi_score_mod({heads})",
                     alibi_mistakes(q, k, v, heads))


@pytest.mark.points(2)
def test_softcap_score_mod(student):
    """softcap_score_mod(cap) maps each score to cap * tanh(score / cap) (flex_attention, scores beyond the cap)"""
    q, k, v = ran(student, "softcap").inputs
    check_scored(student, "softcap", softcap_variant(q, k, v, CAP), "flex_attention with softcap_score_mod(2.0)", {
        _("soft-capping is cap * tanh(score / cap), smooth and never quite reaching the cap; clamping the scores "
          "to [-cap, cap] is not it"): lambda: softcap_variant(q, k, v, CAP, "clamp"),
        _("divide by the cap inside the tanh: cap * tanh(score / cap)"):
            lambda: softcap_variant(q, k, v, CAP, "no_divide"),
        _("your score_mod changed nothing: return cap * tanh(score / cap)"): lambda: softcap_variant(q, k, v, CAP,
                                                                                                     "none"),
    })
