"""Hidden checks for part kv_cache (assignment generation): decode_causal_mask, repeat_kv, KVCache,
CachedSelfAttention, kv_cache_bytes.

The cached module is given the weights W_qkv, W_o of the checks, then run with the student's
own KVCache: once on the whole sequence, then for every split of the sequence into a prompt
and tokens generated one at a time, then in chunks of several tokens after a prompt. Each
run must equal the full causal pass (the property that defines a KV cache); when it does
not, the output is compared with what the classic mistakes give (top-left causal alignment,
the cache not used, no mask once the cache holds positions) to name the mistake.
"""
import math

import pytest
import torch

from autograder.foundation import i18n
from autograder.checks import expect
from autograder.checks.cases import Ran, seeded, send, smallest_failure, weights_taken
from autograder.checks.generation.common import B, D_MODEL, H, HEAD_DIM, HEAD_SHAPES, HEADS_S, ONLY_THEMSELVES, S, \
    TOP_LEFT, decode_variant, head_mistakes, heads_label
from autograder.foundation.failures import StudentRaised
from solutions import generation as ref

_ = i18n.message


# --------------------------------------------------------------------------- #
# decode_causal_mask
# --------------------------------------------------------------------------- #


def mask_mistakes(S_q, S_k):
    offset = S_k - S_q
    ones = torch.ones(S_q, S_k, dtype=torch.bool)
    return {
        TOP_LEFT: ones.tril(),
        _("your mask hides the diagonal: the query at position p may see the key at position p (j <= i + "
          "S_k - S_q)"):
            ones.tril(offset - 1),
        _("your mask is inverted: True marks the keys a query MAY attend to (the past and the present)"):
            ~ones.tril(offset),
        _("your mask lets every query see every key: the queries are positions S_k - S_q ... S_k - 1, and "
          "each one must not see the keys after it"): ones,
    }


@pytest.mark.points(8 / 3)
@pytest.mark.parametrize("S_q,S_k", [(3, 7), (1, 6), (4, 4)])
def test_decode_causal_mask(student, S_q, S_k):
    """decode_causal_mask(S_q, S_k) is True where key j <= i + (S_k - S_q): bottom-right aligned"""
    want = ref.decode_causal_mask(S_q, S_k)
    what = f"decode_causal_mask({S_q}, {S_k})"
    got = expect.shape(part(student)[f"mask {S_q} {S_k}"].value(), want.shape, what,
                       hints={(S_k, S_q): _("rows are the queries: [S_q, S_k]")})
    if got.dtype != torch.bool:
        raise expect.CheckFailure(_("{what} returned dtype {dtype}: return a torch.bool mask").format(what=what, dtype=got.dtype))
    if not torch.equal(got, want):
        hint = expect.diagnose(got, mask_mistakes(S_q, S_k))
        raise expect.CheckFailure(expect.hinted_message(_("{what} is wrong in {wrong} of {numel} places").format(
            what=what, wrong=int((got != want).sum()), numel=want.numel()), hint))


# --------------------------------------------------------------------------- #
# repeat_kv
# --------------------------------------------------------------------------- #

H_KV, N_REP = 3, 2  # six query heads share three key/value heads


@pytest.mark.points(7)
def test_repeat_kv_repeats_each_head_in_place(student):
    """repeat_kv(x [B, H_kv, S, hd], n_rep) repeats each head n_rep times in place: head h serves query heads h*n_rep..(h+1)*n_rep-1"""
    repeated = part(student)["repeat_kv"]
    x = repeated.inputs
    want = ref.repeat_kv(x, N_REP)
    what = f"repeat_kv(x [{B}, {H_KV}, 5, {HEAD_DIM}], n_rep={N_REP})"
    mistakes = {
        _("you tiled the heads (kv0, kv1, kv2, kv0, kv1, kv2, as x.repeat(1, n_rep, 1, 1) does): each "
          "key/value head must be repeated in place, kv0, kv0, kv1, kv1, kv2, kv2 "
          "(repeat_interleave(n_rep, dim=1), or x[:, :, None].expand(...) then reshape), so that query "
          "heads h*n_rep..(h+1)*n_rep-1 share kv head h"):
            x.repeat(1, N_REP, 1, 1),
    }
    shapes = {(B, H_KV, 5 * N_REP, HEAD_DIM): _("you repeated along the sequence axis; repeat the heads (dim=1)"),
              (B * N_REP, H_KV, 5, HEAD_DIM): _("you repeated along the batch axis; repeat the heads (dim=1)"),
              (B, H_KV, 5, HEAD_DIM * N_REP): _("you repeated along the feature axis; repeat the heads (dim=1)")}
    expect.close(repeated.value("n_rep"), want, what, mistakes=mistakes, shapes=shapes)
    same = repeated.value("once")
    expect.close(same, x, "repeat_kv(x, n_rep=1)", hint=_("with n_rep=1 every head is kept once: x itself"))


