"""Hidden checks for part paged_attention (assignment serving): paged_attention, paged_to_csr.

The pool is NaN everywhere but in the slots written: the unused slots of a partly filled last block and the blocks
that table padding points to show as NaN in any output that reads them. Tables are random and non-contiguous.
Decoding (one query per sequence, cu_seqlens_q None and an explicit arange), one call mixing a fresh prefill,
decodes and chunks in the middle of prompts (MQA 4/1, D_v = 6), two sequences sharing their first two blocks, and
FlashInfer's page table; all against per-sequence attention in float64 with bottom-right masks. The part borrows
cu_seqlens (checks/lent.py): a mistake there costs points in varlen only.
"""
import pytest
import torch

from autograder.checks import expect, lent
from autograder.checks.cases import Cases
from autograder.checks.serving.common import BLOCK_SIZE, cu_of, int_list, paged_variant, randn
from autograder.foundation import i18n, spec
from autograder.sandbox.batch import Call
from solutions import serving as ref

_ = i18n.message

PART = spec.assignment("serving").part("paged_attention")
PROBES = {"cu_seqlens": [(([1, 1, 1],), {}), ((torch.tensor([3, 0, 2]),), {})]}
DECODE_LENS = [5, 8, 1, 11]  # partly filled last blocks, a full one, a one-token sequence
MIXED_LENS, MIXED_CHUNKS = [7, 1, 12, 4, 9], [3, 1, 5, 4, 1]  # a fresh prefill (4 of 4), decodes, mid-prompt chunks
NUM_BLOCKS = 16


