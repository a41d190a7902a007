"""Hidden checks for part multihead: split_heads, merge_heads, MultiHeadSelfAttention.

The expected output of the module is nn.MultiheadAttention's, given in_proj_weight =
W_qkv.weight and out_proj.weight = W_o.weight: that fixes the q, k, v order of W_qkv's rows
and the scale (sqrt(head_dim)). It is recomputed by mh_variant(), whose equality with
nn.MultiheadAttention is tested in tests/test_checks_helpers.py.
"""
import math

import torch

import pytest

import solutions as ref
from autograder.foundation import i18n, spec
from autograder.checks import expect, lent
from autograder.checks.cases import seeded
from autograder.checks.self_attention.common import (B, D_MODEL, H, HEAD_DIM, IGNORED_WITH_CAUSAL, LENGTHS, PIECE_PROBES, S,
                                                     lengths_mask, mh_variant, randn)
from autograder.foundation.failures import StudentRaised

_ = i18n.message


@pytest.fixture(autouse=True)
def lent_pieces_multihead(student):
    """MultiHeadSelfAttention is graded with the reference scaled_scores, attention_weights, attend and masks in place of the
    student's (each costs points in its own part only); the part's note names the student's wrong ones."""
    lent.lending(student, "MultiHeadSelfAttention", spec.SELF_ATTENTION.part("multihead"), ref, PIECE_PROBES)
TAKEN = (_("{names} from the first block"), _("{names} from the second block"), _("{names} from the third block"))

SPLIT_HINTS = {
    _("you reshaped [B, S, d_model] straight to [B, H, S, head_dim]: view it as [B, S, H, head_dim] "
      "first, then transpose(1, 2)"): lambda x: x.reshape(B, H, S, HEAD_DIM),
    _("you moved the feature axis before splitting it: view as [B, S, H, head_dim] first, then "
      "transpose(1, 2)"):
        lambda x: x.transpose(1, 2).reshape(B, H, S, HEAD_DIM),
    _("each head takes a contiguous block of head_dim features: view(B, S, H, head_dim), not (B, S, "
      "head_dim, H)"):
        lambda x: x.reshape(B, S, HEAD_DIM, H).permute(0, 3, 1, 2),
}


CASES = {"no mask": (False, False), "padding mask": (True, False), "padding mask and causal": (True, True)}


def _part(student) -> dict:
    """Every check's requests of this part, in the order of the checks, in one round trip:
    {check: (its inputs, its job's result, the step it reads)}."""
    checks = {}
    job = student.job()
    x = randn(seeded(), B, S, D_MODEL)
    checks["split"] = ((x,), job, job.call("split_heads", x, H))
    job = student.job()
    x = randn(seeded(), B, H, S, HEAD_DIM)
    checks["merge"] = ((x,), job, job.call("merge_heads", x))
    job = student.job()
    checks["submodules"] = ((), job, job.describe(job.new("MultiHeadSelfAttention", D_MODEL, H)))
    for case, (use_mask, causal) in CASES.items():
        job, g = student.job(), seeded()
        module = job.new("MultiHeadSelfAttention", D_MODEL, H)
        w_qkv = randn(g, 3 * D_MODEL, D_MODEL) / math.sqrt(D_MODEL)
        w_o = randn(g, D_MODEL, D_MODEL) / math.sqrt(D_MODEL)
        load = job.load_state_dict(module, {"W_qkv.weight": w_qkv, "W_o.weight": w_o})
        job.eval(module)
        x = randn(g, B, S, D_MODEL)
        mask = lengths_mask() if use_mask else None
        kwargs = ({"mask": mask} if use_mask else {}) | ({"causal": True} if causal else {})
        checks[case] = ((w_qkv, w_o, x, mask, causal, load), job, job.forward(module, x, **kwargs))
    job, g = student.job(), seeded()
    module = job.new("MultiHeadSelfAttention", D_MODEL, H, dropout=DROPOUT)
    w_qkv = randn(g, 3 * D_MODEL, D_MODEL) / math.sqrt(D_MODEL)
    w_o = randn(g, D_MODEL, D_MODEL) / math.sqrt(D_MODEL)
    load = job.load_state_dict(module, {"W_qkv.weight": w_qkv, "W_o.weight": w_o})
    job.train(module)
    x = randn(g, 1, 1, D_MODEL).expand(B, S, D_MODEL).contiguous()  # every token the same vector
    checks["dropout"] = ((w_qkv, w_o, x, load), job, job.forward(module, x))
    results = student.run([job for _, job, _ in checks.values()])
    return {key: (inputs, result, step) for (key, (inputs, _, step)), result in zip(checks.items(), results)}


def part(student, check: str):
    return student.once("multihead", lambda: _part(student))[check]


