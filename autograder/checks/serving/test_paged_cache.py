"""Hidden checks for part paged_cache (assignment serving): BlockAllocator, reshape_and_cache, PagedKVCache.

The allocator: distinct ids, exhaustion, reference counts, reuse in LRU order (never-used blocks first, then the least
recently freed), a double free. reshape_and_cache against a slot-by-slot loop, with two -1 slots, every other slot
unchanged. A PagedKVCache driven like a server: interleaved ragged appends to three sequences over two layers (block
size 4, lengths 8, 4, 10), each written at the slots it returned with plain torch (never the student's
reshape_and_cache); a reserve that does not fit raises and changes nothing; freed blocks are reused without their old
keys. Every step of a sequence runs in one job per check; all the part's jobs travel in one round trip.
"""
import pytest
import torch

from autograder.checks import expect
from autograder.checks.cases import Ran, send, seeded
from autograder.checks.serving.common import BLOCK_SIZE, attribute, int_list, randn, slots_of, write
from autograder.foundation import i18n

_ = i18n.message

H_KV, D, LAYERS = 2, 3, 2
APPENDS = [("a", 3), ("b", 4), ("c", 5), ("a", 5), ("c", 5)]  # lengths 8, 4, 10: partial last blocks while they grow
SLOTS = torch.tensor([13, -1, 2, 9, -1, 7, 0])  # reshape_and_cache: two padding tokens, and slot 0
RC_BLOCKS = 5


def _allocator_jobs(student) -> dict:
    checks = {}
    job = student.job()
    a = job.new("BlockAllocator", 5)
    checks["distinct"] = (job, {"ids": [job.method(a, "allocate") for _ in range(5)],
                                "free": attribute(job, a, "num_free")}, None)
    job = student.job()
    a = job.new("BlockAllocator", 3)
    for _i in range(3):
        job.method(a, "allocate")
    checks["exhausted"] = (job, {"raised": job.builtin_value("attempt", attribute(job, a, "allocate"),
                                                             label="BlockAllocator.allocate")}, None)
    job = student.job()
    a = job.new("BlockAllocator", 4)
    untouched = job.method(a, "refcount", 3)
    b = job.method(a, "allocate")
    steps = {"untouched": untouched, "incref": job.method(a, "incref", b), "two": job.method(a, "refcount", b),
             "free": job.method(a, "free", b), "one": job.method(a, "refcount", b),
             "free one": attribute(job, a, "num_free")}
    job.method(a, "free", b)
    steps["zero"], steps["free all"] = job.method(a, "refcount", b), attribute(job, a, "num_free")
    checks["refcounts"] = (job, steps, None)
    job = student.job()
    a = job.new("BlockAllocator", 4)
    x = [job.method(a, "allocate") for _ in range(4)]
    job.method(a, "free", x[2])
    job.method(a, "free", x[0])
    steps = {"x": x, "first": job.method(a, "allocate"), "second": job.method(a, "allocate")}
    job.method(a, "free", x[1])
    job.method(a, "incref", x[1])
    steps["revived"] = job.method(a, "refcount", x[1])
    steps["after"] = attribute(job, a, "num_free")
    checks["reuse"] = (job, steps, None)
    job = student.job()
    a = job.new("BlockAllocator", 3)
    b = job.method(a, "allocate")
    job.method(a, "free", b)
    checks["double free"] = (job, {"raised": job.builtin_value("attempt", attribute(job, a, "free"), b,
                                                               label="BlockAllocator.free")}, None)
    return checks


def _reshape_job(student):
    g = seeded(3)
    key, value = randn(g, len(SLOTS), H_KV, D), randn(g, len(SLOTS), H_KV, D)
    k_cache, v_cache = randn(g, RC_BLOCKS, BLOCK_SIZE, H_KV, D), randn(g, RC_BLOCKS, BLOCK_SIZE, H_KV, D)
    job = student.job()
    fn = job.fetch("reshape_and_cache")
    out = job.builtin_value("written_by", fn, key, value, k_cache, v_cache, SLOTS, label="reshape_and_cache")
    return job, {"value": out}, (key, value, k_cache, v_cache)


