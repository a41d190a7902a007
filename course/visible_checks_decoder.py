"""The visible checks of notebooks 03_cross_attention and 04_decoder (`generation`): CrossAttention, DecoderAttention.

visible_checks.py (course/visible_checks_generation.py) builds them on its harness with `cross_attention_checks` and
`decoder_checks`, so that they speak the notebook's language and name the student's line like the others; they live
here to keep each file short. CrossAttention's compares the layer with attention computed from its own weights.

The check compares the layer with its own computation of the layer from scratch (reference values from the layer's
own weights, in float64), with rope_base 10000 and 50 and with positions [B, S], looks at the keys each append gave
its cache (rotated at their positions: keys cached before RoPE and rotated with arange(S_k) after reading give right
outputs while the positions are 0, 1, 2, ...), then compares the layer with itself (causal, cached versus full,
left-padded versus alone). While it runs, its own apply_rope, decode_causal_mask and repeat_kv stand
in for the student's where the layer finds them, as the grader's do (autograder/checks/lent.py): a mistake in one
of those pieces costs once, in its own notebook; the check says in one line which of the student's were wrong.
Pure torch.
"""
from __future__ import annotations

import contextlib

import torch


class _Recorder:
    """A KV cache that remembers what was appended (the check's own, so only your layer is tested); like KVCache
    it holds everything cached as .k and .v (None while empty)."""

    def __init__(self):
        self.keys, self.values, self.shapes = [], [], []
        self.k = self.v = None

    def append(self, k, v):
        self.shapes.append(list(k.shape))
        self.keys.append(k.detach().clone())
        self.values.append(v.detach().clone())
        self.k, self.v = torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)
        return (self.k, self.v)  # [B, H_kv, S_cached, head_dim] each

    def __len__(self):
        return sum(k.shape[2] for k in self.keys)


# The check's own computation of the layer, from scratch (RoPE in Meta's complex form, as in the notebook's section
# 5): the reference values your layer is compared with, and, lent to it while the check runs, the pieces it calls.


