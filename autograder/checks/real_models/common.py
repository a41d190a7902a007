"""Shapes, seeded inputs and trusted re-computations of the `real_models` checks.

Shapes expose bugs: B, S, H all different and above 1, a padded sample in every batch, fewer key/value heads
than query heads, positions with gaps. Each `*_variant` recomputes a layer's output here, in plain torch, from the
library's weights; its keywords reproduce a classic mistake (GPT-2's Conv1D weight not transposed, BERT's padding
filled with -inf, the RoPE permutation applied the wrong way or to W_v, key/value heads tiled instead of grouped,
positions ignored) so that a check can name it. Without keywords each equals the library's attention
(tests/test_real_models_library.py).
"""
from __future__ import annotations

import math

import torch

from autograder.checks import expect
from autograder.foundation import i18n
from solutions import real_models as ref

_ = i18n.message

NEG = float("-inf")


def split(t: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, S, heads * hd] -> [B, heads, S, hd]"""
    B, S, width = t.shape
    return t.reshape(B, S, heads, width // heads).transpose(1, 2)


def merge(t: torch.Tensor) -> torch.Tensor:
    """[B, H, S, hd] -> [B, S, H * hd]"""
    B, H, S, hd = t.shape
    return t.transpose(1, 2).reshape(B, S, H * hd)


def right_padded(lengths, S: int) -> torch.Tensor:
    """[B, S] bool, True = real token, each row's real tokens first."""
    return torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]


def left_padded(lengths, S: int) -> torch.Tensor:
    """[B, S] bool, True = real token, each row's real tokens last."""
    return torch.arange(S)[None, :] >= S - torch.tensor(lengths)[:, None]


def attend(q, k, v, allowed, scale: bool = True, fill: float | None = NEG) -> torch.Tensor:
    """softmax(q k^T / sqrt(hd) masked) v; `fill` where not allowed (-inf, finfo.min) or added (None: no mask)."""
    scores = q @ k.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    if allowed is not None and fill is not None:
        scores = scores.masked_fill(~allowed, fill)
    return torch.softmax(scores, dim=-1) @ v


# --------------------------------------------------------------------------- GPT-2


def gpt2_variant(state: dict, x: torch.Tensor, key_mask: torch.Tensor, heads: int, *, transposed: bool = True,
                 proj_transposed: bool = True, biases: bool = True, causal: bool = True, padding: bool = True,
                 scale: bool = True) -> torch.Tensor:
    """GPT2Attention's output from its Conv1D weights (`state`); transposed=False: c_attn's [d, 3d] weight split
    along its columns but used as nn.Linear weights (x @ W^T instead of x @ W); biases=False: the biases dropped."""
    W, b = state["c_attn.weight"], state["c_attn.bias"]
    d = W.shape[0]
    zero = torch.zeros_like(b)
    qkv = x @ W if transposed else torch.cat([x @ W[:, i * d:(i + 1) * d].T for i in range(3)], dim=-1)
    qkv = qkv + (b if biases else zero)  # [B, S, 3 d]
    q, k, v = (split(t, heads) for t in qkv.split(d, dim=-1))  # [B, H, S, hd] each
    S = x.shape[1]
    allowed = torch.ones(S, S, dtype=torch.bool) if not causal else torch.ones(S, S, dtype=torch.bool).tril()
    if padding:
        allowed = allowed & key_mask[:, None, None, :]
    out = merge(attend(q, k, v, allowed, scale))
    P, c = state["c_proj.weight"], state["c_proj.bias"]
    return (out @ P if proj_transposed else out @ P.T) + (c if biases else torch.zeros_like(c))


def gpt2_mistakes(state, x, key_mask, heads) -> dict:
    def v(**kw):
        return lambda: gpt2_variant(state, x, key_mask, heads, **kw)

    return {
        _("c_attn's weight was not transposed: a Conv1D stores [in, out] (y = x @ weight), nn.Linear [out, in] "
          "(y = x @ weight.T)"): v(transposed=False),
        _("c_proj's weight was not transposed (Conv1D [in, out] into nn.Linear [out, in])"): v(proj_transposed=False),
        _("c_attn and c_proj's biases were dropped: GPT-2's projections have biases"): v(biases=False),
        _("the layer is not causal: GPT-2 is a decoder, each token sees itself and earlier tokens only"): v(causal=False),
        _("key_mask was ignored: padded keys must get no weight"): v(padding=False),
        _("the scores were not divided by sqrt(head_dim)"): v(scale=False),
    }


# --------------------------------------------------------------------------- BERT

