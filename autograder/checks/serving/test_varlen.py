"""Hidden checks for part varlen (assignment serving): cu_seqlens, pack, unpack, varlen_attention.

Ragged lengths (B, H, lengths all different); varlen_attention against per-sequence attention in float64 for four
cases (grouped heads 6/2 with D_v != D, causal self-attention, a chunked prefill S_q < S_k, S_q > S_k whose first
queries see no key), and isolation: moving one sequence's keys leaves every other sequence's output unchanged.
"""
import pytest
import torch

from autograder.checks import expect
from autograder.checks.cases import Cases
from autograder.checks.serving.common import cu_of, int_list, randn, varlen_variant
from autograder.foundation import i18n
from autograder.sandbox.batch import Call

_ = i18n.message

LENGTHS = [3, 7, 1, 5]  # pack / unpack: four ragged rows, the longest 7
ATTENTION = {  # case: (query lengths, key lengths, H, H_kv, D, D_v, causal)
    "gqa": ([3, 5, 2], [4, 5, 2], 6, 2, 8, 5, False),
    "causal": ([4, 1, 6], [4, 1, 6], 4, 4, 8, 8, True),
    "chunked": ([2, 1, 3], [5, 4, 3], 4, 2, 8, 8, True),
    "more_queries": ([5, 3, 2], [2, 3, 1], 4, 2, 8, 8, True),
}
MOVED = 1  # the isolation check moves this sequence's keys by 50


def _attention(g, case: str, moved: bool = False) -> Call:
    lq, lk, H, H_kv, D, D_v, causal = ATTENTION[case]
    q, k, v = randn(g, sum(lq), H, D), randn(g, sum(lk), H_kv, D), randn(g, sum(lk), H_kv, D_v)
    if moved:
        k0, k1 = sum(lk[:MOVED]), sum(lk[:MOVED + 1])
        k = k.clone()
        k[k0:k1] += 50
    return Call("varlen_attention", q, k, v, cu_of(lq), cu_of(lk), causal=causal)


CALLS = Cases("serving varlen", {
    "cu list": lambda g: Call("cu_seqlens", [4, 6, 3, 1]),
    "cu tensor": lambda g: Call("cu_seqlens", torch.tensor([2, 5, 1])),
    "pack": lambda g: Call("pack", randn(g, 4, 7, 2, 3), torch.tensor(LENGTHS)),
    "pack list": lambda g: Call("pack", randn(g, 4, 7, 2, 3), list(LENGTHS)),
    "unpack": lambda g: Call("unpack", randn(g, sum(LENGTHS), 2, 3), cu_of(LENGTHS), 7),
    **{case: (lambda g, c=case: _attention(g, c)) for case in ATTENTION},
    "moved": lambda g: _attention(g, "chunked", moved=True),
})


@pytest.mark.points(3)
def test_cu_seqlens_values_and_dtype(student):
    """cu_seqlens(lengths) is 0, l_0, l_0 + l_1, ..., T: B + 1 entries, int32, from a list or a tensor"""
    for case, lengths in (("cu list", [4, 6, 3, 1]), ("cu tensor", [2, 5, 1])):
        _call, outcome = CALLS.get(student, case)
        got = expect.value(outcome)
        want = cu_of(lengths)
        what = "cu_seqlens({lengths})".format(lengths=lengths)
        values = int_list(got, what)
        if values != want.tolist():
            if values == want.tolist()[1:]:
                raise expect.CheckFailure(_("{what} returned {got}: it starts with 0 and has B + 1 entries (sequence "
                                            "b holds rows cu[b]:cu[b + 1])").format(what=what, got=values))
            raise expect.CheckFailure(_("{what} returned {got}, expected {want}: the running sum of the lengths "
                                        "after a leading 0").format(what=what, got=values, want=want.tolist()))
        if got.dtype != torch.int32:
            raise expect.CheckFailure(_("{what} returned dtype {got}: cu_seqlens is torch.int32 (flash-attn and "
                                        "FlashInfer require it)").format(what=what, got=got.dtype))


