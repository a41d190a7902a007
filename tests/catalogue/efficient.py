"""The mistake catalogue of the third assignment, `efficient`: textual edits of solutions/efficient.py.

Same rules as tests/catalogue/build.py (whose Case, edits and writer this file reuses): each
case changes the reference in one intended way, declares the parts it must lose, and every
other part must keep full marks. Four cases give the right numbers with too much memory: only
the memory meter catches them.

    .venv/bin/python tests/catalogue/efficient.py          # (re)write tests/catalogue/submissions/efficient/*.py
    .venv/bin/python tests/catalogue/efficient.py --table  # grade them all and print the result table
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCE = ROOT / "solutions" / "efficient.py"
OUT = HERE / "submissions" / "efficient"
GENERATOR = "tests/catalogue/efficient.py"


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
sys.path.insert(0, str(HERE))
import efficient_backward  # noqa: E402 - next to this file, after build's Case


def _fn(name: str, body: str) -> tuple:
    return (name, None, body)


FLASH_DENSE = '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    S_q, S_k = q.shape[-2], k.shape[-2]
    s = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, S_q, S_k]: all of it
    if causal:
        s = s.masked_fill(~torch.ones(S_q, S_k, dtype=torch.bool).tril(S_k - S_q), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.softmax(s, dim=-1).nan_to_num(0.0) @ v.float()
    return out.to(q.dtype), lse
'''

FLASH_ROWS = '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    S_q, S_k = q.shape[-2], k.shape[-2]
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    lse = torch.empty(q.shape[:-1])
    for i0 in range(0, S_q, block_q):
        i1 = min(i0 + block_q, S_q)
        s = q[:, :, i0:i1].float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])  # every key at once
        if causal:
            hide = torch.arange(S_k)[None, :] > torch.arange(i0, i1)[:, None] + S_k - S_q
            s = s.masked_fill(hide, float("-inf"))
        lse[:, :, i0:i1] = torch.logsumexp(s, dim=-1)
        out[:, :, i0:i1] = (torch.softmax(s, dim=-1).nan_to_num(0.0) @ v.float()).to(q.dtype)
    return out, lse
'''

LINEAR_CAUSAL_SS = '''        w = phi_q @ phi_k.transpose(-2, -1)  # [B, H, S, S]
        w = w.tril()
        numerator = w @ v  # [B, H, S, D_v]
        denominator = w.sum(dim=-1)  # [B, H, S]'''

LINEAR_CAUSAL_SUMS = '''        kv = torch.cumsum(phi_k[..., :, None] * v[..., None, :], dim=2)  # [B, H, S, D, D_v]
        z = torch.cumsum(phi_k, dim=2)  # [B, H, S, D]
        numerator = (phi_q[..., :, None] * kv).sum(dim=-2)  # [B, H, S, D_v]
        denominator = (phi_q * z).sum(dim=-1)  # [B, H, S]'''

# The reference's causal branch (chunkwise), from its first line to its last.
_CAUSAL_START = "        B, H, S, D = q.shape\n        C = 64  # positions per chunk\n"
LINEAR_CAUSAL = _CAUSAL_START + REFERENCE.read_text(encoding="utf-8").split(_CAUSAL_START)[1].split(
    "    else:\n        # associativity")[0].rstrip("\n")

CASES: tuple = (
    # ------------------------------------------------------------------ wrong: flash
    Case("flash_no_rescaled_sum", "the running sum is not rescaled when the running maximum grows",
         (("flash_attention", "row_sum = alpha * row_sum + p.sum(dim=-1)", "row_sum = row_sum + p.sum(dim=-1)"),),
         lose=("flash",), says="did not rescale the running sum"),
    Case("flash_lse_without_max", "lse = log(sum) without the running maximum added back",
         (("flash_attention", "(m + torch.log(row_sum)).float()", "torch.log(row_sum).float()"),),
         lose=("flash",), says="without adding the running maximum"),
    Case("flash_top_left_causal", "the causal mask is top-left aligned (no S_k - S_q offset)",
         (("flash_attention", "offset = S_k - S_q  #", "offset = 0  #"),),
         lose=("flash",), says="top-left"),
    Case("flash_skips_visible_blocks", "key blocks are skipped after the last key of the block's FIRST query",
         (("flash_attention", "kv_stop = min(S_k, i1 + offset) if causal", "kv_stop = min(S_k, i0 + 1 + offset) if causal"),),
         lose=("flash",), says="you skipped key blocks"),
    Case("flash_blind_lse_large_negative", "a query that sees no key gets lse -1e10 (a large negative constant), "
         "not -inf",
         (("flash_attention", "lse[:, :, i0:i1] = (m + torch.log(row_sum)).float()",
           "lse[:, :, i0:i1] = torch.where(seen, m + torch.log(row_sum.clamp_min(1e-30)), -1e10).float()"),),
         lose=("flash",), says="a large negative constant such as -1e10 is not -inf"),
    Case("flash_half_accumulation", "accumulates in the inputs' dtype: float16 running sums",
         (("flash_attention", "acc = torch.float64 if q.dtype == torch.float64 else torch.float32",
           "acc = q.dtype"),),
         lose=("flash",), says="accumulated in float16"),
    Case("flash_full_matrix", "MEMORY ONLY: the right out and lse from the whole [B, H, S_q, S_k] score matrix",
         (_fn("flash_attention", FLASH_DENSE),), lose=("flash",), says="of tensors at once"),
    Case("flash_query_blocks_only", "MEMORY ONLY: query blocks, but each against every key at once (no key blocks)",
         (_fn("flash_attention", FLASH_ROWS),), lose=("flash",), says="a block of queries against every key"),
    Case("flash_calls_sdpa", "flash_attention hands the work to F.scaled_dot_product_attention",
         (("flash_attention", "    B, H, S_q, D = q.shape\n",
           "    B, H, S_q, D = q.shape\n"
           "    if not causal:\n"
           "        s = q @ k.transpose(-2, -1) / math.sqrt(D)\n"
           "        return F.scaled_dot_product_attention(q, k, v), torch.logsumexp(s.float(), dim=-1)\n"),),
         # FlashAttentionFunction's forward runs this flash_attention, so flash_backward calls the fused kernel too
         zero=("flash", "flash_backward"), says="scaled_dot_product_attention"),
    Case("merge_overflows", "merge_attention weights each side by exp(lse) directly (overflow past 88)",
         (_fn("merge_attention", "def merge_attention(out_a, lse_a, out_b, lse_b):\n"
              "    w_a, w_b = torch.exp(lse_a), torch.exp(lse_b)\n"
              "    out = (w_a[..., None] * out_a + w_b[..., None] * out_b) / (w_a + w_b)[..., None]\n"
              "    return out, torch.log(w_a + w_b)\n"),),
         lose=("flash",), says="overflows"),
    Case("merge_nan_on_empty_side", "merge_attention's lse = lse_a + log1p(exp(lse_b - lse_a)): NaN when lse_a is -inf",
         (("merge_attention", "    lse = m + torch.log(total)  # -inf when neither side sees a key",
           "    lse = lse_a + torch.log1p(torch.exp(lse_b - lse_a))"),),
         lose=("flash",), says="NaN when lse_a is -inf"),
    Case("merge_nan_when_both_empty", "merge_attention subtracts the larger lse even where both sides are -inf: "
         "-inf - (-inf) is NaN for a query that sees no key on either side",
         (("merge_attention", "    m = m.masked_fill(m == float(\"-inf\"), 0.0)  # both sides empty: both weights below become 0\n",
           ""),),
         lose=("flash",), says="-inf - (-inf) is NaN"),
    # ------------------------------------------------------------------ flash_backward (tests/catalogue/efficient_backward.py)
    *efficient_backward.cases(Case),
    # ------------------------------------------------------------------ wrong: sliding_window
    Case("window_one_too_wide", "sliding_window_mask lets each query see window + 1 keys",
         (("sliding_window_mask", "return (j <= i) & (j > i - window)", "return (j <= i) & (j >= i - window)"),),
         lose=("sliding_window",), says="one key too wide"),
    Case("window_mask_one_too_wide_reused", "sliding_window_mask lets each query see window + 1 keys, and the "
         "attention builds each chunk's mask with it: only the mask's checks may charge the mistake",
         (("sliding_window_mask", "return (j <= i) & (j > i - window)", "return (j <= i) & (j >= i - window)"),
          ("sliding_window_attention", "visible = (key <= query) & (key > query - window)",
           "visible = sliding_window_mask(i1 - j0, window)[i0 - j0:]  # positions j0 .. i1 - 1, the chunk's rows")),
         lose=("sliding_window",), says="stood in for yours"),
    Case("window_chunk_reads_own_keys", "each chunk of queries reads only the chunk's own keys",
         (("sliding_window_attention", "j0 = max(0, i0 - window + 1)", "j0 = i0"),),
         lose=("sliding_window",), says="before the chunk starts"),
    Case("window_reads_every_key", "MEMORY ONLY: each chunk reads every key before it (masked right, but S^2 memory)",
         (("sliding_window_attention", "j0 = max(0, i0 - window + 1)", "j0 = 0"),),
         lose=("sliding_window",), says="of tensors at once"),
    Case("window_calls_flex_attention", "sliding_window_attention hands the work to flex_attention",
         (_fn("sliding_window_attention",
              "def sliding_window_attention(q, k, v, window, chunk_size=128):\n"
              "    from torch.nn.attention.flex_attention import flex_attention\n"
              "    bias = torch.zeros(q.shape[-2], q.shape[-2]).masked_fill(\n"
              "        ~sliding_window_mask(q.shape[-2], window), float('-inf'))\n"
              "    return flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: s + bias[i, j])\n"),),
         zero=("sliding_window",), says="flex_attention"),
    # ------------------------------------------------------------------ wrong: linear
    Case("phi_not_positive", "elu_feature_map returns elu(x), without + 1",
         (("elu_feature_map", "return F.elu(x) + 1", "return F.elu(x)"),),
         lose=("linear",), says="must be positive"),
    Case("linear_no_normaliser", "linear_attention returns the numerator without dividing by the normaliser",
         (("linear_attention", "return numerator / (denominator[..., None] + eps)", "return numerator"),),
         lose=("linear",), says="no normaliser"),
    Case("linear_eps_in_key_sum", "Performer's normaliser phi(q_i) . (sum_j phi(k_j) + eps): eps added to every "
         "feature of the key sum, so once per feature of phi(q_i)",
         (("linear_attention", "return numerator / (denominator[..., None] + eps)",
           "return numerator / (denominator[..., None] + eps * phi_q.sum(dim=-1)[..., None])"),),
         lose=("linear",), says="Performer's normaliser"),
    Case("linear_causal_ss_matrix", "MEMORY ONLY: causal linear attention by masking phi(q) phi(k)^T [S, S]",
         (("linear_attention", LINEAR_CAUSAL, LINEAR_CAUSAL_SS),),
         lose=("linear",), says="running sums"),
    Case("linear_chunks_forget_sums", "causal linear attention in chunks of 32 that each start from zero sums (the "
         "running sums are not carried from chunk to chunk): right up to 32 positions",
         (("linear_attention", "C = 64  # positions per chunk", "C = 32  # positions per chunk"),
          ("linear_attention", "            kv = kv + k_c.transpose(-2, -1) @ v_c  # [B, H, D, D_v]: this chunk's keys "
           "join the state\n            z = z + k_c.sum(dim=-2)  # [B, H, D]\n", "")),
         lose=("linear",), says="your chunks of 32 positions each start from zero sums"),
    Case("linear_step_forgets", "linear_attention_step ignores the state it is given",
         (("linear_attention_step", "    if state is None:\n", "    if True:\n"),),
         lose=("linear",), says="forgets its state"),
    # ------------------------------------------------------------------ wrong: flex
    Case("document_mask_not_causal", "document_causal_mask_mod sees the whole document, future included",
         (("document_causal_mask_mod", "return same_document & (kv_idx <= q_idx)", "return same_document"),),
         lose=("flex",), says="add causality"),
    Case("prefix_one_too_many", "prefix_lm_mask_mod's prefix is kv_idx <= prefix_lengths[b]",
         (("prefix_lm_mask_mod", "(kv_idx < prefix_lengths[b])", "(kv_idx <= prefix_lengths[b])"),),
         lose=("flex",), says="one key too many"),
    Case("alibi_slopes_reversed", "ALiBi's slopes in the wrong head order",
         (("alibi_score_mod", "dtype=torch.float32)  # [H]", "dtype=torch.float32).flip(0)  # [H]"),),
         lose=("flex",), says="head order"),
    Case("alibi_formula_for_every_head_count", "ALiBi's slopes 2^(-8 (h + 1) / H) for every H (attention-gym's "
         "formula), the paper's only for a power of two",
         (("alibi_score_mod", "    n = 2 ** int(math.floor(math.log2(num_heads)))  # the largest power of two <= num_heads\n"
           "    slopes = torch.tensor(power_of_two(n) + power_of_two(2 * n)[0::2][: num_heads - n], dtype=torch.float32)"
           "  # [H]", "    slopes = torch.tensor(power_of_two(num_heads), dtype=torch.float32)  # [H]"),),
         lose=("flex",), says="matches the paper's slopes only when H is a power of two"),
    Case("alibi_wrong_sign", "ALiBi adds slope * (q_idx - kv_idx): distant keys weigh more",
         (("alibi_score_mod", "score + slopes[h] * (kv_idx - q_idx)", "score + slopes[h] * (q_idx - kv_idx)"),),
         lose=("flex",), says="sign"),
    Case("softcap_clamps", "softcap_score_mod clamps the scores to [-cap, cap] instead of tanh",
         (("softcap_score_mod", "return cap * torch.tanh(score / cap)", "return score.clamp(-cap, cap)"),),
         lose=("flex",), says="clamping"),
    # ------------------------------------------------------------------ correct variants
    Case("ok_flash_no_skipping", "flash_attention visits every key block (masking the invisible ones, none skipped) "
         "and merges with torch.logaddexp",
         (("flash_attention", "kv_stop = min(S_k, i1 + offset) if causal else S_k", "kv_stop = S_k"),
          ("flash_attention", "if causal and j1 - 1 > i0 + offset:", "if causal:"),
          ("merge_attention", "    lse = m + torch.log(total)  # -inf when neither side sees a key",
           "    lse = torch.logaddexp(lse_a.float(), lse_b.float())"))),
    Case("ok_window_mask_by_tril", "sliding_window_mask as the difference of two triangles; attention reads keys "
         "through index_select",
         (("sliding_window_mask", "return (j <= i) & (j > i - window)",
           "ones = torch.ones(S, S, dtype=torch.bool)\n    return ones.tril() & ~ones.tril(-window)"),
          ("sliding_window_attention", "@ k[:, :, j0:i1].transpose(-2, -1)",
           "@ k.index_select(2, torch.arange(j0, i1)).transpose(-2, -1)"))),
    Case("ok_linear_cumsum", "causal linear attention through the running sums at every position (torch.cumsum over "
         "[B, H, S, D, D_v]), not chunkwise: linear in S, as the contract asks",
         (("linear_attention", LINEAR_CAUSAL, LINEAR_CAUSAL_SUMS),)),
    Case("ok_linear_einsum", "linear attention with einsum; the step keeps its state in a dict",
         (("linear_attention", "numerator = phi_q @ kv  # [B, H, S, D_v]",
           "numerator = torch.einsum('bhsd,bhde->bhse', phi_q, kv)"),
          ("linear_attention", "kv = phi_k.transpose(-2, -1) @ v  # [B, H, D, D_v]",
           "kv = torch.einsum('bhsd,bhse->bhde', phi_k, v)"),
          ("linear_attention_step", "        kv, z = state\n", "        kv, z = state['kv'], state['z']\n"),
          ("linear_attention_step", "return numerator / (denominator[..., None] + eps), (kv, z)",
           "return numerator / (denominator[..., None] + eps), {'kv': kv, 'z': z}"))),
    Case("ok_flex_where", "mods written with torch.where and a Python list of slopes",
         (("document_causal_mask_mod", "return same_document & (kv_idx <= q_idx)",
           "return torch.where(kv_idx <= q_idx, same_document, False)"),
          ("alibi_score_mod",
           "    def power_of_two(n: int) -> list[float]:\n        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]\n\n"
           "    n = 2 ** int(math.floor(math.log2(num_heads)))  # the largest power of two <= num_heads\n"
           "    slopes = torch.tensor(power_of_two(n) + power_of_two(2 * n)[0::2][: num_heads - n], dtype=torch.float32)"
           "  # [H]",
           "    def get_slopes(n):  # the ALiBi paper's code, as written\n"
           "        def get_slopes_power_of_2(n):\n"
           "            start = 2 ** (-2 ** -(math.log2(n) - 3))\n"
           "            ratio = start\n"
           "            return [start * ratio ** i for i in range(n)]\n\n"
           "        if math.log2(n).is_integer():\n"
           "            return get_slopes_power_of_2(n)\n"
           "        closest_power_of_2 = 2 ** math.floor(math.log2(n))\n"
           "        return (get_slopes_power_of_2(closest_power_of_2)\n"
           "                + get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2])\n\n"
           "    slopes = torch.tensor(get_slopes(num_heads))"),
          ("sliding_window_mask_mod", "return (kv_idx <= q_idx) & (q_idx - kv_idx < window)",
           "return torch.where(kv_idx > q_idx, False, kv_idx > q_idx - window)"))),
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
        from autograder.foundation.spec import EFFICIENT

        with Grader() as grader:
            results = {path.stem: grader.grade(path, assignment=EFFICIENT) for path in paths}
            results["reference"] = grader.grade(REFERENCE, assignment=EFFICIENT)
        print(build.table(results, EFFICIENT.parts, CASES))


if __name__ == "__main__":
    main(sys.argv[1:])
