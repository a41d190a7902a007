"""The `serving` notebooks, in both editions: untouched released ones run to the end with one line per stub; the solved
ones (executed by the course build, which stops on any error or stderr, and committed) pass every visible check and
print the figures the contract names; the visible checks pass on the reference, pass a right function written
differently, and name each common mistake in one plain sentence, in Chinese in the Chinese edition.

Only the six released English notebooks run here, concurrently, in one module fixture (about 10 s of wall time on
two cores); the solved ones are read as `make release` executed them.
"""
from __future__ import annotations

import inspect
import os
import re
import shutil

import nbformat
import pytest
import torch

from course.build import REPO, TARGET_BY_ID, execute_notebooks
from course.content import serving
from solutions import serving as S
from tests import release_import
from tests.notebook_outputs import code_cells, stream_text

EDITIONS = {"en": TARGET_BY_ID["serving"], "zh": TARGET_BY_ID["serving_zh"]}
NOTEBOOKS = [m.NAME for m in serving.MODULES]
CHINESE = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The checks' tensors are tiny: on a loaded machine, torch's thread pool costs ten times their work."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serving-run") / "released"
    shutil.copytree(REPO / EDITIONS["en"].release, folder)
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # the kernels inherit it
    try:
        results = execute_notebooks([folder / f"{name}.ipynb" for name in NOTEBOOKS], allow_errors=True, timeout=300)
    finally:
        os.environ.pop("OMP_NUM_THREADS") if saved is None else os.environ.__setitem__("OMP_NUM_THREADS", saved)
    return {path.stem: nb for path, nb in results.items()}


@pytest.fixture(scope="module")
def solved():
    return {(lang, name): nbformat.read(REPO / target.solved / f"{name}.ipynb", as_version=4)
            for lang, target in EDITIONS.items() for name in NOTEBOOKS}


def test_untouched_released_notebooks_run_to_the_end_saying_not_implemented_once_per_check(released):
    for name in NOTEBOOKS:
        for cell in code_cells(released[name]):
            assert cell.execution_count is not None, f"{name} cell {cell.id} did not run"
            for out in cell.outputs:
                assert out.output_type != "error", f"{name} {cell.id}: {out.ename}: {out.evalue}"
                assert not (out.output_type == "stream" and out.name == "stderr"), f"{name} {cell.id}: {out.text!r}"
        for cell in code_cells(released[name], "check"):
            text = stream_text(cell).strip()
            assert len(text.splitlines()) == 1 and "not implemented yet" in text, f"{name} {cell.id}: {text!r}"
        for cell in code_cells(released[name]):
            if "with uses_your_code():" in cell.source:
                assert stream_text(cell).count("not implemented yet") == 1, f"{name} {cell.id}: {stream_text(cell)!r}"


def test_solved_notebooks_pass_every_visible_check_in_both_editions(solved):
    for (lang, name), nb in solved.items():
        cells = list(code_cells(nb, "check"))
        assert cells, name
        for cell in cells:
            text = stream_text(cell)
            assert text.startswith("✓") and text.count("\n") == 1, f"{lang} {name} {cell.id}: {text!r}"
            assert bool(CHINESE.search(text)) == (lang == "zh"), f"{lang} {name}: {text!r}"


def test_the_solved_notebooks_print_the_figures_of_the_contract(solved):
    """1.77x; 6 blocks = 24 slots vs 30 and 6,144; 33 slots in 10 blocks vs 60; 4 blocks with sharing vs 6 and 27 of 75
    prompt tokens (the contract's figure); 14 vs 19 steps, 69 vs 98 tokens, 10 vs 14 blocks, 29 of 85 with prefix caching; a sink cache of 6 vs
    16 and distances 5 vs 15"""
    text = {name: "".join(stream_text(c) for c in code_cells(solved[("en", name)])) for name in NOTEBOOKS}
    assert "padded       3,456 bytes, packed       1,952 bytes (1.77x)" in text["01_varlen"]
    assert "blocks used: 6 = 24 slots; padded to the longest: 30 slots; padded to max_model_len 2048: 6,144 slots" in \
        text["02_paged_cache"]
    assert "key slots read: 33 in 10 blocks; a padded [B, max_len] cache: 60 slots" in text["03_paged_attention"]
    assert "B hits 0 tokens; blocks used for A + B: 6" in text["04_prefix_sharing"]
    assert "B hits 8 tokens; blocks used for A + B: 4" in text["04_prefix_sharing"]
    assert "27 of 75 prompt tokens computed with a shared system prompt" in text["04_prefix_sharing"]
    batching = text["05_continuous_batching"]
    assert re.search(r"continuous: 14 steps \(\d+ mixed\), 69 tokens computed for 28 generated, peak 10 blocks", batching)
    assert re.search(r"static    : 19 steps \(0 mixed\), 98 tokens computed for 28 generated, peak 14 blocks", batching)
    assert "same tokens both ways: True" in batching
    assert "prefix caching False: 85 of 85 prompt tokens computed" in batching
    assert "prefix caching True : 29 of 85 prompt tokens computed" in batching  # same-step admissions miss
    assert "cache length 6 vs a full cache 16; largest query-key distance 5 vs 15" in text["06_attention_sinks"]
    gaps = re.findall(r"largest difference ([\d.e+-]+)", "".join(text.values()))
    assert len(gaps) >= 3 and all(float(g) < 1e-5 for g in gaps), gaps


