"""The self-attention assignment's visible checks, part two: the checks of the notebooks 03_module
(SelfAttention, to_official, parity_error) and 04_multihead (split_heads, merge_heads, MultiHeadSelfAttention).
visible_checks.py imports it and holds the rest; the harness is visible_checks_scores_masks.py's.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from check_harness import NotReady, close, ok, shape_of
from visible_checks_scores_masks import harness

__all__ = [
    "check_self_attention", "check_to_official", "check_parity_error",
    "check_split_heads", "check_merge_heads", "check_multihead", "lengths_mask",
]

_ = harness.gettext


# --------------------------------------------------------------------------- #
# 03 module: SelfAttention, to_official, parity_error
# --------------------------------------------------------------------------- #


def lengths_mask(lengths, S):
    return torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]


def _single_head(attn, x: torch.Tensor, scale: float) -> torch.Tensor:
    """W_o(softmax(Q K^T * scale) V) from the module's own W_q, W_k, W_v, W_o: x [B, S, d_model] -> [B, S, d_model]."""
    Q, K, V = attn.W_q(x), attn.W_k(x), attn.W_v(x)  # [B, S, d_k], [B, S, d_k], [B, S, d_v]
    return attn.W_o(torch.softmax(Q @ K.transpose(-2, -1) * scale, dim=-1) @ V)