def _appends_job(student):
    g = seeded(4)
    job = student.job()
    cache = job.new("PagedKVCache", 8, BLOCK_SIZE, H_KV, D, num_layers=LAYERS)
    for seq in "abc":
        job.method(cache, "add_sequence", seq)
    written, reserves = {s: [[], []] for s in "abc"}, []
    for seq, n in APPENDS:
        slots = job.method(cache, "reserve", seq, n)
        reserves.append(slots)
        for layer in range(LAYERS):
            k, v = randn(g, n, H_KV, D), randn(g, n, H_KV, D)
            write(job, cache, slots, layer, k, v)
            written[seq][layer].append((k, v))
    steps = {"reserves": reserves,
             "tables": {s: job.method(cache, "block_table", s) for s in "abc"},
             "lens": {s: job.method(cache, "seq_len", s) for s in "abc"},
             "gather": {(s, layer): job.method(cache, "gather", s, layer) for s in "abc" for layer in range(LAYERS)},
             "used": job.method(cache, "blocks_used"),
             "tables tensor": job.method(cache, "block_tables_tensor", ["b", "c"]),
             "lens tensor": job.method(cache, "seq_lens_tensor", ["a", "b", "c"])}
    return job, steps, written


def _pools_job(student):
    """A pool made with dtype=torch.float64 (a job of its own: a constructor that refuses dtype costs this check only)."""
    job = student.job()
    wide = job.new("PagedKVCache", 2, BLOCK_SIZE, H_KV, D, dtype=torch.float64)
    return job, {"k": attribute(job, wide, "k_cache"), "v": attribute(job, wide, "v_cache")}, None


def _full_jobs(student) -> dict:
    """A pool of 5 blocks filled by a (9 tokens) and b (6): a reserve of a that needs one more block; then b freed
    and d given 5 tokens. And a pool of 6 with one block free, a reserve that needs two."""
    g = seeded(5)
    checks = {}
    job = student.job()
    cache = job.new("PagedKVCache", 5, BLOCK_SIZE, 1, 2)
    for seq, n in (("a", 9), ("b", 6)):
        job.method(cache, "add_sequence", seq)
        write(job, cache, job.method(cache, "reserve", seq, n), 0, randn(g, n, 1, 2), randn(g, n, 1, 2))
    before = {"table": job.method(cache, "block_table", "a"), "len": job.method(cache, "seq_len", "a"),
              "free": attribute(job, attribute(job, cache, "allocator"), "num_free")}
    raised = job.builtin_value("attempt", attribute(job, cache, "reserve"), "a", 4, label="PagedKVCache.reserve")
    after = {"table": job.method(cache, "block_table", "a"), "len": job.method(cache, "seq_len", "a"),
             "free": attribute(job, attribute(job, cache, "allocator"), "num_free")}
    old = job.method(cache, "block_table", "b")
    job.method(cache, "free_sequence", "b")
    job.method(cache, "add_sequence", "d")
    k, v = randn(g, 5, 1, 2), randn(g, 5, 1, 2)
    write(job, cache, job.method(cache, "reserve", "d", 5), 0, k, v)
    checks["full"] = (job, {"before": before, "raised": raised, "after": after, "old": old,
                            "new": job.method(cache, "block_table", "d"), "gather": job.method(cache, "gather", "d")},
                      (k, v))
    job = student.job()
    cache = job.new("PagedKVCache", 6, BLOCK_SIZE, 1, 2)
    for seq, n in (("a", 9), ("b", 6)):
        job.method(cache, "add_sequence", seq)
        job.method(cache, "reserve", seq, n)
    raised = job.builtin_value("attempt", attribute(job, cache, "reserve"), "a", 8, label="PagedKVCache.reserve")
    checks["leak"] = (job, {"raised": raised, "free": attribute(job, attribute(job, cache, "allocator"), "num_free"),
                            "table": job.method(cache, "block_table", "a"), "len": job.method(cache, "seq_len", "a")},
                      None)
    return checks


def ran(student) -> dict[str, Ran]:
    def build():
        checks = _allocator_jobs(student)
        checks["reshape"] = _reshape_job(student)
        checks["appends"] = _appends_job(student)
        checks["pools"] = _pools_job(student)
        return send(student, checks | _full_jobs(student))
    return student.once("serving paged_cache", build)


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) and not (
            isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point()):
        raise expect.CheckFailure(_("{what} should return an int, got {kind}").format(what=what,
                                                                                     kind=type(value).__name__))
    return int(value)


def _raised(value, what: str, kind: str | None = None) -> None:
    if value is None:
        raise expect.CheckFailure(_("{what} should raise, and returned").format(what=what))
    if kind is not None and value != kind:
        raise expect.CheckFailure(_("{what} should raise {kind}, raised {got}").format(what=what, kind=kind, got=value))


