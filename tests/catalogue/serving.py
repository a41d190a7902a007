"""The mistake catalogue of the fifth assignment, `serving`: textual edits of solutions/serving.py.

Same rules as tests/catalogue/build.py (whose Case, edits and writer this file reuses): each case changes the
reference in one intended way, declares the parts it must lose, and every other part must keep full marks; a
mistake in a piece that another part borrows (cu_seqlens, reshape_and_cache, paged_attention) costs in its own part
only. A paging mistake in PagedKVCache's allocator can fail paged_cache and prefix_sharing, which grade one class
(the contract's stated exception). The correct variants are real code adapted to the contract: vLLM's kernel-test
references (ref_paged_attn, ref_single_query_cached_kv_attention), flash-attn's bert_padding (unpad_input, pad_input)
and StreamingLLM's StartRecentKVCache.

    .venv/bin/python tests/catalogue/serving.py          # (re)write tests/catalogue/submissions/serving/*.py
    .venv/bin/python tests/catalogue/serving.py --table  # grade them all and print the result table
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCE = ROOT / "solutions" / "serving.py"
OUT = HERE / "submissions" / "serving"
GENERATOR = "tests/catalogue/serving.py"


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


# Real code, adapted to the contract. vLLM's tests/kernels/attention/test_flash_attn.py, ref_paged_attn: per
# sequence, gather the blocks of the table, slice kv_len, repeat_interleave for GQA, a triu mask with diagonal
# kv_len - query_len + 1 (bottom-right). Adapted: query_lens from cu_seqlens_q (one each when None), values of their
# own width, `q = q * scale` (vLLM scales the caller's query in place).
VLLM_REF_PAGED_ATTN = '''def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q=None):
    num_seqs = len(seq_lens)
    if cu_seqlens_q is None:
        cu_seqlens_q = cu_seqlens([1] * num_seqs)
    _, block_size, num_kv_heads, head_size = k_cache.shape
    scale = head_size ** -0.5
    outputs = []
    for i in range(num_seqs):
        start_idx, end_idx = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        query_len, kv_len = end_idx - start_idx, int(seq_lens[i])
        if query_len == 0:
            continue
        q_i = q[start_idx:end_idx] * scale
        num_kv_blocks = (kv_len + block_size - 1) // block_size
        block_indices = block_tables[i, :num_kv_blocks].long()
        k = k_cache[block_indices].view(-1, num_kv_heads, head_size)[:kv_len]
        v = v_cache[block_indices].view(-1, num_kv_heads, v_cache.shape[-1])[:kv_len]
        if q_i.shape[1] != k.shape[1]:
            k = torch.repeat_interleave(k, q_i.shape[1] // k.shape[1], dim=1)
            v = torch.repeat_interleave(v, q_i.shape[1] // v.shape[1], dim=1)
        attn = torch.einsum("qhd,khd->hqk", q_i, k).float()
        mask = torch.triu(torch.ones(query_len, kv_len), diagonal=kv_len - query_len + 1).bool()
        attn.masked_fill_(mask, float("-inf"))
        attn = torch.softmax(attn, dim=-1).to(v.dtype)
        outputs.append(torch.einsum("hqk,khd->qhd", attn, v))
    return torch.cat(outputs, dim=0)
'''

# vLLM's tests/kernels/attention/test_attention.py, ref_single_query_cached_kv_attention: token j of sequence i at
# block_tables[i][j // block_size], offset j % block_size, one token at a time. Adapted: the flash layout
# [num_blocks, block_size, H_kv, D] instead of vLLM's split-x layout, and every query of a chunk (bottom-right)
# instead of one query per sequence.
VLLM_REF_SINGLE_QUERY = '''def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q=None):
    num_seqs = len(seq_lens)
    if cu_seqlens_q is None:
        cu_seqlens_q = cu_seqlens([1] * num_seqs)
    num_query_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    num_queries_per_kv = num_query_heads // num_kv_heads
    block_size = k_cache.shape[1]
    scale = 1.0 / math.sqrt(q.shape[-1])
    output = q.new_zeros(q.shape[0], num_query_heads, v_cache.shape[-1])
    block_tables_lst = block_tables.tolist()
    seq_lens_lst = [int(n) for n in seq_lens]
    for i in range(num_seqs):
        block_table, seq_len = block_tables_lst[i], seq_lens_lst[i]
        keys_lst, values_lst = [], []
        for j in range(seq_len):
            block_number = int(block_table[j // block_size])
            block_offset = j % block_size
            keys_lst.append(k_cache[block_number, block_offset])
            values_lst.append(v_cache[block_number, block_offset])
        keys = torch.repeat_interleave(torch.stack(keys_lst, dim=0), num_queries_per_kv, dim=1)
        values = torch.repeat_interleave(torch.stack(values_lst, dim=0), num_queries_per_kv, dim=1)
        start, end = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        for row in range(start, end):
            visible = seq_len - (end - row) + 1  # bottom-right: the query's own position and every key before it
            attn = scale * torch.einsum("hd,khd->hk", q[row], keys[:visible]).float()
            attn = torch.softmax(attn, dim=-1).to(values.dtype)
            output[row] = torch.einsum("hk,khd->hd", attn, values[:visible])
    return output
'''

# flash-attn's flash_attn/bert_padding.py: unpad_input (indices of the real tokens in the flattened batch,
# cu_seqlens = F.pad(cumsum(seqlens), (1, 0))) and pad_input (index_put_first_axis, then back to [B, S, ...]).
# Adapted: lengths instead of an attention mask, plain torch instead of einops.
FLASH_ATTN_CU = '''def cu_seqlens(lengths):
    seqlens_in_batch = torch.as_tensor(lengths).reshape(-1)
    return F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
'''
FLASH_ATTN_UNPAD = '''def pack(x, lengths):
    lengths = torch.as_tensor(lengths).reshape(-1)
    attention_mask = torch.arange(x.shape[1])[None, :] < lengths[:, None]
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])[indices]  # index_first_axis
'''
FLASH_ATTN_PAD = '''def unpad(packed, cu, max_len):
    cu = torch.as_tensor(cu).long().reshape(-1)
    batch = len(cu) - 1
    indices = torch.cat([b * max_len + torch.arange(int(cu[b + 1] - cu[b])) for b in range(batch)])
    output = packed.new_zeros(batch * max_len, *packed.shape[1:])  # index_put_first_axis
    output[indices] = packed
    return output.reshape(batch, max_len, *packed.shape[1:])
'''.replace("def unpad(", "def unpack(")

# StreamingLLM's streaming_llm/kv_cache.py, StartRecentKVCache: past the cache size, keep slice(0, start_size) and
# slice(seq_len - recent_size, seq_len) of the sequence dimension. Adapted: one layer's keys and values appended
# here (the contract's append), the sequence dimension -2, and the contract's ValueError.
STREAMING_LLM = '''class SinkKVCache:
    """StreamingLLM's StartRecentKVCache, one layer."""

    def __init__(self, num_sink=4, window=60):
        self.start_size, self.recent_size = num_sink, window
        self.cache_size = num_sink + window
        self.past_key_values = None

    def append(self, k, v):
        if k.size(-2) > self.recent_size and len(self) + k.size(-2) > self.cache_size:
            raise ValueError("feed long prompts in pieces of at most `window` tokens")
        if self.past_key_values is not None:
            k = torch.cat([self.past_key_values[0], k], dim=-2)
            v = torch.cat([self.past_key_values[1], v], dim=-2)
        seq_len = k.size(-2)
        if seq_len > self.cache_size:
            k = torch.cat([k[..., 0:self.start_size, :], k[..., seq_len - self.recent_size:seq_len, :]], dim=-2)
            v = torch.cat([v[..., 0:self.start_size, :], v[..., seq_len - self.recent_size:seq_len, :]], dim=-2)
        self.past_key_values = (k, v)
        return k, v

    def __len__(self):
        return 0 if self.past_key_values is None else self.past_key_values[0].size(-2)