# --------------------------------------------------------------------------- #
# KVCache
# --------------------------------------------------------------------------- #

CACHE_STEPS = (2, 2, 1)  # S_new of three appends: 2 positions, then 2 more, then one token


def cache_shapes(S_old, S_new):
    S_all = S_old + S_new
    return {
        (B, 2 * H, S_new, HEAD_DIM): _("you appended on the head axis (dim=1): positions are the sequence axis, dim=2 (or -2) of [B, "
                                       "H, S, head_dim]"),
        (2 * B, H, S_new, HEAD_DIM): _("you appended on the batch axis (dim=0): positions are the sequence axis, dim=2 (or -2)"),
        (B, H, S_new, 2 * HEAD_DIM): _("you appended on the feature axis (dim=-1): positions are the sequence axis, dim=2 (or -2)"),
        (B, H, S_new, HEAD_DIM): _("append returned only the new positions ({S_new}); it must return every cached key and value "
                                   "({S_all} positions), the old ones first").format(S_new=S_new, S_all=S_all),
    }


@pytest.mark.points(6)
def test_kv_cache_append_returns_everything_cached(student):
    """KVCache.append(k, v) stores k, v [B, H, S_new, head_dim] after the cached positions and returns all keys and values"""
    appended = part(student)["append"]
    appended.value("cache")
    ks, vs, S_old = [], [], 0
    for step, (S_new, (k, v)) in enumerate(zip(CACHE_STEPS, appended.inputs), 1):
        ks.append(k)
        vs.append(v)
        what = _("append number {step} (S_new={S_new}, {S_old} positions cached before)").format(step=step, S_new=S_new, S_old=S_old)
        try:
            got = appended.value(step)
        except StudentRaised as exc:
            if exc.kind == "NotImplementedError":
                raise
            raise expect.CheckFailure(_("{exc}; concatenate along the sequence axis (dim=2, or -2) of [B, H, S, head_dim]").format(exc=exc.message)) from None
        if not isinstance(got, (tuple, list)) or len(got) != 2:  # (a list [k_all, v_all] unpacks the same: accepted)
            raise expect.CheckFailure(_("{what} returned {kind}: return the pair (k_all, v_all)").format(what=what, kind=type(got).__name__))
        k_all, v_all = torch.cat(ks, dim=2), torch.cat(vs, dim=2)
        if (expect.same(got[0], v_all) and expect.same(got[1], k_all)) and not expect.same(k_all, v_all):
            raise expect.CheckFailure(_("{what} returned (values, keys): return (k_all, v_all), keys first").format(what=what))
        newest_first = {_("the new positions must come after the cached ones: torch.cat([cached, new], dim=2)"):
                        torch.cat(ks[::-1], dim=2)}
        expect.close(got[0], k_all, _("the keys returned by {what}").format(what=what), mistakes=newest_first,
                     shapes=cache_shapes(S_old, S_new))
        expect.close(got[1], v_all, _("the values returned by {what}").format(what=what), mistakes=newest_first,
                     shapes=cache_shapes(S_old, S_new))
        S_old += S_new


@pytest.mark.points(2)
def test_kv_cache_length_counts_positions(student):
    """len(KVCache()) is 0, then the number of cached positions"""
    counted = part(student)["len"]
    counted.value("cache")
    first = counted.value(0)
    if first != 0:
        raise expect.CheckFailure(_("len(KVCache()) is {first!r}: an empty cache holds 0 positions").format(first=first))
    steps = LEN_STEPS
    for count in range(1, len(steps) + 1):
        counted.value(f"append {count}")
        total = sum(steps[:count])
        got = counted.value(count)
        if got != total:
            hint = (_(": that is the number of append calls; count positions, k.shape[-2] of the cached keys")
                    if got == count else _(": count positions, the size of the sequence axis (dim=2) of the cached keys"))
            raise expect.CheckFailure(_("after appending {join} positions, len(cache) is {got!r}, expected {total}{hint}").format(join=' + '.join(map(str, steps[:count])), got=got, total=total, hint=hint))