@pytest.mark.points(1)
def test_allocator_hands_out_distinct_blocks(student):
    """BlockAllocator(5) hands out 5 distinct block ids in 0..4, then none is free"""
    run = ran(student)["distinct"]
    ids = [_int(run.result[step], "BlockAllocator.allocate()") for step in run.steps["ids"]]
    if sorted(ids) != list(range(5)):
        raise expect.CheckFailure(_("BlockAllocator(5).allocate() five times gave {ids}: expected the 5 distinct "
                                    "blocks 0..4").format(ids=ids))
    if _int(run.value("free"), "num_free") != 0:
        raise expect.CheckFailure(_("after 5 allocations of 5 blocks, num_free is {n}, expected 0").format(
            n=run.value("free")))


@pytest.mark.points(1)
def test_allocator_raises_when_exhausted(student):
    """allocate() on an exhausted pool raises RuntimeError"""
    _raised(ran(student)["exhausted"].value("raised"), "allocate() with no free block", "RuntimeError")


@pytest.mark.points(1)
def test_allocator_counts_owners(student):
    """incref adds an owner, free removes one; a block joins the free queue only when its last owner frees it"""
    run = ran(student)["refcounts"]
    if _int(run.value("untouched"), "refcount") != 0:
        raise expect.CheckFailure(_("a block that was never allocated has refcount {n}: every count starts at 0").format(
            n=run.value("untouched")))
    got = [_int(run.value(k), "refcount / num_free") for k in ("two", "one", "free one")]
    if got[2] == 4 or got[1] == 0:
        raise expect.CheckFailure(_("a block with two owners went back to the free queue when one of them freed it: "
                                    "free removes one owner, and only a block whose count reaches 0 is free again"))
    got += [_int(run.value(k), "refcount / num_free") for k in ("zero", "free all")]
    if got == [2, 1, 3, 0, 4]:
        return
    raise expect.CheckFailure(_("allocate, incref, free, free: refcounts {a}, {b}, {c} and num_free {d}, {e}; "
                                "expected 2, 1, 0 and 3, 4").format(a=got[0], b=got[1], c=got[3], d=got[2], e=got[4]))


@pytest.mark.points(1)
def test_allocator_reuses_the_least_recently_freed_block_first(student):
    """freed blocks join the tail of the free queue: allocate takes the least recently freed first; incref revives a freed block"""
    run = ran(student)["reuse"]
    x = [_int(run.result[s], "allocate()") for s in run.steps["x"]]
    first, second = _int(run.value("first"), "allocate()"), _int(run.value("second"), "allocate()")
    if (first, second) == (x[0], x[2]):
        raise expect.CheckFailure(_("a LIFO free list: after freeing block {a} then block {b}, allocate gave {b} "
                                    "first. Freed blocks join the TAIL of the queue and allocate takes its HEAD "
                                    "(vLLM's LRU order: the freshest prefix is evicted last)").format(a=x[2], b=x[0]))
    if (first, second) != (x[2], x[0]):
        raise expect.CheckFailure(_("after freeing block {a} then block {b}, allocate gave {c} then {d}: expected {a} "
                                    "then {b} (least recently freed first)").format(a=x[2], b=x[0], c=first, d=second))
    if _int(run.value("revived"), "refcount") != 1 or _int(run.value("after"), "num_free") != 0:
        raise expect.CheckFailure(_("incref on a freed block (a prefix-cache hit) must take it back out of the free "
                                    "queue with refcount 1"))


@pytest.mark.points(1)
def test_allocator_refuses_a_double_free(student):
    """freeing a block that is already free raises"""
    _raised(ran(student)["double free"].value("raised"), "free() of a free block")


def _reshape_expected(key, value, k_cache, v_cache, slots, swapped: bool = False, negative: bool = False):
    kc, vc = k_cache.clone(), v_cache.clone()
    for i, slot in enumerate(slots.tolist()):
        if slot < 0 and not negative:
            continue
        block, offset = (slot % BLOCK_SIZE, slot // BLOCK_SIZE) if swapped else (slot // BLOCK_SIZE,
                                                                                 slot % BLOCK_SIZE)
        kc[block, offset], vc[block, offset] = key[i], value[i]
    return kc, vc


def _reshape_result(student):
    run = ran(student)["reshape"]
    got = run.value()
    if not (isinstance(got, tuple) and len(got) == 5):
        raise expect.CheckFailure(_("reshape_and_cache could not be called"))
    return got[2], got[3], run.inputs


