"""The reference of the fifth assignment (solutions/serving.py) agrees with float64 SDPA and with generation's layer.

Packed attention and paged attention against per-sequence F.scaled_dot_product_attention in float64 with
bottom-right masks (ragged lengths, grouped heads, D_v != D, S_q != S_k, NaN in every slot that must not be read);
the paged cache's bookkeeping (slots, LRU free queue, refcounts, a failed reserve changes nothing); prefix caching
(hits, the last prompt token recomputed, copy-on-write, lazy eviction); the paged layer and the scheduler against
generation's DecoderAttention + KVCache run on each request alone; the sink cache against a dense pass over the kept
tokens at positions 0..n-1. The figures the contract prints (14 vs 19 steps, ...) come from the same parameters as
the hidden checks.
"""
from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

from autograder.checks.serving import batching
from solutions import generation as G
from solutions import serving as S


def sdpa_bottom_right(q, k, v, causal=True):
    """One sequence in float64: q [S_q, H, D], k [S_k, H_kv, D] -> [S_q, H, D_v]; zeros where a query sees no key."""
    S_q, H, _ = q.shape
    S_k, H_kv, _ = k.shape
    qd, kd, vd = (t.double().transpose(0, 1) for t in (q, k, v))  # [H, S, D]
    kd, vd = kd.repeat_interleave(H // H_kv, 0), vd.repeat_interleave(H // H_kv, 0)
    allowed = torch.ones(S_q, S_k, dtype=torch.bool)
    if causal:
        allowed = allowed.tril(S_k - S_q)
    out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=allowed)
    out = torch.where(allowed.any(-1)[None, :, None], out, 0.0)
    return out.transpose(0, 1)


def test_cu_seqlens_is_int32_and_starts_at_zero():
    cu = S.cu_seqlens([4, 6, 3])
    assert cu.dtype == torch.int32 and cu.tolist() == [0, 4, 10, 13]
    assert S.cu_seqlens(torch.tensor([2, 1], dtype=torch.int64)).tolist() == [0, 2, 3]


def test_pack_and_unpack_are_inverse_on_ragged_rows():
    g = torch.Generator().manual_seed(0)
    lengths = [3, 7, 1, 5]
    x = torch.randn(4, 7, 2, 3, generator=g)
    packed = S.pack(x, lengths)
    assert packed.shape == (16, 2, 3)
    assert torch.equal(packed[3:10], x[1])
    back = S.unpack(packed, S.cu_seqlens(lengths), 7)
    real = torch.arange(7)[None] < torch.tensor(lengths)[:, None]
    assert torch.equal(back[real], x[real]) and not back[~real].any()


@pytest.mark.parametrize("case", ["gqa", "causal", "chunked", "more_queries"])
def test_varlen_attention_equals_per_sequence_sdpa_in_float64(case):
    g = torch.Generator().manual_seed(1)
    H, H_kv, D, D_v = (6, 2, 8, 5) if case == "gqa" else (4, 4, 8, 8)
    lq, lk = {"gqa": ([3, 5, 2], [3, 5, 2]), "causal": ([4, 1, 6], [4, 1, 6]),
              "chunked": ([2, 1, 3], [5, 4, 3]), "more_queries": ([5, 3, 2], [2, 3, 1])}[case]
    q = torch.randn(sum(lq), H, D, generator=g)
    k = torch.randn(sum(lk), H_kv, D, generator=g)
    v = torch.randn(sum(lk), H_kv, D_v, generator=g)
    cq, ck = S.cu_seqlens(lq), S.cu_seqlens(lk)
    causal = case != "gqa"
    out = S.varlen_attention(q, k, v, cq, ck, causal=causal)
    assert out.shape == (sum(lq), H, D_v) and not out.isnan().any()
    for b in range(3):
        want = sdpa_bottom_right(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], causal)
        torch.testing.assert_close(out[cq[b]:cq[b + 1]].double(), want, atol=1e-5, rtol=0)