def pool(g, lengths, H_kv: int, D: int, D_v: int, shared: int = 0):
    """(k_cache, v_cache, block_tables, seq_lens): NaN wherever nothing was written; each sequence's blocks drawn at
    random (non-contiguous), the first `shared` blocks of sequence 1 those of sequence 0; table padding points at an
    unused (NaN) block."""
    perm = torch.randperm(NUM_BLOCKS, generator=g).tolist()
    k_cache = torch.full((NUM_BLOCKS, BLOCK_SIZE, H_kv, D), float("nan"))
    v_cache = torch.full((NUM_BLOCKS, BLOCK_SIZE, H_kv, D_v), float("nan"))
    width = max(-(-n // BLOCK_SIZE) for n in lengths) + 1
    tables = torch.full((len(lengths), width), perm[-1], dtype=torch.int32)
    rows = []
    for b, n in enumerate(lengths):
        row = rows[0][:shared] if b == 1 and shared else []
        row = row + [perm.pop(0) for _ in range(-(-n // BLOCK_SIZE) - len(row))]
        rows.append(row)
        tables[b, :len(row)] = torch.tensor(row)
        for p in range(shared * BLOCK_SIZE if b == 1 and shared else 0, n):
            k_cache[row[p // BLOCK_SIZE], p % BLOCK_SIZE] = randn(g, H_kv, D)
            v_cache[row[p // BLOCK_SIZE], p % BLOCK_SIZE] = randn(g, H_kv, D_v)
    return k_cache, v_cache, tables, torch.tensor(lengths, dtype=torch.int32)


def _decode(g, explicit: bool) -> Call:
    k_cache, v_cache, tables, lens = pool(g, DECODE_LENS, 2, 8, 8)
    q = randn(g, len(DECODE_LENS), 6, 8)
    extra = (cu_of([1] * len(DECODE_LENS)),) if explicit else ()
    return Call("paged_attention", q, k_cache, v_cache, tables, lens, *extra)


def _mixed(g) -> Call:
    k_cache, v_cache, tables, lens = pool(g, MIXED_LENS, 1, 8, 6)
    return Call("paged_attention", randn(g, sum(MIXED_CHUNKS), 4, 8), k_cache, v_cache, tables, lens,
                cu_of(MIXED_CHUNKS))


def _shared(g) -> Call:
    k_cache, v_cache, tables, lens = pool(g, [10, 11], 2, 4, 4, shared=2)
    return Call("paged_attention", randn(g, 5, 4, 4), k_cache, v_cache, tables, lens, cu_of([2, 3]))


CSR_TABLES = torch.tensor([[5, 2, 9], [7, 0, 0], [3, 8, 1]], dtype=torch.int32)
CSR_LENS = torch.tensor([9, 4, 12], dtype=torch.int32)  # a partial last page, then two full ones

CALLS = Cases("serving paged_attention", {
    "decode": lambda g: _decode(g, False),
    "decode arange": lambda g: _decode(g, True),
    "mixed": _mixed,
    "shared": _shared,
    "csr": lambda g: Call("paged_to_csr", CSR_TABLES, CSR_LENS, BLOCK_SIZE),
    "csr int64": lambda g: Call("paged_to_csr", CSR_TABLES.long(), CSR_LENS.long(), BLOCK_SIZE),
})


@pytest.fixture(autouse=True)
def paged_attention_borrows(student):
    """paged_attention and paged_to_csr call cu_seqlens, graded in varlen: a wrong one is lent (checks/lent.py)."""
    lent.lending(student, "paged_attention", PART, ref, PROBES)


def check_paged(call, outcome, what: str) -> None:
    q, k_cache, v_cache, tables, lens, *rest = call.args
    cu = rest[0] if rest else None

    def variant(**kw):
        return lambda: paged_variant(q, k_cache, v_cache, tables, lens, cu, **kw)

    got = expect.value(outcome)
    if isinstance(got, torch.Tensor) and got.is_floating_point() and got.isnan().any():
        raise expect.CheckFailure(_("{what} returned NaN: it read slots that were never written (the rest of a partly "
                                    "filled last block, or the blocks that table padding points to). Read only the "
                                    "first ceil(seq_len / block_size) entries of a table and the first seq_len "
                                    "slots").format(what=what))
    expect.close(got, paged_variant(q, k_cache, v_cache, tables, lens, cu), what, atol=1e-5, rtol=1e-5, mistakes={
        _("top-left alignment: a sequence's queries are its LAST q_len positions (query i sees keys j <= i + seq_len "
          "- q_len), not positions 0 .. q_len - 1"): variant(align="top_left"),
        _("heads tiled: query head h reads key/value head h // (H / H_kv) (repeat_interleave), not h % H_kv"):
            variant(tiled=True),
        _("you assumed a sequence's blocks are contiguous in the pool: read each block through the block table"):
            variant(contiguous=True),
    })


@pytest.mark.points(3.5)
@pytest.mark.parametrize("case", ["decode", "decode arange"])
def test_decode_over_random_tables_reads_only_written_slots(student, case):
    """decoding (one query per sequence) over random non-contiguous tables equals float64 attention; NaN in every unused slot is never read (GQA 6/2)"""
    call, outcome = CALLS.get(student, case)
    what = "paged_attention(one query each, seq_lens {lens}, cu_seqlens_q={cu})".format(
        lens=DECODE_LENS, cu="None" if case == "decode" else "arange")
    check_paged(call, outcome, what)


@pytest.mark.points(7)
def test_one_call_mixes_prefill_decodes_and_chunks(student):
    """one call serves a fresh prefill, decodes and mid-prompt chunks: chunks [3, 1, 5, 4, 1] of sequences [7, 1, 12, 4, 9], MQA 4/1, D_v = 6, bottom-right"""
    call, outcome = CALLS.get(student, "mixed")
    check_paged(call, outcome, "paged_attention(chunks {c} of sequences {s})".format(c=MIXED_CHUNKS, s=MIXED_LENS))


@pytest.mark.points(3)
def test_two_sequences_sharing_their_first_blocks(student):
    """two sequences whose tables share their first two blocks each read the shared keys and their own"""
    call, outcome = CALLS.get(student, "shared")
    check_paged(call, outcome, "paged_attention(two sequences of 10 and 11 sharing two blocks)")


@pytest.mark.points(3)
def test_paged_to_csr_values_and_dtype(student):
    """paged_to_csr gives FlashInfer's kv_indptr, kv_indices, kv_last_page_len (int32; a full last page counts block_size)"""
    _call, outcome = CALLS.get(student, "csr")
    got = expect.value(outcome)
    want = ref.paged_to_csr(CSR_TABLES, CSR_LENS, BLOCK_SIZE)
    what = "paged_to_csr(tables, seq_lens {lens}, block_size {bs})".format(lens=CSR_LENS.tolist(), bs=BLOCK_SIZE)
    if not (isinstance(got, (tuple, list)) and len(got) == 3):
        raise expect.CheckFailure(_("{what} should return three tensors (kv_indptr, kv_indices, kv_last_page_len), "
                                    "got {kind}").format(what=what, kind=type(got).__name__))
    names = ("kv_indptr", "kv_indices", "kv_last_page_len")
    for name, g, w in zip(names, got, want):
        values = int_list(g, "{what}'s {name}".format(what=what, name=name))
        if values != w.tolist():
            if name == "kv_last_page_len" and values == (CSR_LENS % BLOCK_SIZE).tolist():
                raise expect.CheckFailure(_("kv_last_page_len is seq_len % block_size: 0 for a full last page, where "
                                            "FlashInfer wants block_size (1 <= last_page_len <= block_size)"))
            raise expect.CheckFailure(_("{what}: {name} is {got}, expected {want}").format(
                what=what, name=name, got=values, want=w.tolist()))
        if g.dtype != torch.int32:
            raise expect.CheckFailure(_("{what}: {name} has dtype {got}, FlashInfer's arrays are torch.int32").format(
                what=what, name=name, got=g.dtype))
    wide = expect.value(CALLS.get(student, "csr int64")[1])
    if not (isinstance(wide, (tuple, list)) and len(wide) == 3 and all(
            isinstance(t, torch.Tensor) and t.dtype == torch.int32 for t in wide)):
        raise expect.CheckFailure(_("paged_to_csr of int64 block tables and seq_lens should still return int32 arrays "
                                    "(convert what you return: the inputs may be any integer dtype)"))


