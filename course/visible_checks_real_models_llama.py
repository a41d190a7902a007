"""The visible checks of notebook 03_llama (`real_models`): the row permutation of W_q and W_k, and your decoder
layer loaded from the library's LlamaAttention.

visible_checks.py (course/visible_checks_real_models.py) builds them on its harness with `llama_checks`, so that
they speak the notebook's language; they live here to keep each file short. The permutation check computes RoPE
both ways itself (neighbour pairs, as Meta's checkpoints and this course; half-split pairs, as the library's
`rotate_half`), in float64. The layer check compares your layer with the library's LlamaAttention and its rotary
embedding at positions with gaps and with left padding, then generates a few tokens greedily with a KV cache of the
check's own (a random embedding, the attention layer, a random output matrix), against the library's layer run on
the whole sequence at every step.
"""
from __future__ import annotations

import contextlib

import torch
from check_harness import NotReady, first_sentence, shape_of

ROPE_BASE = 500.0  # not the default 10000, so that a layer that ignores rope_base is caught
# (H, H_kv) of the layers of head_dim 10 after the first (4 over 2, head_dim 8): the same heads (a layer that fails
# there assumes head_dim 8), then 3, 4 and 1 query heads per key/value head (one that fails there repeats them wrongly)
HEAD_DIM_10 = ((4, 2), (6, 2), (4, 1), (3, 3))


class _Cache:
    """The check's own KV cache: `append(k, v)` returns everything so far; `len()` counts positions."""

    def __init__(self):
        self.k = self.v = None

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def __len__(self):
        return 0 if self.k is None else self.k.shape[2]


def _angles(positions: torch.Tensor, head_dim: int, base: float) -> torch.Tensor:
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return positions.double()[..., None] * base ** (-2 * i / head_dim)  # [..., S, head_dim / 2]


