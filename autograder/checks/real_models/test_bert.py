"""Hidden checks for part bert (assignment real_models): extended_attention_mask and BertStyleSelfAttention, against
transformers' BertSelfAttention.

The mask must be BERT's additive [B, 1, 1, S] mask exactly (0 for real keys, finfo(dtype).min for padding, in the
dtype asked for), from int and bool masks. The layer, loaded by `from_hf` from the worker's copy of the library's
BertSelfAttention (its weights, its attribute names), must equal the library's eager attention given the mask
BertModel builds, for several B, S and heads with padding; a sample whose keys are all padding must give the
library's finite output (uniform weights), where -inf gives NaN.
"""
import pytest
import torch

from autograder.foundation import i18n
from autograder.checks import expect
from autograder.checks.cases import seeded, send, smallest_failure
from autograder.checks.real_models import library, lookalike
from autograder.checks.real_models.common import bert_mistakes, extended_mask_mistakes
from solutions import real_models as ref

_ = i18n.message

SHAPES = ((2, 6, 3, 24), (3, 4, 2, 16), (4, 5, 4, 32))  # (B, S, H, d_model)
LENGTHS = {2: (6, 3), 3: (2, 4, 3), 4: (5, 1, 3, 4)}  # real tokens per sample (right-padded), by B
EMPTY = (3, 0, 5)  # the all-padding case: the middle sample has no real token
MASKS = {  # (mask, dtype): int and bool masks, and dtypes whose finfo.min differ
    "int64 mask, float32": (torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]), torch.float32),
    "bool mask, float32": (torch.tensor([[True, True, False], [True, True, True]]), torch.float32),
    "int mask, float16": (torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0]]), torch.float16),
    "int mask, bfloat16": (torch.tensor([[1, 0], [1, 1], [0, 0]]), torch.bfloat16),
}


def _layer(job, attn, d_model, heads):
    built = job.builtin("hf_bert_self_attention", lookalike.describe(attn), library.bert_state(attn))
    layer = job.wrap(job.method(job.fetch("BertStyleSelfAttention"), "from_hf", built),
                     "BertStyleSelfAttention.from_hf(attn)")
    job.eval(layer)  # as the library's reference is
    return layer


def _part(student) -> dict:
    checks = {}
    for case, (mask, dtype) in MASKS.items():
        job = student.job()
        checks[case] = (job, {"value": job.call("extended_attention_mask", mask, dtype)}, (mask, dtype))
    g = seeded()
    for B, S, heads, d_model in SHAPES:
        attn = library.bert_self_attention(d_model, heads, g)
        x = torch.randn(B, S, d_model, generator=g)
        mask = (torch.arange(S)[None, :] < torch.tensor(LENGTHS[B])[:, None]).long()
        job = student.job()
        layer = _layer(job, attn, d_model, heads)
        checks[("parity", B)] = (job, {"value": job.forward(layer, x, attention_mask=mask)}, (attn, x, mask, heads))
    S, heads, d_model = 5, 2, 16
    attn = library.bert_self_attention(d_model, heads, g)
    x = torch.randn(len(EMPTY), S, d_model, generator=g)
    mask = (torch.arange(S)[None, :] < torch.tensor(EMPTY)[:, None]).long()
    job = student.job()
    checks["empty"] = (job, {"value": job.forward(_layer(job, attn, d_model, heads), x, attention_mask=mask)},
                       (attn, x, mask, heads))
    return send(student, checks)


def part(student) -> dict:
    return student.once("real_models bert", lambda: _part(student))


@pytest.mark.points(1)
@pytest.mark.parametrize("case", list(MASKS))
def test_extended_attention_mask_is_berts_additive_mask(student, case):
    """extended_attention_mask(mask, dtype) is [B, 1, 1, S]: 0 for real keys, finfo(dtype).min for padding"""
    run = part(student)[case]
    mask, dtype = run.inputs
    got = run.value()
    expected = ref.extended_attention_mask(mask, dtype)
    B, S = mask.shape
    expect.close(got, expected, f"extended_attention_mask({case})", atol=0, rtol=0,
                 mistakes=extended_mask_mistakes(mask, dtype), shapes={
                     (B, S): _("the mask must broadcast over heads and queries: shape [B, 1, 1, S]"),
                     (B, 1, S): _("the mask must broadcast over heads and queries: shape [B, 1, 1, S], not [B, 1, S]")})


@pytest.mark.points(10)
def test_from_hf_equals_the_library_bert_self_attention(student):
    """BertStyleSelfAttention.from_hf(attn)(x, attention_mask) equals the library's BertSelfAttention (eager) for several B, S, heads, with padding"""
    runs = part(student)

    def check(B):
        attn, x, mask, heads = runs[("parity", B)].inputs
        got = runs[("parity", B)].value()
        expect.close(got, library.bert_reference(attn, x, mask), "BertStyleSelfAttention.from_hf(attn)(x, mask)",
                     atol=1e-5, mistakes=bert_mistakes(library.bert_state(attn), x, mask, heads))

    smallest_failure([(f"B={B}, S={S}, H={H}, d_model={d}", B) for B, S, H, d in sorted(SHAPES, key=lambda s: s[1])],
                     check)


@pytest.mark.points(6)
def test_a_sample_of_padding_only_gives_the_library_finite_output(student):
    """a sample whose keys are all padding gives the library's finite output (uniform weights over its keys), not NaN"""
    run = part(student)["empty"]
    attn, x, mask, heads = run.inputs
    got = expect.shape(run.value(), x.shape, "BertStyleSelfAttention(x, attention_mask) with an empty sample")
    expect.close(got, library.bert_reference(attn, x, mask), _("the output for a batch whose sample 1 is all padding"),
                 atol=1e-5, mistakes=bert_mistakes(library.bert_state(attn), x, mask, heads))
