"""The mistake catalogue of the second assignment, `generation`: textual edits of solutions/generation.py.

Same rules as tests/catalogue/build.py (whose Case, edits and writer this file reuses): each
case changes the reference in one intended way, declares the parts it must lose, and every
other part must keep full marks. The catalogue's files are whole .py submissions: DecoderAttention calls
the file's own apply_rope, repeat_kv and decode_causal_mask, yet a case that breaks one of those loses only
the part that owns it: while `decoder` is graded the grader's versions stand in for them (spec.Part.borrows,
autograder/checks/lent.py), and the part's note names the wrong one.

    .venv/bin/python tests/catalogue/generation.py          # (re)write tests/catalogue/submissions/generation/*.py
    .venv/bin/python tests/catalogue/generation.py --table  # grade them all and print the result table
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCE = ROOT / "solutions" / "generation.py"
OUT = HERE / "submissions" / "generation"
GENERATOR = "tests/catalogue/generation.py"


def _load_build():
    name = "catalogue_build"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "build.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


build = _load_build()
Case = build.Case


def _fn(name: str, body: str) -> tuple:
    return (name, None, body)


CACHED_MASK = 'scores = scores.masked_fill(~decode_causal_mask(S_new, S_k).to(x.device), float("-inf"))'
CACHED_STEPS_3_4 = f"""        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        {CACHED_MASK}
        # 4. softmax over keys, weighted sum, merge heads [B, S_new, d_model], then W_o
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S_new, head_dim]"""

DECODER_STEPS_4_6 = """        # 4. each key/value head serves H // H_kv query heads: [B, H, S_k, head_dim]
        k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)
        # 5. scores [B, H, S_new, S_k]: causal, bottom-right aligned; padded keys hidden
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        allowed = decode_causal_mask(S_new, S_k).to(x.device)  # [S_new, S_k]
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]  # [B, 1, S_new, S_k]
        scores = scores.masked_fill(~allowed, float("-inf"))
        # 6. softmax over keys, weighted sum, merge heads, W_o
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S_new, head_dim]"""

CASES: tuple = (
    # ------------------------------------------------------------------ wrong: positions
    Case("pe_sin_cos_swapped", "cos on the even features, sin on the odd ones",
         (("sinusoidal_positions", "pe[:, 0::2] = torch.sin(angle)", "pe[:, 0::2] = torch.cos(angle)"),
          ("sinusoidal_positions", "pe[:, 1::2] = torch.cos(angle)", "pe[:, 1::2] = torch.sin(angle)")),
         lose=("positions",), says="swapped"),
    Case("pe_sines_then_cosines", "all the sines first, then all the cosines (concatenated, not interleaved)",
         (("sinusoidal_positions", "pe[:, 0::2] = torch.sin(angle)  # even features",
           "pe = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)"),
          ("sinusoidal_positions", "    pe[:, 1::2] = torch.cos(angle)  # odd features\n", "")),
         lose=("positions",), says="interleave"),
    Case("rope_half_split", "RoPE pairs feature i with feature i + head_dim/2 (rotate_half code)",
         (("apply_rope", "a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)",
           "a, b = x[..., : head_dim // 2].to(work), x[..., head_dim // 2 :].to(work)"),
          ("apply_rope", "return rotated.flatten(-2).to(x.dtype)",
           "return torch.cat((rotated[..., 0], rotated[..., 1]), dim=-1).to(x.dtype)")),
         lose=("positions",), says="half-split"),
    Case("rope_base_1000", "RoPE's angles with base 1000",
         (("apply_rope", "base ** (-two_i / head_dim)", "(base / 10) ** (-two_i / head_dim)"),),
         lose=("positions",), says="base"),
    Case("rope_base_500000", "RoPE with Llama 3's base 500000 as the default of `base`",
         (_fn("apply_rope", "def apply_rope(x, positions, base=500000.0):\n"
              "    head_dim = x.shape[-1]\n"
              "    work = torch.float64 if x.dtype == torch.float64 else torch.float32\n"
              "    angle = positions.to(work)[..., None] * base ** (-torch.arange(0, head_dim, 2, dtype=work) / head_dim)\n"
              "    if positions.dim() == 2 and x.dim() == 4:\n"
              "        angle = angle[:, None]\n"
              "    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)\n"
              "    return torch.stack((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), "
              "dim=-1).flatten(-2).to(x.dtype)\n"),),
         lose=("positions",), says="base 500000"),
    Case("rope_nanochat", "nanochat's RoPE: half-split pairs, rotated the other way, base 100000",
         (_fn("apply_rope", "def apply_rope(x, positions, base=100000.0):\n"
              "    head_dim = x.shape[-1]\n"
              "    work = torch.float64 if x.dtype == torch.float64 else torch.float32\n"
              "    angle = positions.to(work)[..., None] * base ** (-torch.arange(0, head_dim, 2, dtype=work) / head_dim)\n"
              "    if positions.dim() == 2 and x.dim() == 4:\n"
              "        angle = angle[:, None]\n"
              "    cos, sin = angle.cos(), angle.sin()\n"
              "    x1, x2 = x[..., : head_dim // 2].to(work), x[..., head_dim // 2 :].to(work)\n"
              "    return torch.cat([x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos], dim=-1).to(x.dtype)\n"),),
         lose=("positions",), says="the half-split pairing (x[i], x[i + head_dim/2]) of rotate_half code, where the "
         "contract pairs neighbours (x[2i], x[2i + 1]), as in x[..., 0::2] with x[..., 1::2]; the other rotation "
         "direction"),
    Case("rope_ignores_positions", "apply_rope rotates row s by s, whatever positions says",
         (("apply_rope", "positions.to(work)[..., None]",
           "torch.arange(x.shape[-2], dtype=work, device=x.device)[:, None]"),),
         lose=("positions",), says="ignored `positions`"),
    Case("rope_base_over_d_model", "RoPE's frequencies with the base divided by head_dim (1e4 / d)",
         (("apply_rope", "base ** (-two_i / head_dim)", "(base / head_dim) ** (-two_i / head_dim)"),),
         lose=("positions",), says="apply_rope"),
    Case("rope_exponent_i", "RoPE's frequencies 10000^(-i / head_dim) (the factor 2 forgotten)",
         (("apply_rope", "two_i = torch.arange(0, head_dim, 2, dtype=work, device=x.device)",
           "two_i = torch.arange(head_dim // 2, dtype=work, device=x.device)"),),
         lose=("positions",), says="10000^(-i / head_dim)"),
    Case("rope_returns_float32", "apply_rope returns float32 for a float16 x (found by mutation testing)",
         (("apply_rope", "return rotated.flatten(-2).to(x.dtype)", "return rotated.flatten(-2)"),),
         lose=("positions",), says="float16"),
    # ------------------------------------------------------------------ wrong: kv_cache
    Case("decode_mask_top_left", "decode_causal_mask is tril() of [S_q, S_k]: top-left aligned",
         (("decode_causal_mask", ".tril(diagonal=offset)", ".tril()"),),
         lose=("kv_cache",), says="top-left aligned"),
    Case("cached_hf_is_causal_q_len", "CachedSelfAttention with HF's SDPA pattern: is_causal = q_len > 1 (right for the "
         "prompt and single tokens, top-left for a chunk after a cache)",
         (("CachedSelfAttention", CACHED_STEPS_3_4,
           "        out = F.scaled_dot_product_attention(q, k, v, is_causal=S_new > 1)  # [B, H, S_new, head_dim]"),),
         lose=("kv_cache",), says="is_causal = q_len > 1"),
    Case("cached_sdpa_is_causal", "CachedSelfAttention calls SDPA with is_causal=True (top-left when S_q != S_k)",
         (("CachedSelfAttention", CACHED_STEPS_3_4,
           "        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, S_new, head_dim]"),),
         lose=("kv_cache",), says="top-left aligned"),
    Case("repeat_kv_tiled", "repeat_kv tiles the heads with .repeat (kv0, kv1, kv0, kv1, ...)",
         (("repeat_kv", "x = x[:, :, None].expand(B, H_kv, n_rep, S, head_dim)",
           "x = x[:, None].expand(B, n_rep, H_kv, S, head_dim)"),),
         lose=("kv_cache",), says="tiled"),
    # a layer written for its own helper, in another convention: the helper costs kv_cache, the layer nothing
    Case("repeat_kv_llama3_layout", "repeat_kv takes Llama 3's layout [B, S, H_kv, head_dim], and DecoderAttention "
         "calls it so (the layer is right with its own helper)",
         (_fn("repeat_kv", "def repeat_kv(x, n_rep):\n"
              "    \"\"\"[B, S, H_kv, head_dim] -> [B, S, H_kv * n_rep, head_dim], each kv head n_rep times in place.\"\"\"\n"
              "    batch, seq, kv_heads, width = x.shape\n"
              "    if n_rep == 1:\n"
              "        return x\n"
              "    wide = x[:, :, :, None, :].expand(batch, seq, kv_heads, n_rep, width)\n"
              "    return wide.reshape(batch, seq, kv_heads * n_rep, width)\n"),
          ("DecoderAttention", "k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)",
           "k = repeat_kv(k.transpose(1, 2), H // H_kv).transpose(1, 2)\n"
           "        v = repeat_kv(v.transpose(1, 2), H // H_kv).transpose(1, 2)")),
         lose=("kv_cache",), says="repeat_kv"),
    Case("repeat_kv_mistral_pair", "repeat_kv(keys, values, repeats) repeats both tensors at once (Mistral's helper), "
         "and DecoderAttention calls it so (the layer is right with its own helper)",
         (_fn("repeat_kv", "def repeat_kv(keys, values, repeats, dim=1):\n"
              "    \"\"\"Both tensors with each head repeated `repeats` times in place along `dim`.\"\"\"\n"
              "    keys = torch.repeat_interleave(keys, repeats=repeats, dim=dim)\n"
              "    values = torch.repeat_interleave(values, repeats=repeats, dim=dim)\n"
              "    return keys, values\n"),
          ("DecoderAttention", "k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)",
           "k, v = repeat_kv(k, v, H // H_kv)")),
         lose=("kv_cache",), says="repeat_kv"),
    Case("repeat_kv_mistral_pair_unscaled", "Mistral's repeat_kv(keys, values, repeats), which DecoderAttention calls "
         "so, and DecoderAttention does not scale its scores: the decoder's checks report the missing scale, never an "
         "error of the grader's repeat_kv",
         (_fn("repeat_kv", "def repeat_kv(keys, values, repeats, dim=1):\n"
              "    \"\"\"Both tensors with each head repeated `repeats` times in place along `dim`.\"\"\"\n"
              "    keys = torch.repeat_interleave(keys, repeats=repeats, dim=dim)\n"
              "    values = torch.repeat_interleave(values, repeats=repeats, dim=dim)\n"
              "    return keys, values\n"),
          ("DecoderAttention", "k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)",
           "k, v = repeat_kv(k, v, H // H_kv)"),
          ("DecoderAttention", "scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)", "scores = q @ k.transpose(-2, -1)")),
         lose=("kv_cache", "decoder"), says="sqrt"),
    Case("cache_on_head_axis", "KVCache.append concatenates along the head axis",
         (("KVCache", "self.k = torch.cat([self.k, k], dim=-2)", "self.k = torch.cat([self.k, k], dim=1)"),
          ("KVCache", "self.v = torch.cat([self.v, v], dim=-2)", "self.v = torch.cat([self.v, v], dim=1)")),
         lose=("kv_cache",), says="head axis"),
    Case("cache_len_counts_appends", "len(KVCache) counts append calls, not positions",
         (("KVCache", "        self.v: torch.Tensor | None = None\n",
           "        self.v: torch.Tensor | None = None\n        self.calls = 0\n"),
          ("KVCache", "        if self.k is None:\n            self.k, self.v = k, v",
           "        self.calls += 1\n        if self.k is None:\n            self.k, self.v = k, v"),
          ("KVCache", "return 0 if self.k is None else self.k.shape[-2]", "return self.calls")),
         lose=("kv_cache",), says="number of append calls"),
    Case("cached_ignores_cache", "CachedSelfAttention appends to the cache but attends only to the new keys",
         (("CachedSelfAttention", "            k, v = cache.append(k, v)", "            cache.append(k, v)"),),
         lose=("kv_cache",), says="attend only to themselves"),
    Case("cached_no_mask_after_prompt", "no causal mask once the cache holds positions (fine one token at a time, "
         "wrong for several)",
         (("CachedSelfAttention", "        if cache is not None:\n            k, v = cache.append(k, v)",
           "        cached = cache is not None and len(cache) > 0\n"
           "        if cache is not None:\n            k, v = cache.append(k, v)"),
          ("CachedSelfAttention", f"        {CACHED_MASK}", f"        if not cached:\n            {CACHED_MASK}")),
         lose=("kv_cache",), says="drop the causal mask"),
    Case("cached_scale_d_model", "CachedSelfAttention scales by sqrt(d_model)",
         (("CachedSelfAttention", "/ math.sqrt(q.shape[-1])", "/ math.sqrt(d_model)"),),
         lose=("kv_cache",), says="sqrt(d_model)"),
    Case("cached_heads_and_width_swapped", "CachedSelfAttention splits heads as view(B, S, head_dim, H): head_dim heads "
         "of width H, unseen when H == head_dim (found by mutation testing)",
         (("CachedSelfAttention", "t.view(B, S_new, H, d_model // H)", "t.view(B, S_new, d_model // H, H)"),),
         lose=("kv_cache",), says="fails for H=1, d_model=4"),
    Case("cached_scale_by_heads", "CachedSelfAttention scales by sqrt(q.shape[1]), the number of heads (found by "
         "mutation testing)",
         (("CachedSelfAttention", "math.sqrt(q.shape[-1])", "math.sqrt(q.shape[1])"),),
         lose=("kv_cache",), says="sqrt(H)"),
    Case("kv_bytes_without_values", "kv_cache_bytes counts the keys only",
         (("kv_cache_bytes", "return 2 * batch", "return batch"),), lose=("kv_cache",), says="factor 2"),
    Case("kv_bytes_always_fp16", "kv_cache_bytes takes 2 bytes per element whatever the dtype",
         (("kv_cache_bytes", "torch.empty((), dtype=dtype)", "torch.empty((), dtype=torch.float16)"),),
         lose=("kv_cache",), says="ignored dtype"),
    # ------------------------------------------------------------------ wrong: cross_attention
    Case("cross_kv_from_x", "CrossAttention projects keys and values from x (self-attention by mistake)",
         (("CrossAttention", "k = self.W_k(context).view(B, S_k, H, head_dim)", "k = self.W_k(x).view(B, S_q, H, head_dim)"),
          ("CrossAttention", "v = self.W_v(context).view(B, S_k, H, head_dim)", "v = self.W_v(x).view(B, S_q, H, head_dim)")),
         lose=("cross_attention",), says="projected from x"),
    Case("cross_mask_inverted", "CrossAttention fills -inf at the real context tokens",
         (("CrossAttention", "masked_fill(~context_mask[:, None, None, :]", "masked_fill(context_mask[:, None, None, :]"),),
         lose=("cross_attention",), says="inverted"),
    Case("cross_causal", "CrossAttention adds a decoder's causal mask",
         (("CrossAttention", "        # 3. softmax over the context",
           "        scores = scores.masked_fill(torch.ones(S_q, S_k, dtype=torch.bool).triu(1), float('-inf'))\n"
           "        # 3. softmax over the context"),),
         lose=("cross_attention",), says="no causal mask"),
    Case("cross_ignores_d_context", "W_k and W_v take d_model features whatever d_context is",
         (("CrossAttention", "self.W_k = nn.Linear(d_context, d_model, bias=False)",
           "self.W_k = nn.Linear(d_model, d_model, bias=False)"),
          ("CrossAttention", "self.W_v = nn.Linear(d_context, d_model, bias=False)",
           "self.W_v = nn.Linear(d_model, d_model, bias=False)")),
         lose=("cross_attention",), says="d_context -> d_model"),
    Case("cross_mask_on_queries", "the context mask hides query rows",
         (("CrossAttention", "~context_mask[:, None, None, :]", "~context_mask[:, None, :, None]"),),
         lose=("cross_attention",), says="context_mask[:, None, None, :]"),
    Case("cross_values_heads_and_width_swapped", "CrossAttention splits the values as view(B, S_k, head_dim, H) "
         "(found by mutation testing)",
         (("CrossAttention", "v = self.W_v(context).view(B, S_k, H, head_dim)", "v = self.W_v(context).view(B, S_k, head_dim, H)"),),
         lose=("cross_attention",), says="fails for H=2, d_model=6"),
    Case("cross_wraps_official_module", "CrossAttention copies its weights into nn.MultiheadAttention and calls it "
         "(correct numbers, but the part's work handed to the module it is graded against)",
         (("CrossAttention", """        # 1. queries from x, keys and values from the context, split into heads""",
           """        official = nn.MultiheadAttention(d_model, H, kdim=context.shape[-1], vdim=context.shape[-1],
                                         bias=False, batch_first=True)
        with torch.no_grad():
            official.q_proj_weight.copy_(self.W_q.weight)
            official.k_proj_weight.copy_(self.W_k.weight)
            official.v_proj_weight.copy_(self.W_v.weight)
            official.out_proj.weight.copy_(self.W_o.weight)
        key_padding_mask = None if context_mask is None else ~context_mask
        return official(x, context, context, key_padding_mask=key_padding_mask, need_weights=False)[0]
        # 1. queries from x, keys and values from the context, split into heads"""),),
         zero=("cross_attention",), says="nn.MultiheadAttention"),
    # ------------------------------------------------------------------ wrong: decoder (the joints)
    Case("decoder_needs_num_kv_heads", "DecoderAttention(d_model, num_heads) without num_kv_heads raises: the "
         "contract's default None is never turned into num_heads",
         (("DecoderAttention", "        num_kv_heads = num_kv_heads or num_heads\n", ""),),
         lose=("decoder",), says="DecoderAttention raised TypeError"),
    Case("decoder_new_token_at_zero", "DecoderAttention rotates the new tokens from position 0, whatever is cached",
         (("DecoderAttention", "start = 0 if cache is None else len(cache)", "start = 0"),),
         lose=("decoder",), says="rotated from position 0"),
    Case("decoder_rotates_cached_keys_again", "DecoderAttention rotates every key the cache returns once more",
         (("DecoderAttention", "            k, v = cache.append(k, v)\n",
           "            k, v = cache.append(k, v)\n"
           "            k = apply_rope(k, torch.arange(k.shape[-2], device=x.device), self.rope_base)\n"),),
         lose=("decoder",), says="rotated again"),
    Case("decoder_caches_unrotated_keys", "DecoderAttention caches the keys before RoPE and rotates all of them at "
         "0 .. S_k - 1 after reading (right outputs for consecutive positions, not what the cache must hold)",
         (("DecoderAttention", "        k = apply_rope(k, positions, self.rope_base)\n", ""),
          ("DecoderAttention", "        S_k = k.shape[-2]\n",
           "        S_k = k.shape[-2]\n        k = apply_rope(k, torch.arange(S_k, device=x.device), self.rope_base)\n")),
         lose=("decoder",), says="the keys were rotated at their places in the cache"),
    Case("decoder_caches_unrotated_keys_when_cached", "DecoderAttention rotates the keys at their positions without a "
         "cache, but with one caches them before RoPE and rotates everything the cache returns at 0 .. S_k - 1 (blog "
         "code: right while the positions are 0, 1, 2, ...; wrong for a left-padded batch)",
         (("DecoderAttention", "        k = apply_rope(k, positions, self.rope_base)\n",
           "        if cache is None:\n            k = apply_rope(k, positions, self.rope_base)\n"),
          ("DecoderAttention", "        S_k = k.shape[-2]\n",
           "        S_k = k.shape[-2]\n        if cache is not None:\n"
           "            k = apply_rope(k, torch.arange(S_k, device=x.device), self.rope_base)\n")),
         lose=("decoder",), says="the keys were rotated at their places in the cache"),
    Case("decoder_caches_all_heads", "DecoderAttention repeats the kv heads before appending: the cache holds H heads",
         (("DecoderAttention", "        if cache is not None:\n            k, v = cache.append(k, v)",
           "        k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)\n"
           "        if cache is not None:\n            k, v = cache.append(k, v)"),
          ("DecoderAttention", "k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)\n        # 5.", "# 5.")),
         lose=("decoder",), says="the cache received 4 heads"),
    Case("decoder_top_left", "DecoderAttention masks with tril() of [S_new, S_k] (top-left aligned)",
         (("DecoderAttention", "decode_causal_mask(S_new, S_k).to(x.device)",
           "torch.ones(S_new, S_k, dtype=torch.bool, device=x.device).tril()"),),
         lose=("decoder",), says="top-left aligned"),
    Case("decoder_sdpa_is_causal", "DecoderAttention calls SDPA with is_causal=True and enable_gqa (top-left when "
         "S_new != S_k; key_mask dropped)",
         (("DecoderAttention", DECODER_STEPS_4_6,
           "        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)"),),
         lose=("decoder",), says="top-left aligned"),
    Case("decoder_ignores_key_mask", "DecoderAttention never applies key_mask",
         (("DecoderAttention", "        if key_mask is not None:\n            allowed = allowed & key_mask[:, None, None, :]"
           "  # [B, 1, S_new, S_k]\n", ""),),
         lose=("decoder",), says="key_mask was ignored"),
    Case("decoder_ignores_rope_base", "DecoderAttention rotates with the default base, whatever rope_base is",
         (("DecoderAttention", "q = apply_rope(q, positions, self.rope_base)", "q = apply_rope(q, positions)"),
          ("DecoderAttention", "k = apply_rope(k, positions, self.rope_base)", "k = apply_rope(k, positions)")),
         lose=("decoder",), says="rope_base was ignored"),
    Case("decoder_rope_on_keys_only", "DecoderAttention rotates the keys, not the queries",
         (("DecoderAttention", "        q = apply_rope(q, positions, self.rope_base)\n", ""),),
         lose=("decoder",), says="rotated the keys only"),
    Case("decoder_ignores_positions", "DecoderAttention always rotates at len(cache) + arange, ignoring positions",
         (("DecoderAttention", "        if positions is None:\n", "        if True:\n"),),
         lose=("decoder",), says="positions argument was ignored"),
    Case("decoder_tiled_kv_heads", "DecoderAttention tiles the kv heads with .repeat (kv0, kv1, kv0, kv1, ...)",
         (("DecoderAttention", "k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)",
           "k, v = k.repeat(1, H // H_kv, 1, 1), v.repeat(1, H // H_kv, 1, 1)"),),
         lose=("decoder",), says="tiled"),
    Case("decoder_inline_half_split", "DecoderAttention rotates with its own rotate_half code inline (Hugging Face's "
         "half-split pairing), not with apply_rope: a convention, charged once",
         (("DecoderAttention", "q = apply_rope(q, positions, self.rope_base)", "q = _rope_half(q, positions, self.rope_base)"),
          ("DecoderAttention", "k = apply_rope(k, positions, self.rope_base)", "k = _rope_half(k, positions, self.rope_base)"),
          ("DecoderAttention", "class DecoderAttention(nn.Module):",
           "def _rope_half(x, positions, base):\n"
           "    d = x.shape[-1]\n"
           "    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))\n"
           "    freqs = positions.float()[..., None] * inv_freq\n"
           "    emb = torch.cat((freqs, freqs), dim=-1)\n"
           "    if positions.dim() == 2:\n"
           "        emb = emb[:, None]\n"
           "    x1, x2 = x[..., : d // 2], x[..., d // 2 :]\n"
           "    return (x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()).type_as(x)\n\n\n"
           "class DecoderAttention(nn.Module):")),
         lose=("decoder",), says="so it costs points here only"),
    Case("decoder_mask_by_positions", "DecoderAttention picks each query's mask row by its position (gpt-fast's "
         "mask[input_pos], made for a cache of one slot per position) in a cache that keeps keys in order",
         (("DecoderAttention", "        allowed = decode_causal_mask(S_new, S_k).to(x.device)  # [S_new, S_k]\n",
           "        size = int(positions.max()) + S_k + 1\n"
           "        allowed = torch.ones(size, size, dtype=torch.bool).tril()[positions][..., :S_k]  # mask[input_pos]\n"
           "        if allowed.dim() == 3:\n"
           "            allowed = allowed[:, None]\n"),),
         lose=("decoder",), says="your causal mask follows the positions"),
    Case("decoder_prefill_branch", "DecoderAttention attends a chunk of several tokens to itself only (a prefill "
         "branch), single tokens to the cache",
         (("DecoderAttention", "        if cache is not None:\n            k, v = cache.append(k, v)",
           "        if cache is not None:\n            k_all, v_all = cache.append(k, v)\n"
           "            if S_new == 1:\n                k, v = k_all, v_all"),),
         lose=("decoder",), says="a prefill branch taken whenever S_new > 1"),
    # ------------------------------------------------------------------ correct variants
    Case("ok_rope_complex", "RoPE as complex multiplication (Meta's LLaMA code); PE with exp/log in float32 "
         "(the Annotated Transformer)",
         (_fn("apply_rope", "def apply_rope(x, positions, base=10000.0):\n"
              "    d = x.shape[-1]\n"
              "    freqs = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))\n"
              "    angles = positions.float()[..., None] * freqs\n"
              "    if positions.dim() == 2 and x.dim() == 4:\n"
              "        angles = angles[:, None]\n"
              "    rot = torch.polar(torch.ones_like(angles), angles)\n"
              "    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], d // 2, 2))\n"
              "    return torch.view_as_real(pairs * rot).flatten(-2).type_as(x)\n"),
          _fn("sinusoidal_positions", "def sinusoidal_positions(seq_len, d_model):\n"
              "    pe = torch.zeros(seq_len, d_model)\n"
              "    position = torch.arange(0, seq_len).unsqueeze(1)\n"
              "    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))\n"
              "    pe[:, 0::2] = torch.sin(position * div_term)\n"
              "    pe[:, 1::2] = torch.cos(position * div_term)\n"
              "    return pe\n"))),
    Case("ok_rope_rotate_every_two", "RoPE with interleaved cos/sin tables and a rotate-every-two helper (GPT-J style)",
         (_fn("apply_rope", "def _rotate_every_two(x):\n"
              "    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)\n\n\n"
              "def apply_rope(x, positions, base=10000.0):\n"
              "    d = x.shape[-1]\n"
              "    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)\n"
              "    angle = (positions.double()[..., None] * inv).repeat_interleave(2, dim=-1)\n"
              "    if positions.dim() == 2 and x.dim() == 4:\n"
              "        angle = angle[:, None]\n"
              "    out = x.double() * angle.cos() + _rotate_every_two(x.double()) * angle.sin()\n"
              "    return out.to(x.dtype)\n"),)),
    Case("ok_cached_sdpa_lower_right", "the cached module through SDPA with causal_lower_right; repeat_interleave; "
         "a cache of lists; itemsize",
         (("CachedSelfAttention", CACHED_STEPS_3_4,
           "        from torch.nn.attention.bias import causal_lower_right\n\n"
           "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(S_new, S_k))"),
          _fn("repeat_kv", "def repeat_kv(x, n_rep):\n    return x.repeat_interleave(n_rep, dim=1)\n"),
          _fn("KVCache", "class KVCache:\n"
              "    def __init__(self):\n        self.ks, self.vs = [], []\n\n"
              "    def append(self, k, v):\n        self.ks.append(k)\n        self.vs.append(v)\n"
              "        return torch.cat(self.ks, dim=2), torch.cat(self.vs, dim=2)\n\n"
              "    def __len__(self):\n        return sum(k.shape[2] for k in self.ks)\n"),
          ("kv_cache_bytes", "element_size = torch.empty((), dtype=dtype).element_size()",
           "element_size = dtype.itemsize"))),
    Case("ok_cross_sdpa", "cross-attention through SDPA with a [B, 1, 1, S_k] boolean mask; einops-free reshape",
         (("CrossAttention", """        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        if context_mask is not None:
            scores = scores.masked_fill(~context_mask[:, None, None, :], float("-inf"))  # [B, 1, 1, S_k]
        # 3. softmax over the context, weighted sum, merge heads, W_o
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S_q, head_dim]""",
           """        allowed = None if context_mask is None else context_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)"""),)),
    Case("ok_list_append_float_bytes", "KVCache.append returns a list [k_all, v_all]; kv_cache_bytes a float of the "
         "right value (bits / 8)",
         (("KVCache", "return self.k, self.v", "return [self.k, self.v]"),
          ("kv_cache_bytes", "element_size = torch.empty((), dtype=dtype).element_size()",
           "element_size = (torch.finfo(dtype).bits if dtype.is_floating_point else torch.iinfo(dtype).bits) / 8"))),
    Case("ok_decode_mask_by_positions", "decode_causal_mask from absolute positions; the cached module masks with "
         "torch.where",
         (_fn("decode_causal_mask", "def decode_causal_mask(S_q, S_k):\n"
              "    query_pos = torch.arange(S_k - S_q, S_k)[:, None]\n"
              "    key_pos = torch.arange(S_k)[None, :]\n"
              "    return key_pos <= query_pos\n"),
          ("CachedSelfAttention", CACHED_MASK,
           'scores = torch.where(decode_causal_mask(S_new, S_k), scores, torch.tensor(float("-inf")))'))),
    Case("ok_decoder_complex_sdpa_gqa", "the decoder layer with Meta's complex-number RoPE (freqs_cis) and SDPA with "
         "enable_gqa=True and a boolean mask (no repeat_kv)",
         (("DecoderAttention", "q = apply_rope(q, positions, self.rope_base)", "q = _rotary(q, positions, self.rope_base)"),
          ("DecoderAttention", "k = apply_rope(k, positions, self.rope_base)", "k = _rotary(k, positions, self.rope_base)"),
          ("DecoderAttention", "        k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)\n", ""),
          ("DecoderAttention", """        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
""", ""),
          ("DecoderAttention", """        scores = scores.masked_fill(~allowed, float("-inf"))
        # 6. softmax over keys, weighted sum, merge heads, W_o
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S_new, head_dim]""",
           "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)"),
          ("DecoderAttention", "class DecoderAttention(nn.Module):",
           "def _rotary(x, positions, base):\n"
           "    d = x.shape[-1]\n"
           "    freqs = 1.0 / (base ** (torch.arange(0, d, 2)[: d // 2].float() / d))\n"
           "    freqs_cis = torch.polar(torch.ones(()), positions.float()[..., None] * freqs)  # [(B,) S, d/2]\n"
           "    if positions.dim() == 2:\n"
           "        freqs_cis = freqs_cis[:, None]\n"
           "    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))\n"
           "    return torch.view_as_real(x_ * freqs_cis).flatten(-2).type_as(x)\n\n\n"
           "class DecoderAttention(nn.Module):"))),
    Case("ok_decoder_hf_style", "the decoder layer as Hugging Face writes it: positions from the cache's keys, an "
         "additive float mask with the dtype's minimum, a cache read through .k",
         (("DecoderAttention", "            start = 0 if cache is None else len(cache)\n"
           "            positions = torch.arange(start, start + S_new, device=x.device)  # [S_new]",
           "            past = 0 if cache is None or getattr(cache, 'k', None) is None else cache.k.shape[-2]\n"
           "            positions = torch.arange(S_new, device=x.device) + past"),
          ("DecoderAttention", 'scores = scores.masked_fill(~allowed, float("-inf"))',
           "scores = scores + torch.zeros_like(scores).masked_fill(~allowed, torch.finfo(scores.dtype).min)"))),
)


def write() -> list[Path]:
    return build.write(CASES, REFERENCE, OUT, GENERATOR)


def sources() -> dict[str, str]:
    return build.sources(CASES, REFERENCE, GENERATOR)


def main(argv: list[str]) -> None:
    paths = write()
    print(f"wrote {len(paths)} cases to {OUT.relative_to(ROOT)}")
    if "--table" in argv:
        sys.path.insert(0, str(ROOT))
        from autograder.grading.grade import Grader
        from autograder.foundation.spec import GENERATION

        with Grader() as grader:
            results = {path.stem: grader.grade(path, assignment=GENERATION) for path in paths}
            results["reference"] = grader.grade(REFERENCE, assignment=GENERATION)
        print(build.table(results, GENERATION.parts, CASES))


if __name__ == "__main__":
    main(sys.argv[1:])
