"""Hidden checks for part decoder (assignment generation): DecoderAttention, a Llama-style attention layer.

The module gets the checks' weights and runs with the grader's own cache, which records every
(k, v) appended to it: so the checks see what is cached (rotated keys? num_kv_heads heads?) as
well as the outputs. The outputs must equal the reference for the whole sequence at once, for
every split into a prompt and tokens one at a time (num_kv_heads H, 2 and 1, smallest case
first), for chunks of several tokens, with another rope_base, with positions given per
sequence, and for a left-padded batch whose real tokens must equal each sequence alone. A
wrong output is compared with what the joint mistakes give (the new token at position 0, the
cached keys rotated again, keys cached before RoPE and rotated at their places 0 .. S_k - 1, top-left
alignment, key_mask ignored, ...) to name the mistake.
"""
import math

import pytest
import torch

from autograder.foundation import i18n, spec
from autograder.checks import expect, lent
from autograder.checks.cases import seeded, send, smallest_failure, weights_taken
from autograder.checks.generation.common import D_MODEL, H, HEAD_DIM, ROPE_HALF_SPLIT, rope_differs
from autograder.checks.generation.decoder_mistakes import cached_mistakes, common_mistakes, convention_of, under, \
    variant_mistakes
from autograder.checks.generation.decoder_variants import decoder_variant, left_padded, rotated_keys
from solutions import generation as ref

_ = i18n.message

B, S = 2, 5  # the property checks: sequences of up to S tokens
KV_HEADS = (H, 2, 1)  # multi-head, grouped-query, multi-query: H // H_kv query heads per kv head
SMALL_BASE = 50.0  # a base far from 10000 so that every pair's angle differs at small positions
LENGTHS = (5, 2, 3)  # the left-padded batch: three prompts of different lengths
PER_ROW = torch.tensor([[0, 1, 2, 6, 7, 11], [4, 5, 9, 10, 15, 16]])  # positions [B, 6]: no row a shift of another


