"""The visible checks of notebooks 04 to 06 of `serving`: prefix caching, the paged decoder layer and its scheduler,
attention sinks.

visible_checks.py (course/visible_checks_serving.py) builds them on its harness with `batching_checks`, so that they
speak the notebook's language and name the student's line like the others; they live here to keep each file short.
Pure torch: the yardstick is a dense pass in float64 (RoPE on neighbour pairs at each token's position, grouped heads,
bottom-right causal), never a reference implementation.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn as nn
from visible_checks_serving_dense import dense_layer


def batching_checks(harness, close, ok):
    """The checks of notebooks 04 and 05, on the harness of visible_checks.py."""
    _ = harness.gettext

    @harness.check("block_hashes")
    def check_block_hashes(block_hashes) -> None:
        hashes = harness.watch(block_hashes, "block_hashes")
        tokens = list(range(10, 21))  # 11 tokens: two full blocks of 4 and a partial one
        got = list(hashes(tokens, 4))
        assert len(got) == 2, _("11 tokens in blocks of 4 have {n} hashes, expected 2: only full blocks are hashed "
                                "(the partial last block has none)").format(n=len(got))
        assert list(hashes(tokens[:8], 4)) == got, _("the hashes of a prompt's first 8 tokens should equal the first two "
                                                     "hashes of the longer prompt")
        assert list(hashes(torch.tensor(tokens), 4)) == got, _("a 1-D tensor of token ids should hash like the list")
        changed = list(hashes([99] + tokens[1:], 4))
        assert changed[1] != got[1], _(
            "changing a token of block 0 left block 1's hash unchanged: chain the hashes, h_i = hash((h_{i-1}, block_i))")
        after = [list(hashes(prefix + [7, 7, 7, 7], 4))[1] for prefix in ([1, 2, 3, 4], [5, 6, 7, 8])]
        assert after[0] != after[1], _("the same block after different prefixes hashes the same: chain the hashes")
        ok(_("block_hashes: full blocks only, chained, a longer prompt extends its prefix's hashes"))

    @harness.check("PagedKVCache")
    def check_prefix_caching(PagedKVCache) -> None:
        A = list(range(100, 111))
        B = A[:9] + [7, 8, 9]
        cache = PagedKVCache(16, 4, 1, 2, enable_prefix_caching=True)
        assert cache.add_sequence("A", A) == 0, _("an empty cache has no hit")
        slots = torch.as_tensor(cache.reserve("A", 11, token_ids=A)).long()
        cache.k_cache[0, slots // 4, slots % 4] = torch.randn(11, 1, 2)
        keys_a = cache.gather("A")[0].clone()
        hit = cache.add_sequence("B", B)
        assert hit == 8, _("B shares A's first 9 tokens: it should hit 8 (two full blocks), got {hit}").format(hit=hit)
        first = cache.block_table("A")[:2]
        assert cache.block_table("B")[:2] == first and cache.allocator.refcount(first[0]) == 2, _(
            "after the hit, B's table should start with A's two blocks {first}, each with refcount 2").format(first=first)
        slots = torch.as_tensor(cache.reserve("B", 4, token_ids=B[8:])).long()
        cache.k_cache[0, slots // 4, slots % 4] = torch.randn(4, 1, 2)
        assert torch.equal(cache.gather("A")[0], keys_a), _("B's writes changed A's keys: B writes past the shared blocks")
        assert cache.blocks_used() == 4, _("A and B should use 4 blocks with sharing, you use {n}").format(
            n=cache.blocks_used())
        cache.add_sequence("C", A[:8])
        assert cache.seq_len("C") == 4, _(
            "an 8-token prompt fully cached should hit 4, not 8: the last prompt token is always computed (its logits "
            "give the first output)")
        assert cache.add_sequence("D", [0] + A[1:]) == 0, _("a prompt whose first token differs should miss")
        assert cache.add_sequence("E") == 0, _("add_sequence(seq_id) without token ids registers an empty sequence "
                                               "and returns 0, prefix caching or not")
        cache.fork("A", "A2")
        last = cache.block_table("A")[-1]
        assert cache.block_table("A2") == cache.block_table("A") and cache.allocator.refcount(last) == 2, _(
            "fork: the child shares every block of the parent (refcount + 1), nothing copied")
        slots = torch.as_tensor(cache.reserve("A2", 1, token_ids=[5])).long()
        cache.k_cache[0, slots // 4, slots % 4] = torch.randn(1, 1, 2)
        assert cache.block_table("A2")[-1] != last, _(
            "A2 appended into the partly filled block it shares with A: copy it first (copy-on-write)")
        assert cache.block_table("A2")[:2] == cache.block_table("A")[:2], _("full shared blocks are never copied")
        assert torch.equal(cache.gather("A")[0], keys_a) and torch.equal(cache.gather("A2")[0][:11], keys_a), _(
            "after copy-on-write, A keeps its keys and A2 starts with a copy of them")
        assert cache.block_table("A")[-1] == last and cache.allocator.refcount(last) == 1, _(
            "after copy-on-write A's table should still end with block {last} (now its sole owner: refcount 1); got "
            "{table} with refcount {n}: the child drops its reference to the old block, the parent's table is its "
            "own").format(last=last, table=cache.block_table("A"), n=cache.allocator.refcount(last))
        assert cache.add_sequence("F", A + [5, 0]) == 12, _(
            "A2's block that its appended token filled should enter the prefix cache (a fork keeps the parent's "
            "tokens): a prompt A + [5, 0] should hit 12")
        cache.reserve("A", 1, token_ids=[6])
        assert cache.block_table("A")[-1] == last, _(
            "A, the sole owner of its partly filled last block (its first blocks still shared), should append in "
            "place: only a shared last block is copied")
        chunked = PagedKVCache(16, 4, 1, 2, enable_prefix_caching=True)
        chunked.add_sequence("A", A)
        for start, stop in ((0, 3), (3, 8), (8, 11)):
            chunked.reserve("A", stop - start, token_ids=A[start:stop])
        assert chunked.add_sequence("B", B) == 8, _(
            "A reserved in chunks of 3, 5 and 3 tokens: B should still hit 8 (each block enters the map when the "
            "chunk that fills it is reserved)")
        twice = PagedKVCache(16, 4, 1, 2, enable_prefix_caching=True)
        for name in ("P", "Q"):  # both added before either reserves: both miss
            twice.add_sequence(name, A[:8])
        for name in ("P", "Q"):
            twice.reserve(name, 8, token_ids=A[:8])
        twice.add_sequence("R", A[:9])
        assert twice.block_table("R")[:2] == twice.block_table("P")[:2], _(
            "P and Q hold the same 8 tokens in different blocks; a later hit should take P's, the first: a full block "
            "enters the map only if its hash is not there yet")
        twice.add_sequence("D", [30, 31, 32, 33, 34, 35])
        twice.reserve("D", 6, token_ids=[30, 31, 32, 33, 34, 35])
        twice.fork("D", "E")
        twice.reserve("D", 1, token_ids=[21])
        twice.reserve("E", 2, token_ids=[22, 23])
        assert twice.add_sequence("F", [30, 31, 32, 33, 34, 35, 22, 23, 24]) == 8, _(
            "after a fork the parent appended 1 token and the child 2: the child's block they filled should enter the "
            "prefix cache (fork copies the parent's recorded tokens; each sequence then records its own)")
        tight = PagedKVCache(3, 4, 1, 2, enable_prefix_caching=True)
        tight.add_sequence("P")
        tight.reserve("P", 6, token_ids=list(range(6)))
        tight.fork("P", "Q")
        try:
            tight.reserve("Q", 4, token_ids=[1, 2, 3, 4])
        except RuntimeError:
            pass
        else:
            raise AssertionError(_("with 1 free block, a child's reserve that needs a copy of its shared last block "
                                   "and one new block should raise RuntimeError"))
        assert tight.block_table("Q") == tight.block_table("P") and tight.seq_len("Q") == 6 and \
            tight.allocator.num_free == 1, _("a reserve that does not fit (the copy counts as a block) must change "
                                             "nothing")
        tight.reserve("Q", 1, token_ids=[1])
        assert tight.block_table("Q")[-1] != tight.block_table("P")[-1], _(
            "with 1 free block, a child's reserve of 1 token needs only the copy of its shared last block: it fits")
        lru = PagedKVCache(4, 4, 1, 2, enable_prefix_caching=True)
        lru.add_sequence("A", A[:9])
        lru.reserve("A", 9, token_ids=A[:9])
        freed = lru.block_table("A")
        lru.free_sequence("A")
        lru.add_sequence("X", [1, 2, 3])
        lru.reserve("X", 3, token_ids=[1, 2, 3])
        tail = PagedKVCache(4, 4, 1, 2, enable_prefix_caching=True)
        tail.add_sequence("A", A[:9])
        tail.reserve("A", 9, token_ids=A[:9])
        tail.free_sequence("A")
        tail.add_sequence("Z", list(range(8)))
        tail.reserve("Z", 8, token_ids=list(range(8)))
        assert tail.add_sequence("A again", A[:9]) == 8, _(
            "after A (3 blocks) was freed, a new sequence took 2 blocks: the never-used one and A's last, so A's two "
            "full blocks should still hit (8 tokens). free_sequence frees a table last to first: the tail of a prefix "
            "is evicted before its head")
        assert lru.block_table("X")[0] not in freed, _(
            "a new sequence took a block of A's freed prefix while a never-used block was free: allocate from the head "
            "of the free queue (never-used blocks first, then the least recently freed)")
        assert lru.add_sequence("A again", A[:9]) == 8, _(
            "A's freed prefix should still hit 8 tokens until its blocks are handed out again (lazy eviction)")
        lru.free_sequence("A again")
        lru.free_sequence("X")
        lru.add_sequence("Y", list(range(16)))
        lru.reserve("Y", 16, token_ids=list(range(16)))
        lru.free_sequence("Y")
        assert lru.add_sequence("A at last", A[:9]) == 0, _(
            "after another sequence overwrote every block, A's prompt still hits: a block handed out again leaves the "
            "hash map")
        ok(_("prefix caching: B hits 8 of A's tokens (4 blocks for both), the last token always computed, fork and "
             "copy-on-write, LRU reuse and lazy eviction"))

    def _model(Layer, vocab, d_model):
        class Tiny(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(vocab, d_model)
                self.layers = nn.ModuleList(Layer(d_model, 4, 2, layer_idx=i) for i in range(2))
                self.head = nn.Linear(d_model, vocab, bias=False)
                self.calls, self.sizes, self.chunks = 0, [], []

            def forward(self, tokens, positions, meta, cache):
                assert isinstance(tokens, torch.Tensor), _("the model takes tokens as a tensor [T] of token ids, "
                                                           "not a {kind}").format(kind=type(tokens).__name__)
                self.calls += 1
                self.sizes.append(len(tokens))
                cu = [int(c) for c in meta.cu_seqlens_q]
                self.chunks.append([cu[b + 1] - cu[b] for b in range(len(cu) - 1)])
                x = self.embed(torch.as_tensor(tokens).long())
                for layer in self.layers:
                    x = x + layer(x, torch.as_tensor(positions), meta, cache)
                return self.head(x)

            def greedy(self, prompt, n):  # the yardstick: every step a dense pass over the whole sequence
                seq = list(prompt)
                for _step in range(n):
                    x = self.embed(torch.tensor(seq)).double()
                    for layer in self.layers:
                        x = x + dense_layer(layer, x, torch.arange(len(seq)), 4)
                    seq.append(int((x[-1] @ self.head.weight.double().T).argmax()))
                return seq[len(prompt):]

        return Tiny().double().eval()

    @harness.check("PagedDecoderAttention")
    def check_paged_decoder_attention(PagedDecoderAttention) -> None:
        layer = PagedDecoderAttention(24, 6, 2, layer_idx=1)
        for name in ("W_q", "W_k", "W_v", "W_o"):
            assert isinstance(getattr(layer, name, None), nn.Linear), _(
                "PagedDecoderAttention needs DecoderAttention's submodule {name} (an nn.Linear)").format(name=name)
        lengths, tables = [5, 7, 3], [[5, 1], [0, 6], [3]]
        x = [torch.randn(n, 24) for n in lengths]
        steps = ([(0, 0, 3), (1, 0, 4)], [(0, 3, 4), (1, 4, 6), (2, 0, 3)], [(0, 4, 5), (1, 6, 7)])
        cache = SimpleNamespace(k_cache=torch.full((2, 8, 4, 2, 4), float("nan")),
                                v_cache=torch.full((2, 8, 4, 2, 4), float("nan")))
        got = [[] for _ in lengths]
        forward = harness.watch(layer, "PagedDecoderAttention.forward")
        for step in steps:
            positions = torch.cat([torch.arange(a, b) for _s, a, b in step])
            slots = torch.cat([torch.tensor([tables[s][p // 4] * 4 + p % 4 for p in range(a, b)]) for s, a, b in step])
            width = max(len(tables[s]) for s, _a, _b in step)
            meta = SimpleNamespace(
                cu_seqlens_q=torch.tensor([0] + torch.tensor([b - a for _s, a, b in step]).cumsum(0).tolist(),
                                          dtype=torch.int32),
                slot_mapping=slots, seq_lens=torch.tensor([b for _s, _a, b in step], dtype=torch.int32),
                block_tables=torch.tensor([tables[s] + [7] * (width - len(tables[s])) for s, _a, _b in step],
                                          dtype=torch.int32))
            with torch.no_grad():
                out = harness.expect_shape(forward(torch.cat([x[s][a:b] for s, a, b in step]), positions, meta, cache),
                                           [len(positions), 24], _("the layer's output"))
            row = 0
            for s, a, b in step:
                got[s].append(out[row:row + b - a])
                row += b - a
        assert torch.isnan(cache.k_cache[0]).all(), _(
            "a layer with layer_idx = 1 wrote into layer 0 of the cache: write cache.k_cache[layer_idx]")
        for s, n in enumerate(lengths):
            want = dense_layer(layer, x[s], torch.arange(n), 6)
            mine = torch.cat(got[s]).double()
            assert not torch.isnan(mine).any(), _(
                "sequence {s}'s output holds NaN: the layer read cache slots past seq_len or blocks of table padding"
            ).format(s=s)
            assert close(mine, want, 1e-4 * max(1.0, want.abs().max().item())), _(
                "sequence {s} fed in chunks differs from DecoderAttention on the whole sequence by up to {gap:.2g}: "
                "rotate at `positions` (a chunk continues where the previous stopped), write the rotated keys, then "
                "paged_attention with meta's tensors").format(s=s, gap=(mine - want).abs().max().item())
        ok(_("PagedDecoderAttention: 3 sequences in 3 steps of chunks and decodes equal DecoderAttention on each whole "
             "sequence; layer 0 untouched"))

    def _requests(PagedDecoderAttention):
        """The hidden check's lengths: 6 requests (7, 7, 6, 13, 11, 3 prompt tokens; 3, 10, 2, 9, 2, 2 new ones) and
        what greedy decoding of each alone gives."""
        model = _model(PagedDecoderAttention, 32, 16)  # a stub layer: "PagedDecoderAttention: not implemented yet"
        prompts = [torch.randint(32, (n,)).tolist() for n in (7, 7, 6, 13, 11, 3)]
        max_new = [3, 10, 2, 9, 2, 2]
        return model, prompts, max_new, [model.greedy(p, n) for p, n in zip(prompts, max_new)]

    STATIC_STEPS = 19  # batches (0, 1, 2) and (3, 4, 5), each decoded until its longest request is done
    # the contract's policy on these lengths (the schedule depends on lengths only): tokens per step and stats
    CONTINUOUS = {"tokens_per_step": [8, 8, 7, 2, 8, 7, 2, 2, 2, 2, 2, 8, 8, 3], "steps": 14, "mixed_steps": 6,
                  "max_blocks_used": 10, "prefill_tokens": 47,
                  "chunks": [[7, 1], [1, 6, 1], [1, 1, 5], [1, 1], [1, 7], [1, 6], [1, 1], [1, 1], [1, 1], [1, 1],
                             [1, 1], [1, 7], [1, 4, 3], [1, 1, 1]]}
    STATIC = {"tokens_per_step": [20] + [3] * 9 + [27] + [3] * 8, "steps": 19, "mixed_steps": 0,
              "max_blocks_used": 14, "prefill_tokens": 47}

    def _same_stats(stats, sizes, want, policy, chunks=()):
        """The tokens the model was given step by step, and each key of `stats`, against the policy's."""
        assert sizes == want["tokens_per_step"], _(
            "the model was given {got} tokens step by step; the contract's policy gives {want}: {policy}").format(
            got=sizes, want=want["tokens_per_step"], policy=policy)
        if "chunks" in want:
            step = next((i for i, (g, w) in enumerate(zip(chunks, want["chunks"])) if g != w), None)
            assert step is None, _("at step {i} the model was given chunks of {got} tokens (meta's rows); the "
                                   "contract's policy gives {want}: decodes first, then the running prompts' chunks "
                                   "oldest first, then admitted requests").format(
                i=step, got=chunks[step] if step is not None else None,
                want=want["chunks"][step] if step is not None else None)
        assert list(stats.get("tokens_per_step", [])) == sizes, _(
            "stats['tokens_per_step'] is {got}, the model was given {sizes}").format(
            got=stats.get("tokens_per_step"), sizes=sizes)
        for key in ("steps", "mixed_steps", "max_blocks_used", "prefill_tokens"):
            assert stats.get(key) == want[key], _(
                "stats[{key!r}] is {got}, expected {want} (steps: model calls; mixed_steps: steps with a decode and a "
                "prompt chunk; max_blocks_used: blocks_used() after each step's reserves, at most; prefill_tokens: "
                "prompt tokens computed)").format(key=key, got=stats.get(key), want=want[key])

    @harness.check("continuous_batching_generate")
    def check_continuous_batching(continuous_batching_generate, PagedDecoderAttention, PagedKVCache) -> None:
        model, prompts, max_new, want = _requests(PagedDecoderAttention)
        cache = PagedKVCache(12, 4, 2, 4, num_layers=2, dtype=torch.float64)
        with torch.no_grad():
            outputs, stats = harness.watch(continuous_batching_generate, "continuous_batching_generate")(
                model, prompts, max_new, cache, token_budget=8, max_num_seqs=3)
        assert all(isinstance(t, int) for o in outputs for t in o), _(
            "the outputs should be lists of Python ints (int(logits.argmax())), not tensors")
        got = [[int(t) for t in o] for o in outputs]
        assert got == want, _("continuous batching generated {got}, greedy decoding of each request alone gives {want}"
                              ).format(got=got, want=want)
        steps = model.calls
        assert stats["steps"] == steps, _("stats['steps'] is {said}, the model was called {n} times").format(
            said=stats["steps"], n=steps)
        assert cache.blocks_used() == 0, _("{n} blocks are still in use at the end: free a finished request at once"
                                           ).format(n=cache.blocks_used())
        assert stats["mixed_steps"] >= 1, _("no step mixed a decode and a prefill chunk: after the decodes, the budget "
                                            "left goes to prefill chunks")
        assert steps < STATIC_STEPS, _("continuous batching took {n} steps, static batching at the same concurrency "
                                       "takes {static}: admit a waiting request as soon as one finishes").format(
            n=steps, static=STATIC_STEPS)
        _same_stats(stats, model.sizes, CONTINUOUS, chunks=model.chunks, policy=_(
            "each step, every running request with an output decodes 1 token, then prompts being prefilled get chunks "
            "oldest first, then waiting requests are admitted in order while budget, max_num_seqs and the free blocks "
            "allow"))
        before = len(model.sizes)
        with torch.no_grad():
            outs, _st = continuous_batching_generate(model, prompts, max_new, PagedKVCache(
                12, 4, 2, 4, num_layers=2, dtype=torch.float64), token_budget=2, max_num_seqs=2)
        assert model.sizes[before:] == [2] * 34 + [1], _(
            "with token_budget 2 and max_num_seqs 2 the model was given {got} tokens step by step, the policy gives "
            "{want}: every running request with an output decodes while any budget is left (a budget of 1 included), "
            "then prompt chunks take what is left, even 1 token").format(got=model.sizes[before:], want=[2] * 34 + [1])
        assert _st["mixed_steps"] == 19, _(
            "stats[{key!r}] is {got}, expected {want} (steps: model calls; mixed_steps: steps with a decode and a "
            "prompt chunk; max_blocks_used: blocks_used() after each step's reserves, at most; prefill_tokens: "
            "prompt tokens computed)").format(key="mixed_steps", got=_st["mixed_steps"], want=19)
        system = torch.randint(32, (8,)).tolist()  # a shared system prompt of two full blocks
        shared = [system + torch.randint(32, (n,)).tolist() for n in (2, 1, 3)]
        cached = PagedKVCache(12, 4, 2, 4, num_layers=2, dtype=torch.float64, enable_prefix_caching=True)
        before = len(model.sizes)
        with torch.no_grad():
            outs, st = continuous_batching_generate(model, shared, [2, 2, 2], cached, token_budget=8, max_num_seqs=2)
        assert model.sizes[before:] == [8, 3, 2, 3, 1], _(
            "the model was given {got} tokens step by step; the contract's policy gives {want}: {policy}").format(
            got=model.sizes[before:], want=[8, 3, 2, 3, 1], policy=_(
                "each step, every running request with an output decodes 1 token, then prompts being prefilled get "
                "chunks oldest first, then waiting requests are admitted in order while budget, max_num_seqs and the "
                "free blocks allow"))
        assert [[int(t) for t in o] for o in outs] == [model.greedy(p, 2) for p in shared] and \
            st["prefill_tokens"] == 14, _(
            "with prefix caching, 3 requests sharing an 8-token system prompt should decode greedily and compute 14 of "
            "their 30 prompt tokens (the first whole, then 1 and 3: add_sequence's hit is skipped, and every reserve "
            "passes token_ids so that full blocks enter the map); you computed {n}").format(n=st["prefill_tokens"])
        whole, prompt = PagedKVCache(5, 4, 2, 4, num_layers=2, dtype=torch.float64), torch.randint(32, (17,)).tolist()
        with torch.no_grad():
            alone, _stats = continuous_batching_generate(model, [prompt], [3], whole, token_budget=8, max_num_seqs=2)
        assert [[int(t) for t in o] for o in alone] == [model.greedy(prompt, 3)], _(
            "one request of 17 + 3 tokens on a pool of exactly the 5 blocks of 4 it needs should run and decode greedily: "
            "need = ceil((len(prompt) + max_new_tokens) / block_size), the pool's blocks k_cache.shape[1]")
        ok(_("continuous batching: 6 requests on a 12-block pool equal greedy decoding, {steps} steps ({mixed} mixed, "
             "static batching takes {static}), all blocks freed").format(steps=steps, mixed=stats["mixed_steps"],
                                                                       static=STATIC_STEPS))

    @harness.check("static_batching_generate")
    def check_static_batching(static_batching_generate, PagedDecoderAttention, PagedKVCache) -> None:
        model, prompts, max_new, want = _requests(PagedDecoderAttention)
        cache = PagedKVCache(24, 4, 2, 4, num_layers=2, dtype=torch.float64)
        with torch.no_grad():
            outputs, stats = harness.watch(static_batching_generate, "static_batching_generate")(
                model, prompts, max_new, cache, batch_size=3)
        assert all(isinstance(t, int) for o in outputs for t in o), _(
            "the outputs should be lists of Python ints (int(logits.argmax())), not tensors")
        got = [[int(t) for t in o] for o in outputs]
        assert got == want, _("static batching generated {got}, expected {want}").format(got=got, want=want)
        assert model.calls == STATIC_STEPS, _(
            "static batching called the model {n} times, expected {static}: one step per batch for the whole prompts, "
            "then one per token until the batch's longest request is done").format(n=model.calls, static=STATIC_STEPS)
        assert stats["steps"] == model.calls and cache.blocks_used() == 0, _(
            "stats['steps'] should count the model's calls and every block should be free at the end")
        _same_stats(stats, model.sizes, STATIC, _(
            "each batch of batch_size requests in arrival order, its prompts in one step, then one token per request "
            "per step until its longest request is done"))
        short = PagedKVCache(8, 4, 2, 4, num_layers=2, dtype=torch.float64)
        with torch.no_grad():
            alone, _stats = static_batching_generate(model, prompts[:1], max_new[:1], short, batch_size=3)
        assert [[int(t) for t in o] for o in alone] == want[:1], _(
            "one request with batch_size 3 (a last batch shorter than batch_size) should decode like the first request "
            "alone")
        ok(_("static batching: the same tokens in {static} steps (batches of 3, each until its longest request is done)"
             ).format(static=STATIC_STEPS))

    return (check_block_hashes, check_prefix_caching, check_paged_decoder_attention, check_continuous_batching,
            check_static_batching)
