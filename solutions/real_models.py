"""Reference implementation of the fourth assignment, `real_models` (see ../shared/course-spec.md).

Your attention inside real code: the layers of the first two assignments, loaded from (and written
back to) three implementations of the `transformers` library — GPT-2's fused `Conv1D` `c_attn`, BERT's
additive `[B, 1, 1, S]` mask, and Llama's half-split rotary pairs, which differ from Meta's neighbouring
pairs by a permutation of the rows of `W_q` and `W_k`. Like solutions/attention.py, this file is the
single ground truth: the solution cells of the `real_models` notebooks are generated from it, and the
hidden checks compare every submission against it. The forwards use plain torch only; the library
supplies weights (through `from_hf`) and, on the grader's side, the reference outputs.

The Llama part reuses the decoder layer of `generation` (DecoderAttention and its pieces), pasted
below as a student pastes it into `03_llama`.

Names follow the maths: B batch, H (query) heads, H_kv key/value heads, S positions,
head_dim = d_model // H unless a config sets its own. Masks are boolean with True = real token, except BERT's, which is 1/0.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

# --------------------------------------------------------------------------- #
# Part gpt2
# --------------------------------------------------------------------------- #


def split_c_attn(weight: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """GPT-2's Conv1D c_attn (weight [d_model, 3 d_model], y = x @ weight + bias) -> (W_q, W_k, W_v [d_model, d_model] in nn.Linear layout, b_q, b_k, b_v)."""
    W_q, W_k, W_v = weight.T.chunk(3, dim=0)  # weight.T is [3 d_model, d_model] (out x in): rows q, k, v
    b_q, b_k, b_v = bias.chunk(3, dim=0)  # [d_model] each
    return W_q.contiguous(), W_k.contiguous(), W_v.contiguous(), b_q, b_k, b_v


class GPT2StyleAttention(nn.Module):
    """GPT-2's causal multi-head self-attention with separate W_q, W_k, W_v, W_o (nn.Linear, with bias)."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S, d_model] -> [B, S, d_model], causal; key_mask [B, S] bool, True = real token."""
        B, S, d_model = x.shape
        H = self.num_heads
        head_dim = d_model // H
        q = self.W_q(x).view(B, S, H, head_dim).transpose(1, 2)  # [B, H, S, head_dim]
        k = self.W_k(x).view(B, S, H, head_dim).transpose(1, 2)  # [B, H, S, head_dim]
        v = self.W_v(x).view(B, S, H, head_dim).transpose(1, 2)  # [B, H, S, head_dim]
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)  # [B, H, S, S]
        allowed = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()  # [S, S]: key j <= query i
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]  # [B, 1, S, S]
        scores = scores.masked_fill(~allowed, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S, head_dim]
        return self.W_o(out.transpose(1, 2).reshape(B, S, d_model))  # merge heads: [B, S, d_model]

    @classmethod
    def from_hf(cls, attn: nn.Module) -> "GPT2StyleAttention":
        """A GPT2StyleAttention equal to transformers' GPT2Attention `attn` (its Conv1D weights transposed into nn.Linear)."""
        d_model = attn.c_attn.weight.shape[0]
        layer = cls(d_model, attn.num_heads)
        W_q, W_k, W_v, b_q, b_k, b_v = split_c_attn(attn.c_attn.weight, attn.c_attn.bias)
        with torch.no_grad():
            for linear, W, b in ((layer.W_q, W_q, b_q), (layer.W_k, W_k, b_k), (layer.W_v, W_v, b_v)):
                linear.weight.copy_(W)
                linear.bias.copy_(b)
            layer.W_o.weight.copy_(attn.c_proj.weight.T)  # Conv1D [in, out] -> nn.Linear [out, in]
            layer.W_o.bias.copy_(attn.c_proj.bias)
        return layer

    def to_hf(self, attn: nn.Module) -> nn.Module:
        """Write this layer's weights into GPT2Attention `attn` (Conv1D layout: weight [in, out]); returns `attn`."""
        with torch.no_grad():
            W_qkv = torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight], dim=0)  # [3 d_model, d_model]
            attn.c_attn.weight.copy_(W_qkv.T)  # [d_model, 3 d_model]
            attn.c_attn.bias.copy_(torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias]))  # [3 d_model]
            attn.c_proj.weight.copy_(self.W_o.weight.T)  # [d_model, d_model], in x out
            attn.c_proj.bias.copy_(self.W_o.bias)
        return attn