def test_block_allocator_hands_out_never_used_blocks_first_then_least_recently_freed():
    a = S.BlockAllocator(4)
    got = [a.allocate() for _ in range(4)]
    assert sorted(got) == [0, 1, 2, 3] and a.num_free == 0
    with pytest.raises(RuntimeError):
        a.allocate()
    a.incref(got[1])
    a.free(got[1])
    assert a.refcount(got[1]) == 1 and a.num_free == 0
    a.free(got[2])
    a.free(got[1])
    assert a.allocate() == got[2]  # freed first, reused first
    a.free(got[3])
    with pytest.raises(ValueError):  # a block freed twice
        a.free(got[3])
    a.incref(got[3])  # a freed block taken back out of the free queue
    assert a.refcount(got[3]) == 1 and got[3] not in a.free_queue


def test_reshape_and_cache_skips_negative_slots():
    g = torch.Generator().manual_seed(2)
    kc, vc = torch.zeros(3, 4, 2, 3), torch.zeros(3, 4, 2, 3)
    key, value = torch.randn(4, 2, 3, generator=g), torch.randn(4, 2, 3, generator=g)
    S.reshape_and_cache(key, value, kc, vc, torch.tensor([9, -1, 2, -1]))
    assert torch.equal(kc[2, 1], key[0]) and torch.equal(vc[0, 2], value[2])
    assert int((kc != 0).any(-1).any(-1).sum()) == 2