def weights(g, kv_heads: int, d_model: int = D_MODEL, heads: int = H) -> dict:
    width = kv_heads * (d_model // heads)
    scale = 1 / math.sqrt(d_model)
    return {"W_q.weight": torch.randn(d_model, d_model, generator=g) * scale,
            "W_k.weight": torch.randn(width, d_model, generator=g) * scale,
            "W_v.weight": torch.randn(width, d_model, generator=g) * scale,
            "W_o.weight": torch.randn(d_model, d_model, generator=g) * scale}


def _module_job(student, kv_heads: int, base: float | None = None, d_model: int = D_MODEL, heads: int = H):
    """DecoderAttention(d_model, heads, kv_heads[, rope_base=base]) with the checks' weights, in eval mode (built as
    DecoderAttention(d_model, heads), the contract's default num_kv_heads=None, when kv_heads == heads), calling
    the grader's stand-ins for the student's wrong apply_rope, decode_causal_mask and repeat_kv (checks/lent.py: each
    is graded in its own part)."""
    g = seeded(kv_heads)
    w = weights(g, kv_heads, d_model, heads)
    job = student.job()
    extra = {} if base is None else {"rope_base": base}
    sizes = (d_model, heads) if kv_heads == heads else (d_model, heads, kv_heads)
    module = job.new("DecoderAttention", *sizes, **extra)
    steps = {"module": module, "load": job.load_state_dict(module, w), "eval": job.eval(module)}
    return job, steps, w, g


def _feed(job, module, x, chunks, positions=None, key_mask=None, cached: bool = True):
    """x fed in `chunks` (through a recording cache when `cached`); (forward steps, the cache's record step)."""
    cache = job.builtin("recording_cache") if cached else None
    forwards, start = [], 0
    for n in chunks:
        kwargs = {}
        if positions is not None:
            kwargs["positions"] = positions[..., start:start + n]
        if key_mask is not None:
            kwargs["key_mask"] = key_mask[:, :start + n]
        args = (x[:, start:start + n], cache) if cached else (x[:, start:start + n],)
        forwards.append(job.forward(module, *args, **kwargs))
        start += n
    return forwards, (job.method(cache, "record") if cached else None)


def compare(run, key, label: str, rows: torch.Tensor | None = None, cached: bool = True, convention=None,
            **variant) -> None:
    """The outputs of the feed `key` of `run` equal decoder_variant(**variant) under the layer's `convention`
    (decoder_mistakes.convention_of; on the real `rows` [B, S] only)."""
    weights_taken(run, _("W_q, W_k, W_v and W_o"))
    w, x, chunks, heads, kv_heads = run.inputs[key]
    forwards, _record = run.steps[key]
    d_model = x.shape[-1]
    outs, start = [], 0
    for n, step in zip(forwards, chunks):
        out = run.result[n]
        outs.append(expect.shape(out, (x.shape[0], step, d_model),
                                 _("forward(x[:, {start}:{stop}]) with {start} cached positions").format(
                                     start=start, stop=start + step)))
        start += step
    got = torch.cat(outs, dim=1)

    expected = under(convention, variant)

    def v(**mistake):
        return lambda: pick(decoder_variant(w, x, chunks, heads, kv_heads, **{**expected, **mistake}))

    def pick(t):
        return t if rows is None else t[rows]

    mistakes = {**(cached_mistakes(v) if cached and len(chunks) > 1 else {}),
                **common_mistakes(v, d_model, d_model // heads)}
    for key_word, extra in variant_mistakes(variant).items():
        mistakes[key_word] = v(**extra)
    expect.close(pick(got), v()(), label, mistakes=mistakes)


# --------------------------------------------------------------------------- #
# the checks
# --------------------------------------------------------------------------- #


@pytest.mark.points(2)
def test_decoder_submodules(student):
    """DecoderAttention(d_model, H, H_kv) has bias-free W_q, W_o (d_model -> d_model) and W_k, W_v (d_model -> H_kv * head_dim)"""
    call = f"DecoderAttention({D_MODEL}, {H}, 2)"
    kv = 2 * HEAD_DIM
    layers = {"W_q": (D_MODEL, D_MODEL), "W_k": (D_MODEL, kv), "W_v": (D_MODEL, kv), "W_o": (D_MODEL, D_MODEL)}
    roles = {"W_k": f"d_model -> num_kv_heads * head_dim = {kv}", "W_v": f"d_model -> num_kv_heads * head_dim = {kv}"}
    expect.submodules(part(student)["submodules"].value(), layers, None, call, roles)


@pytest.mark.points(4)
def test_full_pass_is_causal_attention_with_rope(student):
    """forward(x) without a cache: causal attention of RoPE-rotated queries and keys at positions 0 .. S-1, for every shape of heads"""
    runs = part(student)
    convention = runs["convention"]

    def check(shape):
        d_model, heads, kv_heads = shape
        compare(runs[("full", shape)], "full", f"forward(x [{B}, {S}, {d_model}]) of DecoderAttention({d_model}, "
                f"{heads}, {kv_heads})", cached=False, convention=convention)

    smallest_failure([(f"d_model={d}, H={h}, H_kv={kv} (head_dim {d // h})", (d, h, kv)) for d, h, kv in FULL_SHAPES],
                     check)
    if convention:  # charged here, once: every other check grades the layer under it
        raise expect.CheckFailure(_("{convention}: the other checks of this part graded your layer under that "
                                    "convention, so it costs points here only").format(convention=convention[0]))


@pytest.mark.points(6)
def test_decoding_equals_the_full_pass_for_every_split_and_kv_heads(student):
    """a prompt of p tokens, then one token at a time through a cache, equals the full pass: every p, num_kv_heads in {H, 2, 1}"""
    runs = part(student)

    def check(case):
        length, p, heads = case
        compare(runs[("split", heads)], (length, p), _("a prompt of {p} then {n} token(s) one at a time").format(
            p=p, n=length - p), convention=runs["convention"])

    smallest_failure([(_("H_kv={kv}, {length} tokens, a prompt of {p}").format(kv=heads, length=length, p=p),
                       (length, p, heads)) for length, p in SPLITS for heads in KV_HEADS], check)


@pytest.mark.points(5)
def test_cache_receives_rotated_keys_with_num_kv_heads(student):
    """the cache receives the ROTATED keys and the values, [B, num_kv_heads, S_new, head_dim], once per forward"""
    keywords = under(part(student)["convention"], {})  # (the half-split pairing of a layer written so, ...)
    for heads in (2, 1):
        run = part(student)[("record", heads)]
        weights_taken(run, _("W_q, W_k, W_v and W_o"))
        w, x, chunks, _heads, _kv = run.inputs["record"]
        forwards, record = run.steps["record"]
        for step in forwards:
            run.result[step]
        appended = run.result[record]
        if not isinstance(appended, list) or len(appended) != len(chunks):
            count = len(appended) if isinstance(appended, list) else appended
            raise expect.CheckFailure(_("{calls} calls of forward appended to the cache {count} times: append the new "
                                        "keys and values exactly once per call").format(calls=len(chunks), count=count))
        start = 0
        for number, ((k, v), n) in enumerate(zip(appended, chunks), 1):
            pos = torch.arange(start, start + n)
            new = x[:, start:start + n]
            what = _("the keys of append number {number} (positions {first} .. {last}), H_kv={kv}").format(
                number=number, first=start, last=start + n - 1, kv=heads)
            repeated = rotated_keys(w, new, H, heads, pos, repeated=True, **keywords)
            shapes = {tuple(repeated.shape): _("the cache received {H} heads: append the {kv} key/value heads and call "
                                               "repeat_kv after reading the cache, which keeps it H / H_kv = {ratio} "
                                               "times smaller").format(H=H, kv=heads, ratio=H // heads)}
            mistakes = {_("the cache received keys that were not rotated: rotate the new keys with apply_rope at their "
                          "positions first, then append them; rotated once, a key never needs rotating again"):
                        rotated_keys(w, new, H, heads, pos, rotate=False),
                        _("the cache received the keys rotated from position 0: the new tokens are at positions "
                          "len(cache), len(cache) + 1, ..."):
                        rotated_keys(w, new, H, heads, torch.arange(n), **keywords),
                        rope_differs(ROPE_HALF_SPLIT): rotated_keys(w, new, H, heads, pos, pairs="halves")}
            expect.close(k, rotated_keys(w, new, H, heads, pos, **keywords), what, mistakes=mistakes, shapes=shapes)
            values = rotated_keys({**w, "W_k.weight": w["W_v.weight"]}, new, H, heads, pos, rotate=False)
            rotated_v = rotated_keys({**w, "W_k.weight": w["W_v.weight"]}, new, H, heads, pos, **keywords)
            expect.close(v, values, _("the values of append number {number}").format(number=number), shapes=shapes,
                         mistakes={_("you rotated the values: RoPE rotates the queries and keys only"): rotated_v})
            start += n


@pytest.mark.points(3)
def test_chunks_of_several_tokens_are_bottom_right_aligned(student):
    """several new tokens at once after a prompt (S_new < S_k, S_new > 1) equal the full pass: bottom-right causal alignment"""
    runs = part(student)
    compare(runs["chunks"], "chunks", _("a prompt of 2 tokens, then 3 at once, then 1 (H_kv=2)"),
            convention=runs["convention"])


@pytest.mark.points(3)
def test_rope_base_is_used(student):
    """DecoderAttention(..., rope_base=50) rotates with base 50, in the full pass and through a cache"""
    run, convention = part(student)["base"], part(student)["convention"]
    compare(run, "full", _("forward(x) of DecoderAttention({d}, {H}, 2, rope_base={base})").format(
        d=D_MODEL, H=H, base=SMALL_BASE), cached=False, base=SMALL_BASE, convention=convention)
    compare(run, "split", _("a prompt of 3 tokens, then 2 one at a time, rope_base={base}").format(base=SMALL_BASE),
            base=SMALL_BASE, convention=convention)


@pytest.mark.points(3)
def test_positions_given_per_sequence(student):
    """forward(x, positions=P) rotates at the positions given: [S] for every sequence, or [B, S], one row per sequence"""
    run = part(student)["positions"]
    for key in ("shared", "per row"):
        positions = POSITIONS[key]
        compare(run, key, f"forward(x [{B}, 6, {D_MODEL}], positions={positions.tolist()})", cached=False,
                positions=positions, convention=part(student)["convention"])


@pytest.mark.points(5)
def test_left_padded_batch_equals_each_sequence_alone(student):
    """a left-padded batch (prompts of 5, 2, 3 tokens, positions cumsum - 1, key_mask) then 2 tokens: each sequence's outputs as if alone"""
    run = part(student)["padded"]
    mask, positions = PADDED
    compare(run, "padded", _("a left-padded batch of prompts of {lengths} tokens, then 2 tokens one at a time "
                             "(the outputs at real tokens)").format(lengths=", ".join(map(str, LENGTHS))),
            rows=mask, positions=positions, key_mask=mask, convention=part(student)["convention"])


# --------------------------------------------------------------------------- #
# every request of this part, in one round trip
# --------------------------------------------------------------------------- #

SPLITS = tuple((length, p) for length in range(2, S + 1) for p in range(1, length))  # smallest first
# (d_model, H, H_kv) of the full pass, smallest first: head_dim differs from H from the second on, so that heads and
# their width swapped shows
FULL_SHAPES = ((4, 1, 1), (12, 2, 1), (12, 3, 3), (24, 6, 2)) + tuple((D_MODEL, H, kv) for kv in KV_HEADS)
POSITIONS = {"shared": torch.tensor([0, 1, 2, 6, 7, 11]), "per row": PER_ROW}


def _padded():
    """The key mask and positions [3, 7] of three left-padded prompts (5 tokens wide) and two new tokens."""
    mask, positions = left_padded(LENGTHS, S)
    after = positions[:, -1:] + torch.arange(1, 3)  # [3, 2]: the next positions of each sequence
    return torch.cat([mask, torch.ones(len(LENGTHS), 2, dtype=torch.bool)], 1), torch.cat([positions, after], 1)


PADDED = _padded()


def _add(job, steps, inputs, key, w, x, chunks, kv_heads, cached=True, heads=H, **kwargs):
    module = steps["module"]
    steps[key] = _feed(job, module, x, chunks, cached=cached, **kwargs)
    inputs[key] = (w, x, chunks, heads, kv_heads)


PART = spec.GENERATION.part("decoder")
# the student's own pieces next to DecoderAttention, probed before the part is graded (checks/lent.py)
PROBES = {  # at the shapes DecoderAttention calls them with: H query heads, H_kv < H key heads, one new token
    "apply_rope": [((torch.randn(2, 3, 4, 8, generator=seeded(7)), torch.tensor([0, 3, 1, 7])), {}),
                   ((torch.randn(2, 3, 4, 8, generator=seeded(8)), torch.tensor([[0, 1, 2, 3], [2, 3, 4, 5]])),
                    {"base": SMALL_BASE}),
                   ((torch.randn(2, 1, 1, 8, generator=seeded(10)), torch.tensor([[6], [9]])), {})],
    "decode_causal_mask": [((3, 5), {}), ((1, 4), {}), ((4, 4), {})],
    "repeat_kv": [((torch.randn(2, 2, 3, 4, generator=seeded(9)), 3), {}),
                  ((torch.randn(2, 4, 1, 4, generator=seeded(11)), 1), {})],
}


def _part(student) -> dict:
    lent.lending(student, "DecoderAttention", PART, ref, PROBES)
    checks = {}
    job = student.job()
    checks["submodules"] = (job, {"value": job.describe(job.new("DecoderAttention", D_MODEL, H, 2))}, None)
    for d_model, heads, kv_heads in FULL_SHAPES:
        job, steps, w, g = _module_job(student, kv_heads, d_model=d_model, heads=heads)
        inputs = {}
        _add(job, steps, inputs, "full", w, torch.randn(B, S, d_model, generator=g), (S,), kv_heads, cached=False,
             heads=heads)
        checks[("full", (d_model, heads, kv_heads))] = (job, steps, inputs)
    for heads in KV_HEADS:
        job, steps, w, g = _module_job(student, heads)
        x, inputs = torch.randn(B, S, D_MODEL, generator=g), {}
        for length, p in SPLITS:
            _add(job, steps, inputs, (length, p), w, x[:, :length], (p,) + (1,) * (length - p), heads)
        checks[("split", heads)] = (job, steps, inputs)
    for heads in (2, 1):
        job, steps, w, g = _module_job(student, heads)
        inputs = {}
        _add(job, steps, inputs, "record", w, torch.randn(B, 4, D_MODEL, generator=g), (3, 1), heads)
        checks[("record", heads)] = (job, steps, inputs)
    job, steps, w, g = _module_job(student, 2)
    inputs = {}
    _add(job, steps, inputs, "chunks", w, torch.randn(B, 6, D_MODEL, generator=g), (2, 3, 1), 2)
    checks["chunks"] = (job, steps, inputs)
    job, steps, w, g = _module_job(student, 2, base=SMALL_BASE)
    inputs = {}
    _add(job, steps, inputs, "full", w, torch.randn(B, S, D_MODEL, generator=g), (S,), 2, cached=False)
    _add(job, steps, inputs, "split", w, torch.randn(B, S, D_MODEL, generator=g), (3, 1, 1), 2)
    checks["base"] = (job, steps, inputs)
    job, steps, w, g = _module_job(student, 2)
    inputs = {}
    for key, positions in POSITIONS.items():
        _add(job, steps, inputs, key, w, torch.randn(B, 6, D_MODEL, generator=g), (6,), 2, cached=False,
             positions=positions)
    checks["positions"] = (job, steps, inputs)
    job, steps, w, g = _module_job(student, 2)
    inputs, (mask, positions) = {}, PADDED
    x = torch.randn(len(LENGTHS), S + 2, D_MODEL, generator=g)
    _add(job, steps, inputs, "padded", w, x, (S, 1, 1), 2, positions=positions, key_mask=mask)
    checks["padded"] = (job, steps, inputs)
    ran = send(student, checks)
    ran["convention"] = _convention(ran[("full", (D_MODEL, H, H))])
    return ran


def _convention(run):
    """The convention the layer's full pass follows (decoder_mistakes.CONVENTIONS), or None."""
    w, x, chunks, heads, kv_heads = run.inputs["full"]
    try:
        got = run.result[run.steps["full"][0][0]]
    except expect.CheckFailure:
        return None
    return convention_of(got, w, x, chunks, heads, kv_heads)


def part(student) -> dict:
    return student.once("generation decoder", lambda: _part(student))
