"""Hidden checks for part prefix_sharing (assignment serving): block_hashes and PagedKVCache's prefix cache, fork and
copy-on-write.

Hashes: only full blocks, a longer prompt extends its prefix's hashes, a change in block 0 changes every later hash,
the same tokens after another prefix hash differently (only equality is graded, never a value). Prefix hits: an
11-token prompt A and a 12-token prompt B sharing 9 tokens (B hits 8, A's first two blocks shared with refcount 2,
B's writes leave A intact), an 8-token fully cached prompt hits 4 (its last token is always computed), a changed first
token misses. Fork and copy-on-write over two layers. LRU and lazy eviction. PagedKVCache is graded in paged_cache
too: a paging mistake (slots, tables, allocator) can fail checks of both parts.
"""
import pytest
import torch

from autograder.checks import expect
from autograder.checks.cases import Cases, Ran, send, seeded
from autograder.checks.serving.common import BLOCK_SIZE, attribute, int_list, randn, write
from autograder.foundation import i18n
from autograder.sandbox.batch import Call

_ = i18n.message

PROMPT_A = [5, 9, 2, 7, 1, 3, 8, 6, 4, 0, 11]  # 11 tokens: two full blocks and a partial one
PROMPT_B = PROMPT_A[:9] + [12, 13, 14]  # shares 9 tokens: two full blocks
FORK_POOL, FORK_LEN = 8, 10  # the fork: a parent of two full blocks and a partial third
HASHED = {
    "ten": list(range(10)), "thirteen": list(range(13)), "eight": list(range(8)), "seven": list(range(7)),
    "changed": [99] + list(range(1, 10)), "after 7": [7, 7, 7, 7, 1, 2, 3, 4], "after 8": [8, 8, 8, 8, 1, 2, 3, 4],
}
HASHES = Cases("serving prefix hashes", {**{case: (lambda g, t=tokens: Call("block_hashes", t, BLOCK_SIZE))
                                            for case, tokens in HASHED.items()},
                                         "ten tensor": lambda g: Call("block_hashes", torch.arange(10), BLOCK_SIZE)})


def _hashes(student, case: str) -> list:
    got = expect.value(HASHES.get(student, case)[1])
    if not isinstance(got, (list, tuple)):
        raise expect.CheckFailure(_("block_hashes should return a list, got {kind}").format(kind=type(got).__name__))
    return list(got)


@pytest.mark.points(3)
def test_block_hashes_are_chained_over_full_blocks(student):
    """block_hashes: one hash per full block, a longer prompt extends its prefix's hashes, each hash depends on every block before it"""
    counts = {case: len(_hashes(student, case)) for case in ("ten", "eight", "seven")}
    if counts != {"ten": 2, "eight": 2, "seven": 1}:
        if counts == {"ten": 3, "eight": 2, "seven": 2}:
            raise expect.CheckFailure(_("the partly filled last block got a hash: only FULL blocks are hashed (its "
                                        "tokens will still change)"))
        raise expect.CheckFailure(_("10, 8 and 7 tokens in blocks of 4 have 2, 2 and 1 full blocks; block_hashes gave "
                                    "{a}, {b} and {c} hashes").format(a=counts["ten"], b=counts["eight"],
                                                                     c=counts["seven"]))
    ten = _hashes(student, "ten")
    if _hashes(student, "ten tensor") != ten:
        raise expect.CheckFailure(_("block_hashes of a 1-D tensor of token ids differs from that of the same ids in a "
                                    "list: hash Python ints (int(t)), not tensors (a tensor hashes by its identity)"))
    if _hashes(student, "thirteen")[:2] != ten:
        raise expect.CheckFailure(_("a longer prompt's first hashes must equal its prefix's: block_hashes of 13 "
                                    "tokens does not start with those of its first 10"))
    if _hashes(student, "after 7")[1] == _hashes(student, "after 8")[1]:
        raise expect.CheckFailure(_("unchained hashes: the same block after a different prefix hashed the same. "
                                    "h_i = hash((h_{i-1}, tuple(block_i))): each hash includes the previous one"))
    changed = _hashes(student, "changed")
    if any(a == b for a, b in zip(changed, ten)):
        raise expect.CheckFailure(_("changing the first token left a later block's hash unchanged: every hash must "
                                    "depend on every block before it (chain them)"))