@pytest.mark.points(3)
def test_reshape_and_cache_writes_each_token_at_its_slot(student):
    """reshape_and_cache writes token i at block slot // block_size, offset slot % block_size, like a slot-by-slot loop"""
    kc, vc, (key, value, k_cache, v_cache) = _reshape_result(student)
    want_k, want_v = _reshape_expected(key, value, k_cache, v_cache, SLOTS)
    real = SLOTS >= 0
    for got, want, name in ((kc, want_k, "key_cache"), (vc, want_v, "value_cache")):
        flat_got, flat_want = got.reshape(-1, H_KV, D), want.reshape(-1, H_KV, D)
        expect.close(flat_got[SLOTS[real]], flat_want[SLOTS[real]],
                     "{name} at slots {slots} after reshape_and_cache".format(name=name, slots=SLOTS[real].tolist()),
                     mistakes={_("block and offset swapped: block = slot // block_size, offset = slot % block_size"):
                               lambda i=int(name == "value_cache"): _reshape_expected(
                                   key, value, k_cache, v_cache, SLOTS, swapped=True)[i].reshape(-1, H_KV, D)[
                                   SLOTS[real]]})


@pytest.mark.points(2)
def test_reshape_and_cache_skips_padding_slots(student):
    """a slot of -1 (a padding token) writes nothing, and every slot not named keeps its value"""
    kc, vc, (key, value, k_cache, v_cache) = _reshape_result(student)
    want_k, want_v = _reshape_expected(key, value, k_cache, v_cache, SLOTS)
    neg_k, _neg_v = _reshape_expected(key, value, k_cache, v_cache, SLOTS, negative=True)
    for got, want in ((kc, want_k), (vc, want_v)):
        got = expect.shape(got, want.shape, "reshape_and_cache's key_cache")
        if not expect.same(got, want, atol=0, rtol=0):
            if got is kc and expect.same(got, neg_k, atol=0, rtol=0):
                raise expect.CheckFailure(_("a slot of -1 wrote its token into the last row of the last block (Python's "
                                            "negative indexing): a slot < 0 is a padding token and writes nothing"))
            raise expect.CheckFailure(_("reshape_and_cache changed slots it was not given, or wrote the wrong "
                                        "ones: only the slots >= 0 of slot_mapping change"))


def _appends(student):
    run = ran(student)["appends"]
    tables = {s: int_list(run.result[step], "PagedKVCache.block_table") for s, step in run.steps["tables"].items()}
    return run, tables


@pytest.mark.points(2)
def test_reserve_returns_the_slots_of_the_block_table(student):
    """reserve's slots are block_table[p // block_size] * block_size + p % block_size for the next positions p"""
    run, tables = _appends(student)
    start = {s: 0 for s in "abc"}
    for (seq, n), step in zip(APPENDS, run.steps["reserves"]):
        got = int_list(run.result[step], "PagedKVCache.reserve")
        want = slots_of(tables[seq], start[seq], n) if len(tables[seq]) * BLOCK_SIZE >= start[seq] + n else None
        if got != want:
            raise expect.CheckFailure(_("reserve({seq!r}, {n}) at length {start} gave slots {got}; its block table "
                                        "{table} gives {want}").format(seq=seq, n=n, start=start[seq], got=got,
                                                                      table=tables[seq], want=want))
        start[seq] += n
    lens = {s: _int(run.result[step], "seq_len") for s, step in run.steps["lens"].items()}
    if lens != {"a": 8, "b": 4, "c": 10}:
        raise expect.CheckFailure(_("seq_len after the appends is {got}, expected a: 8, b: 4, c: 10").format(got=lens))


@pytest.mark.points(2)
def test_gather_returns_exactly_what_was_written(student):
    """gather(seq, layer) returns every key and value written at the sequence's slots, layer by layer"""
    run, _tables = _appends(student)
    for (seq, layer), step in run.steps["gather"].items():
        got = run.result[step]
        if not (isinstance(got, tuple) and len(got) == 2):
            raise expect.CheckFailure(_("gather should return (k, v)"))
        k = torch.cat([k for k, _v in run.inputs[seq][layer]])
        v = torch.cat([v for _k, v in run.inputs[seq][layer]])
        what = "gather({seq!r}, layer={layer})".format(seq=seq, layer=layer)
        expect.close(got[0], k, what + " keys", atol=0, rtol=0)
        expect.close(got[1], v, what + " values", atol=0, rtol=0)


