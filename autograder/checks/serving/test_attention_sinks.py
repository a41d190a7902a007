"""Hidden checks for part attention_sinks (assignment serving): SinkKVCache and SinkDecoderAttention.

The cache keeps the first num_sink positions ever seen and the last `window` (StreamingLLM's StartRecentKVCache).
The layer is graded on the grader's own cache, which keeps exactly the positions the contract's cache keeps (the
rows to keep are computed here and handed over as data): a cache mistake costs points in the cache's check only. Each
step must equal generation's DecoderAttention, in float64, run afresh over the kept tokens at positions 0 .. n - 1.
"""
import math

import pytest
import torch

from autograder.checks import expect
from autograder.checks.cases import Ran, send, seeded
from autograder.checks.serving.common import attribute
from autograder.foundation import i18n
from solutions import generation as gen

_ = i18n.message

SINKS, WINDOW, TOKENS = 2, 3, 11  # the kept positions after 11 tokens: [0, 1, 8, 9, 10]
D_MODEL, H, H_KV, B = 24, 4, 2, 2  # head_dim 6 != 4 heads: a view with the two swapped shows
LAYER_SINKS, LAYER_WINDOW = 2, 4
PIECES = [3] + [1] * 13  # 16 tokens: a 3-token prompt, then one at a time


def _kept_job(student):
    job = student.job()
    cache = job.new("SinkKVCache", SINKS, WINDOW)
    steps = [job.method(cache, "append", torch.full((1, 1, 1, 2), float(p)), torch.full((1, 1, 1, 2), -float(p)))
             for p in range(TOKENS)]
    return job, {"appends": steps, "len": job.method(cache, "__len__")}, None


def _pieces_job(student):
    """SinkKVCache(2, 3) fed pieces of two heads: empty (len 0), a first prompt of num_sink + window = 5 tokens
    (accepted whole), a piece of exactly `window` tokens (fits: none of its own keys is dropped), then one of 4 (would
    drop its own first key: ValueError, nothing changed)."""
    job = student.job()
    cache = job.new("SinkKVCache", SINKS, WINDOW)
    steps = {"empty": job.method(cache, "__len__")}
    for name, n in (("prompt", SINKS + WINDOW), ("window", WINDOW)):
        job.method(cache, "append", torch.zeros(1, 2, n, 2), torch.zeros(1, 2, n, 2))
        steps[name] = job.method(cache, "__len__")
    steps["raised"] = job.builtin_value("attempt", attribute(job, cache, "append"), torch.zeros(1, 2, WINDOW + 1, 2),
                                        torch.zeros(1, 2, WINDOW + 1, 2), label="SinkKVCache.append")
    steps["after"] = job.method(cache, "__len__")
    return job, steps, None


def kept_after(pieces, num_sink: int, window: int) -> list[list[int]]:
    """The original positions the cache holds after each piece, and the rows of (held + new) each append keeps."""
    held, rows, positions = [], [], 0
    for n in pieces:
        new = held + list(range(positions, positions + n))
        positions += n
        keep = list(range(len(new))) if len(new) <= num_sink + window else \
            list(range(num_sink)) + list(range(len(new) - window, len(new)))
        rows.append(keep)
        held = [new[i] for i in keep]
    return rows


def kept_positions(pieces, num_sink: int, window: int) -> list[list[int]]:
    held, out, positions = [], [], 0
    for keep, n in zip(kept_after(pieces, num_sink, window), pieces):
        new = held + list(range(positions, positions + n))
        positions += n
        held = [new[i] for i in keep]
        out.append(held)
    return out


