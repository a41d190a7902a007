"""Hidden checks for part continuous_batching (assignment serving): PagedDecoderAttention,
continuous_batching_generate, static_batching_generate.

The layer: three sequences fed in three steps of prefill chunks and decodes through the grader's pool (NaN in every
slot not written; the layer has layer_idx 1 and must leave layer 0 untouched), against generation's DecoderAttention
in float64 on each whole sequence. The scheduler: a 2-layer GQA model (the student's layers inside the grader's
model, which records every call: steps, tokens and blocks are the grader's counts, and the student's stats must agree
with them), 6 requests of 3 to 14 prompt tokens and 2 to 10 new ones, token_budget 8, at most 3 running, a 12-block
pool for 22 blocks of demand: the outputs equal greedy decoding of each request alone through DecoderAttention +
KVCache; the same with prefix caching and a shared 12-token system prompt computes fewer prompt tokens; static
batching (batch_size 3) gives the same tokens in more steps.

The part borrows cu_seqlens, apply_rope, reshape_and_cache and paged_attention (checks/lent.py): the grader's answers
stand in for wrong ones, so that their mistakes cost points in their own parts. The caches are the grader's (caches.py:
tensors in the worker, bookkeeping answered by the contract's cache on this side), so that a mistake in the student's
own PagedKVCache costs points in paged_cache and prefix_sharing only.
"""
import functools
from types import SimpleNamespace

import pytest
import torch

from autograder.checks import expect, lent
from autograder.checks.cases import Ran, send, seeded, weights_taken
from autograder.checks.serving import batching as bt
from autograder.checks.serving import verdicts
from autograder.checks.serving.caches import Caches
from autograder.checks.serving.common import attribute, cu_of, randn, slots_of
from autograder.foundation import i18n, spec
from autograder.foundation.failures import CheckFailure, MissingName, PartStopped, WorkerEnded
from solutions import generation as gen
from solutions import serving as ref

_ = i18n.message

PART = spec.assignment("serving").part("continuous_batching")
LAYER_LENGTHS = {"A": 10, "B": 7, "C": 5}
LAYER_STEPS = [[("A", 5), ("B", 6)], [("A", 4), ("B", 1), ("C", 3)], [("A", 1), ("C", 2)]]
LAYER_POOL = 12
LAYER_D, LAYER_H, LAYER_H_KV = 24, 4, 2  # head_dim 6 != H: q viewed [T, head_dim, H] instead of [T, H, head_dim] shows
LAYER_HEAD_DIM = LAYER_D // LAYER_H


def _probe_pool():
    g = seeded(11)
    k_cache, v_cache = randn(g, 4, 4, 1, 4), randn(g, 4, 4, 1, 4)
    return k_cache, v_cache, torch.tensor([[2, 0], [3, 1]], dtype=torch.int32), torch.tensor([6, 3],
                                                                                               dtype=torch.int32)


PROBES = {
    "cu_seqlens": [(([2, 0, 3],), {}), ((torch.tensor([1, 4]),), {})],
    "apply_rope": [((randn(seeded(12), 4, 5, 8), torch.tensor([0, 3, 1, 7, 2])), {}),
                   ((randn(seeded(13), 2, 3, 4), torch.tensor([5, 6, 7])), {"base": 500.0})],
    "paged_attention": [((randn(seeded(14), 4, 2, 4), *_probe_pool(), cu_of([3, 1])), {}),
                        ((randn(seeded(15), 2, 2, 4), *_probe_pool()), {})],
}
RESHAPE_PROBE = (randn(seeded(16), 3, 1, 4), randn(seeded(17), 3, 1, 4), torch.tensor([5, -1, 12]))


def _judged(student):
    """The verdict on the borrowed pieces: the usual probes, and reshape_and_cache judged by the caches it leaves."""
    verdict = lent.probe(student, "PagedDecoderAttention", PART, {
        name: calls for name, calls in PROBES.items()
        if name in student.session.load_report.get(student.session.namespace_for("PagedDecoderAttention"), {})
        .get("defined", ())}, ref)
    key, value, slots = RESHAPE_PROBE
    k_cache, v_cache = torch.zeros(4, 4, 1, 4), torch.zeros(4, 4, 1, 4)
    job = student.job(lend=False)
    job.lend("PagedDecoderAttention", PART.borrows)
    out = job.builtin_value("written_by", job.fetch("reshape_and_cache"), key, value, k_cache, v_cache, slots,
                            label="reshape_and_cache")
    want_k, want_v = k_cache.clone(), v_cache.clone()
    ref.reshape_and_cache(key, value, want_k, want_v, slots)
    wrong, broken = list(verdict.wrong), list(verdict.broken)
    try:
        got = student.run([job])[0][out]
        if not (isinstance(got, tuple) and expect.same(got[2], want_k) and expect.same(got[3], want_v)):
            wrong.append("reshape_and_cache")
    except MissingName:
        pass  # (a missing piece is lent as missing)
    except (PartStopped, WorkerEnded):
        broken.append("reshape_and_cache")
    except CheckFailure:
        wrong.append("reshape_and_cache")
    return lent.Verdict(tuple(wrong), tuple(broken))