def test_serving_graded_cells_point_to_the_hidden_autograder(released):
    for name in NOTEBOOKS:
        graded = list(code_cells(released[name], "graded"))
        assert len(graded) == 1
        assert f"autograder grade workspace/serving/{name}.ipynb\n" in stream_text(graded[0])


# --------------------------------------------------------------------------- #
# The visible checks, called directly
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def vc():
    out = {}
    for lang, target in EDITIONS.items():
        out[lang] = release_import.load(REPO / target.release, f"visible_checks_serving_{lang}")
        out[lang].use_language(lang)
    return out


REFERENCE_ARGS = {
    "check_cu_seqlens": (S.cu_seqlens,), "check_pack": (S.pack,), "check_unpack": (S.unpack,),
    "check_varlen_attention": (S.varlen_attention,), "check_block_allocator": (S.BlockAllocator,),
    "check_reshape_and_cache": (S.reshape_and_cache,), "check_paged_kv_cache": (S.PagedKVCache,),
    "check_paged_attention": (S.paged_attention,), "check_paged_to_csr": (S.paged_to_csr,),
    "check_block_hashes": (S.block_hashes,), "check_prefix_caching": (S.PagedKVCache,),
    "check_paged_decoder_attention": (S.PagedDecoderAttention,),
    "check_continuous_batching": (S.continuous_batching_generate, S.PagedDecoderAttention, S.PagedKVCache),
    "check_static_batching": (S.static_batching_generate, S.PagedDecoderAttention, S.PagedKVCache),
    "check_sink_kv_cache": (S.SinkKVCache,), "check_sink_decoder_attention": (S.SinkDecoderAttention, S.SinkKVCache),
}


def test_every_serving_visible_check_passes_on_the_reference(vc, capsys):
    assert set(REFERENCE_ARGS) == {n for n in vc["en"].__all__ if n.startswith("check_")}
    for check_name, args in REFERENCE_ARGS.items():
        getattr(vc["en"], check_name)(*args)
        out = capsys.readouterr().out
        assert out.startswith("✓") and out.count("\n") == 1, f"{check_name}: {out!r}"


def mutant(name: str, *edits: str):
    """The reference's `name` with textual edits (old, new, old, new, ...; each must apply), defined next to the
    reference's names."""
    source = inspect.getsource(getattr(S, name))
    for old, new in zip(edits[::2], edits[1::2]):
        assert old in source, (name, old)
        source = source.replace(old, new)
    namespace = dict(vars(S))
    exec(source, namespace)  # the reference, edited by this test
    return namespace[name]