OLD_BERT_FILL = -10000.0  # google-research BERT's and transformers' (before 4.x) additive mask for padding
OLD_BERT_CONVENTION = _(
    "padding got -10000.0, the convention of google-research BERT and of transformers before 4.x, which "
    "finfo(dtype).min replaced: -10000 hides a padded key only while the real scores stay far above it, and in a "
    "sample of padding only it shifts every score alike (the softmax keeps their differences), where finfo.min swamps "
    "every score (uniform weights); finfo.min, the lowest finite number of the dtype, hides padding whatever the "
    "scores and the dtype")


def bert_variant(state: dict, x: torch.Tensor, attention_mask: torch.Tensor, heads: int, *, biases: bool = True,
                 fill: str = "min", scale: bool = True) -> torch.Tensor:
    """BertSelfAttention's output; fill "min": padding gets finfo.min added (the library), "inf": -inf,
    "none": the mask ignored, "inverted": finfo.min added to the real keys instead, "ten_thousand": -10000.0 added
    (google-research BERT, transformers before 4.x)."""
    def proj(name):
        return x @ state[f"{name}.weight"].T + (state[f"{name}.bias"] if biases else 0)

    q, k, v = (split(proj(n), heads) for n in ("query", "key", "value"))
    B, S = attention_mask.shape
    real = attention_mask.bool().view(B, 1, 1, S)
    if fill in ("inf", "none"):
        return merge(attend(q, k, v, real if fill == "inf" else None, scale))
    hidden = real if fill == "inverted" else ~real  # where finfo.min is added
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1)
    low = OLD_BERT_FILL if fill == "ten_thousand" else torch.finfo(scores.dtype).min
    scores = scores + torch.zeros(B, 1, 1, S, dtype=scores.dtype).masked_fill(hidden, low)
    return merge(torch.softmax(scores, dim=-1) @ v)


def bert_mistakes(state, x, attention_mask, heads) -> dict:
    def v(**kw):
        return lambda: bert_variant(state, x, attention_mask, heads, **kw)

    return {
        _("padded keys got -inf: a row whose keys are all padding then gives NaN (softmax of -inf everywhere), where "
          "BERT adds finfo(dtype).min and gives uniform weights"): v(fill="inf"),
        _("the biases of query, key and value were dropped: BERT's projections have biases"): v(biases=False),
        _("attention_mask was ignored: padded keys must get no weight"): v(fill="none"),
        _("the mask is inverted: 1 marks a real token, 0 padding"): v(fill="inverted"),
        _("the scores were not divided by sqrt(head_dim)"): v(scale=False),
        OLD_BERT_CONVENTION: v(fill="ten_thousand"),
    }


def extended_mask_mistakes(attention_mask: torch.Tensor, dtype: torch.dtype) -> dict:
    B, S = attention_mask.shape
    real = attention_mask.bool().view(B, 1, 1, S)
    low = torch.finfo(dtype).min
    return {
        _("padding got -inf: BERT adds finfo(dtype).min, a finite number, so that a row of padding stays finite"):
            lambda: torch.zeros(B, 1, 1, S, dtype=dtype).masked_fill(~real, NEG),
        _("the mask is inverted: finfo.min goes where the mask is 0 (padding), 0 where it is 1"):
            lambda: torch.zeros(B, 1, 1, S, dtype=dtype).masked_fill(real, low),
        _("finfo.min was taken in float32, not in the dtype asked for (in float16 it is -inf)"):
            lambda: ((1 - real.float()) * torch.finfo(torch.float32).min).to(dtype),
        OLD_BERT_CONVENTION: lambda: ((1.0 - real.to(dtype)) * OLD_BERT_FILL).to(dtype),
    }


# --------------------------------------------------------------------------- RoPE, Llama


def half_split_rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The library's rotary embedding in float64: pairs (x[i], x[i + hd/2]) rotated by positions * base^(-2i/hd)."""
    hd = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)  # [hd / 2]
    angle = positions.to(torch.float64)[..., None] * inv_freq  # [..., S, hd / 2]
    emb = torch.cat([angle, angle], dim=-1)  # [..., S, hd]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


