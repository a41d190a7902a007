"""Quick visible checks for the `serving` notebooks (pure torch, no solutions inside).

Each `check_*` function takes your function or class, runs it on small seeded inputs (ragged lengths, partial last
blocks, NaN in the cache slots nobody may read, grouped heads, fewer queries than keys) and prints one "✓" line when
the basic properties hold. When something is off it stops with one AssertionError sentence that says what is wrong;
while your code is a stub it prints "<name>: not implemented yet". Passing them is necessary, not sufficient: the
hidden autograder runs more cases. The yardstick is plain attention in float64, one sequence at a time.

Notebooks 04 to 06 have their checks in visible_checks_serving_batching.py, built on this file's harness.
"""
from __future__ import annotations

import os

import torch
from check_harness import DOMAIN, LOCALES, Harness, close, ok  # noqa: F401 - DOMAIN, LOCALES: for the tests
from visible_checks_serving_batching import batching_checks  # notebooks 04-05, built on this harness
from visible_checks_serving_dense import attend64, cu_lengths, gap, varlen64
from visible_checks_serving_sinks import sink_checks  # notebook 06

__all__ = [
    "check_cu_seqlens", "check_pack", "check_unpack", "check_varlen_attention", "check_block_allocator",
    "check_reshape_and_cache", "check_paged_kv_cache", "check_paged_attention", "check_paged_to_csr",
    "check_block_hashes", "check_prefix_caching", "check_paged_decoder_attention", "check_continuous_batching",
    "check_static_batching", "check_sink_kv_cache", "check_sink_decoder_attention",
    "graded_part", "uses_your_code", "use_language",
]

harness = Harness(__file__, *(os.path.join(os.path.dirname(os.path.abspath(__file__)), name) for name in (
    "visible_checks_serving_batching.py", "visible_checks_serving_sinks.py", "visible_checks_serving_dense.py")))
_ = harness.gettext
use_language, uses_your_code = harness.use_language, harness.uses_your_code


# --------------------------------------------------------------------------- #
# 01 varlen
# --------------------------------------------------------------------------- #


@harness.check("cu_seqlens")
def check_cu_seqlens(cu_seqlens) -> None:
    cu_seqlens = harness.watch(cu_seqlens, "cu_seqlens")
    got = harness.expect_tensor(cu_seqlens([4, 6, 3]), "cu_seqlens([4, 6, 3])")
    assert got.tolist() != [4, 10, 13], _(
        "cu_seqlens([4, 6, 3]) is [4, 10, 13]: it needs B + 1 entries, starting with 0 (sequence b is rows "
        "cu[b]:cu[b+1])")
    assert got.tolist() == [0, 4, 10, 13], _("cu_seqlens([4, 6, 3]) is {got}, expected [0, 4, 10, 13]").format(
        got=got.tolist())
    assert got.dtype == torch.int32, _(
        "cu_seqlens returns {dtype}: flash-attn and FlashInfer take int32").format(dtype=got.dtype)
    again = cu_seqlens(torch.tensor([2, 5], dtype=torch.int64))
    assert harness.expect_tensor(again, "cu_seqlens(tensor([2, 5]))").tolist() == [0, 2, 7], _(
        "cu_seqlens(torch.tensor([2, 5])) is {got}, expected [0, 2, 7]").format(got=again.tolist())
    ok(_("cu_seqlens: [4, 6, 3] -> [0, 4, 10, 13] in int32, from a list or a tensor"))


def _ragged():
    """x [4, 7, 3, 2] right-padded to lengths 5, 1, 7, 3; its 16 real tokens; which positions are real."""
    lengths = [5, 1, 7, 3]
    x = torch.randn(4, 7, 3, 2)  # [B, S, H, D]
    real = torch.arange(7)[None, :] < torch.tensor(lengths)[:, None]  # [B, S]
    return x, lengths, torch.cat([x[b, :n] for b, n in enumerate(lengths)]), real


@harness.check("pack")
def check_pack(pack) -> None:
    x, lengths, want, _real = _ragged()
    packed = harness.expect_shape(harness.watch(pack, "pack")(x, lengths), [16, 3, 2],
                                  "pack(x [4, 7, 3, 2], lengths [5, 1, 7, 3])")
    assert torch.equal(packed, want), _(
        "pack(x, lengths) should hold the first l_b rows of each sequence b, sequence after sequence")
    assert torch.equal(pack(x, torch.tensor(lengths)), want), _("pack(x, lengths) with lengths as a tensor should "
                                                                "give the same as with a list")
    ok(_("pack: 4 ragged rows (5, 1, 7, 3 tokens) packed to 16, sequence after sequence"))