# --------------------------------------------------------------------------- #
# Part bert
# --------------------------------------------------------------------------- #


def extended_attention_mask(attention_mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """attention_mask [B, S] of 1/0 (int or bool) -> [B, 1, 1, S] in `dtype`: 0 where a key is real, finfo(dtype).min where it is padding."""
    B, S = attention_mask.shape
    keep = attention_mask.to(dtype).view(B, 1, 1, S)  # [B, 1, 1, S]: broadcasts over heads and queries
    return (1.0 - keep) * torch.finfo(dtype).min


class BertStyleSelfAttention(nn.Module):
    """BERT's bidirectional multi-head self-attention (W_q, W_k, W_v with bias; no output projection: BERT's is in BertSelfOutput)."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S, d_model] -> [B, S, d_model]; attention_mask [B, S] of 1/0 (1 = real token), added as BERT adds it."""
        B, S, d_model = x.shape
        H = self.num_heads
        head_dim = d_model // H
        q = self.W_q(x).view(B, S, H, head_dim).transpose(1, 2)  # [B, H, S, head_dim]
        k = self.W_k(x).view(B, S, H, head_dim).transpose(1, 2)  # [B, H, S, head_dim]
        v = self.W_v(x).view(B, S, H, head_dim).transpose(1, 2)  # [B, H, S, head_dim]
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)  # [B, H, S, S]
        if attention_mask is not None:
            scores = scores + extended_attention_mask(attention_mask, scores.dtype)  # + [B, 1, 1, S]: finite
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S, head_dim]
        return out.transpose(1, 2).reshape(B, S, d_model)  # merge heads: [B, S, d_model]

    @classmethod
    def from_hf(cls, attn: nn.Module) -> "BertStyleSelfAttention":
        """A BertStyleSelfAttention equal to transformers' BertSelfAttention `attn` (query, key, value are nn.Linear already)."""
        layer = cls(attn.query.in_features, attn.num_attention_heads)
        with torch.no_grad():
            for mine, theirs in ((layer.W_q, attn.query), (layer.W_k, attn.key), (layer.W_v, attn.value)):
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)
        return layer


# --------------------------------------------------------------------------- #
# Part rope_permutation
# --------------------------------------------------------------------------- #