def grouped_scores(q: torch.Tensor, k: torch.Tensor, heads: int, kv_heads: int) -> torch.Tensor:
    """q [heads, S, hd], k [kv_heads, S, hd] -> [heads, S, S]: query head h against kv head h // (heads / kv_heads)."""
    return q @ k.repeat_interleave(heads // kv_heads, dim=0).transpose(-2, -1)


def llama_variant(state: dict, x: torch.Tensor, positions: torch.Tensor, key_mask: torch.Tensor, heads: int,
                  kv_heads: int, inv_freq: torch.Tensor, *, permute: str = "back", permute_v: bool = False,
                  tiled: bool = False, ignore_positions: bool = False,
                  rotate: torch.Tensor | None = None) -> torch.Tensor:
    """LlamaAttention's output recomputed with neighbour-pair RoPE at the library's frequencies `inv_freq` after
    `permute` of W_q, W_k ("back": half_split_to_interleaved, as it should; "none"; "wrong": interleaved_to_half_split);
    permute_v: W_v permuted too; tiled: kv head h % H_kv serves query head h; ignore_positions: positions 0 .. S-1;
    rotate: other frequencies (inv_freq ignored: the plain base 10000's)."""
    fix = {"back": ref.half_split_to_interleaved, "wrong": ref.interleaved_to_half_split,
           "none": lambda w, n: w}[permute]
    W_q, W_k = fix(state["q_proj.weight"], heads), fix(state["k_proj.weight"], kv_heads)
    W_v = fix(state["v_proj.weight"], kv_heads) if permute_v else state["v_proj.weight"]
    B, S, d = x.shape
    q, k, v = split(x @ W_q.T, heads), split(x @ W_k.T, kv_heads), split(x @ W_v.T, kv_heads)
    where = torch.arange(S).expand(B, S) if ignore_positions else positions
    freqs = inv_freq if rotate is None else rotate
    q, k = ref.apply_rope(q, where, inv_freq=freqs), ref.apply_rope(k, where, inv_freq=freqs)
    n = heads // kv_heads
    k, v = (t.repeat(1, n, 1, 1) if tiled else t.repeat_interleave(n, dim=1) for t in (k, v))
    allowed = torch.ones(S, S, dtype=torch.bool).tril() & key_mask[:, None, None, :]
    return merge(attend(q, k, v, allowed)) @ state["o_proj.weight"].T


def plain_inv_freq(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """base^(-2i / head_dim), float32, as the library computes its default frequencies."""
    return 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)


def llama_mistakes(state, x, positions, key_mask, heads, kv_heads, inv_freq) -> dict:
    def v(**kw):
        return lambda: llama_variant(state, x, positions, key_mask, heads, kv_heads, inv_freq, **kw)

    return {
        _("W_q and W_k were loaded without the permutation: the library's rows are in half-split pairs, your RoPE "
          "rotates neighbouring pairs (half_split_to_interleaved)"): v(permute="none"),
        _("the permutation was applied the wrong way (interleaved_to_half_split): the library's weights are "
          "half-split already"): v(permute="wrong"),
        _("W_v was permuted too: values are not rotated, only W_q and W_k change"): v(permute_v=True),
        _("key/value heads were tiled (kv head h % H_kv for query head h) instead of grouped (h // (H / H_kv)): a "
          "mistake of your pasted DecoderAttention (repeat_kv), graded in generation"): v(tiled=True),
        _("positions were ignored: RoPE must rotate each token at the position it is given (these have gaps): a "
          "mistake of your pasted DecoderAttention, graded in generation"): v(ignore_positions=True),
        _("inv_freq was not used by your layer (it rotated with base 10000's frequencies): the layer must rotate "
          "with the frequencies it is given"): v(rotate=plain_inv_freq(inv_freq.numel() * 2)),
    }


def distinct(mistakes: dict, expected: torch.Tensor, atol: float = 1e-4) -> dict:
    """The mistakes whose result differs from `expected`: a hint is never offered where it equals the right answer
    (ignoring inv_freq changes nothing where the frequencies are base 10000's)."""
    return {hint: f for hint, f in mistakes.items() if not expect.same(f(), expected, atol, 0)}


# --------------------------------------------------------------------------- the pasted layer, step by step


def llama_steps(state: dict, hidden: list, schedule: list, heads: int, kv_heads: int, inv_freq: torch.Tensor, *,
                cache_positions: bool = False, decode_mask: bool = True, top_left: bool = False) -> list:
    """The right layer's outputs [B, S_new, d] at each step of greedy decoding (`hidden`: the step's input, `schedule`:
    (positions, key_mask) per step, library.schedule), with its own cache; or with a mistake of the pasted
    DecoderAttention: cache_positions (each token at len(cache) + i, not at the position given), decode_mask=False
    (key_mask dropped while decoding one token), top_left (the causal mask's diagonal not shifted by S_k - S_new)."""
    W_q = ref.half_split_to_interleaved(state["q_proj.weight"], heads)
    W_k = ref.half_split_to_interleaved(state["k_proj.weight"], kv_heads)
    W_v, W_o, n = state["v_proj.weight"], state["o_proj.weight"], heads // kv_heads
    K = V = None
    outs = []
    for x, (positions, key_mask) in zip(hidden, schedule):
        B, S_new, _d = x.shape
        start = 0 if K is None else K.shape[-2]
        where = torch.arange(start, start + S_new).expand(B, S_new) if cache_positions else positions
        q = ref.apply_rope(split(x @ W_q.T, heads), where, inv_freq=inv_freq)
        k = ref.apply_rope(split(x @ W_k.T, kv_heads), where, inv_freq=inv_freq)
        v = split(x @ W_v.T, kv_heads)
        K, V = (k, v) if K is None else (torch.cat([K, k], dim=-2), torch.cat([V, v], dim=-2))
        S_k = K.shape[-2]
        allowed = torch.ones(S_new, S_k, dtype=torch.bool).tril(diagonal=0 if top_left else S_k - S_new)
        if decode_mask or S_new > 1:
            allowed = allowed & key_mask[:, None, None, :]
        out = attend(q, K.repeat_interleave(n, dim=1), V.repeat_interleave(n, dim=1), allowed,
                     fill=torch.finfo(x.dtype).min)
        outs.append(merge(out) @ W_o.T)
    return outs


def pasted_layer_mistakes() -> dict:
    """The pasted DecoderAttention's mistakes that only decoding shows: {hint: llama_steps keywords}."""
    return {
        _("your pasted DecoderAttention took the positions from the cache length (len(cache)) instead of the positions "
          "it is given: with left padding each row's tokens sit at their own positions (a mistake of the pasted "
          "layer, graded in generation)"): {"cache_positions": True},
        _("your pasted DecoderAttention dropped key_mask while decoding one token: the padded keys of the prompt "
          "still get weight (a mistake of the pasted layer, graded in generation)"): {"decode_mask": False},
        _("your pasted DecoderAttention's causal mask is top-left aligned: with a cache, the S_new queries are the "
          "last of S_k positions, key j is allowed where j <= i + (S_k - S_new) (decode_causal_mask; a mistake of the "
          "pasted layer, graded in generation)"): {"top_left": True},
    }


# --------------------------------------------------------------------------- rope_inv_freq


def inv_freq_variant(params: dict, head_dim: int, *, scaled: bool = True, swapped: bool = False,
                     blend: str = "right") -> torch.Tensor:
    """Llama 3.1's frequencies (params: rope_theta, rope_type, factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings) recomputed; scaled=False: llama3's scaling ignored; swapped: the two thresholds
    exchanged; blend "reversed": smooth and 1 - smooth exchanged, "kept": the band between the thresholds left as it
    was, "divided": the band divided by factor."""
    inv_freq = plain_inv_freq(head_dim, params["rope_theta"])
    if not scaled or params.get("rope_type", "default") != "llama3":
        return inv_freq
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    old = params["original_max_position_embeddings"]
    long_wl, short_wl = (old / high, old / low) if swapped else (old / low, old / high)
    wavelen = 2 * math.pi / inv_freq
    out = torch.where(wavelen > long_wl, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    if blend == "reversed":
        smooth = 1 - smooth
    band = {"right": (1 - smooth) * out / factor + smooth * out, "reversed": (1 - smooth) * out / factor + smooth * out,
            "kept": inv_freq, "divided": inv_freq / factor}[blend]
    return torch.where((wavelen >= short_wl) & (wavelen <= long_wl), band, out)


def inv_freq_mistakes(params: dict, head_dim: int, default_head_dim: int) -> dict:
    mistakes = {
        _("llama3's scaling was ignored: with rope_type \"llama3\" the long wavelengths are divided by factor"):
            inv_freq_variant(params, head_dim, scaled=False),
        _("the two thresholds are swapped: wavelengths longer than original_max_position_embeddings / "
          "low_freq_factor are divided by factor, those shorter than original_max_position_embeddings / "
          "high_freq_factor kept"): inv_freq_variant(params, head_dim, swapped=True),
        _("the blend between the thresholds is wrong: smooth = (original_max_position_embeddings / wavelen - "
          "low_freq_factor) / (high_freq_factor - low_freq_factor), then (1 - smooth) * inv_freq / factor + smooth * "
          "inv_freq"): inv_freq_variant(params, head_dim, blend="reversed"),
        _("the band between the thresholds was left unscaled: it is blended between inv_freq / factor and "
          "inv_freq"): inv_freq_variant(params, head_dim, blend="kept"),
        _("the band between the thresholds was divided by factor: it is blended between inv_freq / factor and "
          "inv_freq"): inv_freq_variant(params, head_dim, blend="divided"),
    }
    if default_head_dim != head_dim:
        mistakes[_("head_dim was taken as hidden_size / num_attention_heads ({wrong}): this config sets head_dim = "
                   "{right}").format(wrong=default_head_dim, right=head_dim)] = inv_freq_variant(params,
                                                                                                default_head_dim)
    return mistakes
