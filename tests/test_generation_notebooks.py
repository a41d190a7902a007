"""The generation notebooks run: solved ones cleanly, untouched released ones to the end without any error,
and their visible checks pass on the reference, report stubs in one line and name common bugs.

The eight notebooks (four solved, four released) are executed once, concurrently, by a module fixture.
"""
from __future__ import annotations

import re
import shutil
import sys

import pytest
import torch

from course.build import REPO, TARGET_BY_ID, execute_notebooks
from autograder.foundation.spec import GENERATION
from solutions import generation as G
from tests import release_import
from tests.notebook_outputs import code_cells, stream_text

TARGET = TARGET_BY_ID["generation"]
NOTEBOOKS = [m.NAME for m in TARGET.modules]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("generation-run")
    shutil.copytree(REPO / TARGET.solved, tmp / "solved")
    shutil.copytree(REPO / TARGET.release, tmp / "released")
    paths = [tmp / kind / f"{name}.ipynb" for kind in ("solved", "released") for name in NOTEBOOKS]
    results = execute_notebooks(paths, allow_errors=True, timeout=300)
    return {(path.parent.name, path.stem): nb for path, nb in results.items()}


@pytest.mark.parametrize("kind", ["solved", "released"])
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_generation_notebook_runs_to_the_end_without_errors_or_stderr(executed, kind, name):
    """Run All reaches the end: in the solved notebook, and in the untouched release too (stubs say so in one line)"""
    for cell in code_cells(executed[(kind, name)]):
        assert cell.execution_count is not None, f"{kind} {name} cell {cell.id} did not run"
        for out in cell.outputs:
            assert out.output_type != "error", f"{kind} {name} cell {cell.id}: {out.ename}: {out.evalue}"
            assert not (out.output_type == "stream" and out.name == "stderr"), f"{kind} {name} {cell.id}: {out.text!r}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_generation_checks_pass_when_solved_and_say_not_implemented_in_one_line_when_released(executed, name):
    solved, released = list(code_cells(executed[("solved", name)], "check")), list(
        code_cells(executed[("released", name)], "check"))
    assert solved and len(solved) == len(released)
    for cell in solved:
        assert stream_text(cell).startswith("✓"), f"{name} {cell.id}: {stream_text(cell)!r}"
    for cell in released:
        text = stream_text(cell).strip()
        assert len(text.splitlines()) == 1 and ("not implemented yet" in text or "first" in text), text


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_generation_demos_print_one_line_per_missing_function_in_the_release(executed, name):
    for cell in code_cells(executed[("released", name)]):
        if "with uses_your_code():" in cell.source:
            text = stream_text(cell)
            assert text.count("not implemented yet") == 1, f"{name} {cell.id}: {text!r}"
            assert not any("image/png" in o.get("data", {}) for o in cell.outputs), f"{name} {cell.id}: empty plot"


@pytest.mark.parametrize("name", ["01_positions", "02_kv_cache", "03_cross_attention"])
def test_solved_generation_notebook_draws_its_plots(executed, name):
    assert any("image/png" in o.get("data", {}) for c in code_cells(executed[("solved", name)]) for o in c.outputs)


def test_the_positions_notebook_prints_that_rope_turns_faster_than_the_sinusoidal_encoding(executed):
    text = "".join(stream_text(c) for c in code_cells(executed[("solved", "01_positions")]))
    assert "10000 ** (-2 * 1 / 64) = 0.75 rad per position" in text and "10000 ** (-2 * 1 / 512) = 0.96 rad per position" in text


def test_the_kv_cache_notebook_prints_the_claims_it_makes(executed):
    """top-left is_causal differs from causal_lower_right; 2 GiB at 4k and 64 GiB at 128k for the 32-layer model"""
    text = "".join(stream_text(c) for c in code_cells(executed[("solved", "02_kv_cache")]))
    assert "SDPA with is_causal=True equals SDPA with this mask: True" in text
    assert "SDPA with your mask vs causal_lower_right: largest difference 0.0e+00" in text
    assert "batch 1,   4,096 tokens:   2.0 GiB" in text and "batch 1, 131,072 tokens:  64.0 GiB" in text
    assert "GQA, H_kv = H/4 = 8  at 131,072 tokens:  16.00 GiB" in text