@harness.check("unpack")
def check_unpack(unpack) -> None:
    x, lengths, packed, real = _ragged()
    cu = torch.tensor(cu_lengths(lengths), dtype=torch.int32)
    back = harness.expect_shape(harness.watch(unpack, "unpack")(packed, cu, 7), [4, 7, 3, 2], "unpack(packed, cu, 7)")
    assert torch.equal(back[real], x[real]), _("unpack puts sequence b's rows cu[b]:cu[b+1] back at positions 0 .. l_b - 1")
    assert (back[~real] == 0).all(), _("unpack should leave zeros at the padding")
    ok(_("unpack: 16 packed tokens back to 4 rows of 7, zeros at the padding"))


@harness.check("varlen_attention")
def check_varlen_attention(varlen_attention) -> None:
    attention = harness.watch(varlen_attention, "varlen_attention")
    cases = (  # (what, H, H_kv, D, D_v, q_lens, k_lens, causal)
        (_("grouped heads 6/2, D_v != D"), 6, 2, 4, 3, [3, 5, 2], [3, 5, 2], False),
        (_("causal self-attention"), 2, 2, 4, 4, [4, 1, 6], [4, 1, 6], True),
        (_("chunks (S_q < S_k)"), 4, 2, 4, 4, [2, 1, 3], [5, 4, 3], True),
        (_("S_q > S_k (the first queries see no key)"), 2, 1, 4, 4, [4, 2], [2, 2], True),
    )
    for what, H, H_kv, D, D_v, q_lens, k_lens, causal in cases:
        q, k, v = torch.randn(sum(q_lens), H, D), torch.randn(sum(k_lens), H_kv, D), torch.randn(sum(k_lens), H_kv, D_v)
        cq, ck = (torch.tensor(cu_lengths(lens), dtype=torch.int32) for lens in (q_lens, k_lens))
        got = harness.expect_shape(attention(q, k, v, cq, ck, causal=causal), [sum(q_lens), H, D_v],
                                   _("varlen_attention ({what})").format(what=what))
        want = varlen64(q, k, v, q_lens, k_lens, causal)
        assert not torch.isnan(got).any(), _(
            "{what}: your output holds NaN; a query that sees no key returns zeros (a softmax over a row of -inf alone "
            "gives NaN)").format(what=what)
        if close(got.double(), want):
            continue
        assert not (causal and close(got.double(), varlen64(q, k, v, q_lens, k_lens, causal, top_left=True))), _(
            "{what}: your causal mask is top-left aligned (SDPA's is_causal=True); a sequence's queries are its last "
            "S_q positions: query i sees key j iff j <= i + S_k - S_q").format(what=what)
        assert not close(got.double(), varlen64(q, k, v, q_lens, k_lens, causal, tiled=True)), _(
            "{what}: your key/value heads are tiled (repeat); query head h reads kv head h // (H / H_kv) "
            "(repeat_interleave)").format(what=what)
        raise AssertionError(_("{what}: your output differs from attention per sequence by up to {gap:.2g} (each "
                               "sequence attends to its own keys only: rows cu_k[b]:cu_k[b+1])").format(
            what=what, gap=gap(got, want)))
    q, k, v = torch.randn(9, 2, 4), torch.randn(9, 2, 4), torch.randn(9, 2, 4)
    cu = torch.tensor([0, 3, 5, 9], dtype=torch.int32)
    before = attention(q, k, v, cu, cu, causal=True)
    moved = k.clone()
    moved[3:5] += 50
    after = attention(q, moved, v, cu, cu, causal=True)
    others = torch.tensor([True] * 3 + [False] * 2 + [True] * 4)
    assert close(after[others], before[others]), _(
        "moving sequence 1's keys by 50 changed the outputs of other sequences: each sequence attends only to its own "
        "keys")
    ok(_("varlen_attention: grouped heads, causal, chunks and S_q > S_k equal attention per sequence; sequences are "
         "isolated"))


# --------------------------------------------------------------------------- #
# 02 paged_cache
# --------------------------------------------------------------------------- #