# --------------------------------------------------------------------------- #
# CachedSelfAttention
# --------------------------------------------------------------------------- #


@pytest.mark.points(2)
def test_cached_module_submodules(student):
    """CachedSelfAttention has W_qkv (d_model -> 3 d_model, rows q, k, v) and W_o (d_model -> d_model), bias-free"""
    call = f"CachedSelfAttention({D_MODEL}, {H})"
    layers = {"W_qkv": (D_MODEL, 3 * D_MODEL), "W_o": (D_MODEL, D_MODEL)}
    roles = {"W_qkv": "d_model -> 3 * d_model, rows q, k, v", "W_o": "d_model -> d_model"}
    expect.submodules(part(student)["submodules"].value(), layers, None, call, roles)


def weights(gen, d_model: int = D_MODEL):
    w_qkv = torch.randn(3 * d_model, d_model, generator=gen) / math.sqrt(d_model)
    w_o = torch.randn(d_model, d_model, generator=gen) / math.sqrt(d_model)
    return w_qkv, w_o


def decode_mistakes(w_qkv, w_o, x, chunks):
    def v(**kw):
        return lambda: decode_variant(w_qkv, w_o, x, chunks, **kw)

    cached = len(chunks) > 1
    out = {}
    if cached:
        out[TOP_LEFT] = v(align="top_left")
        out[_("for several new tokens after a cache your causal mask is top-left aligned (is_causal = q_len > 1, as in "
              "Hugging Face's SDPA attention: right for a prompt and for one token, wrong for a chunk): new query i "
              "may see keys j <= i + (S_k - S_q), decode_causal_mask(S_q, S_k)")] = v(align="top_left_chunks")
        out[ONLY_THEMSELVES] = v(use_cache=False)
        out[_("once the cache holds positions you drop the causal mask, but several new tokens must still not "
              "see each other's future: mask with decode_causal_mask(S_new, S_k)")] = v(mask_cached=False)
    out[_("the attention is not causal: a token must not see the tokens after it")] = v(align="none")
    out[_("your causal mask hides the diagonal: a token may attend to itself")] = v(diagonal=False)
    out[_("you scaled by sqrt(d_model) = sqrt({d_model}); scale each head by sqrt(head_dim) = "
          "sqrt({head_dim})").format(d_model=D_MODEL, head_dim=HEAD_DIM)] = \
        v(scale=D_MODEL ** -0.5)
    out[_("you did not scale the scores: divide by sqrt(head_dim)")] = v(scale=1.0)
    for order in ((1, 0, 2), (0, 2, 1), (2, 1, 0)):
        out[_("the rows of W_qkv are ordered q, k, v (as in nn.MultiheadAttention.in_proj_weight); you read "
              "them as {join}").format(join=', '.join('qkv'[i] for i in order))] = v(order=order)
    return out


def compare_split(run: Ran, chunks, label):
    """The outputs of x fed in `chunks` (steps of the check's job: run.steps[chunks]) equal the full causal pass."""
    w_qkv, w_o, x = run.inputs
    weights_taken(run, _("W_qkv and W_o"))
    cache, forwards, length = run.steps[chunks]
    if cache is not None:
        run.result[cache]
    outs, start = [], 0
    for n, step in zip(chunks, forwards):
        what = _("forward(x[:, {start}:{start2}], cache) with {start} cached position{plural}").format(start=start, start2=start + n, plural='' if start == 1 else 's')
        try:
            out = run.result[step]
        except StudentRaised as exc:
            if exc.kind == "NotImplementedError" or len(chunks) == 1:
                raise
            raise expect.CheckFailure(_("{what}: {exc}; the new queries [B, H, S_new, head_dim] attend over all S_k cached keys: scores "
                                        "[B, H, S_new, S_k], mask decode_causal_mask(S_new, S_k)").format(what=what, exc=exc.message)
                                      ) from None
        outs.append(out if len(chunks) == 1 else expect.shape(out, (B, n, D_MODEL), what))
        start += n
    got = torch.cat(outs, dim=1) if len(chunks) > 1 else outs[0]
    want = decode_variant(w_qkv, w_o, x, chunks)
    expect.close(got, want, label, mistakes=decode_mistakes(w_qkv, w_o, x, chunks))
    if length is not None:
        length = run.result[length]  # (the cache's __len__)
        if length != sum(chunks):
            raise expect.CheckFailure(_("{label}: afterwards len(cache) is {length!r}, expected {sum}: forward must append the new keys "
                                        "and values exactly once").format(label=label, length=length, sum=sum(chunks)))