def test_the_decoder_notebook_prints_the_claims_it_makes(executed):
    """the two position bugs are visible, the cache holds H_kv heads, GQA's memory, the wavelengths, Meta's form, the
    two causal conventions, the left-padded batch equal to each prompt alone with per-sequence or batch-wide RoPE
    positions (not with a learned position table), two stacked layers spreading a padded query's NaN, and in training
    zeroing after the layer leaving NaN gradients where a -1e9 fill or 0 computed inside the attention leaves none"""
    text = "".join(stream_text(c) for c in code_cells(executed[("solved", "04_decoder")]))
    gaps = {line.rpartition(": ")[2]: float(line.split()[0]) for line in text.splitlines() if "of the largest |output|" in line}
    assert gaps["positions len(cache), len(cache) + 1"] < 1e-5
    assert gaps["every new token at position 0"] > 1e-2 and gaps["cached keys rotated again"] > 1e-2
    assert "the cache receives keys of shape [1, 2, 5, 4]" in text
    assert "(repeat after reading): 1.00 GiB" in text and "(repeat before appending): 4.00 GiB" in text
    assert "base    10,000: slowest pair turns once every       54,410 positions; 14 of 64 pairs" in text
    meta = next(line for line in text.splitlines() if line.startswith("Meta's form vs your apply_rope"))
    assert float(meta.split("largest difference ")[1].split(",")[0]) < 1e-5
    assert text.count("equal: True") == 3 and "equal: False" not in text
    rope = next(line for line in text.splitlines() if line.startswith("RoPE, positions from the first column"))
    assert "same tokens True" in rope and float(rope.split("relative ")[1].rstrip(")")) < 1e-5
    assert "a learned position table, per-sequence positions: every prompt as if alone True" in text
    assert "a learned position table, positions from the first column: every prompt as if alone False" in text
    left, zeroed = text.split("padded rows left as they are")[1].split("padded rows zeroed")
    zeroed = zeroed.split("zeroed, two layers")[0]
    assert "after layer 2: real tokens with NaN per sequence [0, 0, 0]" not in left
    assert zeroed.count("real tokens with NaN per sequence [0, 0, 0]") == 2
    assert "your layer: a padded query that sees no key gives NaN: True (True: a -inf fill" in text
    fills = {line.split(": ")[0]: line.split(": ", 1)[1] for line in text.splitlines()
             if "parameters with a NaN gradient" in line}
    assert fills == {"-inf": "real tokens with NaN per sequence [0, 2, 4], parameters with a NaN gradient 8 of 8",
                     "-1e9": "real tokens with NaN per sequence [0, 0, 0], parameters with a NaN gradient 0 of 8",
                     "-inf, zeroed after": "real tokens with NaN per sequence [0, 0, 0], parameters with a NaN gradient 6 of 8",
                     "0 inside": "real tokens with NaN per sequence [0, 0, 0], parameters with a NaN gradient 0 of 8"}
    assert "-1e9 in float16: -inf; torch.finfo(torch.float16).min: -65504.0" in text
    assert "SDPA, queries that see no key: [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]" in text


@pytest.mark.parametrize("kind", ["solved", "released"])
def test_generation_graded_cells_point_to_the_hidden_autograder(executed, kind):
    graded = [c for name in NOTEBOOKS for c in code_cells(executed[(kind, name)], "graded")]
    assert len(graded) == len(GENERATION.parts)
    for cell in graded:
        text = stream_text(cell)
        assert "hidden autograder" in text and "    make grade\n" in text, text
        assert re.search(r"    \.venv/bin/python -m autograder grade workspace/generation/0\d_\w+\.ipynb", text), text


# --------------------------------------------------------------------------- #
# The visible checks, called directly
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def vc():
    sys.modules.pop("visible_checks", None)
    try:
        with release_import.importable(REPO / TARGET.release):
            import visible_checks
    finally:
        sys.modules.pop("visible_checks", None)  # the first assignment's tests import their own
    return visible_checks


CHECK_ARGS = {
    "check_sinusoidal_positions": (G.sinusoidal_positions,),
    "check_apply_rope": (G.apply_rope,),
    "check_decode_causal_mask": (G.decode_causal_mask,),
    "check_kv_cache": (G.KVCache,),
    "check_cached_self_attention": (G.CachedSelfAttention, G.KVCache),
    "check_kv_cache_bytes": (G.kv_cache_bytes,),
    "check_repeat_kv": (G.repeat_kv,),
    "check_cross_attention": (G.CrossAttention,),
    "check_decoder_attention": (G.DecoderAttention,),
}


@pytest.mark.parametrize("check_name", sorted(CHECK_ARGS))
def test_generation_visible_check_passes_on_the_reference(vc, capsys, check_name):
    getattr(vc, check_name)(*CHECK_ARGS[check_name])
    assert capsys.readouterr().out.startswith("✓")


def _stub(*args, **kwargs):
    raise NotImplementedError


class _Stub:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError


@pytest.mark.parametrize("check_name", sorted(CHECK_ARGS))
def test_generation_visible_check_on_a_stub_prints_one_line(vc, capsys, check_name):
    getattr(vc, check_name)(*[(_Stub if isinstance(a, type) else _stub) for a in CHECK_ARGS[check_name]])
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1 and "not implemented yet" in out, out


def _top_left(S_q, S_k):
    return torch.ones(S_q, S_k, dtype=torch.bool).tril()