def _hit_job(student):
    g = seeded(6)
    job = student.job()
    cache = job.new("PagedKVCache", 10, BLOCK_SIZE, 1, 2, enable_prefix_caching=True)
    steps = {"A": job.method(cache, "add_sequence", "A", PROMPT_A)}
    ka, va = randn(g, 11, 1, 2), randn(g, 11, 1, 2)
    for start, stop in ((0, 5), (5, 11)):  # in two chunks, as a chunked prefill reserves them
        write(job, cache, job.method(cache, "reserve", "A", stop - start, token_ids=PROMPT_A[start:stop]), 0,
              ka[start:stop], va[start:stop])
    steps["B"] = job.method(cache, "add_sequence", "B", PROMPT_B)
    steps["table A"], steps["table B"] = job.method(cache, "block_table", "A"), job.method(cache, "block_table", "B")
    steps["refcount"] = job.method(attribute(job, cache, "allocator"), "refcount", steps["table A"][0])
    write(job, cache, job.method(cache, "reserve", "B", 4, token_ids=PROMPT_B[8:]), 0, randn(g, 4, 1, 2),
          randn(g, 4, 1, 2))
    steps["gather A"] = job.method(cache, "gather", "A")
    steps["C"] = job.method(cache, "add_sequence", "C", PROMPT_A[:8])
    steps["E"] = job.method(cache, "add_sequence", "E", PROMPT_A[:9])
    steps["D"] = job.method(cache, "add_sequence", "D", [PROMPT_A[0] + 1] + PROMPT_A[1:])
    return job, steps, (ka, va)


def _fork_job(student):
    g = seeded(7)
    job = student.job()
    cache = job.new("PagedKVCache", FORK_POOL, BLOCK_SIZE, 1, 2, num_layers=2)
    job.method(cache, "add_sequence", "p")
    parent = [(randn(g, FORK_LEN, 1, 2), randn(g, FORK_LEN, 1, 2)) for _ in range(2)]
    slots = job.method(cache, "reserve", "p", FORK_LEN)
    for layer, (k, v) in enumerate(parent):
        write(job, cache, slots, layer, k, v)
    job.method(cache, "fork", "p", "c")
    steps = {"parent table": job.method(cache, "block_table", "p"), "child table": job.method(cache, "block_table", "c")}
    steps["refcount"] = job.method(attribute(job, cache, "allocator"), "refcount", steps["parent table"][-1])
    child_token = [(randn(g, 1, 1, 2), randn(g, 1, 1, 2)) for _ in range(2)]
    slots = job.method(cache, "reserve", "c", 1)
    for layer, (k, v) in enumerate(child_token):
        write(job, cache, slots, layer, k, v)
    parent_token = [(randn(g, 1, 1, 2), randn(g, 1, 1, 2)) for _ in range(2)]
    slots = job.method(cache, "reserve", "p", 1)
    for layer, (k, v) in enumerate(parent_token):
        write(job, cache, slots, layer, k, v)
    steps["child after"] = job.method(cache, "block_table", "c")
    steps["parent after"] = job.method(cache, "block_table", "p")
    steps["free"] = attribute(job, attribute(job, cache, "allocator"), "num_free")
    for seq in "pc":
        for layer in range(2):
            steps[(seq, layer)] = job.method(cache, "gather", seq, layer)
    return job, steps, (parent, child_token, parent_token)


def _fork_full_job(student):
    """A parent whose last block is full: the child's append goes to a new block, nothing is copied."""
    job = student.job()
    cache = job.new("PagedKVCache", 6, BLOCK_SIZE, 1, 2)
    job.method(cache, "add_sequence", "p")
    job.method(cache, "reserve", "p", 8)
    job.method(cache, "fork", "p", "c")
    job.method(cache, "reserve", "c", 1)
    return job, {"parent": job.method(cache, "block_table", "p"), "child": job.method(cache, "block_table", "c"),
                 "free": attribute(job, attribute(job, cache, "allocator"), "num_free")}, None