def rope_neighbours(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """RoPE on the pairs (x[2i], x[2i+1]) (Meta's checkpoints, this course's apply_rope), in float64."""
    angle = _angles(positions, x.shape[-1], base)
    cos, sin = angle.cos(), angle.sin()
    a, b = x[..., 0::2].double(), x[..., 1::2].double()
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def rope_halves(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """RoPE on the pairs (x[i], x[i + head_dim/2]) (the library's rotate_half), in float64."""
    angle = _angles(positions, x.shape[-1], base)
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # rotate_half
    return x.double() * cos + rotated.double() * sin


def tiny_llama(hidden_size=32, num_heads=4, num_kv_heads=2, rope_base=ROPE_BASE, seed=0):
    """The library's LlamaAttention of a tiny config (eager, grouped-query) and its rotary embedding, random weights."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=hidden_size, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                         num_hidden_layers=1, intermediate_size=2 * hidden_size, vocab_size=50,
                         rope_theta=rope_base, attn_implementation="eager")
    attn = LlamaAttention(config, layer_idx=0).eval()
    with torch.no_grad():
        for parameter in attn.parameters():
            parameter.normal_(0.0, 0.3)
    return attn, LlamaRotaryEmbedding(config)


def llama_reference(attn, rotary, x, positions, key_mask, library_mask):
    """The library's layer on the whole sequence: its rotary embedding at `positions` [B, S], causal and padding mask."""
    S = x.shape[1]
    allowed = torch.ones(S, S, dtype=torch.bool).tril() & key_mask[:, None, None, :]  # [B, 1, S, S]
    with torch.no_grad():
        cos, sin = rotary(x, positions)
        return attn(x, position_embeddings=(cos, sin), attention_mask=library_mask(allowed))[0]


def llama_checks(harness, close, ok, library_mask):
    """The checks of notebook 03 on the assignment's harness: (check_interleaved_to_half_split, check_rope_permutation,
    check_from_hf_llama)."""
    _ = harness.gettext

    @harness.check("interleaved_to_half_split")
    def check_interleaved_to_half_split(interleaved_to_half_split) -> None:
        H, head_dim, d_in = 2, 8, 3
        rows = torch.arange(H * head_dim, dtype=torch.float32)[:, None].repeat(1, d_in)  # row r is filled with r
        out = harness.expect_shape(interleaved_to_half_split(rows, H), [H * head_dim, d_in],
                                   "interleaved_to_half_split(weight [16, 3], num_heads=2)")
        got = out[:, 0].long().tolist()
        want = [h * head_dim + r for h in range(H) for r in (0, 2, 4, 6, 1, 3, 5, 7)]
        back = [h * head_dim + r for h in range(H) for r in (0, 4, 1, 5, 2, 6, 3, 7)]
        if got == back:
            raise AssertionError(_("interleaved_to_half_split went the other way: the library's row j of a head (j < "
                                   "head_dim / 2) is Meta's row 2j, and row head_dim / 2 + j is Meta's row 2j + 1"))
        if got == list(range(0, 16, 2)) + list(range(1, 16, 2)):
            raise AssertionError(_("the rows were reordered across the whole matrix: each head of head_dim rows is "
                                   "reordered on its own (view it as [num_heads, head_dim / 2, 2, d_in])"))
        assert got == want, _("interleaved_to_half_split put the rows of [16, 3] (2 heads) in the order {got}, "
                              "expected {want}").format(got=got, want=want)
        with _not_head_dim_8(_("with 3 heads of head_dim 6 (weight [18, 1]) interleaved_to_half_split"), 6):
            six = interleaved_to_half_split(torch.arange(18, dtype=torch.float32)[:, None], 3)[:, 0].long().tolist()
        assert six == [h * 6 + r for h in range(3) for r in (0, 2, 4, 1, 3, 5)], _(
            "with 3 heads of head_dim 6 (weight [18, 1]) interleaved_to_half_split put the rows in the order {got}: "
            "each head of head_dim = rows / num_heads rows is reordered, whatever head_dim is").format(got=six)
        ok(_("interleaved_to_half_split: the rows of each head of [16, 3] (2 heads) in the order 0, 2, 4, 6, 1, 3, 5, "
              "7: Meta's neighbours 2i, 2i + 1 become the library's partners i, i + head_dim / 2"))

    @contextlib.contextmanager
    def _not_head_dim_8(what: str, head_dim: int):
        """Inside: an error raised by the student's code on weights of another head_dim than 8 (where it worked)
        becomes one sentence naming the cause, a permutation built for head_dim 8."""
        try:
            yield
        except (AssertionError, NotImplementedError, NotReady):
            raise
        except Exception as error:  # noqa: BLE001 - raised by the student's conversion (a view, an index)
            raise AssertionError(_(
                "{what} raised {kind} ({text}), where head_dim 8 works: the permutation is built for head_dim 8; "
                "build it from the weight's own head_dim = rows // num_heads ({head_dim} here)").format(
                what=what, kind=type(error).__name__, text=first_sentence(error), head_dim=head_dim)) from None

    def _scores_gap(interleaved_to_half_split, H, H_kv, head_dim, d_model) -> float:
        """q.k after RoPE: Meta's weights with neighbour pairs against the converted weights with half-split pairs
        (relative difference, float64)."""
        W_q, W_k = torch.randn(H * head_dim, d_model), torch.randn(H_kv * head_dim, d_model)
        x, positions = torch.randn(5, d_model), torch.tensor([0, 3, 4, 40, 41])

        def scores(W_q, W_k, rope):
            q = (x @ W_q.T).view(5, H, head_dim).transpose(0, 1)  # [H, S, head_dim]
            k = (x @ W_k.T).view(5, H_kv, head_dim).transpose(0, 1).repeat_interleave(H // H_kv, 0)  # [H, S, head_dim]
            return rope(q, positions, ROPE_BASE) @ rope(k, positions, ROPE_BASE).transpose(-2, -1)  # [H, S, S]

        meta = scores(W_q, W_k, rope_neighbours)
        library = scores(interleaved_to_half_split(W_q, H), interleaved_to_half_split(W_k, H_kv), rope_halves)
        return ((library - meta).abs().max() / meta.abs().max()).item()

    @harness.check("rope_permutation")
    def check_rope_permutation(interleaved_to_half_split, half_split_to_interleaved) -> None:
        torch.manual_seed(6)
        weight = torch.randn(3 * 8, 5)  # 3 heads of head_dim 8
        round_trip = half_split_to_interleaved(interleaved_to_half_split(weight, 3), 3)
        assert torch.equal(round_trip, weight), _(
            "half_split_to_interleaved(interleaved_to_half_split(w)) should give w back exactly")
        assert torch.equal(interleaved_to_half_split(half_split_to_interleaved(weight, 3), 3), weight), _(
            "interleaved_to_half_split(half_split_to_interleaved(w)) should give w back exactly")
        gap = _scores_gap(interleaved_to_half_split, 4, 2, 8, 12)
        assert gap < 1e-5, _(
            "with 4 query heads and 2 key/value heads, the scores q.k with the library's RoPE on converted weights "
            "differ from Meta's by {gap:.2g} (relative): convert W_q with num_heads=4 and W_k with num_heads=2"
        ).format(gap=gap)
        weight = torch.randn(3 * 6, 5)  # 3 heads of head_dim 6: nothing may assume head_dim 8
        with _not_head_dim_8(_("with 3 heads of head_dim 6 (weight [18, 5]) your conversions"), 6):
            back = half_split_to_interleaved(interleaved_to_half_split(weight, 3), 3)
            forth = interleaved_to_half_split(half_split_to_interleaved(weight, 3), 3)
            six = _scores_gap(interleaved_to_half_split, 6, 2, 6, 10)
        assert torch.equal(back, weight) and torch.equal(forth, weight) and six < 1e-5, _(
            "with head_dim 6 (3 heads, weight [18, 5]; 6 query heads over 2 key/value heads for q.k) your conversions "
            "do not undo each other or change q.k after RoPE, and with head_dim 8 they are right: the permutation "
            "is built for head_dim 8; build it from the weight's own head_dim = rows // num_heads")
        ok(_("rope_permutation: each conversion undoes the other, and q.k after RoPE is the same both ways with 4 "
              "query heads and 2 key/value heads (relative difference {gap:.0e}), and with head_dim 6").format(gap=gap))

    @harness.check("from_hf_llama")
    def check_from_hf_llama(from_hf_llama) -> None:
        attn, rotary = tiny_llama()
        layer = from_hf_llama(attn, ROPE_BASE)
        assert hasattr(layer, "eval") and callable(layer), _("from_hf_llama should return your layer (an nn.Module)")
        layer.eval()
        torch.manual_seed(7)
        x = torch.randn(2, 6, 32)
        positions = torch.tensor([[0, 1, 2, 5, 9, 10], [0, 0, 0, 1, 4, 5]])  # gaps; sample 1 left-padded
        key_mask = torch.tensor([[True] * 6, [False, False, True, True, True, True]])
        want = llama_reference(attn, rotary, x, positions, key_mask, library_mask)
        with torch.no_grad():
            got = harness.expect_shape(layer(x, positions=positions, key_mask=key_mask), [2, 6, 32],
                                       "layer(x [2, 6, 32], positions=[2, 6], key_mask=[2, 6])")
        gap = (got - want)[key_mask].abs().max().item()
        if gap > 1e-5:
            shifted = llama_reference(attn, rotary, x, torch.arange(6).expand(2, 6), key_mask, library_mask)
            assert not close(got[0], shifted[0], 1e-5), _(
                "your layer gives what the library gives at positions 0..5, not at the positions it was given "
                "(0, 1, 2, 5, 9, 10): pass `positions` on to RoPE")
            raise AssertionError(_(
                "your layer from from_hf_llama differs from the library's LlamaAttention by up to {gap:.3g} at real "
                "tokens (positions with gaps, left padding): W_q and W_k go back to neighbour pairs with "
                "half_split_to_interleaved, per head (num_heads for W_q, num_key_value_heads for W_k); W_v and W_o "
                "are copied unchanged; RoPE with rope_base={base:g}; key_mask hides the padded keys; repeat_kv "
                "shares each key/value head among num_heads // num_key_value_heads query heads").format(
                gap=gap, base=ROPE_BASE))
        _other_shapes(from_hf_llama)
        steps = _greedy(layer, attn, rotary, library_mask)
        ok(_("from_hf_llama: equals the library's LlamaAttention at positions with gaps and with left padding "
              "(largest difference {gap:.1e}); greedy decoding with a KV cache gives the library's {n} tokens for "
              "3 left-padded prompts").format(gap=gap, n=steps))

    def _disagreement(from_hf_llama, H, H_kv, seed) -> str:
        """'' where the layer loaded from the library's layer of H query heads over H_kv key/value heads, head_dim
        10, equals it at real tokens (B 2, S 5, left padding, positions with gaps); else what went wrong."""
        attn, rotary = tiny_llama(hidden_size=10 * H, num_heads=H, num_kv_heads=H_kv, seed=seed)
        x, positions = torch.randn(2, 5, 10 * H), torch.tensor([[0, 0, 1, 2, 3], [0, 2, 3, 7, 8]])
        key_mask = torch.tensor([[False, True, True, True, True], [True] * 5])
        want = llama_reference(attn, rotary, x, positions, key_mask, library_mask)
        try:
            with torch.no_grad():
                got = from_hf_llama(attn, ROPE_BASE).eval()(x, positions=positions, key_mask=key_mask)
        except (NotImplementedError, NotReady):
            raise
        except Exception as error:  # noqa: BLE001 - raised by the student's layer: named with its cause below
            return _("raises {kind} ({text})").format(kind=type(error).__name__, text=first_sentence(error))
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return _("returns {shape} instead of [2, 5, {d}]").format(shape=shape_of(got), d=10 * H)
        gap = (got - want)[key_mask].abs().max().item()
        return "" if gap <= 1e-5 else _("differs from the library's LlamaAttention by up to {gap:.3g} at real "
                                        "tokens").format(gap=gap)

    def _other_shapes(from_hf_llama) -> None:
        """head_dim 10 with the first layer's heads, then 3, 4 and 1 query heads per key/value head: a failure names
        head_dim 8 assumed, or the keys and values repeated the wrong number of times."""
        for seed, (H, H_kv) in enumerate(HEAD_DIM_10, start=9):
            torch.manual_seed(seed)
            how = _disagreement(from_hf_llama, H, H_kv, seed)
            if how and (H, H_kv) == HEAD_DIM_10[0]:
                raise AssertionError(_(
                    "with head_dim 10 (4 query heads over 2 key/value heads, as before) your layer from from_hf_llama "
                    "{how}, and with head_dim 8 it is right: something assumes head_dim 8: the permutation of W_q and "
                    "W_k must be built from the layer's own head_dim (rows // num_heads) and the heads split with "
                    "it").format(how=how))
            assert not how, _(
                "with {H} query heads over {H_kv} key/value heads your layer from from_hf_llama {how}, and with 4 over "
                "2 it is right (head_dim 10 both): the keys and values were repeated the wrong number of times: each "
                "of the {H_kv} key/value heads serves num_key_value_groups = num_heads // num_key_value_heads = {n} "
                "query heads, so repeat it H // H_kv times, never a fixed number").format(
                H=H, H_kv=H_kv, how=how, n=H // H_kv)

    def _greedy(layer, attn, rotary, library_mask, new_tokens=5):
        """A one-layer model (a random embedding, the attention, a random output matrix) decodes `new_tokens` greedily:
        your layer with a KV cache, the library's layer on the whole sequence at every step."""
        torch.manual_seed(8)
        vocab = 20
        embed, unembed = torch.randn(vocab, 32), torch.randn(32, vocab)
        tokens = torch.tensor([[0, 0, 3, 7, 1], [4, 9, 2, 2, 8], [0, 0, 0, 5, 6]])  # 0 = padding on the left
        mask = tokens != 0  # [B, S]
        cache = _Cache()
        with torch.no_grad():
            mine = layer(embed[tokens], positions=(mask.cumsum(1) - 1).clamp(min=0), cache=cache, key_mask=mask)
            for step in range(new_tokens):
                positions = (mask.cumsum(1) - 1).clamp(min=0)  # [B, S]: real tokens count from 0
                theirs = llama_reference(attn, rotary, embed[tokens], positions, mask, library_mask)
                want = (theirs[:, -1] @ unembed).argmax(-1)  # [B]
                got = (mine[:, -1] @ unembed).argmax(-1)
                if not torch.equal(got, want):
                    sample = (got != want).nonzero()[0].item()
                    raise AssertionError(_(
                        "greedy decoding with your layer and a KV cache gives token {got} at new token {step} of prompt "
                        "{sample}, the library's layer gives {want}; the check feeds the prompt, then one token at a "
                        "time with positions [B, 1] and key_mask covering everything cached, and your layer agrees "
                        "without a cache: with one, rotate the new keys at their positions before appending them (not "
                        "the cached keys after reading them) and align the causal mask bottom-right "
                        "(decode_causal_mask)").format(got=got[sample].item(), step=step, sample=sample, want=want[sample].item()))
                tokens = torch.cat([tokens, want[:, None]], dim=1)
                mask = torch.cat([mask, torch.ones(3, 1, dtype=torch.bool)], dim=1)
                where = positions[:, -1:] + 1  # [B, 1]
                mine = layer(embed[want][:, None], positions=where, cache=cache, key_mask=mask)
        return new_tokens

    return check_interleaved_to_half_split, check_rope_permutation, check_from_hf_llama