@pytest.mark.points(3)
def test_pack_and_unpack_round_trip_on_ragged_rows(student):
    """pack keeps the real tokens sequence after sequence (lengths a tensor or a list); unpack puts them back with zeros at padding"""
    call, outcome = CALLS.get(student, "pack")
    x, lengths = call.args
    real = torch.arange(x.shape[1])[None] < lengths[:, None]
    expect.close(expect.value(outcome), x[real], "pack(x [4, 7, 2, 3], lengths {l})".format(l=LENGTHS), mistakes={
        _("pack read the tokens position by position across the batch: keep sequence 0's tokens first, then "
          "sequence 1's, ..."): lambda: x.transpose(0, 1)[real.T]})
    call, outcome = CALLS.get(student, "pack list")
    x_list = call.args[0]
    expect.close(expect.value(outcome), x_list[real], "pack(x [4, 7, 2, 3], lengths {l} as a list)".format(l=LENGTHS))
    call, outcome = CALLS.get(student, "unpack")
    packed, cu, max_len = call.args
    want = torch.zeros(4, max_len, 2, 3)
    want[real] = packed
    expect.close(expect.value(outcome), want, "unpack(packed, cu_seqlens {l}, max_len 7)".format(l=cu.tolist()))


def _mistakes(q, k, v, cq, ck, causal: bool) -> dict:
    def variant(**kw):
        return lambda: varlen_variant(q, k, v, cq, ck, causal, **kw)

    return {
        _("top-left causal: the queries of a sequence are its LAST S_q positions, query i sees keys j <= i + S_k - "
          "S_q (SDPA's is_causal=True is top-left when S_q != S_k: pass an explicit bottom-right mask)"):
            variant(align="top_left"),
        _("heads tiled: query head h reads key/value head h // (H / H_kv) (repeat_interleave, generation's repeat_kv "
          "order), not h % H_kv (repeat)"): variant(tiled=True),
        _("your attention runs over the whole packed batch: each sequence attends only to its own keys, rows "
          "cu_seqlens_k[b]:cu_seqlens_k[b + 1]"): variant(whole=True),
        _("the keys were sliced with the query offsets: sequence b's keys are rows cu_seqlens_k[b]:cu_seqlens_k[b + "
          "1]"): variant(query_offsets=True),
        _("NaN where a query sees no key (causal with S_q > S_k): its output is zeros, as in flash-attn"):
            variant(nan_rows=True),
    }


@pytest.mark.points(1.5)
@pytest.mark.parametrize("case", list(ATTENTION))
def test_varlen_attention_equals_per_sequence_attention_in_float64(student, case):
    """varlen_attention equals each sequence's own attention (float64, 1e-5): GQA 6/2 with D_v != D, causal, chunked prefill S_q < S_k, S_q > S_k"""
    call, outcome = CALLS.get(student, case)
    q, k, v, cq, ck = call.args
    causal = call.kwargs["causal"]
    what = "varlen_attention(q [{tq}, {h}, {d}], k [{tk}, {hkv}, {d}], query lengths {lq}, key lengths {lk}, " \
           "causal={c})".format(tq=q.shape[0], h=q.shape[1], d=q.shape[2], tk=k.shape[0], hkv=k.shape[1],
                                lq=ATTENTION[case][0], lk=ATTENTION[case][1], c=causal)
    expect.close(expect.value(outcome), varlen_variant(q, k, v, cq, ck, causal), what, atol=1e-5, rtol=1e-5,
                 mistakes=_mistakes(q, k, v, cq, ck, causal))


@pytest.mark.points(3)
def test_one_sequence_keys_leave_the_others_unchanged(student):
    """moving one sequence's keys by 50 leaves every other sequence's output unchanged (no attention across sequences)"""
    base = expect.tensor(expect.value(CALLS.get(student, "chunked")[1]), "varlen_attention")
    call, outcome = CALLS.get(student, "moved")
    moved = expect.tensor(expect.value(outcome), "varlen_attention")
    lq = ATTENTION["chunked"][0]
    cq = cu_of(lq)
    for b in range(len(lq)):
        if b != MOVED and (base.shape != moved.shape or not expect.same(base[cq[b]:cq[b + 1]], moved[cq[b]:cq[b + 1]])):
            raise expect.CheckFailure(_("moving the keys of sequence {moved} by 50 changed the output of sequence "
                                        "{b}: a query may only see the keys of its own sequence").format(
                moved=MOVED, b=b))