def _turn(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as a complex product: pair (x[2i], x[2i + 1]) times e^(i * position * base^(-2i / head_dim))."""
    hd = x.shape[-1]
    speed = base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)  # [hd / 2] radians per position
    t = positions.to(torch.float64)[..., None] * speed  # [S, hd / 2] or [B, S, hd / 2]
    if t.dim() == 3 and x.dim() == 4:
        t = t[:, None]  # [B, 1, S, hd / 2]: one row of positions per sequence
    z = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], hd // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(t), t)).flatten(-2).to(x.dtype)


def _share(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    return x.repeat_interleave(n_rep, dim=1)  # kv head h serves query heads h * n_rep ... (h + 1) * n_rep - 1


def _bottom_right(S_q: int, S_k: int) -> torch.Tensor:
    return torch.arange(S_k)[None, :] <= torch.arange(S_q)[:, None] + (S_k - S_q)


LENT = {"apply_rope": _turn, "decode_causal_mask": _bottom_right, "repeat_kv": _share}


def _heads_of(layer, name: str, x: torch.Tensor, count: int) -> torch.Tensor:
    """x [B, S, d_model] through the layer's projection `name`, split into `count` heads: [B, count, S, head_dim],
    in float64."""
    B, S, _d = x.shape
    out = x.double() @ getattr(layer, name).weight.double().T  # [B, S, count * head_dim]
    return out.view(B, S, count, -1).transpose(1, 2)


def _layer_output(layer, x, heads: int, kv_heads: int, positions, base: float, *, rope: str = "qk",
                  scale: float | None = None, tiled: bool = False, keys_at_places: bool = False) -> torch.Tensor:
    """The layer's output for x [B, S, d_model] without a cache, from its own weights, in float64. rope: "qk" (the
    contract), "none", "qkv" (the values rotated too); scale: the factor of the scores (1 / sqrt(head_dim));
    tiled: kv heads 0, 1, 0, 1, ... instead of 0, 0, 1, 1, ...; keys_at_places: the keys rotated at 0 .. S - 1
    whatever the positions (keys cached before RoPE, everything the cache returns rotated with arange(S_k))."""
    B, S, d = x.shape
    hd = d // heads
    q, k, v = (_heads_of(layer, name, x, n) for name, n in (("W_q", heads), ("W_k", kv_heads), ("W_v", kv_heads)))
    if rope != "none":
        q, k = _turn(q, positions, base), _turn(k, torch.arange(S) if keys_at_places else positions, base)
    if rope == "qkv":
        v = _turn(v, positions, base)
    rep = heads // kv_heads
    k, v = (t.repeat(1, rep, 1, 1) if tiled else _share(t, rep) for t in (k, v))
    scores = q @ k.transpose(-2, -1) * (hd ** -0.5 if scale is None else scale)  # [B, H, S, S]
    scores = scores.masked_fill(~_bottom_right(S, S), float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, S, d)  # heads merged: [B, S, d]
    return out @ layer.W_o.weight.double().T


def _namespaces(cls) -> list[dict]:
    """The global namespaces of the functions of cls and of its bases (where its forward finds apply_rope)."""
    found = {}
    for klass in getattr(cls, "__mro__", ())[:-1]:
        if klass.__module__.startswith("torch."):
            continue
        for attr in vars(klass).values():
            ns = getattr(getattr(attr, "__func__", attr), "__globals__", None)
            if isinstance(ns, dict):
                found[id(ns)] = ns
    return list(found.values())


@contextlib.contextmanager
def _lent(cls):
    """While inside: the check's apply_rope, decode_causal_mask and repeat_kv stand in for yours where your layer
    finds them (as the grader's do: each piece is graded in its own notebook). Yields your own versions."""
    spaces = [ns for ns in _namespaces(cls) if any(name in ns for name in LENT)]
    saved = [{name: ns[name] for name in LENT if name in ns} for ns in spaces]
    own = {name: fn for kept in saved for name, fn in kept.items()}
    for ns, kept in zip(spaces, saved):
        ns.update({name: LENT[name] for name in kept})
    try:
        yield own
    finally:
        for ns, kept in zip(spaces, saved):
            ns.update(kept)


def _cross_output(layer, x, context, keep, heads: int, *, scale: str = "sqrt", softmax_dim: int = -1,
                  output: bool = True, view: str = "H, head_dim") -> torch.Tensor:
    """Cross-attention from the layer's own weights, in float64, made right or with one mistake made on purpose
    (a scale other than / sqrt(head_dim), softmax over another axis, no W_o, the heads view [B, S, head_dim, H])."""
    B, S_q, d = x.shape
    hd = d // heads

    def split(t: torch.Tensor) -> torch.Tensor:
        shape = (B, t.shape[1], heads, hd) if view == "H, head_dim" else (B, t.shape[1], hd, heads)
        return t.view(*shape).transpose(1, 2)

    def weight(name: str) -> torch.Tensor:
        return getattr(layer, name).weight.detach().to(torch.float64)

    q, k, v = (split(t.to(torch.float64) @ weight(name).T)
               for t, name in ((x, "W_q"), (context, "W_k"), (context, "W_v")))
    scores = q @ k.transpose(-2, -1) * {"sqrt": hd ** -0.5, "none": 1.0, "times": hd ** 0.5, "head_dim": 1 / hd}[scale]
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    merged = (torch.softmax(scores, dim=softmax_dim) @ v).transpose(1, 2).reshape(B, S_q, d)
    return merged @ weight("W_o").T if output else merged


def cross_attention_checks(harness, close, ok, linear):
    """check_cross_attention on `harness` (its language, the student's line), with the assignment's close, ok and
    linear (an nn.Linear submodule without bias, of the sizes given)."""
    _ = harness.gettext

    def _compare_with_own_weights(CrossAttention) -> None:
        """On a layer whose sizes all differ (B 2, S_q 3, H 4, S_k 5, head_dim 6, d_context 7): the output against
        attention computed from the layer's own weights, the usual mistakes named."""
        layer = CrossAttention(24, 4, d_context=7).eval()
        x, context = torch.randn(2, 3, 24), torch.randn(2, 5, 7)
        keep = torch.tensor([[True] * 5, [True, True, False, False, False]])
        with torch.no_grad():
            got = harness.expect_shape(layer(x, context, keep), [2, 3, 24],
                                       "CrossAttention(24, 4, d_context=7)(x [2, 3, 24], context [2, 5, 7], context_mask)")
        got = got.to(torch.float64)
        gap = (got - _cross_output(layer, x, context, keep, 4)).abs().max().item()
        if gap <= 1e-5:
            return
        named = ((dict(scale="none"), _("the scores are not scaled: divide q @ k^T by sqrt(head_dim)")),
                 (dict(scale="times"), _("the scores are multiplied by sqrt(head_dim): divide by it")),
                 (dict(scale="head_dim"), _("the scores are divided by head_dim: divide by sqrt(head_dim)")),
                 *((dict(softmax_dim=dim), _("the softmax runs over axis {dim} of the scores [B, H, S_q, S_k]: "
                                             "normalise over the context tokens (dim=-1)").format(dim=dim))
                   for dim in (0, 1, 2)),
                 (dict(output=False), _("W_o is not applied: the merged heads go through W_o")),
                 (dict(view="head_dim, H"), _("the heads are split as view(B, S, head_dim, H): split d_model as "
                                              "view(B, S, H, head_dim), then transpose(1, 2)")))
        for variant, why in named:
            if close(got, _cross_output(layer, x, context, keep, 4, **variant), 1e-5):
                raise AssertionError(_("CrossAttention(24, 4, d_context=7) (head_dim 6): {why}").format(why=why))
        raise AssertionError(_(
            "CrossAttention(24, 4, d_context=7) differs from attention computed from the layer's own weights by up to "
            "{gap:.3g}: queries W_q(x), keys W_k(context) and values W_v(context), each split as view(B, S, H, "
            "head_dim).transpose(1, 2); scores q @ k^T / sqrt(head_dim), -inf at padded context tokens, softmax over "
            "the context, the heads merged back, then W_o").format(gap=gap))

    @harness.check("CrossAttention")
    def check_cross_attention(CrossAttention) -> None:
        module = CrossAttention(16, 4, d_context=6)
        for name, d_in in (("W_q", 16), ("W_k", 6), ("W_v", 6), ("W_o", 16)):
            linear(module, name, d_in, 16, "CrossAttention(16, 4, d_context=6)")
        default = CrossAttention(16, 4)
        linear(default, "W_k", 16, 16, _("CrossAttention(16, 4) (d_context defaults to d_model)"))
        module.eval()
        x, context = torch.randn(2, 3, 16), torch.randn(2, 5, 6)
        keep = torch.tensor([[True] * 5, [True, True, False, False, False]])  # True = real context token
        with torch.no_grad():
            try:
                out = module(x, context, keep)
            except RuntimeError as error:
                if "mat1 and mat2" in str(error):  # a projection got the other sequence's width
                    error.check_advice = _("Keys and values must come from `context` [B, S_k, d_context] (W_k(context), "
                                           "W_v(context)); only the queries come from x [B, S_q, d_model].")
                raise
            out = harness.expect_shape(out, [2, 3, 16], "forward(x [2, 3, 16], context [2, 5, 6], context_mask)")
            assert torch.isfinite(out).all(), _("the output contains NaN or inf (is the context mask inverted?)")
            padded = context.clone()
            padded[1, 2:] = 50.0  # only the padding of sample 1 changes
            assert close(module(x, padded, keep), out), _(
                "the output changed when only padded context tokens did: -inf where context_mask is False, "
                "as context_mask[:, None, None, :] against [B, H, S_q, S_k] scores")
            last = context.clone()
            last[0, 4] = 3.0  # the last real context token of sample 0
            assert not close(module(x, last, keep)[0, 0], out[0, 0]), _(
                "query 0 did not react to the last context token: cross-attention has no causal mask, every query "
                "sees the whole context")
        _compare_with_own_weights(CrossAttention)
        ok(_("CrossAttention: W_q 16->16, W_k and W_v 6->16, W_o 16->16; [2, 3, 16] x context [2, 5, 6] -> [2, 3, 16]; "
              "padding ignored"))

    return check_cross_attention


def decoder_checks(harness, close, ok, linear):
    """check_decoder_attention on `harness` (close, ok: the harness module's; linear: the submodule check)."""
    _ = harness.gettext

    def _pieces_note(own: dict) -> str:
        """One line about your pasted pieces that are stubs or give other values than the check's own ('' if none)."""
        g = torch.Generator().manual_seed(5)
        x, heads = torch.randn(2, 3, 4, 8, generator=g), torch.randn(2, 3, 5, 4, generator=g)
        rows = torch.tensor([[0, 2, 5, 7], [3, 1, 4, 9]])
        calls = {"apply_rope": [((x, torch.tensor([0, 3, 1, 7])), {}), ((x, rows), {"base": 50.0})],
                 "decode_causal_mask": [((2, 5), {}), ((4, 4), {})], "repeat_kv": [((heads, 2), {})]}
        stubs, wrong = [], []
        for name, fn in own.items():
            try:
                same = all(close(torch.as_tensor(fn(*args, **kwargs)), LENT[name](*args, **kwargs))
                           for args, kwargs in calls[name])
            except NotImplementedError:
                stubs.append(name)
                continue
            except Exception:  # noqa: BLE001 - a piece that raises is a wrong piece; its own check says why
                same = False
            if not same:
                wrong.append(name)
        said = []
        if wrong:
            said.append(_("your pasted {names} gave other results than the contract's (their own checks, in 01_positions "
                          "and 02_kv_cache, say why): fix the copies here too, or the demos below go wrong").format(
                names=", ".join(wrong)))
        if stubs:
            said.append(_("your {names} here is still a stub: paste your own from 01_positions (apply_rope) or "
                          "02_kv_cache (decode_causal_mask, repeat_kv, KVCache), so that the demos below run").format(
                names=", ".join(stubs)))
        return _("note: this check, like the grader, ran your layer with its own apply_rope, decode_causal_mask and "
                 "repeat_kv; {what}").format(what="; ".join(said)) if said else ""


    def _compare_with_reference(got: torch.Tensor, layer, x, what: str, *, heads: int, kv_heads: int, positions,
                                base: float, extra: dict) -> None:
        """got equals the check's own computation of the layer; if not, the mistake it equals is named."""
        want = _layer_output(layer, x, heads, kv_heads, positions, base)
        if close(got, want, 1e-4):
            return
        d = x.shape[-1]
        mistakes = {
            **extra,
            _("no RoPE: rotate q and k with apply_rope(..., positions, base=self.rope_base) before the scores"):
                dict(rope="none"),
            _("you rotated the values too: RoPE rotates the queries and keys only, the values pass unrotated"):
                dict(rope="qkv"),
            _("you did not scale the scores: divide q k^T by sqrt(head_dim)"): dict(scale=1.0),
            _("you scaled by sqrt(d_model) = sqrt({d}): scale each head by sqrt(head_dim) = sqrt({hd})").format(
                d=d, hd=d // heads): dict(scale=d ** -0.5),
            _("you tiled the key/value heads (kv 0, 1, 0, 1, ...: .repeat): repeat each kv head in place, 0, 0, 1, 1, "
              "..., as repeat_kv does, so that query heads 2h and 2h + 1 share kv head h"): dict(tiled=True),
        }
        for sentence, change in mistakes.items():
            variant = {"positions": positions, "base": base, **change}
            if close(got, _layer_output(layer, x, heads, kv_heads, **variant), 1e-4):
                raise AssertionError(_("{what}: {mistake}").format(what=what, mistake=sentence))
        raise AssertionError(_(
            "{what} differs from the check's own computation of the layer by up to {gap:.3g} (q, k rotated at the "
            "positions with base {base:g}, kv head h serving query heads 2h and 2h + 1, softmax(q k^T / sqrt(head_dim)) "
            "with the causal mask, times v, heads merged, W_o)").format(
            what=what, gap=(got.double() - want).abs().max().item(), base=base))


    def _cached_keys_rotated(layer, x, appended: list, bounds, kv_heads: int) -> None:
        """Append number i received the keys of x[:, bounds[i]:bounds[i + 1]] rotated at those positions."""
        for number, (k, start, stop) in enumerate(zip(appended, bounds, bounds[1:]), 1):
            plain = _heads_of(layer, "W_k", x[:, start:stop], kv_heads)  # [B, H_kv, S_new, head_dim]
            if close(k, _turn(plain, torch.arange(start, stop), layer.rope_base), 1e-4):
                continue
            said = {"start": start, "stop": stop - 1, "number": number}
            if close(k, plain, 1e-4):
                raise AssertionError(_(
                    "append number {number} (positions {start} .. {stop}) received the keys before RoPE: the cache must "
                    "hold each key rotated once, at its own position; rotating everything the cache returns with "
                    "arange(S_k) puts each key at its place in the cache, which is its position only while the "
                    "positions are 0, 1, 2, ... (not with positions given, nor in a left-padded batch): rotate the new "
                    "keys at their positions, then append them").format(**said))
            if close(k, _turn(plain, torch.arange(stop - start), layer.rope_base), 1e-4):
                raise AssertionError(_(
                    "append number {number} received the keys rotated from position 0: the new tokens are at positions "
                    "len(cache), len(cache) + 1, ... ({start} .. {stop} here)").format(**said))
            raise AssertionError(_(
                "append number {number} received other keys than the new keys rotated at their positions {start} .. "
                "{stop} (W_k(x), split into the key/value heads, then apply_rope), by up to {gap:.3g}").format(
                gap=(k.double() - _turn(plain, torch.arange(start, stop), layer.rope_base)).abs().max().item(), **said))

    @harness.check("DecoderAttention")
    def check_decoder_attention(DecoderAttention) -> None:
        layer = DecoderAttention(16, 4, 2)
        for name, d_out in (("W_q", 16), ("W_k", 8), ("W_v", 8), ("W_o", 16)):
            linear(layer, name, 16, d_out, "DecoderAttention(16, 4, 2)")
        layer.eval()
        x = torch.randn(2, 6, 16)
        with _lent(DecoderAttention) as own, torch.no_grad():
            note = _pieces_note(own)
            full = harness.expect_shape(layer(x), [2, 6, 16], "DecoderAttention(16, 4, 2)(x [2, 6, 16])")
            _compare_with_reference(full, layer, x, "DecoderAttention(16, 4, 2)(x [2, 6, 16])", heads=4, kv_heads=2,
                                    positions=torch.arange(6), base=10000.0, extra={})
            wide, x_wide = DecoderAttention(24, 4, 2).eval(), torch.randn(2, 5, 24)  # head_dim 6: no two sizes equal
            what = "DecoderAttention(24, 4, 2)(x [2, 5, 24])"
            _compare_with_reference(harness.expect_shape(wide(x_wide), [2, 5, 24], what), wide, x_wide, what, heads=4,
                                    kv_heads=2, positions=torch.arange(5), base=10000.0, extra={})
            per_row = torch.tensor([[0, 1, 2, 6, 7, 11], [4, 5, 9, 10, 15, 16]])  # [B, S]: no row a shift of the other
            given = harness.expect_shape(layer(x, positions=per_row), [2, 6, 16], "forward(x, positions [2, 6])")
            _compare_with_reference(
                given, layer, x, _("forward(x [2, 6, 16], positions={rows})").format(rows=per_row.tolist()), heads=4,
                kv_heads=2, positions=per_row, base=10000.0,
                extra={_("the positions argument was ignored: when it is given, rotate q and k at exactly those positions "
                         "([S_new], or [B, S_new] with one row per sequence)"): dict(positions=torch.arange(6)),
                       _("the queries were rotated at the positions given, the keys at their places 0 .. S - 1: rotate "
                         "the keys at the same positions as the queries, before appending them (caching the keys before "
                         "RoPE and rotating everything the cache returns with arange(S_k) does this: it is right only "
                         "while the positions are 0, 1, 2, ...)"): dict(keys_at_places=True)})
            other = DecoderAttention(16, 4, 2, rope_base=50.0).eval()
            other.load_state_dict(layer.state_dict())
            based = harness.expect_shape(other(x), [2, 6, 16], "DecoderAttention(16, 4, 2, rope_base=50.0)(x)")
            _compare_with_reference(
                based, other, x, "DecoderAttention(16, 4, 2, rope_base=50.0)(x [2, 6, 16])", heads=4, kv_heads=2,
                positions=torch.arange(6), base=50.0,
                extra={_("rope_base was ignored: pass base=self.rope_base to every apply_rope call (it is 10000 by "
                         "default; Llama 3 uses 500000)"): dict(base=10000.0)})
            changed = x.clone()
            changed[:, 4:] = 5.0
            assert close(layer(changed)[:, :4], full[:, :4]), _(
                "without a cache, forward must be causal: outputs 0..3 changed when only tokens 4 and 5 did")
            cache = _Recorder()
            outs = [layer(x[:, :3], cache), layer(x[:, 3:5], cache), layer(x[:, 5:6], cache)]
            assert cache.shapes and cache.shapes[0][1] != 4, _(
                "the cache received keys with 4 heads: append the 2 key/value heads, repeat_kv after reading the cache")
            assert cache.shapes == [[2, 2, 3, 4], [2, 2, 2, 4], [2, 2, 1, 4]], _(
                "the cache received keys of shapes {shapes}, expected [2, 2, 3, 4], then [2, 2, 2, 4], then [2, 2, 1, 4]: "
                "append the new keys [B, H_kv, S_new, head_dim] once per call").format(shapes=cache.shapes)
            _cached_keys_rotated(layer, x, cache.keys, (0, 3, 5, 6), kv_heads=2)
            gap = (torch.cat(outs, dim=1) - full).abs().max().item()
            assert gap < 1e-5, _(
                "a prompt of 3 tokens, then 2 at once, then 1, differs from the full pass by up to {gap:.3g}: are the new "
                "tokens at positions len(cache), len(cache) + 1, ... (not 0)? are only the new keys rotated, once? is the "
                "causal mask bottom-right aligned (decode_causal_mask)?").format(gap=gap)
            mask = torch.tensor([[False, False, True, True, True], [True] * 5])  # sequence 0: left-padded, 3 real tokens
            positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
            xs = torch.randn(2, 5, 16)
            batched = layer(xs, _Recorder(), positions, mask)[0, 2:]
            alone = layer(xs[:1, 2:])[0]
        assert close(batched, alone), _(
            "a left-padded sequence (2 pads, then 3 tokens, positions from mask.cumsum(-1) - 1) differs from the same 3 "
            "tokens alone: hide the padded keys with key_mask[:, None, None, :] and rotate at the positions given")
        ok(_("DecoderAttention: equals the check's own computation (base 10000 and 50, positions [B, S]); W_k, W_v of "
             "H_kv heads; the cache gets the keys rotated at their positions, [B, H_kv, S_new, head_dim]; prompt, chunk "
             "and token equal the full pass; a left-padded sequence equals itself alone"))
        if note:
            print(note)

    return check_decoder_attention