def _fork_short_job(student):
    """A pool of 4: a parent of 10 tokens (3 blocks, the last partial), forked; the child's 3 new tokens need the copy
    of the shared partial block and one new block, and 1 block is free: the reserve raises and changes nothing. First
    a plain reserve that does not fit (no copy): a reserve that changes things whenever it fails is paged_cache's
    mistake, graded there, so the copy is judged only when that one is clean."""
    job = student.job()
    cache = job.new("PagedKVCache", 4, BLOCK_SIZE, 1, 2)
    job.method(cache, "add_sequence", "p")
    job.method(cache, "reserve", "p", FORK_LEN)
    plain = {"plain raised": job.builtin_value("attempt", attribute(job, cache, "reserve"), "p", FORK_LEN,
                                               label="PagedKVCache.reserve"),
             "plain len": job.method(cache, "seq_len", "p"),
             "plain free": attribute(job, attribute(job, cache, "allocator"), "num_free")}
    job.method(cache, "fork", "p", "c")
    raised = job.builtin_value("attempt", attribute(job, cache, "reserve"), "c", 3, label="PagedKVCache.reserve")
    return job, {**plain, "raised": raised, "parent": job.method(cache, "block_table", "p"),
                 "child": job.method(cache, "block_table", "c"), "len": job.method(cache, "seq_len", "c"),
                 "free": attribute(job, attribute(job, cache, "allocator"), "num_free")}, None


def _records_job(student):
    """Two sequences with the same 8-token prompt, both added before either reserves (both miss): the map keeps the
    FIRST one's blocks. And a fork whose parent and child each append their own tokens: the child's block that its
    tokens fill enters the map (the child's recorded tokens are its own copy)."""
    job = student.job()
    cache = job.new("PagedKVCache", 16, BLOCK_SIZE, 1, 2, enable_prefix_caching=True)
    same = PROMPT_A[:8]
    steps = {"first miss": job.method(cache, "add_sequence", "P", same),
             "second miss": job.method(cache, "add_sequence", "Q", same)}
    job.method(cache, "reserve", "P", 8, token_ids=same)
    job.method(cache, "reserve", "Q", 8, token_ids=same)
    job.method(cache, "add_sequence", "R", same + [1])
    steps["P"], steps["R"] = job.method(cache, "block_table", "P"), job.method(cache, "block_table", "R")
    parent = list(range(30, 36))  # tokens no other sequence holds
    job.method(cache, "add_sequence", "D", parent)
    job.method(cache, "reserve", "D", 6, token_ids=parent)
    job.method(cache, "fork", "D", "E")
    job.method(cache, "reserve", "D", 1, token_ids=[21])
    job.method(cache, "reserve", "E", 2, token_ids=[22, 23])
    steps["child block"] = job.method(cache, "add_sequence", "F", parent + [22, 23, 24])
    return job, steps, None


def _order_job(student):
    """A pool of 4: A (3 blocks) freed last block first, then X takes 2 blocks: A's tail goes, its head stays."""
    job = student.job()
    cache = job.new("PagedKVCache", 4, BLOCK_SIZE, 1, 2, enable_prefix_caching=True)
    job.method(cache, "add_sequence", "A", PROMPT_A)
    job.method(cache, "reserve", "A", 11, token_ids=PROMPT_A)
    job.method(cache, "free_sequence", "A")
    job.method(cache, "add_sequence", "X")
    job.method(cache, "reserve", "X", 8)
    return job, {"hit": job.method(cache, "add_sequence", "A2", PROMPT_A)}, None


def _lru_job(student):
    job = student.job()
    cache = job.new("PagedKVCache", 10, BLOCK_SIZE, 1, 2, enable_prefix_caching=True)
    job.method(cache, "add_sequence", "A", PROMPT_A)
    steps = {"old": job.method(cache, "reserve", "A", 11, token_ids=PROMPT_A)}
    job.method(cache, "free_sequence", "A")
    job.method(cache, "add_sequence", "X")
    job.method(cache, "reserve", "X", 4)
    steps["hit"] = job.method(cache, "add_sequence", "A2", PROMPT_A)
    job.method(cache, "free_sequence", "A2")
    job.method(cache, "free_sequence", "X")
    job.method(cache, "add_sequence", "Y")
    job.method(cache, "reserve", "Y", 40, token_ids=list(range(100, 140)))
    job.method(cache, "free_sequence", "Y")
    steps["evicted"] = job.method(cache, "add_sequence", "A3", PROMPT_A)
    return job, steps, None


def ran(student) -> dict[str, Ran]:
    return student.once("serving prefix_sharing", lambda: send(student, {
        "hit": _hit_job(student), "fork": _fork_job(student), "fork full": _fork_full_job(student),
        "fork short": _fork_short_job(student),
        "lru": _lru_job(student), "order": _order_job(student), "records": _records_job(student)}))