@harness.check("BlockAllocator")
def check_block_allocator(BlockAllocator) -> None:
    pool = BlockAllocator(4)
    counts = [pool.refcount(b) for b in range(4)]
    assert counts == [0, 0, 0, 0], _("a new BlockAllocator(4) gives refcounts {counts}: no block has an owner before "
                                     "it is allocated, expected [0, 0, 0, 0]").format(counts=counts)
    ids = [pool.allocate() for _ in range(4)]
    assert sorted(ids) == [0, 1, 2, 3], _("4 allocations from BlockAllocator(4) gave {ids}: 4 distinct ids 0..3").format(
        ids=ids)
    assert pool.num_free == 0, _("num_free is {n} after every block was allocated, expected 0").format(n=pool.num_free)
    try:
        pool.allocate()
    except RuntimeError:
        pass
    else:
        raise AssertionError(_("allocate() with no free block should raise RuntimeError"))
    a = ids[0]
    pool.incref(a)
    assert pool.refcount(a) == 2, _("after incref, refcount is {n}, expected 2").format(n=pool.refcount(a))
    pool.free(a)
    assert pool.num_free == 0 and pool.refcount(a) == 1, _(
        "a block with two owners freed once still has an owner: it must not return to the pool")
    pool.free(a)
    assert pool.num_free == 1 and pool.refcount(a) == 0, _("a block whose last owner frees it returns to the pool")
    try:
        pool.free(a)
    except Exception:  # noqa: BLE001 - any error says "already free"
        pass
    else:
        raise AssertionError(_("freeing a free block should raise"))
    lru = BlockAllocator(4)
    first, second, third = lru.allocate(), lru.allocate(), lru.allocate()
    lru.free(second)
    lru.free(first)
    order = [lru.allocate(), lru.allocate(), lru.allocate()]
    never_used = ({0, 1, 2, 3} - {first, second, third}).pop()
    assert order == [never_used, second, first], _(
        "after freeing {second} then {first}, three allocations gave {order}: take the never-used block first, then "
        "the least recently freed (head of the queue out, tail in), expected {want}").format(
        second=second, first=first, order=order, want=[never_used, second, first])
    lru.free(third)
    lru.incref(third)
    assert lru.num_free == 0 and lru.refcount(third) == 1, _(
        "incref on a freed block takes it back out of the free queue (a prefix-cache hit on a freed block)")
    ok(_("BlockAllocator: distinct ids, exhaustion, refcounts, double free, LRU order, incref of a freed block"))