'''

# SDPA with an explicit bottom-right mask, one sequence at a time: allowed (the contract's "what may be called").
SDPA_PER_SEQUENCE = '''def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False):
    n_rep = q.shape[1] // k.shape[1]
    out = q.new_zeros(q.shape[0], q.shape[1], v.shape[2])
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if q1 == q0:
            continue
        mask = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool)
        if causal:
            mask = mask.tril(diagonal=(k1 - k0) - (q1 - q0))
        o = F.scaled_dot_product_attention(q[q0:q1].transpose(0, 1), k[k0:k1].transpose(0, 1),
                                           v[k0:k1].transpose(0, 1), attn_mask=mask, enable_gqa=n_rep > 1)
        out[q0:q1] = torch.where(mask.any(-1)[:, None], o, 0.0).transpose(0, 1)
    return out
'''

# The classic mistake: SDPA's is_causal=True, top-left aligned when S_q != S_k.
SDPA_IS_CAUSAL = SDPA_PER_SEQUENCE.replace(
    "attn_mask=mask, enable_gqa=n_rep > 1)", "attn_mask=None if causal else mask, is_causal=causal,\n"
    "                                           enable_gqa=n_rep > 1)")

NESTED_SDPA = '''def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False):
    def nested(t, cu):
        pieces = [t[int(cu[b]):int(cu[b + 1])].transpose(0, 1) for b in range(len(cu) - 1)]
        return torch.nested.as_nested_tensor(pieces, layout=torch.jagged).transpose(1, 2)
    n_rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
    out = F.scaled_dot_product_attention(nested(q, cu_seqlens_q), nested(k, cu_seqlens_k), nested(v, cu_seqlens_k))
    return torch.cat([o.transpose(0, 1) for o in out.transpose(1, 2).unbind()])