def test_paged_cache_slots_follow_the_block_table_and_a_failed_reserve_changes_nothing():
    c = S.PagedKVCache(7, 4, 2, 3, num_layers=2)
    for seq in "abc":
        c.add_sequence(seq)
    for seq, n in (("a", 5), ("b", 4), ("c", 6), ("a", 3), ("c", 4)):
        slots = c.reserve(seq, n)
        table, start = c.block_table(seq), c.seq_len(seq) - n
        want = [table[p // 4] * 4 + p % 4 for p in range(start, start + n)]
        assert slots.tolist() == want
    assert [c.seq_len(s) for s in "abc"] == [8, 4, 10] and c.blocks_used() == 6
    assert not set(c.block_table("a")) & set(c.block_table("c"))
    before = (c.allocator.num_free, c.block_table("b"), c.seq_len("b"))
    with pytest.raises(RuntimeError):
        c.reserve("b", 9)
    assert (c.allocator.num_free, c.block_table("b"), c.seq_len("b")) == before
    assert c.block_tables_tensor(["a", "b"]).dtype == torch.int32


def random_paged(g, lengths, block_size, H_kv, D, D_v, num_blocks):
    """A pool with NaN everywhere, each sequence's keys written through a random non-contiguous table."""
    perm = torch.randperm(num_blocks, generator=g).tolist()
    kc = torch.full((num_blocks, block_size, H_kv, D), float("nan"))
    vc = torch.full((num_blocks, block_size, H_kv, D_v), float("nan"))
    width = max(-(-n // block_size) for n in lengths) + 1
    tables = torch.full((len(lengths), width), perm[-1], dtype=torch.int32)  # padding points at a NaN block
    keys = []
    for b, n in enumerate(lengths):
        blocks = [perm.pop(0) for _ in range(-(-n // block_size))]
        tables[b, :len(blocks)] = torch.tensor(blocks)
        k, v = torch.randn(n, H_kv, D, generator=g), torch.randn(n, H_kv, D_v, generator=g)
        slots = torch.tensor([blocks[p // block_size] * block_size + p % block_size for p in range(n)])
        S.reshape_and_cache(k, v, kc, vc, slots)
        keys.append((k, v))
    return kc, vc, tables, keys


def test_paged_attention_mixes_prefills_decodes_and_chunks_like_dense_sdpa():
    g = torch.Generator().manual_seed(3)
    seq_lens, q_lens = [7, 1, 12, 4, 9], [3, 1, 5, 4, 1]
    kc, vc, tables, keys = random_paged(g, seq_lens, 4, 1, 8, 6, 16)
    q = torch.randn(sum(q_lens), 4, 8, generator=g)
    cq = S.cu_seqlens(q_lens)
    out = S.paged_attention(q, kc, vc, tables, torch.tensor(seq_lens, dtype=torch.int32), cq)
    for b, (k, v) in enumerate(keys):
        torch.testing.assert_close(out[cq[b]:cq[b + 1]].double(), sdpa_bottom_right(q[cq[b]:cq[b + 1]], k, v),
                                   atol=1e-5, rtol=0)
    decode = S.paged_attention(q[:5], kc, vc, tables, torch.tensor(seq_lens))
    for b, (k, v) in enumerate(keys):
        torch.testing.assert_close(decode[b:b + 1].double(), sdpa_bottom_right(q[b:b + 1], k, v), atol=1e-5, rtol=0)


def test_paged_to_csr_counts_a_full_last_page_as_block_size():
    indptr, indices, last = S.paged_to_csr(torch.tensor([[3, 1, 0], [2, 0, 0]]), torch.tensor([8, 5]), 4)
    assert indptr.tolist() == [0, 2, 4] and indices.tolist() == [3, 1, 2, 0] and last.tolist() == [4, 1]
    assert {t.dtype for t in (indptr, indices, last)} == {torch.int32}


def test_block_hashes_are_chained_and_skip_the_partial_block():
    h = S.block_hashes(list(range(10)), 4)
    assert len(h) == 2 and S.block_hashes(list(range(13)), 4)[:2] == h
    assert S.block_hashes([99] + list(range(1, 10)), 4)[1] != h[1]
    assert S.block_hashes([7, 7, 7, 7, 1, 2, 3, 4], 4)[1] != S.block_hashes([8, 8, 8, 8, 1, 2, 3, 4], 4)[1]


def test_prefix_hits_share_blocks_recompute_the_last_token_and_evict_lazily():
    c = S.PagedKVCache(10, 4, 1, 2, enable_prefix_caching=True)
    A = list(range(11))
    B = A[:9] + [50, 51, 52]
    assert c.add_sequence("A", A) == 0
    c.reserve("A", 11, token_ids=A)
    assert c.add_sequence("B", B) == 8
    assert c.block_table("B")[:2] == c.block_table("A")[:2] and c.allocator.refcount(c.block_table("A")[0]) == 2
    c.reserve("B", 4, token_ids=B[8:])
    assert c.add_sequence("C", A[:8]) == 4 and c.add_sequence("D", [1] + A[1:]) == 0
    for s in "BCD":
        c.free_sequence(s)
    c.free_sequence("A")
    c.add_sequence("X")
    c.reserve("X", 4)
    assert c.add_sequence("A2", A) == 8  # the never-used blocks went first: A's prefix still hits
    c.free_sequence("A2")
    c.free_sequence("X")
    c.add_sequence("Y")
    c.reserve("Y", 40)  # every block reused for other content
    c.free_sequence("Y")
    assert c.add_sequence("A3", A) == 0


def test_fork_shares_blocks_and_copies_only_a_shared_partial_block_on_write():
    c = S.PagedKVCache(6, 4, 1, 2, num_layers=2)
    c.add_sequence("p")
    S.reshape_and_cache(torch.ones(6, 1, 2), torch.ones(6, 1, 2), c.k_cache[1], c.v_cache[1], c.reserve("p", 6))
    c.fork("p", "c")
    assert c.block_table("c") == c.block_table("p") and c.allocator.refcount(c.block_table("p")[1]) == 2
    slots = c.reserve("c", 1)
    assert c.block_table("c")[0] == c.block_table("p")[0] and c.block_table("c")[1] != c.block_table("p")[1]
    assert int(slots[0]) // 4 == c.block_table("c")[1]
    assert torch.equal(c.k_cache[1, c.block_table("c")[1], :2], c.k_cache[1, c.block_table("p")[1], :2])
    c.reserve("p", 1)  # now the sole owner: in place
    assert c.allocator.num_free == 3


class TinyModel(torch.nn.Module):
    """Embedding, two paged layers with residuals, a head: the shape of the grader's model."""

    def __init__(self, vocab=40, d_model=16, heads=4, kv_heads=2, layers=2):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d_model)
        self.layers = torch.nn.ModuleList(S.PagedDecoderAttention(d_model, heads, kv_heads, layer_idx=i)
                                          for i in range(layers))
        self.head = torch.nn.Linear(d_model, vocab)

    def forward(self, tokens, positions, meta, cache):
        x = self.emb(tokens)
        for layer in self.layers:
            x = x + layer(x, positions, meta, cache)
        return self.head(x)

    def alone(self, prompt, n):
        """Greedy decoding of one request through generation's DecoderAttention + KVCache."""
        layers = []
        for layer in self.layers:
            dense = G.DecoderAttention(16, 4, 2)
            dense.load_state_dict(layer.state_dict())
            layers.append(dense)
        caches, out, x_in = [G.KVCache() for _ in layers], [], torch.tensor([prompt])
        for _ in range(n):
            x = self.emb(x_in)
            for layer, cache in zip(layers, caches):
                x = x + layer(x, cache)
            out.append(int(self.head(x)[0, -1].argmax()))
            x_in = torch.tensor([[out[-1]]])
        return out


PROMPT_LENGTHS, NEW_TOKENS = list(batching.PROMPT_LENGTHS), list(batching.NEW_TOKENS)  # the hidden checks' requests


@torch.no_grad()
def test_continuous_batching_equals_each_request_alone_and_beats_static_batching():
    torch.manual_seed(0)
    model = TinyModel()
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 40, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]
    want = [model.alone(p, n) for p, n in zip(prompts, NEW_TOKENS)]
    cache = S.PagedKVCache(12, 4, 2, 4, num_layers=2)
    out, stats = S.continuous_batching_generate(model, prompts, NEW_TOKENS, cache, token_budget=8, max_num_seqs=3)
    assert out == want and cache.blocks_used() == 0
    assert (stats["steps"], sum(stats["tokens_per_step"]), stats["max_blocks_used"]) == (14, 69, 10)
    assert stats["mixed_steps"] >= 1 and stats["prefill_tokens"] == sum(PROMPT_LENGTHS)
    static, sstats = S.static_batching_generate(model, prompts, NEW_TOKENS, S.PagedKVCache(24, 4, 2, 4, num_layers=2),
                                                batch_size=3)
    assert static == want
    assert (sstats["steps"], sum(sstats["tokens_per_step"]), sstats["max_blocks_used"]) == (19, 98, 14)


@torch.no_grad()
def test_a_shared_system_prompt_is_computed_once_with_prefix_caching():
    torch.manual_seed(0)
    model = TinyModel()
    g = torch.Generator().manual_seed(6)
    system = torch.randint(0, 40, (12,), generator=g).tolist()
    prompts = [system + torch.randint(0, 40, (n - 3,), generator=g).tolist() for n in PROMPT_LENGTHS]
    want = [model.alone(p, n) for p, n in zip(prompts, NEW_TOKENS)]
    cache = S.PagedKVCache(30, 4, 2, 4, num_layers=2, enable_prefix_caching=True)
    out, stats = S.continuous_batching_generate(model, prompts, NEW_TOKENS, cache, token_budget=8, max_num_seqs=3)
    assert out == want and stats["prefill_tokens"] < sum(map(len, prompts))


@torch.no_grad()
def test_the_sink_cache_keeps_sinks_and_a_window_and_attends_like_a_dense_pass_at_cache_positions():
    cache = S.SinkKVCache(2, 3)
    for p in range(11):
        cache.append(torch.full((1, 1, 1, 1), float(p)), torch.zeros(1, 1, 1, 1))
    assert cache.k.flatten().tolist() == [0, 1, 8, 9, 10]
    with pytest.raises(ValueError):
        S.SinkKVCache(2, 3).append(torch.zeros(1, 1, 6, 1), torch.zeros(1, 1, 6, 1))
    torch.manual_seed(1)
    layer = S.SinkDecoderAttention(16, 4, 2).double()
    dense = G.DecoderAttention(16, 4, 2).double()
    dense.load_state_dict(layer.state_dict())
    x = torch.randn(2, 16, 16, dtype=torch.float64)
    cache, kept = S.SinkKVCache(2, 4), []
    for start, stop in [(0, 3)] + [(t, t + 1) for t in range(3, 16)]:
        out = layer(x[:, start:stop], cache)
        kept = kept + list(range(start, stop))
        kept = kept[:2] + kept[-4:] if len(kept) > 6 else kept
        want = dense(x[:, kept])[:, -(stop - start):]
        torch.testing.assert_close(out, want, atol=1e-10, rtol=0)
    assert len(cache) == 6