def _count(run, key: str, what: str) -> int:
    value = run.value(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise expect.CheckFailure(_("{what} should return an int, got {kind}").format(what=what,
                                                                                     kind=type(value).__name__))
    return value


@pytest.mark.points(4)
def test_a_shared_prompt_prefix_hits_its_full_blocks(student):
    """B (12 tokens, 9 shared with A's 11) hits 8 tokens in A's two blocks (refcount 2) without changing A; a fully cached 8-token prompt hits 4; a changed first token misses"""
    run = ran(student)["hit"]
    if _count(run, "A", "add_sequence") != 0:
        raise expect.CheckFailure(_("the first prompt found {n} cached tokens in an empty cache").format(
            n=run.value("A")))
    hit = _count(run, "B", "add_sequence")
    if hit != 8:
        if hit in (9, 12):
            raise expect.CheckFailure(_("B shares 9 tokens with A: only the 2 FULL blocks (8 tokens) are cached, "
                                        "add_sequence returned {n}").format(n=hit))
        raise expect.CheckFailure(_("add_sequence('B', prompt) returned {n}: B shares two full blocks (8 tokens) "
                                    "with A").format(n=hit))
    table_a, table_b = (int_list(run.value(k), "block_table") for k in ("table A", "table B"))
    if table_b[:2] != table_a[:2]:
        raise expect.CheckFailure(_("B's first two table entries {b} should be A's blocks {a}").format(
            b=table_b[:2], a=table_a[:2]))
    if run.value("refcount") != 2:
        raise expect.CheckFailure(_("A's first block has refcount {n} after B's hit: a hit adds an owner (incref), "
                                    "expected 2").format(n=run.value("refcount")))
    ka, va = run.inputs
    got = run.value("gather A")
    expect.close(got[0] if isinstance(got, tuple) else got, ka, "gather('A') after B's tokens were written",
                 atol=0, rtol=0)
    whole = _count(run, "C", "add_sequence")
    if whole != 4:
        raise expect.CheckFailure(_("an 8-token prompt whose two blocks are cached hit {n}: at most len(prompt) - 1 "
                                    "tokens count as cached (the last prompt token is always computed: its logits "
                                    "give the first output), so 4").format(n=whole))
    if _count(run, "E", "add_sequence") != 8:
        raise expect.CheckFailure(_("a 9-token prompt whose first two blocks are cached hit {n}: its first 8 tokens "
                                    "are cached (at most len(prompt) - 1 = 8), so 8").format(n=run.value("E")))
    if _count(run, "D", "add_sequence") != 0:
        raise expect.CheckFailure(_("a prompt whose first token differs hit {n} tokens: chained hashes make every "
                                    "block depend on the first").format(n=run.value("D")))
    records = ran(student)["records"]
    first, hit = (int_list(records.value(k), "block_table") for k in ("P", "R"))
    if hit[:2] != first[:2]:
        raise expect.CheckFailure(_("P and Q hold the same 8 tokens in different blocks (both missed); a later hit "
                                    "took {hit}, not P's {first}: a hash already in the map keeps its first block "
                                    "(a full block enters the map only if its hash is not there yet)").format(
            hit=hit[:2], first=first[:2]))


@pytest.mark.points(4)
def test_fork_shares_blocks_and_copies_a_shared_partial_block_on_write(student):
    """fork shares every block (refcount 2); the child's append copies the shared partial block (all layers) and never a full one; the parent then writes in place"""
    run = ran(student)["fork"]
    parent_table, child_table = (int_list(run.value(k), "block_table") for k in ("parent table", "child table"))
    if child_table != parent_table:
        raise expect.CheckFailure(_("after fork the child's table {c} should be the parent's {p}").format(
            c=child_table, p=parent_table))
    if run.value("refcount") != 2:
        raise expect.CheckFailure(_("fork without incref: the shared blocks have refcount {n}, expected 2").format(
            n=run.value("refcount")))
    child_after, parent_after = (int_list(run.value(k), "block_table") for k in ("child after", "parent after"))
    full = ran(student)["fork full"]
    full_parent, full_child = (int_list(full.value(k), "block_table") for k in ("parent", "child"))
    if child_after[:-1] != parent_after[:-1] or full_child[:2] != full_parent or full.value("free") != 3:
        raise expect.CheckFailure(_("the full first block was copied: full shared blocks are never copied, only a "
                                    "partly filled last block that someone else owns"))
    if child_after[-1] == parent_after[-1]:
        raise expect.CheckFailure(_("no copy-on-write: the child appended into the parent's partly filled block "
                                    "(refcount 2): copy it into a fresh block first (all layers) and drop one "
                                    "reference to the old"))
    parent, child_token, parent_token = run.inputs
    for layer in range(2):
        for seq, prefix, token in (("c", parent[layer], child_token[layer]), ("p", parent[layer], parent_token[layer])):
            got = run.value((seq, layer))
            want = torch.cat([prefix[0], token[0]])
            expect.close(got[0] if isinstance(got, tuple) else got, want,
                         "gather({seq!r}, layer={layer}) after both appended".format(seq=seq, layer=layer),
                         atol=0, rtol=0, mistakes={_(
                             "the copied block lost the parent's keys of this layer: copy-on-write copies the block "
                             "in every layer"): torch.cat([torch.zeros_like(prefix[0]), token[0]])})
    short = ran(student)["fork short"]
    clean = (short.value("plain raised") == "RuntimeError" and short.value("plain len") == FORK_LEN
             and short.value("plain free") == 1)
    if clean and (short.value("raised") != "RuntimeError" or short.value("len") != FORK_LEN or short.value("free") != 1
                  or int_list(short.value("child"), "block_table") != int_list(short.value("parent"), "block_table")):
        raise expect.CheckFailure(_("a child's reserve that needs the copy of a shared partial block and one new block, "
                                    "with 1 block free, must raise RuntimeError and change nothing: count the copy among "
                                    "the blocks needed before allocating any"))
    if parent_after[-1] != parent_table[-1]:
        raise expect.CheckFailure(_("after the child's copy the parent, sole owner of its partly filled last block "
                                    "{block}, copied it again to {new}: a sole owner writes in place; copy only when "
                                    "the LAST block's refcount is above 1 (the first blocks are shared, but full)").format(
            block=parent_table[-1], new=parent_after[-1]))
    if _count(ran(student)["records"], "child block", "add_sequence") != 8:
        raise expect.CheckFailure(_("after a fork the parent appended 1 token and the child 2 (each with its ids): the "
                                    "child's block they filled should enter the prefix cache, so its 9-token prompt "
                                    "hits 8, got {n}. fork copies the parent's recorded tokens: the two sequences then "
                                    "record their own").format(n=ran(student)["records"].value("child block")))
    want = FORK_POOL - -(-FORK_LEN // BLOCK_SIZE) - 1
    if run.value("free") != want:
        raise expect.CheckFailure(_("{pool} blocks, the parent's {blocks} and one copy in use: num_free is {n}, expected "
                                    "{want} (the parent, sole owner after the copy, writes in place)").format(
            pool=FORK_POOL, blocks=-(-FORK_LEN // BLOCK_SIZE), n=run.value("free"), want=want))


@pytest.mark.points(4)
def test_freed_prefixes_stay_findable_until_their_blocks_are_reused(student):
    """after A is freed, new blocks come from the never-used ones and A's prefix still hits; once every block was reused, A misses"""
    run = ran(student)["lru"]
    hit = _count(run, "hit", "add_sequence")
    if hit != 8:
        raise expect.CheckFailure(_("A was freed, then X took one block: A's prompt should still hit 8 tokens, got "
                                    "{n}. A freed block keeps its hash until allocate hands it out again, and "
                                    "allocate takes the never-used blocks first, then the least recently freed (a "
                                    "LIFO free list evicts the freshest prefix first)").format(n=hit))
    if _count(ran(student)["order"], "hit", "add_sequence") != 8:
        raise expect.CheckFailure(_("free_sequence frees a table's blocks last to first, so that a prefix's tail is "
                                    "evicted before its head: after A was freed and X took 2 of 4 blocks, A's first "
                                    "two blocks should still hit 8 tokens, got {n}").format(
            n=ran(student)["order"].value("hit")))
    if _count(run, "evicted", "add_sequence") != 0:
        raise expect.CheckFailure(_("every block was reused for other tokens, yet A's prompt still hit: a block "
                                    "leaves the hash map when allocate hands it out again (a stale hash)"))