def _multi_head(mha, x: torch.Tensor, H: int, scale: float) -> torch.Tensor:
    """The same for H heads from the module's own W_qkv (rows q, k, v) and W_o: [B, S, d_model] -> [B, S, d_model]."""
    B, S, width = x.shape  # width = d_model
    Q, K, V = (t.view(B, S, H, width // H).transpose(1, 2) for t in mha.W_qkv(x).chunk(3, dim=-1))  # [B, H, S, head_dim]
    out = torch.softmax(Q @ K.transpose(-2, -1) * scale, dim=-1) @ V  # [B, H, S, head_dim]
    return mha.W_o(out.transpose(1, 2).reshape(B, S, width))  # [B, S, d_model]


def _scale_named(got: torch.Tensor, computed, d_model: int, width: int, width_name: str) -> bool:
    """Whether `got` is computed(1 / sqrt(width)), the attention of the module's own weights; a scale by
    sqrt(d_model), or none, is named in a failure."""
    if close(got, computed(width ** -0.5), 1e-4):
        return True
    if close(got, computed(d_model ** -0.5), 1e-4):
        raise AssertionError(_(
            "your scores are divided by sqrt(d_model) = sqrt({d_model}); divide them by sqrt({width_name}) = "
            "sqrt({width}), the width of the queries and keys that were multiplied"
        ).format(d_model=d_model, width_name=width_name, width=width))
    if close(got, computed(1.0), 1e-4):
        raise AssertionError(_("your scores are not scaled: divide them by sqrt({width_name}) = sqrt({width})").format(
            width_name=width_name, width=width))
    return False


def _dropout_on_weights(name: str, rows: torch.Tensor, parts: torch.Tensor, p: float) -> None:
    """rows [N, d_model]: train-mode outputs for a sequence of identical tokens (every row of weights uniform);
    parts [d_model, n]: what each head adds to a row in eval mode. Dropout on the weights scales each head's part
    of a row by (kept weights) / (S * (1 - p)), never 1 for S = 5, p = 0.5; dropout anywhere else does not."""
    rows, parts = rows.double(), parts.double()
    if close(rows, parts.sum(dim=1).expand_as(rows), 1e-5):
        raise AssertionError(_(
            "{name} with dropout={p} in train mode gives exactly its eval-mode output: apply self.dropout to the "
            "attention weights, right after the softmax (dropout on the scores before the softmax, or none at all, "
            "changes nothing here, where every token is the same)"
        ).format(name=name, p=p))
    factors = torch.linalg.lstsq(parts, rows.T).solution  # [n, N]: each head's factor in each row
    if (parts @ factors - rows.T).abs().max() > 1e-4 * (1 + rows.abs().max()):
        raise AssertionError(_(
            "{name} with dropout={p} in train mode: your output is not what dropout on the attention weights gives; "
            "dropout seems to act on the values, on weights @ V or on the output. Apply self.dropout to the "
            "weights right after the softmax"
        ).format(name=name, p=p))


@harness.check("SelfAttention")
def check_self_attention(SelfAttention) -> None:
    B, S, d_model, d_k, d_v = 3, 6, 12, 8, 10
    make = harness.watch(SelfAttention, "SelfAttention")
    attn = make(d_model, d_k=d_k, d_v=d_v, dropout=0.0)
    for name, (fan_in, fan_out) in {"W_q": (d_model, d_k), "W_k": (d_model, d_k), "W_v": (d_model, d_v), "W_o": (d_v, d_model)}.items():
        layer = getattr(attn, name, None)
        assert isinstance(layer, nn.Linear), _("SelfAttention needs a submodule {name} (nn.Linear)").format(name=name)
        assert layer.bias is None, _("{name} should have no bias").format(name=name)
        assert (layer.in_features, layer.out_features) == (fan_in, fan_out), _(
            "{name} maps {fan_in} -> {fan_out}, expected {want_in} -> {want_out}"
        ).format(name=name, fan_in=layer.in_features, fan_out=layer.out_features, want_in=fan_in, want_out=fan_out)
    assert isinstance(getattr(attn, "dropout", None), nn.Dropout), _("SelfAttention needs self.dropout = nn.Dropout(dropout)")
    default = make(d_model)
    assert all(isinstance(getattr(default, n, None), nn.Linear) for n in ("W_q", "W_v")), _("SelfAttention(d_model) needs W_q and W_v too")
    assert default.W_q.out_features == d_model and default.W_v.out_features == d_model, _("d_k and d_v default to d_model")
    attn.eval()
    forward = harness.watch(attn, "SelfAttention")
    x = torch.randn(B, S, d_model)
    out = harness.expect_shape(forward(x), [B, S, d_model], _("SelfAttention output"))
    harness.no_nan(out, _("output"))
    with torch.no_grad():
        computed = _scale_named(forward(2 * x), lambda scale: _single_head(attn, 2 * x, scale), d_model, d_k, "d_k")
    mask = lengths_mask([6, 3, 1], S)
    with torch.no_grad():
        out_mask = harness.expect_tensor(forward(x, mask), _("SelfAttention output with a padding mask"))
        if list(out_mask.shape) == [B, B, S, d_model]:
            raise AssertionError(_(
                "with a padding mask [B={B}, S={S}] your SelfAttention returned {got} instead of "
                "{expected}: the mask viewed as [B, 1, 1, S] (the multi-head view) broadcasts against "
                "single-head scores [B, S, S] to [B, B, S, S]; view it as [B, 1, S]"
            ).format(B=B, S=S, got=shape_of(out_mask), expected=[B, S, d_model]))
        harness.expect_shape(out_mask, [B, S, d_model], _("SelfAttention output with a padding mask"))
        harness.no_nan(out_mask, _("output with a padding mask"))
        x2 = x.clone()
        x2[~mask] = 100.0  # change only the padded tokens
        out_mask2 = harness.expect_shape(forward(x2, mask), [B, S, d_model], _("SelfAttention output with a padding mask"))
    assert close(out_mask[mask], out_mask2[mask], 1e-4), _("real tokens still look at padded tokens: apply the padding mask to the keys")
    with torch.no_grad():
        out_c = harness.expect_shape(forward(x, causal=True), [B, S, d_model], _("SelfAttention output with causal=True"))
        x3 = x.clone()
        x3[:, 3:] = -50.0  # change only the future of positions 0..2
        out_c3 = forward(x3, causal=True)
    assert close(out_c[:, :3], out_c3[:, :3], 1e-4), _("with causal=True, position i must not depend on tokens after i")
    assert computed, _(
        "in eval mode your SelfAttention(x) is not W_o(softmax(Q K^T / sqrt(d_k)) V) computed from its own W_q, W_k, "
        "W_v and W_o: check each step against the table above"
    )
    p, noisy = 0.5, make(d_model, d_k=d_k, d_v=d_v, dropout=0.5)
    same = torch.randn(1, 1, d_model).expand(2, 5, d_model)  # every token the same vector: uniform weights
    with torch.no_grad():
        u = harness.expect_shape(harness.watch(noisy.eval(), "SelfAttention")(same), [2, 5, d_model], _("SelfAttention output"))
        rows = harness.expect_shape(harness.watch(noisy.train(), "SelfAttention")(same), [2, 5, d_model],
                                    _("SelfAttention output in train mode"))
    _dropout_on_weights("SelfAttention", rows.reshape(-1, d_model), u[0, :1].T, p)
    ok(_("SelfAttention: submodules W_q, W_k, W_v, W_o, dropout; [3, 6, 12] -> [3, 6, 12]; scaled by sqrt(d_k); "
         "padding and causal masks respected; dropout on the weights"))


class _Holder(nn.Module):
    """Just the four projections of a single-head module (no forward needed)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.dropout = nn.Dropout(0.0)


@harness.check("to_official")
def check_to_official(to_official) -> None:
    d_model = 8
    holder = _Holder(d_model)
    official = harness.watch(to_official, "to_official")(holder)
    assert isinstance(official, nn.MultiheadAttention), _("to_official should return nn.MultiheadAttention, got {type}").format(
        type=type(official).__name__)
    assert official.num_heads == 1, _("use one head, got num_heads={heads}").format(heads=official.num_heads)
    assert official.batch_first, _("create it with batch_first=True: our tensors are [B, S, d_model]")
    assert official.in_proj_weight is not None and list(official.in_proj_weight.shape) == [3 * d_model, d_model], _(
        "expected in_proj_weight [3 * d_model, d_model] (d_k == d_v == d_model)"
    )
    w = official.in_proj_weight.detach()
    for i, name in enumerate(("W_q", "W_k", "W_v")):
        block = w[i * d_model : (i + 1) * d_model]
        assert torch.equal(block, getattr(holder, name).weight), _(
            "rows {first}..{last} of in_proj_weight should hold {name}.weight (order q, k, v)"
        ).format(first=i * d_model, last=(i + 1) * d_model - 1, name=name)
    if official.in_proj_bias is not None:
        assert not official.in_proj_bias.any(), _("in_proj_bias must be zero (our projections have no bias)")
    assert torch.equal(official.out_proj.weight, holder.W_o.weight), _("out_proj.weight should hold W_o.weight")
    if official.out_proj.bias is not None:
        assert not official.out_proj.bias.any(), _("out_proj.bias must be zero")
    x = torch.randn(3, 5, d_model)
    with torch.no_grad():
        trained, evaluated = (official.train(mode)(x, x, x, need_weights=False)[0] for mode in (True, False))
    assert close(trained, evaluated), _(
        "in train mode the module you return gives other outputs than in eval mode (its dropout is {p}): create it "
        "with dropout=0.0, so that it computes the same attention as the module it copies").format(p=official.dropout)
    ok(_("to_official: one head, batch_first, in_proj_weight = [W_q; W_k; W_v], out_proj = W_o, biases zero"))


@harness.check("parity_error")
def check_parity_error(parity_error, SelfAttention) -> None:
    try:
        custom = harness.watch(SelfAttention, "SelfAttention")(8, dropout=0.0)
    except NotImplementedError:
        raise NotReady(_("write SelfAttention first: parity_error needs a module to compare")) from None
    parity_error = harness.watch(parity_error, "parity_error")
    x = torch.randn(3, 5, 8)
    mask = lengths_mask([5, 2, 4], 5)
    err = parity_error(custom, x)
    float_please = _("parity_error should return a Python float (use .item()), got {type}")
    assert isinstance(err, float), float_please.format(type=type(err).__name__)
    err_mask = parity_error(custom, x, mask)
    assert isinstance(err_mask, float), float_please.format(type=type(err_mask).__name__)
    if max(err, err_mask) > 1e-4:
        raise AssertionError(_(
            "parity_error is {plain:.2e} without a mask and {masked:.2e} with one: a correct module gives < 1e-5. "
            "Either SelfAttention or to_official is off, or the mask was not converted (key_padding_mask: True = ignore)"
        ).format(plain=err, masked=err_mask))
    noisy = harness.watch(SelfAttention, "SelfAttention")(8, dropout=0.5)
    noisy.load_state_dict(custom.state_dict())
    err_train = parity_error(noisy.train(), x, mask)
    assert isinstance(err_train, float), float_please.format(type=type(err_train).__name__)
    if err_train > 1e-4:
        raise AssertionError(_(
            "parity_error is {error:.2e} for the same module with dropout=0.5 in train mode ({masked:.1e} with "
            "dropout=0): in train mode dropout zeroes random weights, so the outputs differ by chance. Switch both "
            "modules to eval() before comparing"
        ).format(error=err_train, masked=err_mask))

    for shift in (0.5, -0.5):  # off in either direction: the largest |difference|

        class Broken(SelfAttention):
            def forward(self, x, mask=None, causal=False, shift=shift):
                return super().forward(x, mask, causal) + shift

        broken = Broken(8, dropout=0.0)
        broken.load_state_dict(custom.state_dict())
        bad = parity_error(broken, x)
        assert isinstance(bad, float), float_please.format(type=type(bad).__name__)
        assert bad > 0.1, _(
            "parity_error says {error:.2e} for a module whose output is shifted by {shift}: a parity check must be "
            "able to fail, whichever side is off (the largest absolute difference, .abs().max())"
        ).format(error=bad, shift=shift)
    ok(_("parity_error: {plain:.1e} for your module ({masked:.1e} with padding), {broken:.2f} for a broken one").format(
        plain=err, masked=err_mask, broken=bad))


# --------------------------------------------------------------------------- #
# 04 multihead
# --------------------------------------------------------------------------- #


@harness.check("split_heads")
def check_split_heads(split_heads) -> None:
    B, S, H, hd = 2, 3, 4, 5
    x = torch.arange(B * S * H * hd, dtype=torch.float32).reshape(B, S, H * hd)
    out = harness.expect_shape(harness.watch(split_heads, "split_heads")(x, H), [B, H, S, hd], f"split_heads([{B}, {S}, {H * hd}], num_heads={H})")
    if torch.equal(out, x.view(B, H, S, hd)):
        raise AssertionError(_(
            "split_heads gives x.view(B, H, S, head_dim) with no transpose: that cuts each sequence's memory into H "
            "consecutive pieces, so head 0 holds only features of token 0 ({values} ...). "
            "View as [B, S, H, head_dim] first, then move the head axis forward with .transpose(1, 2)"
        ).format(values=out[0, 0].int().flatten()[:8].tolist()))
    if torch.equal(out, x.permute(0, 2, 1).reshape(B, H, S, hd)):
        raise AssertionError(_(
            "split_heads permutes before it views (x.permute(0, 2, 1) then a view or reshape to [B, H, S, head_dim]): "
            "each row of a head then mixes numbers from different tokens. "
            "View as [B, S, H, head_dim] first, then move the head axis forward with .transpose(1, 2)"
        ))
    for b in range(B):
        for h in range(H):
            for s in range(S):
                want = x[b, s, h * hd : (h + 1) * hd]
                if not torch.equal(out[b, h, s], want):
                    raise AssertionError(_(
                        "head {head} of token {token} holds {got}, expected features "
                        "{first}..{last} of that token: {expected}. "
                        "View as [B, S, H, head_dim] first, then move the head axis forward with .transpose(1, 2)"
                    ).format(head=h, token=s, got=out[b, h, s].int().tolist(), first=h * hd, last=(h + 1) * hd - 1,
                             expected=want.int().tolist()))
    ok(_("split_heads: {before} -> {after}, each head gets its own block of features").format(
        before=[B, S, H * hd], after=[B, H, S, hd]))


@harness.check("merge_heads")
def check_merge_heads(merge_heads) -> None:
    merge_heads = harness.watch(merge_heads, "merge_heads")
    B, H, S, hd = 2, 4, 3, 5
    heads = torch.arange(B * H * S * hd, dtype=torch.float32).reshape(B, H, S, hd)
    out = harness.expect_shape(merge_heads(heads), [B, S, H * hd], f"merge_heads([{B}, {H}, {S}, {hd}])")
    if torch.equal(out, heads.reshape(B, S, H * hd)):
        raise AssertionError(_(
            "merge_heads reshapes [B, H, S, head_dim] to [B, S, H * head_dim] with no transpose: each output token then "
            "holds pieces of several positions of one head. Move the head axis back next to head_dim first, "
            ".transpose(1, 2), then reshape"
        ))
    for h in range(H):
        assert torch.equal(out[:, :, h * hd : (h + 1) * hd], heads[:, h]), _(
            "features {first}..{last} of each token should come from head {head}: "
            "move the head axis back next to head_dim before reshaping"
        ).format(first=h * hd, last=(h + 1) * hd - 1, head=h)
    noncontig = heads.transpose(1, 2).contiguous().transpose(1, 2)  # same values, different strides
    assert torch.equal(merge_heads(noncontig), out), _("merge_heads must also work on non-contiguous input (use reshape)")
    ok(_("merge_heads: {before} -> {after}, the inverse of split_heads").format(before=[B, H, S, hd], after=[B, S, H * hd]))


@harness.check("MultiHeadSelfAttention")
def check_multihead(MultiHeadSelfAttention) -> None:
    B, S, d_model, H = 2, 6, 12, 4  # head_dim 3: no two sizes equal
    mha = harness.watch(MultiHeadSelfAttention, "MultiHeadSelfAttention")(d_model, H)
    W_qkv = getattr(mha, "W_qkv", None)
    assert isinstance(W_qkv, nn.Linear) and W_qkv.bias is None, _("needs W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)")
    assert (W_qkv.in_features, W_qkv.out_features) == (d_model, 3 * d_model), _(
        "{name} maps {fan_in} -> {fan_out}, expected {want_in} -> {want_out}"
    ).format(name="W_qkv", fan_in=W_qkv.in_features, fan_out=W_qkv.out_features, want_in=d_model, want_out=3 * d_model)
    W_o = getattr(mha, "W_o", None)
    assert isinstance(W_o, nn.Linear) and W_o.bias is None and W_o.in_features == W_o.out_features == d_model, _(
        "needs W_o = nn.Linear(d_model, d_model, bias=False)"
    )
    assert isinstance(getattr(mha, "dropout", None), nn.Dropout), _("needs self.dropout = nn.Dropout(dropout)")
    mha.eval()
    forward = harness.watch(mha, "MultiHeadSelfAttention")
    x = torch.randn(B, S, d_model)
    with torch.no_grad():
        out = harness.expect_shape(forward(x), [B, S, d_model], _("MultiHeadSelfAttention output"))
        harness.no_nan(out, _("output"))
        computed = _scale_named(forward(2 * x), lambda scale: _multi_head(mha, 2 * x, H, scale), d_model, d_model // H,
                                "head_dim")
        # Q = K = 0 (uniform weights), V = x, W_o = identity: every position outputs the mean token.
        mha.W_qkv.weight.zero_()
        mha.W_qkv.weight[2 * d_model :] = torch.eye(d_model)
        mha.W_o.weight.copy_(torch.eye(d_model))
        mean = harness.expect_shape(forward(x), [B, S, d_model], _("MultiHeadSelfAttention output"))
        assert close(mean, x.mean(dim=1, keepdim=True).expand_as(x), 1e-5), _(
            "with Q = K = 0 every head should average the values uniformly: check the q, k, v order "
            "of W_qkv's rows and that the softmax runs over the keys"
        )
        mask = lengths_mask([6, 2], S)
        masked = harness.expect_shape(forward(x, mask), [B, S, d_model], _("MultiHeadSelfAttention output with a padding mask"))
        for b, n in enumerate([6, 2]):
            assert close(masked[b], x[b, :n].mean(0, keepdim=True).expand(S, d_model), 1e-5), _(
                "sample {sample} has {count} real tokens: with uniform weights its outputs should average only those"
            ).format(sample=b, count=n)
        causal = harness.expect_shape(forward(x, causal=True), [B, S, d_model], _("MultiHeadSelfAttention output with causal=True"))
        assert close(causal[:, 2], x[:, :3].mean(1), 1e-5), _("with causal=True position 2 should average tokens 0, 1, 2 only")
    assert computed, _(
        "in eval mode your MultiHeadSelfAttention(x) is not the attention of its own W_qkv and W_o with heads split as "
        "view(B, S, H, head_dim).transpose(1, 2) and scores divided by sqrt(head_dim): check the q, k, v order of "
        "W_qkv's rows, then each step"
    )
    p, noisy = 0.5, harness.watch(MultiHeadSelfAttention, "MultiHeadSelfAttention")(d_model, H, dropout=0.5)
    same = torch.randn(1, 1, d_model).expand(2, 5, d_model)  # every token the same vector
    with torch.no_grad():
        noisy.W_qkv.weight.zero_()  # Q = K = 0: uniform weights; V = x
        noisy.W_qkv.weight[2 * d_model :] = torch.eye(d_model)
        noisy.W_o.weight.copy_(torch.eye(d_model))
        rows = harness.expect_shape(harness.watch(noisy.train(), "MultiHeadSelfAttention")(same), [2, 5, d_model],
                                    _("MultiHeadSelfAttention output in train mode"))
    blocks = torch.eye(H).repeat_interleave(d_model // H, dim=0)  # [d_model, H]: 1 where a feature belongs to head h
    _dropout_on_weights("MultiHeadSelfAttention", rows.reshape(-1, d_model), same[0, 0, :, None] * blocks, p)
    ok(_("MultiHeadSelfAttention: W_qkv [36, 12], W_o [12, 12]; [3, 6, 12] -> [3, 6, 12]; scaled by sqrt(head_dim); "
         "padding and causal masks respected; dropout on the weights"))