@pytest.mark.points(3)
def test_split_heads(student):
    """split_heads turns [B, S, d_model] into [B, H, S, head_dim], head h holding features h*head_dim..(h+1)*head_dim"""
    (x,), result, step = part(student, "split")
    got = result[step]
    expect.close(got, ref.split_heads(x, H), f"split_heads(x [{B}, {S}, {D_MODEL}], {H})",
                 mistakes={hint: fn(x) for hint, fn in SPLIT_HINTS.items()},
                 shapes={(B, S, H, HEAD_DIM): _("move the head axis forward: transpose(1, 2) after the view")})


@pytest.mark.points(3)
def test_merge_heads(student):
    """merge_heads turns [B, H, S, head_dim] back into [B, S, H * head_dim] (the inverse of split_heads)"""
    (x,), result, step = part(student, "merge")
    got = expect.hinted(lambda: result[step],
                        hint=_("after transpose(1, 2) the tensor is not contiguous: use .reshape(...) or "
                               ".contiguous().view(...)"))
    expect.close(got, ref.merge_heads(x), f"merge_heads(x [{B}, {H}, {S}, {HEAD_DIM}])",
                 mistakes={_("you did not transpose back: transpose(1, 2) to [B, S, H, head_dim] before reshaping to [B, S, "
                             "d_model]"): x.reshape(B, S, D_MODEL)})


@pytest.mark.points(2)
def test_submodules(student):
    """MultiHeadSelfAttention has W_qkv (d_model -> 3 d_model), W_o (d_model -> d_model), both bias-free, and dropout"""
    call = f"MultiHeadSelfAttention({D_MODEL}, {H})"
    layers = {"W_qkv": (D_MODEL, 3 * D_MODEL), "W_o": (D_MODEL, D_MODEL)}
    roles = {"W_qkv": "d_model -> 3 * d_model, rows q, k, v", "W_o": "d_model -> d_model"}
    __, result, step = part(student, "submodules")
    expect.submodules(result[step], layers, 0.0, call, roles)


def mh_mistakes(w_qkv, w_o, x, mask, causal):
    """{hint: () -> output} for the usual mistakes of a multi-head forward on these inputs (computed lazily)."""
    args = (w_qkv, w_o, x, mask, causal)
    out = {
        _("you scaled by sqrt(d_model) = sqrt({d_model}); each head's scores are scaled by sqrt(head_dim) "
          "= sqrt({head_dim})").format(d_model=D_MODEL, head_dim=HEAD_DIM): lambda: mh_variant(*args, scale=D_MODEL ** -0.5),
        _("you did not scale the scores: divide by sqrt(head_dim)"): lambda: mh_variant(*args, scale=1.0),
        _("the softmax runs over the queries: use dim=-1 (the keys)"): lambda: mh_variant(*args, dim=-2),
        _("you split the heads without the transpose: view as [B, S, H, head_dim], then transpose(1, 2)"):
            lambda: mh_variant(*args, split="no_transpose"),
        _("you merged the heads without transposing back to [B, S, H, head_dim] first"):
            lambda: mh_variant(*args, merge="no_transpose"),
    }
    names = "QKV"
    for order in ((1, 0, 2), (0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)):
        taken = _("{first}, {second}, {third}").format(**{place: TAKEN[order[i]].format(names=names[i])
                                                          for i, place in enumerate(("first", "second", "third"))})
        out[_("the rows of W_qkv must be ordered q, k, v as in nn.MultiheadAttention.in_proj_weight; you took "
              "{taken}").format(taken=taken)] = \
            (lambda o=order: mh_variant(*args, order=o))
    # W_qkv's output read per head as (q, k, v) blocks of head_dim (Megatron's layout) is the standard reading of these
    # rows reordered: [H, 3, head_dim, d_model] -> [3, H, head_dim, d_model]
    interleaved = w_qkv.view(H, 3, HEAD_DIM, D_MODEL).transpose(0, 1).reshape(3 * D_MODEL, D_MODEL)
    out[_("you read W_qkv's output per head, as interleaved (q, k, v) blocks of head_dim (Megatron's layout); its "
          "rows are three d_model blocks, q, then k, then v, as in nn.MultiheadAttention.in_proj_weight: "
          ".chunk(3, dim=-1) first, then split each into heads")] = \
        lambda: mh_variant(interleaved, w_o, x, mask, causal)
    if mask is not None:
        out[_("your padding mask hides queries, not keys: use mask[:, None, None, :] for [B, H, S, S] scores")] = \
            lambda: mh_variant(*args, on="queries")
        out[_("your padding mask is inverted: True marks a real token")] = lambda: mh_variant(*args, invert=True)
        out[IGNORED_WITH_CAUSAL if causal else _("the padding mask is ignored: padded keys were attended")] = \
            lambda: mh_variant(w_qkv, w_o, x, None, causal)
    if causal:
        out[_("the causal mask is ignored: queries attended to the keys after them")] = \
            lambda: mh_variant(w_qkv, w_o, x, mask, False)
        out[_("your causal mask hides the diagonal")] = lambda: mh_variant(*args, causal_diagonal=0)
        out[_("your causal mask is transposed: hide key j > query i")] = lambda: mh_variant(*args, causal_transposed=True)
    return out