def _half_split_rope(x, positions):
    d = x.shape[-1]
    perm = torch.stack([torch.arange(d // 2), torch.arange(d // 2) + d // 2], 1).flatten()
    return G.apply_rope(x[..., perm], positions)[..., torch.argsort(perm)]


def _tiled(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)


def _keys_only_bytes(batch, layers, kv_heads, head_dim, seq_len, dtype=torch.float16):
    return G.kv_cache_bytes(batch, layers, kv_heads, head_dim, seq_len, dtype) // 2


class _CacheOnHeads(G.KVCache):
    def append(self, k, v):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], 1), torch.cat([self.v, v], 1)
        return self.k, self.v


class _TopLeftModule(G.CachedSelfAttention):
    def forward(self, x, cache=None):
        B, S_new, d = x.shape
        q, k, v = (t.view(B, S_new, self.num_heads, -1).transpose(1, 2) for t in self.W_qkv(x).chunk(3, -1))
        if cache is not None:
            k, v = cache.append(k, v)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.W_o(out.transpose(1, 2).reshape(B, S_new, d))


class _HFIsCausalModule(G.CachedSelfAttention):
    """Hugging Face's SDPA pattern: is_causal only when several queries come (right for a prompt and one token)."""

    def forward(self, x, cache=None):
        B, S_new, d = x.shape
        q, k, v = (t.view(B, S_new, self.num_heads, -1).transpose(1, 2) for t in self.W_qkv(x).chunk(3, -1))
        if cache is not None:
            k, v = cache.append(k, v)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=S_new > 1)
        return self.W_o(out.transpose(1, 2).reshape(B, S_new, d))


class _CausalCross(G.CrossAttention):
    def forward(self, x, context, context_mask=None):
        S_q, S_k = x.shape[1], context.shape[1]
        future = torch.ones(S_q, S_k, dtype=torch.bool).triu(1)
        mask = torch.ones(x.shape[0], S_k, dtype=torch.bool) if context_mask is None else context_mask
        rows = [super(_CausalCross, self).forward(x[:, i : i + 1], context, mask & ~future[i]) for i in range(S_q)]
        return torch.cat(rows, 1)


class _DecoderAtZero(G.DecoderAttention):
    """The new tokens rotated from position 0, whatever the cache holds."""

    def forward(self, x, cache=None, positions=None, key_mask=None):
        return super().forward(x, cache, torch.arange(x.shape[1]) if positions is None else positions, key_mask)


class _DecoderCachesAllHeads(G.DecoderAttention):
    """repeat_kv before appending: the cache holds H heads (the outputs stay right)."""

    def forward(self, x, cache=None, positions=None, key_mask=None):
        n_rep = self.num_heads // self.num_kv_heads

        class Repeating:  # hands the cache H heads, gives the layer back its H_kv
            def append(self, k, v):
                k_all, v_all = cache.append(G.repeat_kv(k, n_rep), G.repeat_kv(v, n_rep))
                return k_all[:, ::n_rep], v_all[:, ::n_rep]

            def __len__(self):
                return len(cache)

        return super().forward(x, None if cache is None else Repeating(), positions, key_mask)


class _KeysFromX(G.CrossAttention):
    def forward(self, x, context, context_mask=None):
        return super().forward(x, x, None)  # keys and values projected from x, not from the context


BUGS = [
    ("check_decode_causal_mask", (_top_left,), "top-left"),
    ("check_apply_rope", (_half_split_rope,), "not the half-split pairing"),
    ("check_cross_attention", (_KeysFromX,), "Keys and values must come from `context`"),
    ("check_apply_rope", (_half_split_rope,), "x[..., 0::2] with x[..., 1::2]"),
    ("check_repeat_kv", (_tiled,), "tiled"),
    ("check_kv_cache_bytes", (_keys_only_bytes,), "count the values too"),
    ("check_kv_cache", (_CacheOnHeads,), "append along dim=2"),
    ("check_cached_self_attention", (_TopLeftModule, G.KVCache), "top-left aligned (is_causal=True"),
    ("check_cached_self_attention", (_HFIsCausalModule, G.KVCache), "is_causal=S_new > 1, Hugging Face's pattern"),
    ("check_cross_attention", (_CausalCross,), "no causal mask"),
    ("check_decoder_attention", (_DecoderAtZero,), "received the keys rotated from position 0"),
    ("check_decoder_attention", (_DecoderCachesAllHeads,), "4 heads"),
]


@pytest.mark.parametrize("check_name,args,needle", BUGS, ids=[b[0] + "-" + b[1][0].__name__.strip("_") for b in BUGS])
def test_generation_visible_check_names_a_common_bug_in_one_assertion_sentence(vc, check_name, args, needle):
    with pytest.raises(AssertionError) as info:
        getattr(vc, check_name)(*args)
    assert needle in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_a_bug_raised_inside_student_code_becomes_one_sentence_naming_the_line(vc):
    def broken(seq_len, d_model):
        return torch.zeros(seq_len, d_model) @ torch.zeros(3, 3)  # a shape error of the student's own

    with pytest.raises(AssertionError) as info:
        vc.check_sinusoidal_positions(broken)
    message = str(info.value)
    assert message.startswith("your `sinusoidal_positions` raised RuntimeError in the line `return torch.zeros")
    assert info.value._render_traceback_() == [f"AssertionError: {message}"]