def interleaved_to_half_split(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[num_heads * head_dim, d_in], rows of each head in neighbouring pairs (Meta) -> rows in half-split pairs (the library)."""
    out_features, d_in = weight.shape
    head_dim = out_features // num_heads
    w = weight.view(num_heads, head_dim // 2, 2, d_in)  # [H, pair i, member of pair, d_in]: row 2i + j
    return w.transpose(1, 2).reshape(out_features, d_in)  # [H, member, pair i, d_in]: row j * head_dim / 2 + i


def half_split_to_interleaved(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[num_heads * head_dim, d_in], rows of each head in half-split pairs (the library) -> neighbouring pairs (Meta); the inverse."""
    out_features, d_in = weight.shape
    head_dim = out_features // num_heads
    w = weight.view(num_heads, 2, head_dim // 2, d_in)  # [H, half j, pair i, d_in]: row j * head_dim / 2 + i
    return w.transpose(1, 2).reshape(out_features, d_in)  # [H, pair i, member j, d_in]: row 2i + j


# --------------------------------------------------------------------------- #
# Part llama: the decoder layer of `generation`, pasted, and its loader
# --------------------------------------------------------------------------- #


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
               inv_freq: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., S, head_dim], positions [S] or [B, S] -> same shape and dtype: pair (2i, 2i + 1) rotated by
    positions * inv_freq[i] (default: base^(-2i / head_dim); given: Llama 3.1's frequencies, rope_inv_freq)."""
    head_dim = x.shape[-1]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32  # angles need more than fp16
    if inv_freq is None:
        two_i = torch.arange(0, head_dim, 2, dtype=work, device=x.device)  # [head_dim / 2]
        inv_freq = base ** (-two_i / head_dim)
    angle = positions.to(work)[..., None] * inv_freq.to(work)  # [S, head_dim / 2] or [B, S, head_dim / 2]
    if positions.dim() == 2 and x.dim() == 4:
        angle = angle[:, None]  # [B, 1, S, head_dim / 2]: one row of positions per sequence, the same for every head
    cos, sin = torch.cos(angle), torch.sin(angle)
    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)  # [..., S, head_dim / 2]: the two halves of each pair
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # [..., S, head_dim / 2, 2]
    return rotated.flatten(-2).to(x.dtype)  # [..., S, head_dim]: pairs back in place


def decode_causal_mask(S_q: int, S_k: int) -> torch.Tensor:
    """BoolTensor [S_q, S_k]: the queries are the last S_q of S_k positions; True where key j <= i + (S_k - S_q)."""
    offset = S_k - S_q  # how many positions came before the first query
    return torch.ones(S_q, S_k, dtype=torch.bool).tril(diagonal=offset)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[B, H_kv, S, head_dim] -> [B, H_kv * n_rep, S, head_dim]: kv head h serves query heads h * n_rep ... (h + 1) * n_rep - 1."""
    B, H_kv, S, head_dim = x.shape
    x = x[:, :, None].expand(B, H_kv, n_rep, S, head_dim)  # [B, H_kv, n_rep, S, head_dim], no copy yet
    return x.reshape(B, H_kv * n_rep, S, head_dim)  # copies of one head end up next to each other


class DecoderAttention(nn.Module):
    """A Llama-style decoder's attention at generation time: RoPE at each token's position, a grouped-query KV cache.

    Pasted from `generation`, with two keywords a current Llama needs: `head_dim` of its own (W_q [H * head_dim,
    d_model], W_o [d_model, H * head_dim]; default d_model // H) and `inv_freq`, the rotary frequencies when no single
    base gives them (Llama 3.1's, rope_inv_freq)."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, rope_base: float = 10000.0,
                 head_dim: int | None = None, inv_freq: torch.Tensor | None = None):
        super().__init__()
        num_kv_heads = num_kv_heads or num_heads
        if (head_dim is None and d_model % num_heads) or num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must divide d_model={d_model}, num_kv_heads={num_kv_heads} "
                             "must divide num_heads")
        self.num_heads, self.num_kv_heads, self.rope_base = num_heads, num_kv_heads, rope_base
        self.head_dim = head_dim or d_model // num_heads
        self.inv_freq = None if inv_freq is None else inv_freq.detach().clone()  # [head_dim / 2], or None: rope_base
        self.W_q = nn.Linear(d_model, num_heads * self.head_dim, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)  # fewer key/value heads than query heads
        self.W_v = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.W_o = nn.Linear(num_heads * self.head_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None, cache=None,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, S_new, d_model] -> [B, S_new, d_model]; positions [S_new] or [B, S_new] (default: after the cache); key_mask [B, S_k]."""
        B, S_new, d_model = x.shape
        H, H_kv, head_dim = self.num_heads, self.num_kv_heads, self.head_dim
        # 1. project the new tokens and split heads
        q = self.W_q(x).view(B, S_new, H, head_dim).transpose(1, 2)  # [B, H, S_new, head_dim]
        k = self.W_k(x).view(B, S_new, H_kv, head_dim).transpose(1, 2)  # [B, H_kv, S_new, head_dim]
        v = self.W_v(x).view(B, S_new, H_kv, head_dim).transpose(1, 2)  # [B, H_kv, S_new, head_dim]
        # 2. the new tokens come after everything cached: positions len(cache), len(cache) + 1, ...
        if positions is None:
            start = 0 if cache is None else len(cache)
            positions = torch.arange(start, start + S_new, device=x.device)  # [S_new]
        q = apply_rope(q, positions, self.rope_base, self.inv_freq)
        k = apply_rope(k, positions, self.rope_base, self.inv_freq)
        # 3. cache the ROTATED keys (each rotated once, at its own position) and the values: [B, H_kv, S_k, head_dim]
        if cache is not None:
            k, v = cache.append(k, v)
        S_k = k.shape[-2]
        # 4. each key/value head serves H // H_kv query heads: [B, H, S_k, head_dim]
        k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)
        # 5. scores [B, H, S_new, S_k]: causal, bottom-right aligned; padded keys hidden
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        allowed = decode_causal_mask(S_new, S_k).to(x.device)  # [S_new, S_k]
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]  # [B, 1, S_new, S_k]
        scores = scores.masked_fill(~allowed, float("-inf"))
        # 6. softmax over keys, weighted sum, merge heads, W_o
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S_new, head_dim]
        return self.W_o(out.transpose(1, 2).reshape(B, S_new, H * head_dim))  # [B, S_new, d_model]


def rope_inv_freq(config) -> torch.Tensor:
    """The rotary frequencies [head_dim // 2] (float32) of the library's LlamaRotaryEmbedding for `config`:
    rope_type "default" (base^(-2i / head_dim)) or "llama3" (Llama 3.1: long wavelengths divided by `factor`, short
    ones kept, a smooth blend between the two thresholds). The library keeps the base and the scaling in
    `config.rope_parameters` in 5.x, in `config.rope_theta` and `config.rope_scaling` in 4.x."""
    params = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    base = params.get("rope_theta", getattr(config, "rope_theta", None))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)  # [head_dim / 2]
    if params.get("rope_type", params.get("type", "default")) != "llama3":
        return inv_freq
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    old_context = params["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq  # positions per turn of each pair
    # longer than old_context / low: divided by factor; shorter than old_context / high: kept; between: a blend
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)  # 0 at the long threshold, 1 at the short one
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    between = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return torch.where(between, blended, scaled)


def from_hf_llama(attn: nn.Module, rope_base: float | None = None,
                  inv_freq: torch.Tensor | None = None) -> DecoderAttention:
    """Your DecoderAttention loaded from transformers' LlamaAttention `attn`: W_q and W_k rows back to neighbouring
    pairs; head_dim from the module (it may differ from hidden_size / num_heads); rotating with `rope_base` or, when
    given instead, the frequencies `inv_freq` [head_dim / 2] (rope_inv_freq(config): Llama 3.1 and later)."""
    if (rope_base is None) == (inv_freq is None):
        raise ValueError("pass exactly one of rope_base and inv_freq")
    config = attn.config
    H, H_kv = config.num_attention_heads, config.num_key_value_heads
    layer = DecoderAttention(attn.q_proj.in_features, H, H_kv, rope_base=rope_base or 10000.0,
                             head_dim=attn.head_dim, inv_freq=inv_freq)
    with torch.no_grad():
        layer.W_q.weight.copy_(half_split_to_interleaved(attn.q_proj.weight, H))  # [H * head_dim, d_model]
        layer.W_k.weight.copy_(half_split_to_interleaved(attn.k_proj.weight, H_kv))  # [H_kv * head_dim, d_model]
        layer.W_v.weight.copy_(attn.v_proj.weight)  # values are not rotated: no permutation
        layer.W_o.weight.copy_(attn.o_proj.weight)  # [d_model, H * head_dim]
    return layer


# --------------------------------------------------------------------------- #
# Part attention_interface: your attention through the library's own seam
# --------------------------------------------------------------------------- #


def course_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """The library's attention-function signature: query [B, H, S_q, D], key/value [B, H_kv, S_k, D] (H_kv divides
    H), attention_mask None (every key), bool [B, 1, S_q, S_k] (True = attend) or float additive (0 / finfo.min)
    -> (output [B, S_q, H, D], the layout the library reshapes; weights [B, H, S_q, S_k], after dropout)."""
    H, H_kv, D = query.shape[1], key.shape[1], query.shape[-1]
    # grouped heads: kv head h serves query heads h * H / H_kv ... (h + 1) * H / H_kv - 1 -> [B, H, S_k, D]
    key, value = key.repeat_interleave(H // H_kv, dim=1), value.repeat_interleave(H // H_kv, dim=1)
    scale = D ** -0.5 if scaling is None else scaling
    scores = query @ key.transpose(-2, -1) * scale  # [B, H, S_q, S_k]
    if attention_mask is not None:
        mask = attention_mask[..., : key.shape[-2]]  # the library's masks may be longer than the keys
        if mask.dtype == torch.bool:  # finfo.min, not -inf: a padded query row stays finite, as with eager's mask
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask  # additive: 0 where allowed, finfo.min elsewhere
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)  # the library passes 0.0 in eval
    return (weights @ value).transpose(1, 2).contiguous(), weights  # [B, S_q, H, D], [B, H, S_q, S_k]


def register_course_attention(name: str = "course") -> str:
    """Registers course_attention under `name` with the library's AttentionInterface and, under the same name, the
    eager mask function (always the float additive [B, 1, S_q, S_k] mask: never None, never left to a kernel's
    is_causal) with AttentionMaskInterface; then `attn_implementation=name` runs it in every layer. Returns `name`."""
    from transformers import AttentionInterface, AttentionMaskInterface  # noqa: PLC0415 - the library's registries
    from transformers.masking_utils import eager_mask  # noqa: PLC0415

    AttentionInterface.register(name, course_attention)
    AttentionMaskInterface.register(name, eager_mask)
    return name
