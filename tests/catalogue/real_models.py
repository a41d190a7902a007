"""The mistake catalogue of the fourth assignment, `real_models`: textual edits of solutions/real_models.py.

Same rules as tests/catalogue/build.py (whose Case, edits and writer this file reuses): each case changes the
reference in one intended way, declares the parts it must lose, and every other part must keep full marks. The
mistakes are the ones met when a layer written from scratch meets the library's code: GPT-2's Conv1D weight not
transposed, biases dropped, BERT's padding filled with -inf, the RoPE permutation applied the wrong way, over the
whole matrix or to W_v, key/value heads tiled, positions ignored, the frequencies not used, head_dim
taken as hidden_size / num_heads, Llama 3.1's frequency bands wrong, and a registered attention without the mask
function it needs or with flex's (a BlockMask), its output in the wrong layout, the scaling ignored. (A forward that
calls the library's own code is not a case here: importing the library in the worker takes 6 to 20 seconds; tests/test_forbidden_scan.py checks
that the watch names such a call.)

    .venv/bin/python tests/catalogue/real_models.py          # (re)write tests/catalogue/submissions/real_models/*.py
    .venv/bin/python tests/catalogue/real_models.py --table  # grade them all and print the result table
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCE = ROOT / "solutions" / "real_models.py"
OUT = HERE / "submissions" / "real_models"
GENERATOR = "tests/catalogue/real_models.py"


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

GPT2_MASKED = """        scores = scores.masked_fill(~allowed, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S, head_dim]"""

CASES: tuple = (
    # ------------------------------------------------------------------ wrong: gpt2
    Case("gpt2_c_attn_not_transposed", "split_c_attn cuts the Conv1D weight into columns without transposing them",
         (("split_c_attn", "W_q, W_k, W_v = weight.T.chunk(3, dim=0)", "W_q, W_k, W_v = weight.chunk(3, dim=1)"),),
         lose=("gpt2",), says="not transposed"),
    Case("gpt2_causal_only_with_key_mask", "GPT2StyleAttention applies its causal mask only when a key_mask is given",
         (("GPT2StyleAttention", """        allowed = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()  # [S, S]: key j <= query i
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]  # [B, 1, S, S]""",
           """        allowed = torch.ones(S, S, dtype=torch.bool, device=x.device)  # [S, S]
        if key_mask is not None:
            allowed = allowed.tril() & key_mask[:, None, None, :]  # [B, 1, S, S]"""),),
         lose=("gpt2",), says="without key_mask: the output at real tokens"),
    Case("gpt2_biases_dropped", "from_hf copies the weights and leaves the biases at zero",
         (("GPT2StyleAttention", "                linear.bias.copy_(b)", "                linear.bias.zero_()"),
          ("GPT2StyleAttention", "layer.W_o.bias.copy_(attn.c_proj.bias)", "layer.W_o.bias.zero_()")),
         lose=("gpt2",), says="biases were dropped"),
    Case("gpt2_not_causal", "GPT2StyleAttention attends to every real key, later ones too",
         (("GPT2StyleAttention", "allowed = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()",
           "allowed = torch.ones(S, S, dtype=torch.bool, device=x.device)"),),
         lose=("gpt2",), says="not causal"),
    Case("gpt2_to_hf_proj_not_transposed", "to_hf copies W_o into the Conv1D c_proj without transposing it",
         (("GPT2StyleAttention", "attn.c_proj.weight.copy_(self.W_o.weight.T)", "attn.c_proj.weight.copy_(self.W_o.weight)"),),
         lose=("gpt2",), says="c_proj.weight was not transposed"),
    # ------------------------------------------------------------------ wrong: bert
    Case("bert_mask_inf", "extended_attention_mask fills padding with -inf, not finfo(dtype).min",
         (("extended_attention_mask", "return (1.0 - keep) * torch.finfo(dtype).min",
           "return torch.zeros_like(keep).masked_fill(keep == 0, float(\"-inf\"))"),),
         lose=("bert",), says="-inf"),
    Case("bert_forward_inf", "BertStyleSelfAttention masks padding with masked_fill(-inf) (the helper is right)",
         (("BertStyleSelfAttention", "scores = scores + extended_attention_mask(attention_mask, scores.dtype)",
           "scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float(\"-inf\"))"),),
         lose=("bert",), says="NaN"),
    Case("bert_biases_dropped", "BertStyleSelfAttention.from_hf copies the weights, not the biases",
         (("BertStyleSelfAttention", "                mine.bias.copy_(theirs.bias)", "                mine.bias.zero_()"),),
         lose=("bert",), says="biases"),
    Case("bert_mask_inverted", "extended_attention_mask puts finfo.min on the real tokens",
         (("extended_attention_mask", "return (1.0 - keep) * torch.finfo(dtype).min",
           "return keep * torch.finfo(dtype).min"),),
         lose=("bert",), says="inverted"),
    # ------------------------------------------------------------------ wrong: rope_permutation
    Case("rope_wrong_way", "interleaved_to_half_split does half_split_to_interleaved's reordering",
         (("interleaved_to_half_split", "w = weight.view(num_heads, head_dim // 2, 2, d_in)",
           "w = weight.view(num_heads, 2, head_dim // 2, d_in)"),),
         lose=("rope_permutation",), says="wrong way"),
    Case("rope_whole_matrix", "interleaved_to_half_split reorders the rows of the whole matrix as if it were one head",
         (("interleaved_to_half_split", "w = weight.view(num_heads, head_dim // 2, 2, d_in)",
           "w = weight.view(1, out_features // 2, 2, d_in)"),),
         lose=("rope_permutation",), says="one head"),
    # ------------------------------------------------------------------ wrong: llama
    Case("llama_no_permutation", "from_hf_llama loads q_proj and k_proj as they are",
         (("from_hf_llama", "layer.W_q.weight.copy_(half_split_to_interleaved(attn.q_proj.weight, H))",
           "layer.W_q.weight.copy_(attn.q_proj.weight)"),
          ("from_hf_llama", "layer.W_k.weight.copy_(half_split_to_interleaved(attn.k_proj.weight, H_kv))",
           "layer.W_k.weight.copy_(attn.k_proj.weight)")),
         lose=("llama",), says="without the permutation"),
    Case("llama_wrong_way", "from_hf_llama permutes q_proj and k_proj with interleaved_to_half_split",
         (("from_hf_llama", "layer.W_q.weight.copy_(half_split_to_interleaved(attn.q_proj.weight, H))",
           "layer.W_q.weight.copy_(interleaved_to_half_split(attn.q_proj.weight, H))"),
          ("from_hf_llama", "layer.W_k.weight.copy_(half_split_to_interleaved(attn.k_proj.weight, H_kv))",
           "layer.W_k.weight.copy_(interleaved_to_half_split(attn.k_proj.weight, H_kv))")),
         lose=("llama",), says="wrong way"),
    Case("llama_permutes_v", "from_hf_llama permutes v_proj's rows too",
         (("from_hf_llama", "layer.W_v.weight.copy_(attn.v_proj.weight)",
           "layer.W_v.weight.copy_(half_split_to_interleaved(attn.v_proj.weight, H_kv))"),),
         lose=("llama",), says="W_v was permuted"),
    Case("llama_kv_tiled", "the pasted repeat_kv tiles the key/value heads (kv0, kv1, kv0, kv1, ...)",
         (("repeat_kv", "x = x[:, :, None].expand(B, H_kv, n_rep, S, head_dim)",
           "x = x[:, None].expand(B, n_rep, H_kv, S, head_dim)"),),
         lose=("llama",), says="tiled"),
    Case("llama_ignores_positions", "the pasted DecoderAttention numbers the new tokens after the cache, whatever "
         "positions says", (("DecoderAttention", "        if positions is None:\n",
                             "        if True:  # positions ignored\n"),),
         lose=("llama",), says="positions were ignored"),
    Case("llama_inv_freq_ignored", "from_hf_llama builds the layer without the frequencies it is given (base 10000)",
         (("from_hf_llama", "head_dim=attn.head_dim, inv_freq=inv_freq)", "head_dim=attn.head_dim)"),),
         lose=("llama",), says="inv_freq"),
    Case("llama_head_dim_from_d_model", "from_hf_llama's layer takes head_dim as hidden_size / num_heads",
         (("from_hf_llama", "head_dim=attn.head_dim, inv_freq=inv_freq)", "inv_freq=inv_freq)"),),
         lose=("llama",), says="head_dim"),
    Case("rope_h2i_wrong_way", "half_split_to_interleaved does interleaved_to_half_split's reordering (from_hf_llama "
         "calls it: llama is graded with the reference's, lent)",
         (("half_split_to_interleaved", "w = weight.view(num_heads, 2, head_dim // 2, d_in)",
           "w = weight.view(num_heads, head_dim // 2, 2, d_in)"),),
         lose=("rope_permutation",), says="wrong way"),
    # issue 54's student-seat splits: right with 4 query heads over 2 key/value heads of head_dim 8 only
    Case("llama_repeat_kv_fixed_2", "the pasted repeat_kv repeats each key/value head twice, whatever n_rep says",
         (("repeat_kv", "x = x[:, :, None].expand(B, H_kv, n_rep, S, head_dim)  # [B, H_kv, n_rep, S, head_dim], no "
           "copy yet\n    return x.reshape(B, H_kv * n_rep, S, head_dim)  # copies of one head end up next to each other",
           "return x.repeat_interleave(2, dim=1)  # each head twice, whatever n_rep says"),),
         lose=("llama",), says="num_key_value_groups = H // H_kv = 4 times"),
    Case("rope_h2i_head_dim_8", "half_split_to_interleaved splits each head into halves of 4 rows (head_dim 8 only; "
         "from_hf_llama calls it: llama is graded with the reference's, lent)",
         (("half_split_to_interleaved", "w = weight.view(num_heads, 2, head_dim // 2, d_in)",
           "w = weight.view(num_heads, 2, 4, -1)"),),
         lose=("rope_permutation",), says="head_dim=4"),
    # ------------------------------------------------------------------ wrong: rope_inv_freq (rope_permutation)
    Case("rope_llama3_blend_wrong", "rope_inv_freq blends the band between the thresholds the wrong way round",
         (("rope_inv_freq", "blended = (1 - smooth) * scaled / factor + smooth * scaled",
           "blended = smooth * scaled / factor + (1 - smooth) * scaled"),),
         lose=("rope_permutation",), says="blend"),
    Case("rope_llama3_thresholds_swapped", "rope_inv_freq divides the wavelengths above old_context / high",
         (("rope_inv_freq", "scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)",
           "scaled = torch.where(wavelen > old_context / high, inv_freq / factor, inv_freq)"),
          ("rope_inv_freq", "between = (wavelen >= old_context / high) & (wavelen <= old_context / low)",
           "between = (wavelen >= old_context / low) & (wavelen <= old_context / high)")),
         lose=("rope_permutation",), says="swapped"),
    Case("rope_inv_freq_head_dim", "rope_inv_freq takes head_dim as hidden_size / num_attention_heads",
         (("rope_inv_freq", 'head_dim = getattr(config, "head_dim", None) or config.hidden_size // '
           'config.num_attention_heads', "head_dim = config.hidden_size // config.num_attention_heads"),),
         lose=("rope_permutation",), says="head_dim"),
    # ------------------------------------------------------------------ wrong: attention_interface
    Case("iface_no_mask_function", "register_course_attention registers the function alone, no mask function",
         (("register_course_attention", "    AttentionMaskInterface.register(name, eager_mask)\n", ""),),
         lose=("attention_interface",), says="attention_mask=None"),
    Case("iface_sdpa_mask", "register_course_attention registers sdpa_mask (None on causal batches) as the mask",
         (("register_course_attention", "    AttentionMaskInterface.register(name, eager_mask)\n",
           "    from transformers.masking_utils import sdpa_mask  # noqa: PLC0415\n\n"
           "    AttentionMaskInterface.register(name, sdpa_mask)\n"),),
         lose=("attention_interface",), says="attention_mask=None"),
    Case("iface_flex_mask", "register_course_attention registers flex_attention_mask (it hands a BlockMask) as the mask",
         (("register_course_attention", "    AttentionMaskInterface.register(name, eager_mask)\n",
           "    from transformers.masking_utils import flex_attention_mask  # noqa: PLC0415\n\n"
           "    AttentionMaskInterface.register(name, flex_attention_mask)\n"),),
         lose=("attention_interface",), says="you registered flex_attention_mask"),
    Case("iface_output_bhsd", "course_attention returns the output as [B, H, S_q, D]",
         (("course_attention", "return (weights @ value).transpose(1, 2).contiguous(), weights",
           "return weights @ value, weights"),),
         lose=("attention_interface",), says="[B, H, S_q, D]"),
    Case("iface_scaling_ignored", "course_attention always scales by D ** -0.5",
         (("course_attention", "scale = D ** -0.5 if scaling is None else scaling", "scale = D ** -0.5"),),
         lose=("attention_interface",), says="scaling"),
    Case("iface_heads_tiled", "course_attention tiles the key/value heads (repeat) instead of grouping them",
         (("course_attention", "key, value = key.repeat_interleave(H // H_kv, dim=1), value.repeat_interleave(H // H_kv, dim=1)",
           "key, value = key.repeat(1, H // H_kv, 1, 1), value.repeat(1, H // H_kv, 1, 1)"),),
         lose=("attention_interface",), says="tiled"),
    # ------------------------------------------------------------------ correct variants
    Case("bert_minus_ten_thousand", "extended_attention_mask adds -10000.0 for padding (google-research BERT, "
         "transformers before 4.x), not finfo(dtype).min",
         (("extended_attention_mask", "return (1.0 - keep) * torch.finfo(dtype).min", "return (1.0 - keep) * -10000.0"),),
         lose=("bert",), says="the convention of google-research BERT"),
    Case("ok_from_hf_reads_the_librarys_attributes", "from_hf reads the library module's own attributes and config, as "
         "code written against the library does (attn.scale_attn_weights, attn.embed_dim, attn.config.n_head, "
         "attn.all_head_size, attn.attention_head_size)",
         (("GPT2StyleAttention", "        layer = cls(d_model, attn.num_heads)\n",
           "        if not attn.scale_attn_weights or attn.scale_attn_by_inverse_layer_idx or attn.reorder_and_upcast_attn:\n"
           "            raise ValueError(\"only GPT-2's default scaling is supported\")\n"
           "        layer = cls(attn.embed_dim, attn.config.n_head)\n"),
          ("BertStyleSelfAttention", "layer = cls(attn.query.in_features, attn.num_attention_heads)",
           "layer = cls(attn.attention_head_size * attn.num_attention_heads, attn.all_head_size // attn.attention_head_size)"))),
    Case("ok_gpt2_attention_dropout", "GPT2StyleAttention with the library's attention dropout (attn_pdrop 0.1): "
         "graded in eval mode, as the library's reference is",
         (("GPT2StyleAttention", "        self.W_o = nn.Linear(d_model, d_model)\n",
           "        self.W_o = nn.Linear(d_model, d_model)\n        self.attn_dropout = nn.Dropout(0.1)  # GPT-2's attn_pdrop\n"),
          ("GPT2StyleAttention", "        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S, head_dim]",
           "        out = self.attn_dropout(torch.softmax(scores, dim=-1)) @ v  # [B, H, S, head_dim]"))),
    Case("ok_gpt2_sdpa", "GPT2StyleAttention with F.scaled_dot_product_attention and a boolean mask (SDPA is allowed)",
         (("GPT2StyleAttention", GPT2_MASKED,
           "        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)"),)),
    Case("ok_split_by_columns", "split_c_attn splits the Conv1D weight's columns, then transposes each piece",
         (("split_c_attn", "W_q, W_k, W_v = weight.T.chunk(3, dim=0)",
           "W_q, W_k, W_v = (w.T for w in weight.split(weight.shape[0], dim=1))"),)),
    Case("ok_rope_index", "the permutation written as an index of rows (evens then odds in each head)",
         (("interleaved_to_half_split", None,
           "def interleaved_to_half_split(weight, num_heads):\n"
           "    out_features, d_in = weight.shape\n"
           "    head_dim = out_features // num_heads\n"
           "    order = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])\n"
           "    return weight.view(num_heads, head_dim, d_in)[:, order].reshape(out_features, d_in)\n"),
          ("half_split_to_interleaved", None,
           "def half_split_to_interleaved(weight, num_heads):\n"
           "    out_features, d_in = weight.shape\n"
           "    head_dim = out_features // num_heads\n"
           "    order = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])\n"
           "    back = torch.argsort(order)\n"
           "    return weight.view(num_heads, head_dim, d_in)[:, back].reshape(out_features, d_in)\n"))),
    Case("ok_iface_bool_everywhere", "course_attention turns every mask into booleans first (finfo.min or "
         "False marks a hidden key) and fills hidden scores with finfo.min",
         (("course_attention", "        if mask.dtype == torch.bool:  # finfo.min, not -inf: a padded query row stays "
           "finite, as with eager's mask\n"
           "            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)\n"
           "        else:\n"
           "            scores = scores + mask  # additive: 0 where allowed, finfo.min elsewhere\n",
           "        allowed = mask if mask.dtype == torch.bool else mask == 0\n"
           "        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)\n"),)),
    Case("ok_iface_own_mask_function", "register_course_attention registers a mask function of the student's own "
         "(the float additive mask, causal and padded, from the arguments either pin passes)",
         (("register_course_attention", "    from transformers.masking_utils import eager_mask  # noqa: PLC0415\n\n", ""),
          ("register_course_attention", "    AttentionMaskInterface.register(name, eager_mask)\n",
           "    def course_mask(batch_size, kv_length, kv_offset=0, mask_function=None, attention_mask=None,\n"
           "                    dtype=torch.float32, cache_position=None, q_length=None, q_offset=0, **kwargs):\n"
           "        if cache_position is None:  # 5.x passes q_length and q_offset, 4.x cache_position\n"
           "            cache_position = torch.arange(q_offset, q_offset + q_length)\n"
           "        q_idx = cache_position[:, None]\n"
           "        kv_idx = torch.arange(kv_offset, kv_offset + kv_length)[None, :]\n"
           "        allowed = mask_function(0, 0, q_idx, kv_idx)[None, None].expand(batch_size, 1, -1, -1)\n"
           "        if attention_mask is not None:\n"
           "            allowed = allowed & attention_mask[:, None, None, kv_offset:kv_offset + kv_length].bool()\n"
           "        return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)\n\n"
           "    AttentionMaskInterface.register(name, course_mask)\n"))),
    Case("ok_bert_sdpa", "BertStyleSelfAttention hands the additive mask to F.scaled_dot_product_attention",
         (("BertStyleSelfAttention", "        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)  # [B, H, S, S]\n"
           "        if attention_mask is not None:\n"
           "            scores = scores + extended_attention_mask(attention_mask, scores.dtype)  # + [B, 1, 1, S]: finite\n"
           "        out = torch.softmax(scores, dim=-1) @ v  # [B, H, S, head_dim]",
           "        additive = None if attention_mask is None else extended_attention_mask(attention_mask, x.dtype)\n"
           "        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=additive)"),)),
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
        from autograder.foundation.spec import REAL_MODELS

        with Grader() as grader:
            results = {path.stem: grader.grade(path, assignment=REAL_MODELS) for path in paths}
            results["reference"] = grader.grade(REFERENCE, assignment=REAL_MODELS)
        print(build.table(results, REAL_MODELS.parts, CASES))


if __name__ == "__main__":
    main(sys.argv[1:])