SPLITS = tuple((p,) + (1,) * (S - p) for p in range(1, S))  # a prompt of p tokens, then one token at a time


@pytest.mark.points(4)
def test_cached_module_without_cache_is_causal_self_attention(student):
    """forward(x) without a cache is causal multi-head self-attention (nn.MultiheadAttention with a causal mask)"""
    compare_split(part(student)["no cache"], (S,), f"forward(x [{B}, {S}, {D_MODEL}])")


@pytest.mark.points(6)
def test_decoding_equals_the_full_pass_for_every_split(student):
    """a prompt of p tokens, then one token at a time through one KVCache, equals the full causal pass, for every p"""
    run = part(student)["every split"]
    for chunks in SPLITS:
        p = chunks[0]
        compare_split(run, chunks,
                      _("a prompt of {p} token{plural}, then {s} tokens one at a time (outputs joined, [{b}, {s2}, "
                        "{d_model}])").format(p=p, plural='s' if p > 1 else '', s=S - p, b=B, s2=S, d_model=D_MODEL))


@pytest.mark.points(5)
def test_chunks_of_several_tokens_after_a_prompt(student):
    """several new tokens at once after a prompt (S_q < S_k, S_q > 1) equal the full causal pass"""
    compare_split(part(student)["chunks"], (2, 3, 1),
                  _("a prompt of 2 tokens, then 3 tokens at once, then 1 (outputs joined, [{b}, {s}, {d_model}])").format(b=B, s=S, d_model=D_MODEL))


# --------------------------------------------------------------------------- #
# kv_cache_bytes
# --------------------------------------------------------------------------- #

BYTES_CASES = (
    ((2, 3, 5, 7, 11), {"dtype": torch.float64}),  # 8 bytes: no two mistakes give the same number
    ((1, 32, 32, 128, 4096), {}),  # a 32-layer, 32-head model at 4k tokens, fp16 by default
    ((3, 2, 1, 8, 13), {"dtype": torch.bfloat16}),
)


def bytes_hint(got, args, dtype):
    batch, layers, kv_heads, head_dim, seq_len = args
    size = torch.empty((), dtype=dtype).element_size()
    numbers = batch * layers * kv_heads * head_dim * seq_len  # of the keys alone
    known = (  # the first that matches (with 2-byte elements the first two coincide: both are said)
        (2 * numbers, _("that is the number of elements; multiply by the element size ({size} bytes for {dtype}), and "
                        "count both the keys and the values (a factor 2)").format(size=size, dtype=dtype) if size == 2
         else _("that is the number of elements; multiply by the element size ({size} bytes for {dtype})").format(
             size=size, dtype=dtype)),
        (numbers * size, _("count both the keys and the values (a factor 2)")),
        (numbers, _("count both the keys and the values (a factor 2) and multiply by the element size")),
        (2 * numbers * 2, _("you ignored dtype: a {dtype} element takes {size} bytes").format(dtype=dtype, size=size)),
        (2 * numbers * size * 8, _("that is bits, not bytes")),
        (2 * batch * kv_heads * head_dim * seq_len * size, _("that is one layer: multiply by the number of layers")),
    )
    return next((hint for value, hint in known if got == value),
                _("it is 2 (keys and values) x batch x layers x kv_heads x head_dim x seq_len x {size} bytes").format(size=size))


@pytest.mark.points(5)
def test_kv_cache_bytes(student):
    """kv_cache_bytes is 2 (K and V) x batch x layers x kv_heads x head_dim x seq_len x the element size"""
    for args, kwargs in BYTES_CASES:
        dtype = kwargs.get("dtype", torch.float16)
        want = ref.kv_cache_bytes(*args, **kwargs)
        got = part(student)[f"bytes {args}"].value()
        shown = ", ".join(map(str, args)) + (f", dtype={dtype}" if kwargs else "")
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise expect.CheckFailure(_("kv_cache_bytes({shown}) returned {kind}: return a Python int").format(
                shown=shown, kind=type(got).__name__))
        if got != want:  # (a float of the right value, 1048576.0, is accepted: as attention_matrix_bytes in self_attention)
            raise expect.CheckFailure(_("kv_cache_bytes({shown}) returned {got!r}, expected {want}: {hint}").format(
                shown=shown, got=got, want=want, hint=bytes_hint(got, args, dtype)))


# --------------------------------------------------------------------------- #
# every request of this part, in the order of the checks above, in one round trip
# --------------------------------------------------------------------------- #