'''

CASES: tuple = (
    # ------------------------------------------------------------------ wrong: varlen
    Case("cu_no_leading_zero", "cu_seqlens returns the running sums without the leading 0 (B entries)",
         (("cu_seqlens", "    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)\n"
           "    cu[1:] = torch.cumsum(lengths, dim=0)", "    cu = torch.cumsum(lengths, dim=0).to(torch.int32)"),),
         lose=("varlen",), says="starts with 0"),
    Case("varlen_sdpa_is_causal", "varlen_attention calls SDPA with is_causal=True per sequence (top-left when "
         "S_q != S_k)", (_fn("varlen_attention", SDPA_IS_CAUSAL),), lose=("varlen",), says="top-left"),
    Case("varlen_heads_tiled", "varlen_attention tiles the key/value heads (repeat) instead of grouping them",
         (("varlen_attention", "k[k0:k1].transpose(0, 1).repeat_interleave(n_rep, dim=0)",
           "k[k0:k1].transpose(0, 1).repeat(n_rep, 1, 1)"),
          ("varlen_attention", "v[k0:k1].transpose(0, 1).repeat_interleave(n_rep, dim=0)",
           "v[k0:k1].transpose(0, 1).repeat(n_rep, 1, 1)")), lose=("varlen",), says="heads tiled"),
    Case("varlen_key_query_offsets", "varlen_attention slices the keys with the query offsets",
         (("varlen_attention", "k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])", "k0, k1 = q0, q1"),),
         lose=("varlen",), says="query offsets"),
    Case("varlen_nan_rows", "varlen_attention leaves NaN where a query sees no key",
         (("varlen_attention", "        weights = torch.where(allowed.any(dim=-1)[:, None], weights, 0.0)  "
           "# a query that sees no key gives zeros\n", ""),), lose=("varlen",), says="NaN"),
    Case("varlen_nested_sdpa", "varlen_attention runs SDPA on nested tensors (a serving kernel)",
         (_fn("varlen_attention", NESTED_SDPA),), zero=("varlen",), says="nested tensors"),
    # ------------------------------------------------------------------ wrong: paged_cache
    Case("reshape_swapped", "reshape_and_cache swaps block and offset",
         (("reshape_and_cache", "slots[real] // block_size, slots[real] % block_size",
           "slots[real] % block_size, slots[real] // block_size"),), lose=("paged_cache",), says="swapped"),
    Case("reshape_writes_padding", "reshape_and_cache writes the -1 slots (Python's negative indexing)",
         (("reshape_and_cache", "real = slots >= 0", "real = slots == slots"),), lose=("paged_cache",),
         says="negative indexing"),
    Case("allocator_lifo", "BlockAllocator hands out the most recently freed block first (a LIFO free list)",
         (("BlockAllocator", "block = self.free_queue.pop(0)", "block = self.free_queue.pop()"),),
         lose=("paged_cache", "prefix_sharing"), says="LIFO"),
    Case("allocator_frees_shared", "free returns a block to the pool while another owner holds it",
         (("BlockAllocator", "        self.refcounts[block] -= 1\n", "        self.refcounts[block] = 0\n"),),
         lose=("paged_cache", "prefix_sharing"), says="two owners"),
    Case("reserve_leaks", "a reserve that does not fit allocates what it can before raising",
         (("PagedKVCache", "        if needed > self.allocator.num_free:\n            raise RuntimeError(f\"sequence "
           "{seq_id!r} needs {needed} more blocks, {self.allocator.num_free} are free\")\n", ""),),
         lose=("paged_cache",), says="leaked"),
    # ------------------------------------------------------------------ wrong: paged_attention
    Case("paged_top_left", "paged_attention places a sequence's queries at 0 .. q_len - 1 (top-left)",
         (("paged_attention", ".tril(diagonal=S_k - S_q)", ".tril(diagonal=0)"),), lose=("paged_attention",),
         says="top-left"),
    Case("paged_whole_block", "paged_attention reads the whole last block (no [:seq_len])",
         (("paged_attention", "        S_k = int(seq_lens[b])\n",
           "        S_k = -(-int(seq_lens[b]) // block_size) * block_size  # every slot of the last block\n"),),
         lose=("paged_attention",), says="NaN"),
    Case("paged_contiguous", "paged_attention assumes a sequence's blocks follow its first",
         (("paged_attention", "blocks = torch.as_tensor(block_tables[b][:-(-S_k // block_size)], "
           "device=q.device).long()", "blocks = int(block_tables[b][0]) + torch.arange(-(-S_k // block_size))"),),
         lose=("paged_attention",), says="contiguous"),
    Case("csr_last_page_mod", "paged_to_csr's last page length is seq_len % block_size (0 for a full page)",
         (("paged_to_csr", "((seq_lens - 1) % block_size + 1)", "(seq_lens % block_size)"),),
         lose=("paged_attention",), says="seq_len % block_size"),
    # ------------------------------------------------------------------ wrong: prefix_sharing
    Case("hashes_unchained", "block_hashes hashes each block alone (not chained)",
         (("block_hashes", "parent = hash((parent, tuple(ids[start:start + block_size])))",
           "parent = hash((None, tuple(ids[start:start + block_size])))"),), lose=("prefix_sharing",),
         says="unchained"),
    Case("hashes_partial_block", "block_hashes hashes the partly filled last block too",
         (("block_hashes", "range(0, len(ids) - block_size + 1, block_size)", "range(0, len(ids), block_size)"),),
         lose=("prefix_sharing",), says="partly filled"),
    Case("whole_prompt_cached", "add_sequence may report the whole prompt cached (no len(prompt) - 1)",
         (("PagedKVCache", "block_hashes(ids[:len(ids) - 1], self.block_size)", "block_hashes(ids, self.block_size)"),),
         lose=("prefix_sharing",), says="len(prompt) - 1"),
    Case("no_copy_on_write", "reserve appends into a shared partial block (no copy-on-write)",
         (("PagedKVCache", "copy = num_new > 0 and start % bs != 0 and self.allocator.refcount(table[-1]) > 1",
           "copy = False"),), lose=("prefix_sharing",), says="copy-on-write"),
    Case("fork_without_incref", "fork shares the parent's blocks without adding an owner",
         (("PagedKVCache", "        for block in self.tables[parent_id]:\n            self.allocator.incref(block)\n",
           ""),), lose=("prefix_sharing",), says="without incref"),
    Case("stale_hash", "a reused block keeps its old hash in the map (no eviction)",
         (("PagedKVCache", "        if block in self.hash_of_block:\n            del self.block_of_hash["
           "self.hash_of_block.pop(block)]\n", ""),), lose=("prefix_sharing",), says="stale hash"),
    # ------------------------------------------------------------------ wrong: continuous_batching
    Case("positions_restart", "the scheduler gives each chunk positions 0 .. n - 1",
         (("continuous_batching_generate", "torch.cat([torch.arange(done[r], done[r] + n) for r, n in chunks])",
           "torch.cat([torch.arange(n) for r, n in chunks])"),), lose=("continuous_batching",), says="positions"),
    Case("sample_first_token", "a request samples from its chunk's first token",
         (("continuous_batching_generate", "logits[int(cu[i + 1]) - 1].argmax()", "logits[int(cu[i])].argmax()"),),
         lose=("continuous_batching",), says="LAST token"),
    Case("layers_write_layer_0", "every layer writes layer 0 of the pool",
         (("PagedDecoderAttention", "cache.k_cache[self.layer_idx], cache.v_cache[self.layer_idx]",
           "cache.k_cache[0], cache.v_cache[0]"),), lose=("continuous_batching",), says="layer 0"),
    Case("prefill_never_mixed", "steps with decodes never take a prompt chunk",
         (("continuous_batching_generate", "        for r in running:  # 2. prompts being prefilled, oldest first\n",
           "        budget = 0 if chunks else budget\n"
           "        for r in running:  # 2. prompts being prefilled, oldest first\n"),),
         lose=("continuous_batching",), says="mixed"),
    Case("static_counts_every_token_as_prefill", "static batching's stats count every token fed as a prompt token",
         (("static_batching_generate", 'stats["prefill_tokens"] += int(cu[-1]) if step == 0 else 0',
           'stats["prefill_tokens"] += int(cu[-1])'),), lose=("continuous_batching",), says="prefill_tokens"),
    # ------------------------------------------------------------------ wrong: attention_sinks
    Case("sinks_evicted", "SinkKVCache keeps the last num_sink + window positions (a pure window)",
         (("SinkKVCache", "k_all = torch.cat([k_all[..., :self.num_sink, :], k_all[..., -self.window:, :]], dim=-2)",
           "k_all = k_all[..., -(self.num_sink + self.window):, :]"),
          ("SinkKVCache", "v_all = torch.cat([v_all[..., :self.num_sink, :], v_all[..., -self.window:, :]], dim=-2)",
           "v_all = v_all[..., -(self.num_sink + self.window):, :]")), lose=("attention_sinks",), says="sinks"),
    Case("sink_rotated_twice", "SinkDecoderAttention caches rotated keys and rotates them again",
         (("SinkDecoderAttention", "        k, v = cache.append(k, v)  #",
           "        k = apply_rope(k, torch.arange(len(cache), len(cache) + S_new), self.rope_base)\n"
           "        k, v = cache.append(k, v)  #"),), lose=("attention_sinks",), says="rotated again"),
    # ------------------------------------------------------------------ correct: real code adapted, allowed calls
    Case("vllm_ref_paged_attn", "paged_attention as vLLM's ref_paged_attn (adapted to the contract)",
         (_fn("paged_attention", VLLM_REF_PAGED_ATTN),)),
    Case("vllm_ref_single_query", "paged_attention as vLLM's ref_single_query_cached_kv_attention, token by token "
         "(adapted: flash layout, chunks)", (_fn("paged_attention", VLLM_REF_SINGLE_QUERY),)),
    Case("flash_attn_bert_padding", "cu_seqlens, pack and unpack as flash-attn's unpad_input / pad_input",
         (_fn("cu_seqlens", FLASH_ATTN_CU), _fn("pack", FLASH_ATTN_UNPAD), _fn("unpack", FLASH_ATTN_PAD))),
    Case("streaming_llm_cache", "SinkKVCache as StreamingLLM's StartRecentKVCache (one layer)",
         (_fn("SinkKVCache", STREAMING_LLM),)),
    Case("varlen_sdpa_explicit_mask", "varlen_attention calls SDPA with an explicit bottom-right mask per sequence "
         "(allowed)", (_fn("varlen_attention", SDPA_PER_SEQUENCE),)),
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
        from autograder.foundation.spec import SERVING

        with Grader() as grader:
            results = {path.stem: grader.grade(path, assignment=SERVING) for path in paths}
            results["reference"] = grader.grade(REFERENCE, assignment=SERVING)
        print(build.table(results, SERVING.parts, CASES))


if __name__ == "__main__":
    main(sys.argv[1:])