@harness.check("reshape_and_cache")
def check_reshape_and_cache(reshape_and_cache) -> None:
    write = harness.watch(reshape_and_cache, "reshape_and_cache")
    key, value = torch.randn(6, 2, 3), torch.randn(6, 2, 3)
    key_cache, value_cache = torch.randn(5, 4, 2, 3), torch.randn(5, 4, 2, 3)
    slots = torch.tensor([7, -1, 0, 13, -1, 17])
    want_k, want_v = key_cache.clone(), value_cache.clone()
    for i, slot in enumerate(slots.tolist()):
        if slot >= 0:
            want_k[slot // 4, slot % 4], want_v[slot // 4, slot % 4] = key[i], value[i]
    result = write(key, value, key_cache, value_cache, slots)
    assert result is None, _("reshape_and_cache writes in place and returns None")
    assert not (torch.equal(key_cache[4, 3], key[1]) or torch.equal(key_cache[4, 3], key[4])), _(
        "slot -1 was written into the last block's last row: a slot < 0 is a padding token and writes nothing")
    swapped = torch.equal(key_cache[7 % 5, 7 // 5], key[0])
    assert not swapped or torch.equal(key_cache, want_k), _(
        "token 0 (slot 7) landed in block 7 % num_blocks, row 7 // num_blocks: block and offset are swapped; block = "
        "slot // block_size, offset = slot % block_size")
    assert torch.equal(key_cache, want_k) and torch.equal(value_cache, want_v), _(
        "the caches differ from writing token i into block slot // block_size, row slot % block_size (every other "
        "row unchanged)")
    ok(_("reshape_and_cache: 4 tokens in their slots, two -1 slots skipped, every other slot unchanged"))


@harness.check("PagedKVCache")
def check_paged_kv_cache(PagedKVCache) -> None:
    cache = PagedKVCache(12, 4, 2, 3, num_layers=2)
    assert list(cache.k_cache.shape) == [2, 12, 4, 2, 3] and list(cache.v_cache.shape) == [2, 12, 4, 2, 3], _(
        "k_cache and v_cache of PagedKVCache(12, 4, 2, 3, num_layers=2) should be [2, 12, 4, 2, 3]")
    lengths, written = {"a": 8, "b": 4, "c": 10}, {}
    for name in lengths:
        cache.add_sequence(name)
    for n in (3, 2, 4, 1):
        for name, total in lengths.items():
            step = min(n, total - cache.seq_len(name))
            if step <= 0:
                continue
            start, before = cache.seq_len(name), cache.block_table(name)
            slots = torch.as_tensor(cache.reserve(name, step)).long()
            table = cache.block_table(name)
            assert table[:len(before)] == before, _(
                "reserve({name!r}, {n}) changed the blocks the sequence already had ({before} -> {table}): a sequence "
                "that owns its partly filled last block writes in place (only a shared one is copied)").format(
                name=name, n=step, before=before, table=table)
            want = [table[p // 4] * 4 + p % 4 for p in range(start, start + step)]
            assert slots.tolist() == want, _(
                "reserve({name!r}, {n}) returned slots {got}; with block table {table} the slots of positions "
                "{first}..{last} are table[p // block_size] * block_size + p % block_size = {want}").format(
                name=name, n=step, got=slots.tolist(), table=table, first=start, last=start + step - 1, want=want)
            kv = torch.randn(2, 2, step, 2, 3)  # keys, values
            cache.k_cache[:, slots // 4, slots % 4], cache.v_cache[:, slots // 4, slots % 4] = kv[0], kv[1]
            written[name] = torch.cat([written[name], kv], dim=2) if name in written else kv
    tables = [cache.block_table(name) for name in lengths]
    flat = [b for t in tables for b in t]
    assert len(flat) == len(set(flat)), _("the block tables {tables} share a block: each sequence needs its own").format(
        tables=tables)
    assert [len(t) for t in tables] == [2, 1, 3] and cache.blocks_used() == 6, _(
        "8, 4 and 10 tokens in blocks of 4 need 2, 1 and 3 blocks (6 in all); your tables {tables}, blocks_used() "
        "{used}").format(tables=tables, used=cache.blocks_used())
    for name in lengths:
        for layer in range(2):
            k, v = cache.gather(name, layer)
            assert torch.equal(k, written[name][0, layer]), _(
                "gather({name!r}, {layer}) does not return exactly the keys written at the sequence's slots").format(
                name=name, layer=layer)
            assert torch.equal(v, written[name][1, layer]), _(
                "gather({name!r}, {layer}) does not return exactly the values written at the sequence's slots "
                "[seq_len, H_kv, D]").format(name=name, layer=layer)
    lens = cache.seq_lens_tensor(list(lengths))
    assert isinstance(lens, torch.Tensor) and lens.tolist() == [8, 4, 10], _(
        "seq_lens_tensor(['a', 'b', 'c']) should be a tensor [8, 4, 10]")
    rows = cache.block_tables_tensor(["b", "c"])
    assert isinstance(rows, torch.Tensor) and not rows.is_floating_point() and rows.dim() == 2 and rows.shape[0] == 2 \
        and rows.shape[1] >= 3 and all(
        rows[i, :len(t)].tolist() == t for i, t in enumerate(tables[1:])), _(
        "block_tables_tensor(['b', 'c']) should be an integer tensor [2, at least 3]: row i starts with sequence i's "
        "block table")
    wide = PagedKVCache(2, 4, 2, 3, dtype=torch.float64)
    assert wide.k_cache.dtype == wide.v_cache.dtype == torch.float64, _(
        "PagedKVCache(..., dtype=torch.float64) made k_cache and v_cache of dtype {k}, {v}: the pool holds the dtype "
        "it is given").format(k=wide.k_cache.dtype, v=wide.v_cache.dtype)
    small = PagedKVCache(3, 4, 1, 2)
    small.add_sequence("x")
    small.reserve("x", 8)
    small.add_sequence("y")
    try:
        small.reserve("y", 8)
    except RuntimeError:
        pass
    else:
        raise AssertionError(_("reserve needing 2 blocks with 1 free should raise RuntimeError"))
    assert small.allocator.num_free == 1 and small.seq_len("y") == 0 and small.block_table("y") == [], _(
        "a reserve that does not fit must change nothing: {free} blocks free (expected 1), y holds {n} tokens in "
        "{table}").format(free=small.allocator.num_free, n=small.seq_len("y"), table=small.block_table("y"))
    small.free_sequence("x")
    assert small.allocator.num_free == 3, _("free_sequence should return every block of the sequence")
    ok(_("PagedKVCache: ragged interleaved appends over 2 layers (partial last blocks), slots from the table, 6 blocks; "
         "a reserve that does not fit changes nothing"))


# --------------------------------------------------------------------------- #
# 03 paged_attention
# --------------------------------------------------------------------------- #


def _paged_case(q_lens, seq_lens, H, H_kv, D, D_v, bs=4, pool=24):
    """A pool with NaN in every slot nobody may read, scattered tables padded with a NaN block, and the dense answer."""
    pages = [-(-n // bs) for n in seq_lens]
    order = torch.randperm(pool - 1).tolist()  # block pool - 1 stays NaN: table padding points there
    tables = [order[sum(pages[:b]):sum(pages[:b + 1])] for b in range(len(seq_lens))]
    k_cache, v_cache = torch.full((pool, bs, H_kv, D), float("nan")), torch.full((pool, bs, H_kv, D_v), float("nan"))
    keys, values = [], []
    for table, n in zip(tables, seq_lens):
        k, v = torch.randn(n, H_kv, D), torch.randn(n, H_kv, D_v)
        for p in range(n):
            k_cache[table[p // bs], p % bs], v_cache[table[p // bs], p % bs] = k[p], v[p]
        keys.append(k)
        values.append(v)
    padded = torch.tensor([t + [pool - 1] * (max(pages) + 1 - len(t)) for t in tables], dtype=torch.int32)
    q = torch.randn(sum(q_lens), H, D)
    cq = cu_lengths(q_lens)
    answers = {name: torch.cat([attend64(q[cq[b]:cq[b + 1]], keys[b], values[b], True, **mistake)
                                for b in range(len(q_lens))])
               for name, mistake in (("right", {}), ("top_left", {"top_left": True}), ("tiled", {"tiled": True}))}
    return q, k_cache, v_cache, padded, torch.tensor(seq_lens, dtype=torch.int32), answers


@harness.check("paged_attention")
def check_paged_attention(paged_attention) -> None:
    attention = harness.watch(paged_attention, "paged_attention")
    runs = (
        (_("decoding, grouped heads 6/2"), [1, 1, 1], [5, 8, 3], 6, 2, 8, 8, False),
        (_("decoding with cu_seqlens_q = arange"), [1, 1, 1], [5, 8, 3], 6, 2, 8, 8, True),
        (_("one mixed call: chunks [3, 1, 5, 4, 1] of [7, 1, 12, 4, 9], MQA 4/1, D_v = 6"),
         [3, 1, 5, 4, 1], [7, 1, 12, 4, 9], 4, 1, 4, 6, True),
    )
    for what, q_lens, seq_lens, H, H_kv, D, D_v, explicit in runs:
        q, k_cache, v_cache, tables, lens, answers = _paged_case(q_lens, seq_lens, H, H_kv, D, D_v)
        cu = torch.tensor(cu_lengths(q_lens), dtype=torch.int32) if explicit else None
        got = harness.expect_shape(attention(q, k_cache, v_cache, tables, lens, cu), [sum(q_lens), H, D_v],
                                   _("paged_attention ({what})").format(what=what))
        assert not torch.isnan(got).any(), _(
            "{what}: your output holds NaN: you read slots past seq_len (the rest of a partly filled last block) or "
            "blocks that table padding points to; read the first ceil(seq_len / block_size) blocks and the first "
            "seq_len slots only").format(what=what)
        if close(got.double(), answers["right"]):
            continue
        assert not close(got.double(), answers["top_left"]), _(
            "{what}: your queries sit at positions 0 .. q_len - 1 (top-left); sequence b's queries are its last q_len "
            "positions").format(what=what)
        assert not close(got.double(), answers["tiled"]), _(
            "{what}: your key/value heads are tiled; query head h reads kv head h // (H / H_kv)").format(what=what)
        raise AssertionError(_("{what}: your output differs from dense attention over each sequence's blocks by up to "
                               "{gap:.2g}").format(what=what, gap=gap(got, answers["right"])))
    ok(_("paged_attention: decoding (grouped heads, NaN in unused slots) and one mixed call of chunks equal dense "
         "attention per sequence"))


@harness.check("paged_to_csr")
def check_paged_to_csr(paged_to_csr) -> None:
    tables = torch.tensor([[5, 2, 9], [7, 0, 0], [1, 3, 6]], dtype=torch.int32)
    got = harness.watch(paged_to_csr, "paged_to_csr")(tables, torch.tensor([10, 4, 9], dtype=torch.int32), 4)
    assert isinstance(got, tuple) and len(got) == 3, _("paged_to_csr returns three tensors: (kv_indptr, kv_indices, "
                                                       "kv_last_page_len)")
    indptr, indices, last = (harness.expect_tensor(t, name) for t, name in
                             zip(got, ("kv_indptr", "kv_indices", "kv_last_page_len")))
    assert indptr.tolist() == [0, 3, 4, 7] and indices.tolist() == [5, 2, 9, 7, 1, 3, 6], _(
        "seq_lens [10, 4, 9], blocks of 4: kv_indptr {indptr} (expected [0, 3, 4, 7]), kv_indices {indices} (expected "
        "[5, 2, 9, 7, 1, 3, 6]): each sequence's ceil(seq_len / block_size) pages, one after another").format(
        indptr=indptr.tolist(), indices=indices.tolist())
    assert 0 not in last.tolist(), _(
        "kv_last_page_len holds 0 for a full last page: 1 <= last_page_len <= block_size, so a full page holds "
        "block_size, not seq_len % block_size")
    assert last.tolist() == [2, 4, 1], _("kv_last_page_len is {got}, expected [2, 4, 1]").format(got=last.tolist())
    assert all(t.dtype == torch.int32 for t in (indptr, indices, last)), _("paged_to_csr returns int32 tensors")
    wide = paged_to_csr(tables.long(), torch.tensor([10, 4, 9]), 4)
    assert all(t.dtype == torch.int32 for t in wide), _(
        "paged_to_csr of int64 tables and seq_lens should still return int32 tensors")
    ok(_("paged_to_csr: indptr, indices and last page lengths (a full last page holds block_size), int32"))


(check_block_hashes, check_prefix_caching, check_paged_decoder_attention, check_continuous_batching,
 check_static_batching) = batching_checks(harness, close, ok)
check_sink_kv_cache, check_sink_decoder_attention = sink_checks(harness, close, ok)


# --------------------------------------------------------------------------- #
# Graded cells
# --------------------------------------------------------------------------- #


# The check cells above each graded cell, which nbgrader's Validate runs again (see graded_cells.py).
PART_CHECKS = {
    "varlen": ("check_cu_seqlens(cu_seqlens)", "check_pack(pack)", "check_unpack(unpack)",
               "check_varlen_attention(varlen_attention)"),
    "paged_cache": ("check_block_allocator(BlockAllocator)", "check_reshape_and_cache(reshape_and_cache)",
                    "check_paged_kv_cache(PagedKVCache)"),
    "paged_attention": ("check_paged_attention(paged_attention)", "check_paged_to_csr(paged_to_csr)"),
    "prefix_sharing": ("check_block_hashes(block_hashes)", "check_prefix_caching(PagedKVCache)"),
    "continuous_batching": ("check_paged_decoder_attention(PagedDecoderAttention)",
                            "check_continuous_batching(continuous_batching_generate, PagedDecoderAttention, PagedKVCache)",
                            "check_static_batching(static_batching_generate, PagedDecoderAttention, PagedKVCache)"),
    "attention_sinks": ("check_sink_kv_cache(SinkKVCache)",
                        "check_sink_decoder_attention(SinkDecoderAttention, SinkKVCache)"),
}


# The notebook of each part (the command that grades one notebook names it).
PART_NOTEBOOKS = {"varlen": "01_varlen", "paged_cache": "02_paged_cache", "paged_attention": "03_paged_attention",
                  "prefix_sharing": "04_prefix_sharing", "continuous_batching": "05_continuous_batching",
                  "attention_sinks": "06_attention_sinks"}


graded_part = harness.graded_part(
    PART_CHECKS, globals(), ".venv/bin/python -m autograder grade workspace/serving{suffix}/{notebook}.ipynb",
    PART_NOTEBOOKS)