@pytest.mark.points(7 / 3)
@pytest.mark.parametrize("case", list(CASES))
def test_forward_matches_official_module(student, case):
    """in eval mode, forward(x, mask, causal) equals nn.MultiheadAttention with in_proj_weight = W_qkv.weight"""
    use_mask, causal = CASES[case]
    (w_qkv, w_o, x, mask, causal, load), result, step = part(student, case)
    if result.failed(load) and isinstance(result.failure, StudentRaised):
        raise expect.CheckFailure(_("weights could not be loaded into your module ({failure}): it needs exactly the bias-free "
                                    "layers W_qkv and W_o").format(failure=result.failure))
    try:
        got = result[step]
    except StudentRaised as exc:
        if use_mask and exc.kind == "RuntimeError":
            raise expect.CheckFailure(_("{exc}; per-head scores are [B, H, S, S]: the [B, S] padding mask must become mask[:, None, "
                                        "None, :]").format(exc=exc.message)) from None
        raise
    what = f"forward(x{', mask' if use_mask else ''}{', causal=True' if causal else ''})"
    if use_mask:
        what = _("{call} with lengths {lengths}").format(call=what, lengths=list(LENGTHS))
    expect.close(got, mh_variant(w_qkv, w_o, x, mask, causal), what,
                 mistakes=mh_mistakes(w_qkv, w_o, x, mask, causal))


DROPOUT = 0.5


def _eval_forward_off(student) -> bool:
    """Whether the module's eval-mode forward(x) (no mask) already differs from nn.MultiheadAttention's."""
    (w_qkv, w_o, x, mask, causal, load), result, step = part(student, "no mask")
    try:
        got = result[step]
    except Exception:  # noqa: BLE001 - failed or raised: the forward is off (the check [no mask] says how)
        return True
    want = mh_variant(w_qkv, w_o, x, mask, causal)
    return not (isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(got, want, atol=1e-4, rtol=1e-4))


@pytest.mark.points(2)
def test_dropout_on_attention_weights(student):
    """in train mode, MultiHeadSelfAttention(d_model, H, dropout) drops attention weights (after the softmax)"""
    # Every token is the same vector, so in each head every value vector is the same v_h and every row of
    # the weights is uniform. Dropout on the weights rescales each head's row sum by kept / (S * (1 - p)),
    # never exactly 1 for S = 5, p = 0.5: each output row is then a mix sum_h f_h * u_h of the heads'
    # contributions u_h = W_o[:, head h] v_h, and never the eval output sum_h u_h. Dropout on the values
    # or the output scales single features, which leaves that span.
    (w_qkv, w_o, x, load), result, step = part(student, "dropout")
    if result.failed(load) and isinstance(result.failure, StudentRaised):
        raise expect.CheckFailure(_("weights could not be loaded into your module ({failure}): it needs exactly the bias-free "
                                    "layers W_qkv and W_o").format(failure=result.failure))
    what = "forward(x) in train mode with dropout={p}".format(p=DROPOUT)
    got = expect.shape(result[step], (B, S, D_MODEL), what).double()
    expect.finite(got, what)
    v = x[0, 0].double() @ w_qkv[2 * D_MODEL:].double().T  # [d_model]: the one value vector, all heads
    heads = torch.stack([w_o.double()[:, h * HEAD_DIM:(h + 1) * HEAD_DIM] @ v[h * HEAD_DIM:(h + 1) * HEAD_DIM]
                         for h in range(H)], dim=1)  # [d_model, H]: u_h
    rows = got.reshape(-1, D_MODEL)
    forward_off = _eval_forward_off(student)
    if torch.allclose(rows, heads.sum(dim=1).expand_as(rows), atol=1e-5, rtol=1e-4):
        raise expect.CheckFailure(_("in train mode with dropout={p} your output is the same as in eval mode: apply "
                                    "self.dropout to the attention weights, after the softmax").format(p=DROPOUT))
    factors = torch.linalg.lstsq(heads, rows.T).solution  # [H, B * S]
    residual = (heads @ factors - rows.T).abs().max().item()
    if residual > 1e-4 * (1 + rows.abs().max().item()):
        if forward_off:  # the heads' contributions u_h above assume a correct forward: dropout is not to blame
            raise expect.CheckFailure(_("in train mode with dropout={p} your output cannot be judged: already in eval mode "
                                        "forward(x) differs from nn.MultiheadAttention (see the check [no mask]); fix "
                                        "that first").format(p=DROPOUT))
        raise expect.CheckFailure(_("in train mode with dropout={p} your output is not what dropout on the attention "
                                    "weights gives: dropout seems to act on the values or on the output; apply "
                                    "self.dropout to the weights right after the softmax").format(p=DROPOUT))