@pytest.fixture(autouse=True)
def continuous_batching_borrows(student):
    """The layer calls cu_seqlens, apply_rope, reshape_and_cache and paged_attention, graded in other parts: wrong
    ones are lent (checks/lent.py)."""
    lent.lending(student, "PagedDecoderAttention", PART, ref, {}, judged=lambda: _judged(student))
    session = student.session
    if not getattr(session.lenders.get(PART.id), "serving_caches", False):  # the grader's caches answer here too
        session.lenders[PART.id] = caches(student).lender(session.lenders.get(PART.id))


def caches(student) -> Caches:
    """The contract's caches behind this submission's remote caches (one set, whichever pieces the checks run with)."""
    return student.once("serving caches", Caches, every_mode=True)


# --------------------------------------------------------------------------- #
# the layer
# --------------------------------------------------------------------------- #


def layer_plan():
    """(tables {seq: blocks}, steps [(cu, slots, block_tables, seq_lens, positions, rows [(seq, start, n)])])."""
    perm = torch.randperm(LAYER_POOL, generator=seeded(18)).tolist()
    tables = {s: [perm.pop() for _ in range(-(-n // bt.BLOCK_SIZE))] for s, n in LAYER_LENGTHS.items()}
    done, plan = {s: 0 for s in LAYER_LENGTHS}, []
    for chunks in LAYER_STEPS:
        slots, positions, rows = [], [], []
        for seq, n in chunks:
            p = list(range(done[seq], done[seq] + n))
            slots += slots_of(tables[seq], done[seq], n, bt.BLOCK_SIZE)
            positions += p
            rows.append((seq, done[seq], n))
            done[seq] += n
        block_tables = torch.full((len(chunks), 4), perm[0], dtype=torch.int32)  # padding: an unused (NaN) block
        for i, (seq, _n) in enumerate(chunks):
            block_tables[i, :len(tables[seq])] = torch.tensor(tables[seq])
        plan.append((cu_of([n for _s, n in chunks]), torch.tensor(slots), block_tables,
                     torch.tensor([done[s] for s, _n in chunks], dtype=torch.int32), torch.tensor(positions), rows))
    return tables, plan


def layer_weights() -> dict:
    """The layer check's own weights (GQA 4/2, head_dim 6): W_q, W_k, W_v, W_o."""
    g, scale = seeded(20), LAYER_D ** -0.5
    return {"W_q.weight": randn(g, LAYER_D, LAYER_D) * scale, "W_k.weight": randn(g, LAYER_H_KV * LAYER_HEAD_DIM, LAYER_D) * scale,
            "W_v.weight": randn(g, LAYER_H_KV * LAYER_HEAD_DIM, LAYER_D) * scale, "W_o.weight": randn(g, LAYER_D, LAYER_D) * scale}


def _layer_job(student):
    g = seeded(19)
    w = layer_weights()
    x = {s: randn(g, n, LAYER_D) for s, n in LAYER_LENGTHS.items()}
    shape = (2, LAYER_POOL, bt.BLOCK_SIZE, LAYER_H_KV, LAYER_HEAD_DIM)
    job = student.job()
    layer = job.new("PagedDecoderAttention", LAYER_D, LAYER_H, LAYER_H_KV, layer_idx=1)
    steps = {"module": layer, "load": job.load_state_dict(layer, w), "eval": job.eval(layer), "outs": []}
    pool = job.builtin("paged_pool", torch.full(shape, float("nan")), torch.full(shape, float("nan")))
    _tables, plan = layer_plan()
    for cu, slots, block_tables, seq_lens, positions, rows in plan:
        meta = job.builtin("step_meta", cu, slots, block_tables, seq_lens)
        x_step = torch.cat([x[seq][start:start + n] for seq, start, n in rows])
        steps["outs"].append(job.forward(layer, x_step, positions, meta, pool))
    steps["pool"] = job.method(pool, "tensors")
    return job, steps, (w, x, plan)


def _restarted(w, x, plan) -> list[torch.Tensor]:
    """The mistake: positions restarting at 0 in each chunk (the reference layer, run here with those positions)."""
    layer = ref.PagedDecoderAttention(LAYER_D, LAYER_H, LAYER_H_KV, layer_idx=1)
    layer.load_state_dict(w)
    shape = (2, LAYER_POOL, bt.BLOCK_SIZE, LAYER_H_KV, LAYER_HEAD_DIM)
    pool = SimpleNamespace(k_cache=torch.zeros(shape), v_cache=torch.zeros(shape))
    outs = []
    with torch.no_grad():
        for cu, slots, block_tables, seq_lens, _positions, rows in plan:
            meta = SimpleNamespace(cu_seqlens_q=cu, slot_mapping=slots, block_tables=block_tables,
                                       seq_lens=seq_lens)
            positions = torch.cat([torch.arange(n) for _s, _a, n in rows])
            outs.append(layer(torch.cat([x[s][a:a + n] for s, a, n in rows]), positions, meta, pool))
    return outs


# --------------------------------------------------------------------------- #
# the scheduler
# --------------------------------------------------------------------------- #


def _model(job):
    w = bt.weights()
    layers = []
    for i, state in enumerate(w["layers"]):
        layer = job.new("PagedDecoderAttention", bt.D_MODEL, bt.H, bt.H_KV, layer_idx=i)
        job.load_state_dict(layer, state)
        job.eval(layer)
        layers.append(layer)
    return job.builtin("serving_model", w["embedding"], w["head"], layers)


def _generate_job(student, key: str, prefix: bool = False, static: bool = False, whole: bool = False,
                  tight: bool = False):
    """One generation on the grader's remote cache (its bookkeeping the contract's, on this side: caches.py); `whole`:
    one request that needs every block of its pool."""
    job = student.job()
    model = _model(job)
    blocks = bt.WHOLE_POOL if whole else bt.STATIC_POOL if static else bt.PREFIX_POOL if prefix else bt.POOL
    cache_id = caches(student).create(key, ref.PagedKVCache(blocks, bt.BLOCK_SIZE, bt.H_KV, bt.HEAD_DIM,
                                                           num_layers=1, enable_prefix_caching=prefix))
    cache = job.builtin("remote_cache", cache_id, blocks, bt.BLOCK_SIZE, bt.H_KV, bt.HEAD_DIM, bt.LAYERS)
    requests, new = ([bt.prompts()[bt.WHOLE]], [bt.WHOLE_NEW]) if whole else (bt.prompts(prefix), list(bt.NEW_TOKENS))
    if static:
        result = job.call("static_batching_generate", model, requests, new, cache, batch_size=bt.MAX_NUM_SEQS)
    else:
        budget, seqs = (bt.TIGHT, bt.TIGHT) if tight else (bt.TOKEN_BUDGET, bt.MAX_NUM_SEQS)
        result = job.call("continuous_batching_generate", model, requests, new, cache, token_budget=budget,
                          max_num_seqs=seqs)
    steps = {"result": result, "record": job.method(model, "record"),
             "free": attribute(job, attribute(job, cache, "allocator"), "num_free")}
    return job, steps, (requests, blocks)


def ran(student) -> dict[str, Ran]:
    return student.once("serving continuous_batching", lambda: send(student, {
        "layer": _layer_job(student), "continuous": _generate_job(student, "continuous"),
        "prefix": _generate_job(student, "prefix", prefix=True), "static": _generate_job(student, "static",
                                                                                          static=True),
        "whole": _generate_job(student, "whole", whole=True),
        "static whole": _generate_job(student, "static whole", static=True, whole=True),
        "tight": _generate_job(student, "tight", tight=True)}))


@functools.lru_cache(maxsize=2)
def expected(prefix: bool) -> tuple:
    w = bt.weights()
    return tuple(tuple(bt.alone(w, p, n)[0]) for p, n in zip(bt.prompts(prefix), bt.NEW_TOKENS))


def prepare() -> None:
    """The greedy references, once per grading process (check.Checks.prepare)."""
    expected(False)
    expected(True)


@pytest.mark.points(4)
def test_the_layer_equals_decoder_attention_over_mixed_steps(student):
    """three sequences in three steps of prefill chunks and decodes equal DecoderAttention on each whole sequence (positions from the cache, bottom-right, GQA 4/2, NaN in every unused slot)"""
    run = ran(student)["layer"]
    weights_taken(run, _("W_q, W_k, W_v and W_o"))
    w, x, plan = run.inputs
    dense = gen.DecoderAttention(LAYER_D, LAYER_H, LAYER_H_KV).double()
    dense.load_state_dict(w)
    with torch.no_grad():
        whole = {s: dense(t[None].double())[0].float() for s, t in x.items()}
    restarted = _restarted(w, x, plan)
    for i, (step, (*_meta, rows)) in enumerate(zip(run.steps["outs"], plan)):
        want = torch.cat([whole[s][a:a + n] for s, a, n in rows])
        chunks = ", ".join("{s} {a}..{b}".format(s=s, a=a, b=a + n - 1) for s, a, n in rows)
        expect.close(run.result[step], want, "PagedDecoderAttention at step {i} ({chunks})".format(i=i, chunks=chunks),
                     atol=1e-5 * max(1.0, float(want.abs().max())), rtol=0, mistakes={
                         _("positions restarting at 0 in each chunk: a token's position is its place in its own "
                           "sequence (the cache's length before this step plus its offset in the chunk)"):
                             restarted[i]})


@pytest.mark.points(1)
def test_the_layer_writes_only_its_own_layer(student):
    """PagedDecoderAttention(layer_idx=1) writes layer 1 of the pool and leaves layer 0 untouched"""
    run = ran(student)["layer"]
    pool = run.value("pool")
    k_cache = pool[0] if isinstance(pool, tuple) else None
    if not isinstance(k_cache, torch.Tensor) or not k_cache[0].isnan().all():
        raise expect.CheckFailure(_("layer_idx=1 wrote into layer 0 of the pool: write k_cache[layer_idx] and "
                                    "v_cache[layer_idx] only (every layer writing layer 0 overwrites the others)"))
    if k_cache[1].isnan().all():
        raise expect.CheckFailure(_("nothing was written into layer 1: write the rotated keys and the values with "
                                    "reshape_and_cache into k_cache[layer_idx], v_cache[layer_idx]"))


def generated(student, key: str) -> tuple:
    """(outputs, stats, the grader's counts, free blocks at the end) of one generation job, or a failure that says
    what most likely went wrong."""
    run = ran(student)[key]
    try:
        result = run.value("result")
    except PartStopped as exc:
        raise CheckFailure(_("{failure} Did every finished request free its blocks in the same step? A scheduler "
                             "that never frees them waits for blocks forever").format(failure=exc.message)) from None
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        raise expect.CheckFailure(_("the generation should return (outputs, stats), stats a dict"))
    requests, _blocks = run.inputs
    counts = bt.counts(run.value("record"), requests, [list(e) for e in expected(key == "prefix")])
    return result[0], result[1], counts, run.value("free")


@pytest.mark.points(4)
def test_continuous_batching_generates_what_each_request_alone_generates(student):
    """6 requests, token budget 8, at most 3 running, 12 blocks for 22 of demand: every request's tokens equal greedy decoding of it alone; one request that needs a whole 4-block pool runs"""
    outputs, _stats, _counts, _free = generated(student, "continuous")
    verdicts.same_outputs(outputs, expected(False), "continuous_batching_generate")
    try:
        whole = ran(student)["whole"].value("result")
    except CheckFailure as exc:
        raise CheckFailure(_("one request of {n} + {new} tokens on a pool of exactly the {blocks} blocks it needs: "
                             "{failure} A request is refused only when its need, ceil((len(prompt) + max_new_tokens) / "
                             "block_size), exceeds the pool's blocks (k_cache.shape[1])").format(
            n=bt.PROMPT_LENGTHS[bt.WHOLE], new=bt.WHOLE_NEW, blocks=bt.WHOLE_POOL, failure=exc.message)) from None
    verdicts.same_outputs(whole[0] if isinstance(whole, tuple) else whole, [expected(False)[bt.WHOLE][:bt.WHOLE_NEW]],
                 "continuous_batching_generate on a pool of exactly the blocks one request needs")


@pytest.mark.points(3)
def test_continuous_batching_mixes_steps_and_frees_every_block(student):
    """at least one step mixes decodes and a prefill chunk, at most 12 blocks are in use, none at the end; stats agree with the grader's counts; the steps follow the policy at token_budget 8 and at 2"""
    _outputs, stats, counts, free = generated(student, "continuous")
    if counts["mixed_steps"] < 1:
        raise expect.CheckFailure(_("no step mixed decodes with a prefill chunk: each step, the running requests "
                                    "decode one token each and the rest of the token budget goes to prompt chunks"))
    if counts["max_blocks_used"] > bt.POOL:
        raise expect.CheckFailure(_("the steps used {n} blocks of a {pool}-block pool").format(
            n=counts["max_blocks_used"], pool=bt.POOL))
    if free != bt.POOL:
        raise expect.CheckFailure(_("{n} blocks are still in use at the end: a finished request frees its blocks "
                                    "(free_sequence) in the step it finishes").format(n=bt.POOL - free
                                                                                      if isinstance(free, int) else "?"))
    verdicts.stats_agree(stats, counts)
    verdicts.follows_the_policy(counts, "continuous")
    outputs, _stats, tight, _free = generated(student, "tight")
    verdicts.same_outputs(outputs, expected(False), "continuous_batching_generate with token_budget 2, max_num_seqs 2")
    want = bt.reference_stats(ref, tight=True)["chunks_per_step"]
    step = next((i for i, (g, w) in enumerate(zip(tight["chunks_per_step"], want)) if g != w),
                None if len(tight["chunks_per_step"]) == len(want) else min(len(want), len(tight["chunks_per_step"])))
    if step is not None:
        raise expect.CheckFailure(_("with token_budget 2 and max_num_seqs 2, the model was given chunks {got} at step "
                                    "{i}; the contract's policy gives {want}: every running request with an output "
                                    "decodes while any budget is left (a budget of 1 included), then prompt chunks "
                                    "take what is left, even 1 token").format(
            i=step, got=tight["chunks_per_step"][step:step + 1], want=want[step:step + 1]))


@pytest.mark.points(4)
def test_prefix_caching_computes_a_shared_system_prompt_once(student):
    """with prefix caching and a shared 12-token system prompt: the same tokens as each request alone, fewer prompt tokens computed than the prompts hold"""
    outputs, stats, counts, _free = generated(student, "prefix")
    verdicts.same_outputs(outputs, expected(True), "continuous_batching_generate with prefix caching")
    held = sum(map(len, bt.prompts(True)))
    if counts["prefill_tokens"] >= held:
        raise expect.CheckFailure(_("{n} of {held} prompt tokens were computed: add_sequence(id, prompt) returns how "
                                    "many are cached, and those are skipped").format(n=counts["prefill_tokens"],
                                                                                     held=held))
    verdicts.stats_agree(stats, counts)
    verdicts.follows_the_policy(counts, "prefix")


@pytest.mark.points(4)
def test_static_batching_gives_the_same_tokens_in_more_steps(student):
    """static batching (batch_size 3, a 24-block pool) gives the same tokens and takes more steps than continuous batching at the same concurrency"""
    outputs, stats, counts, _free = generated(student, "static")
    verdicts.same_outputs(outputs, expected(False), "static_batching_generate")
    _o, _s, continuous, _f = generated(student, "continuous")
    if counts["steps"] <= continuous["steps"]:
        raise expect.CheckFailure(_("static batching took {s} steps, continuous batching {c}: a static batch is "
                                    "prefilled in one step, then decoded until its LONGEST request is done, before "
                                    "the next batch starts").format(s=counts["steps"], c=continuous["steps"]))
    try:
        alone = ran(student)["static whole"].value("result")
    except CheckFailure as exc:
        raise CheckFailure(_("one request with batch_size 3 (a last batch shorter than batch_size): {failure}").format(
            failure=exc.message)) from None
    verdicts.same_outputs(alone[0] if isinstance(alone, tuple) else alone, [expected(False)[bt.WHOLE][:bt.WHOLE_NEW]],
                 "static_batching_generate of one request with batch_size 3")
    want = bt.reference_stats(ref, static=True)
    if counts["tokens_per_step"] != want["tokens_per_step"]:
        raise expect.CheckFailure(_("static batching gave the model {got} tokens step by step, expected {want}: each "
                                    "batch of batch_size requests in arrival order, its prompts in one step, then one "
                                    "token per request per step until its longest request is done").format(
            got=counts["tokens_per_step"], want=want["tokens_per_step"]))
    if counts["max_blocks_used"] != want["max_blocks_used"]:
        raise expect.CheckFailure(_("static batching held {got} blocks at its peak, the baseline holds {want}: a batch's "
                                    "requests are added when it starts and freed (free_sequence) when its longest "
                                    "request is done, before the next batch starts").format(
            got=counts["max_blocks_used"], want=want["max_blocks_used"]))
    verdicts.stats_agree(stats, counts)