LEN_STEPS = (3, 1, 2)  # never as many positions as append calls


@pytest.mark.points(3)
def test_cached_module_for_every_number_of_heads(student):
    """CachedSelfAttention(d_model, H) is right for every number of heads and head width (the smallest failing case named)"""
    runs = part(student)["heads"]

    def check(shape):
        heads, d_model = shape
        run = runs[shape]
        weights_taken(run, "W_qkv and W_o")
        w_qkv, w_o, x = run.inputs
        what = "forward(x [{B}, {S}, {d}]) of CachedSelfAttention({d}, {H})".format(B=B, S=HEADS_S, d=d_model, H=heads)
        expect.close(run.result[run.steps[(HEADS_S,)][1][0]], decode_variant(w_qkv, w_o, x, (HEADS_S,), heads=heads), what,
                     mistakes=head_mistakes(w_qkv, w_o, x, heads))

    smallest_failure([(heads_label(*shape), shape) for shape in HEAD_SHAPES], check)


def _module_job(student, splits, heads: int = H, d_model: int = D_MODEL):
    """CachedSelfAttention(d_model, heads) with the checks' weights, then x [B, sum(splits[0]), d_model] fed in each
    of `splits` through a new KVCache."""
    g = seeded()
    w_qkv, w_o = weights(g, d_model)
    job = student.job()
    module = job.new("CachedSelfAttention", d_model, heads)
    steps = {"module": module, "load": job.load_state_dict(module, {"W_qkv.weight": w_qkv, "W_o.weight": w_o}),
             "eval": job.eval(module)}
    x = torch.randn(B, sum(splits[0]), d_model, generator=g)
    for chunks in splits:
        cache = job.new("KVCache") if len(chunks) > 1 else None
        forwards, start = [], 0
        for n in chunks:
            forwards.append(job.forward(module, x[:, start:start + n], cache) if cache is not None
                            else job.forward(module, x))
            start += n
        steps[chunks] = (cache, forwards, job.method(cache, "__len__") if cache is not None else None)
    return job, steps, (w_qkv, w_o, x)


def _part(student) -> dict:
    checks = {}
    for S_q, S_k in ((3, 7), (1, 6), (4, 4)):
        job = student.job()
        checks[f"mask {S_q} {S_k}"] = (job, {"value": job.call("decode_causal_mask", S_q, S_k)}, None)
    job, x = student.job(), torch.randn(B, H_KV, 5, HEAD_DIM, generator=seeded())
    checks["repeat_kv"] = (job, {"n_rep": job.call("repeat_kv", x, N_REP), "once": job.call("repeat_kv", x, 1)}, x)
    job, g = student.job(), seeded()
    steps, pairs = {"cache": job.new("KVCache")}, []
    for step, S_new in enumerate(CACHE_STEPS, 1):
        k, v = torch.randn(B, H, S_new, HEAD_DIM, generator=g), torch.randn(B, H, S_new, HEAD_DIM, generator=g)
        pairs.append((k, v))
        steps[step] = job.method(steps["cache"], "append", k, v)
    checks["append"] = (job, steps, pairs)
    job, g = student.job(), seeded()
    steps = {"cache": job.new("KVCache")}
    steps[0] = job.method(steps["cache"], "__len__")
    for count, S_new in enumerate(LEN_STEPS, 1):
        steps[f"append {count}"] = job.method(steps["cache"], "append", torch.randn(B, H, S_new, HEAD_DIM, generator=g),
                                              torch.randn(B, H, S_new, HEAD_DIM, generator=g))
        steps[count] = job.method(steps["cache"], "__len__")
    checks["len"] = (job, steps, None)
    job = student.job()
    checks["submodules"] = (job, {"value": job.describe(job.new("CachedSelfAttention", D_MODEL, H))}, None)
    checks["no cache"] = _module_job(student, ((S,),))
    checks["every split"] = _module_job(student, SPLITS)
    checks["chunks"] = _module_job(student, ((2, 3, 1),))
    for args, kwargs in BYTES_CASES:
        job = student.job()
        checks[f"bytes {args}"] = (job, {"value": job.call("kv_cache_bytes", *args, **kwargs)}, None)
    for shape in HEAD_SHAPES:
        checks[("heads", shape)] = _module_job(student, ((HEADS_S,),), *shape)
    ran = send(student, checks)
    ran["heads"] = {shape: ran.pop(("heads", shape)) for shape in HEAD_SHAPES}
    return ran


def part(student) -> dict:
    return student.once("generation kv_cache", lambda: _part(student))