def weights(g) -> dict:
    width = H_KV * (D_MODEL // H)
    scale = 1 / math.sqrt(D_MODEL)
    return {"W_q.weight": torch.randn(D_MODEL, D_MODEL, generator=g) * scale,
            "W_k.weight": torch.randn(width, D_MODEL, generator=g) * scale,
            "W_v.weight": torch.randn(width, D_MODEL, generator=g) * scale,
            "W_o.weight": torch.randn(D_MODEL, D_MODEL, generator=g) * scale}


def _layer_job(student):
    g = seeded(8)
    w = weights(g)
    x = torch.randn(B, sum(PIECES), D_MODEL, generator=g)
    job = student.job()
    layer = job.new("SinkDecoderAttention", D_MODEL, H, H_KV)
    steps = {"module": layer, "load": job.load_state_dict(layer, w), "eval": job.eval(layer)}
    cache = job.builtin("scheduled_cache", kept_after(PIECES, LAYER_SINKS, LAYER_WINDOW))
    start, outs = 0, []
    for n in PIECES:
        outs.append(job.forward(layer, x[:, start:start + n], cache))
        start += n
    steps["outs"] = outs
    return job, steps, (w, x)


def ran(student) -> dict[str, Ran]:
    return student.once("serving attention_sinks", lambda: send(student, {"kept": _kept_job(student),
                                                                          "layer": _layer_job(student),
                                                                          "pieces": _pieces_job(student)}))


@pytest.mark.points(4)
def test_the_cache_keeps_the_sinks_and_the_last_window(student):
    """SinkKVCache(num_sink=2, window=3) keeps positions [0, 1, 8, 9, 10] after 11 tokens, in order, values with their keys"""
    run = ran(student)["kept"]
    got = run.result[run.steps["appends"][-1]]
    if not (isinstance(got, tuple) and len(got) == 2):
        raise expect.CheckFailure(_("SinkKVCache.append should return (k_all, v_all)"))
    k = expect.tensor(got[0], "SinkKVCache.append's k_all")
    held = [int(p) for p in k[0, 0, :, 0].tolist()] if k.dim() == 4 and k.shape[:2] == (1, 1) else None
    want = [0, 1, 8, 9, 10]
    if held != want:
        if held == [8, 9, 10] or held == [6, 7, 8, 9, 10]:
            raise expect.CheckFailure(_("the sinks were evicted: after 11 tokens you keep {got}, a pure window. Keep "
                                        "the first num_sink positions ever seen and the last window: {want}").format(
                got=held, want=want))
        raise expect.CheckFailure(_("after 11 tokens SinkKVCache(2, 3) keeps {got}, expected positions {want}").format(
            got=held, want=want))
    v = expect.tensor(got[1], "SinkKVCache.append's v_all")
    if v.shape != k.shape or not torch.equal(v, -k):
        raise expect.CheckFailure(_("the values kept are not those of the kept keys"))
    if run.value("len") != 5:
        raise expect.CheckFailure(_("len(cache) is {n}, expected 5 (the kept length)").format(n=run.value("len")))
    pieces = ran(student)["pieces"]
    lens = [pieces.value(k) for k in ("empty", "prompt", "window")]
    if lens != [0, SINKS + WINDOW, SINKS + WINDOW]:
        raise expect.CheckFailure(_("SinkKVCache(2, 3) with two key/value heads: len is {lens} when empty, after a "
                                    "first prompt of 5 tokens and after a piece of 3, expected [0, 5, 5]: the new "
                                    "tokens are axis -2 of [B, H_kv, S_new, D]; a first prompt of num_sink + window "
                                    "tokens and a piece of window tokens fit").format(lens=lens))
    if pieces.value("raised") != "ValueError" or pieces.value("after") != SINKS + WINDOW:
        raise expect.CheckFailure(_("a piece of 4 tokens with a window of 3 would evict one of its own keys: append "
                                    "raises ValueError and changes nothing (it raised {got}, len is then {n})").format(
            got=pieces.value("raised"), n=pieces.value("after")))


def dense_steps(w, x, positions_of) -> list[torch.Tensor]:
    """generation's DecoderAttention in float64 over the tokens each step keeps, at positions 0 .. n - 1 (or
    `positions_of(kept)` for a mistake), the last n outputs of each step."""
    layer = gen.DecoderAttention(D_MODEL, H, H_KV).double()
    layer.load_state_dict(w)
    outs, start = [], 0
    for kept, n in zip(kept_positions(PIECES, LAYER_SINKS, LAYER_WINDOW), PIECES):
        start += n
        pos = positions_of(kept)
        with torch.no_grad():
            outs.append(layer(x[:, kept].double(), positions=pos)[:, -n:].float())
    return outs


def twice_steps(w, x) -> list[torch.Tensor]:
    """The mistake: keys rotated once when cached (at their cache position), then again at 0 .. n - 1 every step."""
    layer = gen.DecoderAttention(D_MODEL, H, H_KV).double()
    layer.load_state_dict(w)
    hd, outs, held, start = D_MODEL // H, [], None, 0
    rows_each = kept_after(PIECES, LAYER_SINKS, LAYER_WINDOW)
    for rows, n in zip(rows_each, PIECES):
        xs = x[:, start:start + n].double()
        q = layer.W_q(xs).view(B, n, H, hd).transpose(1, 2)
        k = layer.W_k(xs).view(B, n, H_KV, hd).transpose(1, 2)
        v = layer.W_v(xs).view(B, n, H_KV, hd).transpose(1, 2)
        before = 0 if held is None else held[0].shape[-2]
        k = gen.apply_rope(k, torch.arange(before, before + n))
        k_all = k if held is None else torch.cat([held[0], k], -2)
        v_all = v if held is None else torch.cat([held[1], v], -2)
        idx = torch.tensor(rows)
        held = (k_all[:, :, idx], v_all[:, :, idx])
        S = held[0].shape[-2]
        keys = gen.apply_rope(held[0], torch.arange(S)).repeat_interleave(H // H_KV, 1)
        vals = held[1].repeat_interleave(H // H_KV, 1)
        q = gen.apply_rope(q, torch.arange(S - n, S))
        scores = (q @ keys.transpose(-2, -1) / math.sqrt(hd)).masked_fill(~gen.decode_causal_mask(n, S), -math.inf)
        out = torch.softmax(scores, -1) @ vals
        outs.append(layer.W_o(out.transpose(1, 2).reshape(B, n, D_MODEL)).float())
        start += n
    return outs


@pytest.mark.points(6)
def test_each_step_equals_a_dense_pass_over_the_kept_tokens_at_cache_positions(student):
    """16 tokens (a 3-token prompt, then one at a time), 2 sinks, window 4, GQA 4/2, B = 2: every step equals DecoderAttention over the kept tokens at positions 0 .. n - 1"""
    run = ran(student)["layer"]
    run.value("module")
    run.value("load")
    w, x = run.inputs
    want = dense_steps(w, x, lambda kept: torch.arange(len(kept)))
    original = dense_steps(w, x, lambda kept: torch.tensor(kept))
    twice = twice_steps(w, x)
    start = 0
    for i, (step, n) in enumerate(zip(run.steps["outs"], PIECES)):
        got = run.result[step]
        tol = 1e-5 * max(1.0, float(want[i].abs().max()))
        expect.close(got, want[i], "SinkDecoderAttention at step {i} (tokens {a}..{b})".format(
            i=i, a=start, b=start + n - 1), atol=tol, rtol=0, mistakes={
            _("original positions kept: rotate every cached key at its position INSIDE the cache (0 .. len - 1) and "
              "the new queries at the last positions, every step (StreamingLLM's pos_shift)"): original[i],
            _("cached keys rotated and rotated again: cache the keys BEFORE RoPE (unrotated) and rotate all of them "
              "at 0 .. len - 1 at every step"): twice[i],
        })
        start += n