@pytest.mark.points(2)
def test_tables_are_disjoint_and_blocks_counted(student):
    """three sequences' tables are disjoint, blocks_used counts 6 blocks (2 + 1 + 3), the tables and lengths tensors agree; a pool made with dtype=torch.float64 holds float64"""
    run, tables = _appends(student)
    used = [b for s in "abc" for b in tables[s]]
    if len(set(used)) != len(used):
        raise expect.CheckFailure(_("two sequences' block tables share a block: {tables}").format(tables=tables))
    if [len(tables[s]) for s in "abc"] != [2, 1, 3]:
        raise expect.CheckFailure(_("lengths 8, 4, 10 in blocks of 4 need 2, 1 and 3 blocks; the tables are "
                                    "{tables}").format(tables=tables))
    if _int(run.value("used"), "blocks_used()") != 6:
        raise expect.CheckFailure(_("blocks_used() is {n}, expected 6").format(n=run.value("used")))
    bt = run.value("tables tensor")
    if not isinstance(bt, torch.Tensor) or bt.dim() != 2 or bt.shape[0] != 2 or bt.shape[1] < 3 or any(
            bt[i, :len(tables[s])].tolist() != tables[s] for i, s in enumerate("bc")):
        raise expect.CheckFailure(_("block_tables_tensor(['b', 'c']) should be [2, at least 3]: each sequence's table "
                                    "in its row, padded"))
    if bt.is_floating_point() or bt.dtype == torch.bool:
        raise expect.CheckFailure(_("block_tables_tensor returned dtype {dtype}: block ids are integers (int32)").format(
            dtype=bt.dtype))
    lens = run.value("lens tensor")
    if not isinstance(lens, torch.Tensor) or int_list(lens, "seq_lens_tensor") != [8, 4, 10]:
        raise expect.CheckFailure(_("seq_lens_tensor(['a', 'b', 'c']) should be [8, 4, 10]"))
    pools = [ran(student)["pools"].value(name) for name in ("k", "v")]
    if not all(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in pools):
        raise expect.CheckFailure(_("PagedKVCache(..., dtype=torch.float64) made k_cache and v_cache of dtype {got}: "
                                    "the pool holds the dtype it is given").format(
            got=", ".join(str(getattr(t, "dtype", type(t).__name__)) for t in pools)))


@pytest.mark.points(2)
def test_a_reserve_that_does_not_fit_raises_and_changes_nothing(student):
    """a reserve that the free blocks cannot cover raises RuntimeError and changes no table, length or free count"""
    checks = ran(student)
    run = checks["full"]
    _raised(run.value("raised"), "reserve of a block more than the pool holds", "RuntimeError")
    before, after = ({k: run.result[step] for k, step in run.steps[key].items()} for key in ("before", "after"))
    if before != after:
        raise expect.CheckFailure(_("the failed reserve changed the sequence or the pool: before {a}, after {b}").format(
            a=before, b=after))
    run = checks["leak"]
    _raised(run.value("raised"), "reserve of two blocks with one free", "RuntimeError")
    if _int(run.value("free"), "num_free") != 1 or _int(run.value("len"), "seq_len") != 9:
        raise expect.CheckFailure(_("a reserve that needs two blocks with one free raised but leaked: num_free is {n} "
                                    "(expected 1). Check that the free blocks suffice BEFORE allocating any").format(
            n=run.value("free")))


@pytest.mark.points(2)
def test_freed_blocks_are_reused_without_their_old_keys(student):
    """after free_sequence, a new sequence gets the freed blocks and reads only its own keys"""
    run = ran(student)["full"]
    old, new = int_list(run.value("old"), "block_table"), int_list(run.value("new"), "block_table")
    if sorted(new) != sorted(old):
        raise expect.CheckFailure(_("the pool was full: after free_sequence('b') (blocks {old}), the new sequence "
                                    "should get those blocks, got {new}").format(old=old, new=new))
    k, v = run.inputs
    got = run.value("gather")
    if not (isinstance(got, tuple) and len(got) == 2):
        raise expect.CheckFailure(_("gather should return (k, v)"))
    expect.close(got[0], k, "gather('d') keys after reusing b's blocks", atol=0, rtol=0)
    expect.close(got[1], v, "gather('d') values after reusing b's blocks", atol=0, rtol=0)