# (check, the mistake, the arguments after the mutant, words of the English message)
MISTAKES = [
    ("check_cu_seqlens", ("cu_seqlens", "dtype=torch.int32", "dtype=torch.int64"), (), "int32"),
    ("check_varlen_attention", ("varlen_attention", "tril(diagonal=S_k - S_q)", "tril(diagonal=0)"), (), "top-left"),
    ("check_varlen_attention", ("varlen_attention", "weights = torch.where(allowed.any(dim=-1)[:, None], weights, 0.0)", "pass"), (), "NaN"),
    ("check_block_allocator", ("BlockAllocator", "self.free_queue.pop(0)", "self.free_queue.pop()"), (), "least recently freed"),
    ("check_reshape_and_cache", ("reshape_and_cache", "real = slots >= 0", "real = slots >= -1"), (), "slot -1"),
    ("check_reshape_and_cache", ("reshape_and_cache", "block, offset = slots[real] // block_size, slots[real] % block_size", "block, offset = slots[real] % key_cache.shape[0], slots[real] // key_cache.shape[0]"), (), "swapped"),
    ("check_paged_kv_cache", ("PagedKVCache", "if needed > self.allocator.num_free:", "if needed > self.allocator.num_free + 99:"), (), "change nothing"),
    ("check_paged_attention", ("paged_attention", "tril(diagonal=S_k - S_q)", "tril(diagonal=0)"), (), "top-left"),
    ("check_paged_attention", ("paged_attention", "reshape(-1, H_kv, D)[:S_k]", "reshape(-1, H_kv, D); S_k = len(k)",
                                "reshape(-1, H_kv, v_cache.shape[3])[:S_k]", "reshape(-1, H_kv, v_cache.shape[3])"),
     (), "NaN"),
    ("check_paged_to_csr", ("paged_to_csr", "((seq_lens - 1) % block_size + 1)", "(seq_lens % block_size)"), (), "full last page"),
    ("check_block_hashes", ("block_hashes", "hash((parent, tuple(ids[start:start + block_size])))", "hash(tuple(ids[start:start + block_size]))"), (), "chain"),
    ("check_block_hashes", ("block_hashes", "range(0, len(ids) - block_size + 1, block_size)", "range(0, len(ids), block_size)"), (), "only full blocks"),
    ("check_prefix_caching", ("PagedKVCache", "ids[:len(ids) - 1]", "ids"), (), "last prompt token"),
    ("check_prefix_caching", ("PagedKVCache", "and self.allocator.refcount(table[-1]) > 1", "and False"), (), "copy-on-write"),
    ("check_prefix_caching", ("PagedKVCache", "del self.block_of_hash[self.hash_of_block.pop(block)]", "pass"), (),
     "leaves the hash map"),
    ("check_paged_decoder_attention", ("PagedDecoderAttention", "cache.k_cache[self.layer_idx], cache.v_cache[self.layer_idx]", "cache.k_cache[0], cache.v_cache[0]"), (), "layer 0"),
    ("check_continuous_batching", ("continuous_batching_generate", "logits[int(cu[i + 1]) - 1]", "logits[int(cu[i])]"), (S.PagedDecoderAttention, S.PagedKVCache), "greedy decoding"),
    ("check_sink_kv_cache", ("SinkKVCache", "k_all[..., :self.num_sink, :], k_all[..., -self.window:, :]", "k_all[..., -(self.window + self.num_sink):, :]"), (), "pure window"),
    ("check_sink_decoder_attention", ("SinkDecoderAttention", "k = apply_rope(k, positions, self.rope_base)", "k = k"), (S.SinkKVCache,), "dense pass"),
]


@pytest.mark.parametrize("check_name,edit,rest,needle", MISTAKES, ids=[f"{m[0]}-{m[3]}" for m in MISTAKES])
def test_a_serving_visible_check_names_a_common_mistake_in_one_plain_sentence_in_both_languages(vc, check_name, edit,
                                                                                               rest, needle):
    wrong = mutant(*edit)
    for lang in EDITIONS:
        with pytest.raises(AssertionError) as info:
            getattr(vc[lang], check_name)(wrong, *rest)
        message = str(info.value)
        assert "\n" not in message and info.value._render_traceback_() == [f"AssertionError: {message}"]
        assert (needle in message) if lang == "en" else bool(CHINESE.search(message)), message


def test_a_serving_visible_check_passes_right_code_written_differently(vc, capsys):
    """pack by a loop over rows; SDPA with an explicit bottom-right mask, one sequence at a time"""
    def pack(x, lengths):
        return torch.cat([x[b, :int(n)] for b, n in enumerate(lengths)])

    def varlen_attention(q, k, v, cu_q, cu_k, causal=False):
        out = []
        for b in range(len(cu_q) - 1):
            qb, kb, vb = q[cu_q[b]:cu_q[b + 1]], k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]]
            n_rep = q.shape[1] // k.shape[1]
            kb, vb = kb.repeat_interleave(n_rep, 1), vb.repeat_interleave(n_rep, 1)
            mask = torch.ones(len(qb), len(kb), dtype=torch.bool)
            mask = mask.tril(len(kb) - len(qb)) if causal else mask
            o = torch.nn.functional.scaled_dot_product_attention(
                qb.transpose(0, 1), kb.transpose(0, 1), vb.transpose(0, 1), attn_mask=mask).transpose(0, 1)
            out.append(torch.where(mask.any(-1)[:, None, None], o, 0.0))
        return torch.cat(out)

    for check_name, right in (("check_pack", pack), ("check_varlen_attention", varlen_attention)):
        getattr(vc["en"], check_name)(right)
        assert capsys.readouterr().out.startswith("✓"), check_name


def test_a_stub_prints_one_line(vc, capsys):
    def cu_seqlens(lengths):
        raise NotImplementedError

    vc["en"].check_cu_seqlens(cu_seqlens)
    assert capsys.readouterr().out == "cu_seqlens: not implemented yet (replace the `raise NotImplementedError` with your code)\n"
