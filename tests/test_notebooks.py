"""The notebooks run: solved ones cleanly, untouched released ones top to bottom with one-line notes.

The ten notebooks, and one released notebook filled in with wrong answers, are executed once,
concurrently (one kernel each), by a module-scoped fixture. The visible checks are also tested
directly: they pass on the reference, reject the mistakes the course teaches with one plain
AssertionError sentence and report stubs without a traceback.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import warnings

import nbformat
import pytest
import torch

import solutions as S
from autograder.foundation.spec import NOTEBOOKS
from course.build import REPO, RELEASE_DIR, SOLVED_DIR, execute_notebooks
from tests import release_import
from tests.notebook_outputs import code_cells, stream_text

SOLVED = [REPO / SOLVED_DIR / f"{name}.ipynb" for name in NOTEBOOKS]
RELEASED = [REPO / RELEASE_DIR / f"{name}.ipynb" for name in NOTEBOOKS]


# A student's wrong answers, typed into the released 01_scores (solution cells by grade_id).
WRONG_ANSWERS = {
    "solution_scaled_scores": (
        "def scaled_scores(Q, K):\n"
        "    return Q @ K.T / math.sqrt(Q.shape[-1])  # the K.T mistake\n"
    ),
    "solution_attention_weights": "def attention_weights(scores):\n    return torch.softmax(scores, dim=-2)\n",
    "solution_attend": "def attend(weights, V)\n    return weights @ V\n",  # a SyntaxError: attend is never defined
}


def _with_wrong_answers(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        answer = WRONG_ANSWERS.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
        if answer:
            cell.source = answer
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Run copies of the solved and released folders, so nothing in the repository is touched."""
    tmp = tmp_path_factory.mktemp("run")
    shutil.copytree(REPO / SOLVED_DIR, tmp / "solved")
    shutil.copytree(REPO / RELEASE_DIR, tmp / "released")
    shutil.copytree(REPO / RELEASE_DIR, tmp / "wrong")
    _with_wrong_answers(tmp / "wrong" / "01_scores.ipynb")
    paths = [tmp / "solved" / p.name for p in SOLVED] + [tmp / "released" / p.name for p in RELEASED]
    paths.append(tmp / "wrong" / "01_scores.ipynb")
    results = execute_notebooks(paths, allow_errors=True, timeout=300)
    return {(path.parent.name, path.stem): nb for path, nb in results.items()}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_solved_notebook_runs_top_to_bottom_without_errors_or_stderr(executed, name):
    nb = executed[("solved", name)]
    for cell in code_cells(nb):
        for out in cell.outputs:
            assert out.output_type != "error", f"{name} cell {cell.id}: {out.ename}: {out.evalue}"
            assert not (out.output_type == "stream" and out.name == "stderr"), f"{name} cell {cell.id} wrote to stderr: {out.text!r}"
        assert cell.execution_count is not None, f"{name} cell {cell.id} did not run"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_solved_notebook_visible_checks_all_pass(executed, name):
    checks = list(code_cells(executed[("solved", name)], "check"))
    assert checks, f"{name} has no visible-check cells"
    for cell in checks:
        text = stream_text(cell)
        assert text.startswith("✓"), f"{name} cell {cell.id}: expected a ✓ line, got {text!r}"


def _stub(name):
    return f"{name}: not implemented yet (replace the `raise NotImplementedError` with your code)"


def _demo(name):
    return f"This demo needs your `{name}`, which is not implemented yet: fill it in above, then run this cell again."


# The one-line notes that Run All on each untouched release prints, in order (other output aside).
EXPECTED_NOTES = {
    "01_scores": [_stub("make_projections"), _stub("project_qkv"), _demo("make_projections"), _stub("scaled_scores"),
                  _stub("attention_weights"), _stub("attend"), _demo("make_projections"), _demo("make_projections")],
    "02_masks": [_stub("padding_mask"), _stub("apply_padding_mask"), _stub("causal_mask"), _stub("apply_causal_mask"),
                 _demo("padding_mask")],
    "03_module": [_stub("SelfAttention"), _demo("SelfAttention"), _stub("to_official"),
                  "parity_error: write SelfAttention first: parity_error needs a module to compare",
                  _demo("SelfAttention"), _demo("SelfAttention")],
    "04_multihead": [_stub("split_heads"), _stub("merge_heads"), _stub("MultiHeadSelfAttention"), _demo("MultiHeadSelfAttention")],
    "05_long_sequence": [_stub("attention_matrix_bytes"), _demo("attention_matrix_bytes"), _stub("sdpa_attention"),
                         _stub("chunked_attention"), "(nan: that function is not implemented yet)", _demo("sdpa_attention")],
}


def _notes(nb):
    lines = [line for cell in code_cells(nb) for line in stream_text(cell).splitlines()]
    return [line for line in lines if "not implemented yet" in line or "write SelfAttention first" in line]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_untouched_release_runs_to_the_last_cell_without_an_error_printing_its_notes(executed, name):
    nb = executed[("released", name)]
    cells = list(code_cells(nb))
    for cell in cells:
        errors = [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]
        assert not errors, f"{name} cell {cell.id}: Run All would stop here: {errors}"
        assert not any(o.output_type == "stream" and o.name == "stderr" for o in cell.outputs), f"{name} cell {cell.id} wrote to stderr"
    assert cells[-1].execution_count is not None, f"{name}: the last code cell did not run"
    assert _notes(nb) == EXPECTED_NOTES[name]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_released_notebook_checks_report_stubs_in_one_friendly_line(executed, name):
    for cell in code_cells(executed[("released", name)], "check"):
        assert not any(o.output_type == "error" for o in cell.outputs), f"{name} check cell {cell.id} raised"
        text = stream_text(cell).strip()
        assert "not implemented yet" in text or "first" in text, f"{name} cell {cell.id}: {text!r}"
        assert len(text.splitlines()) == 1, f"{name} cell {cell.id}: expected one line, got {text!r}"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _error_of(nb, grade_id):
    cell = next(c for c in code_cells(nb) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert len(errors) == 1, f"{grade_id}: expected one error output, got {cell.outputs}"
    return errors[0], _ANSI.sub("", "\n".join(errors[0].traceback))


def test_a_failing_check_in_a_real_kernel_shows_one_sentence_alone_as_in_the_generation_assignment(executed):
    nb = executed[("wrong", "01_scores")]
    error, shown = _error_of(nb, "check_attention_weights")
    assert error.ename == "AssertionError"
    assert "softmax must run over the key dimension, dim=-1" in error.evalue
    assert shown == f"AssertionError: {error.evalue}", shown


def test_a_check_after_a_solution_cell_with_a_syntax_error_says_its_cell_raised_instead_of_a_raw_name_error(executed):
    nb = executed[("wrong", "01_scores")]
    error, shown = _error_of(nb, "check_attend")
    assert error.ename == "NameError"
    assert shown == "NameError: attend is not defined: its cell raised an error (a SyntaxError?); fix it and run it again", shown


def test_a_student_error_in_a_real_kernel_names_the_k_t_mistake_and_the_students_line(executed):
    nb = executed[("wrong", "01_scores")]
    error, shown = _error_of(nb, "check_scaled_scores")
    assert error.ename == "AssertionError"
    assert error.evalue.startswith("your `scaled_scores` raised RuntimeError on Q [2, 3, 4], K [2, 5, 4], in the line "
                                   "`return Q @ K.T / math.sqrt(Q.shape[-1])  # the K.T mistake`"), error.evalue
    assert "`.T` reverses every axis" in error.evalue and "K.transpose(-2, -1)" in error.evalue
    assert "and PyTorch deprecates it there" in error.evalue
    assert "visible_checks" not in shown and len(shown.splitlines()) == 1, shown
    cell = next(c for c in code_cells(nb) if c.metadata.get("nbgrader", {}).get("grade_id") == "check_scaled_scores")
    assert stream_text(cell, "stderr") == "", "torch's warning for .T must not appear above the check's sentence"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_graded_cells_point_to_the_hidden_autograder_with_make_grade_and_the_command_for_this_notebook(executed, name):
    for kind in ("solved", "released"):
        graded = list(code_cells(executed[(kind, name)], "graded"))
        assert graded, f"{name} has no graded cell"
        for cell in graded:
            text = stream_text(cell)
            assert "hidden autograder" in text and "    make grade\n" in text, f"{kind} {name} cell {cell.id}"
            assert f"    .venv/bin/python -m autograder grade workspace/self_attention/{name}.ipynb" in text, text
            assert not any(o.output_type == "error" for o in cell.outputs)


# Facts the notebooks' text states, printed by their own cells (regular expressions, on the solved notebooks).
PRINTED_FACTS = {
    "01_scores": [
        r"token (\d+) puts 0\.9\d\d of its weight on token (\d+), token \2 puts 0\.0\d\d on token \1",
        r"PyTorch's warning for K\.T: The use of `x\.T` on tensors of dimension other than 2 .* is deprecated",
        r"d_k = 64, 128 keys, unscaled: mean largest weight 0\.[1-5]\d\d",
        r"mean \|cos\|",
    ],
    "02_masks": [
        re.escape("every key masked, filled with -1e9: [0.25, 0.25, 0.25, 0.25]"),
        re.escape("every key masked, filled with -inf: [nan, nan, nan, nan]"),
        re.escape("every key masked, filled with finfo.min: [0.25, 0.25, 0.25, 0.25]"),
        re.escape("ours passed as key_padding_mask, NaN per sequence: [False, True]"),
        re.escape("the negation passed to SDPA, sequence 1: NaN False | largest |output| 0.0"),
    ],
    "04_multihead": [
        re.escape("(S = 5, head_dim = 4): RuntimeError: view size is not compatible with input tensor's size and stride"),
        re.escape("(S = head_dim = 4): the view runs"),
        r"H = 1: .* 4,096 parameters(.|\n)*H = 8: .* 4,096 parameters",
    ],
    "05_long_sequence": [  # the meter does not see a temporary made and freed inside one operator (issue 47)
        re.escape("logsumexp of a 64 MiB tensor: torch.logsumexp 0.06 MiB seen, the same written as separate "
                  "operators 64.06 MiB"),
    ],
}


@pytest.mark.parametrize("name", sorted(PRINTED_FACTS))
def test_the_notebook_prints_the_facts_its_text_states(executed, name):
    text = "".join(stream_text(cell) for cell in code_cells(executed[("solved", name)]))
    for pattern in PRINTED_FACTS[name]:
        assert re.search(pattern, text), f"{name} no longer prints {pattern!r}"


def test_random_vectors_get_closer_to_orthogonal_as_d_k_grows_while_the_dot_product_spreads(executed):
    text = "".join(stream_text(cell) for cell in code_cells(executed[("solved", "01_scores")]))
    rows = [line.split() for line in text.splitlines() if re.match(r"\s*(4|16|64|256|1024)\s+0\.\d+\s", line)]
    cosines, variances = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
    assert len(rows) == 5 and cosines == sorted(cosines, reverse=True) and variances == sorted(variances), rows


@pytest.mark.parametrize("name", ["01_scores", "02_masks", "04_multihead", "05_long_sequence"])
def test_solved_notebook_renders_inline_png_plots(executed, name):
    images = [o for cell in code_cells(executed[("solved", name)]) for o in cell.outputs if "image/png" in o.get("data", {})]
    assert images, f"{name} should show at least one matplotlib figure"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_solved_notebook_holds_executed_outputs_without_errors(name):
    import nbformat

    nb = nbformat.read(REPO / SOLVED_DIR / f"{name}.ipynb", as_version=4)
    cells = list(code_cells(nb))
    assert all(c.execution_count is not None for c in cells), f"{name} was committed unexecuted (run `make release`)"
    assert not any(o.output_type == "error" or o.get("name") == "stderr" for c in cells for o in c.outputs)


# --------------------------------------------------------------------------- #
# graded_part: stock nbgrader autograde must not hand out free points
# --------------------------------------------------------------------------- #


# (Under nbgrader's Validate the graded cell reruns the visible checks: tests/test_validate.py.)
@pytest.mark.parametrize("mode,expect_stderr", [(None, False), ("autograde", True)])
def test_graded_part_writes_stderr_under_stock_nbgrader_autograde_and_not_in_a_plain_run(mode, expect_stderr):
    env = {k: v for k, v in os.environ.items() if k != "NBGRADER_EXECUTION"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # (it imports from the release: nothing compiled into it)
    if mode:
        env["NBGRADER_EXECUTION"] = mode
    code = "from visible_checks import graded_part; graded_part('masks')"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO / RELEASE_DIR, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "hidden autograder" in done.stdout
    assert bool(done.stderr.strip()) == expect_stderr, done.stderr


# --------------------------------------------------------------------------- #
# Visible checks, called directly
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def vc():
    with release_import.importable(REPO / RELEASE_DIR):
        import visible_checks
    return visible_checks


CHECK_ARGS = {
    "check_make_projections": (S.make_projections,),
    "check_project_qkv": (S.project_qkv,),
    "check_scaled_scores": (S.scaled_scores,),
    "check_attention_weights": (S.attention_weights,),
    "check_attend": (S.attend,),
    "check_padding_mask": (S.padding_mask,),
    "check_causal_mask": (S.causal_mask,),
    "check_apply_padding_mask": (S.apply_padding_mask,),
    "check_apply_causal_mask": (S.apply_causal_mask,),
    "check_self_attention": (S.SelfAttention,),
    "check_to_official": (S.to_official,),
    "check_parity_error": (S.parity_error, S.SelfAttention),
    "check_split_heads": (S.split_heads,),
    "check_merge_heads": (S.merge_heads,),
    "check_multihead": (S.MultiHeadSelfAttention,),
    "check_attention_matrix_bytes": (S.attention_matrix_bytes,),
    "check_sdpa_attention": (S.sdpa_attention,),
    "check_chunked_attention": (S.chunked_attention,),
}


@pytest.mark.parametrize("check_name", sorted(CHECK_ARGS))
def test_visible_check_passes_on_the_reference(vc, capsys, check_name):
    getattr(vc, check_name)(*CHECK_ARGS[check_name])
    assert capsys.readouterr().out.startswith("✓")


def _stub(*args, **kwargs):
    raise NotImplementedError


class _StubModule(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        raise NotImplementedError


@pytest.mark.parametrize("check_name", sorted(CHECK_ARGS))
def test_visible_check_on_a_stub_prints_one_line_instead_of_a_traceback(vc, capsys, check_name):
    args = [(_StubModule if isinstance(a, type) else _stub) for a in CHECK_ARGS[check_name]]
    getattr(vc, check_name)(*args)
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1 and ("not implemented yet" in out or "first" in out), out


def _softmax_over_queries(scores):
    return torch.softmax(scores, dim=-2)


def _unscaled(Q, K):
    return Q @ K.transpose(-2, -1)


def _four_d_mask_on_everything(scores, mask):
    return scores.masked_fill(~mask[:, None, None, :], float("-inf"))


def _permute_then_view(x, num_heads):
    B, S_, D = x.shape
    return x.permute(0, 2, 1).reshape(B, num_heads, S_, D // num_heads)


def _inverted_padding(lengths, seq_len):
    return ~S.padding_mask(lengths, seq_len)


def _sdpa_with_inverted_mask(q, k, v, mask=None, causal=False):
    return S.sdpa_attention(q, k, v, None if mask is None else ~mask | (torch.arange(mask.shape[1]) == 0), causal)


def _chunked_local_causal(q, k, v, mask=None, causal=False, chunk_size=1024):
    out = torch.empty_like(q)
    for start in range(0, q.shape[-2], chunk_size):
        stop = min(start + chunk_size, q.shape[-2])
        block = S.sdpa_attention(q[:, :, start:stop], k[:, :, : stop - start], v[:, :, : stop - start], mask=None, causal=causal) if causal else None
        out[:, :, start:stop] = block if block is not None else S.sdpa_attention(q[:, :, start:stop], k, v, mask)
    return out


def _bytes_of_fp32_always(batch, heads, seq_len, dtype=torch.float32):
    return batch * heads * seq_len * seq_len * 4


class _NoCausal(S.SelfAttention):
    def forward(self, x, mask=None, causal=False):
        return super().forward(x, mask, False)


class _QKVOrderSwapped(S.MultiHeadSelfAttention):
    def forward(self, x, mask=None, causal=False):
        d = x.shape[-1]
        w = self.W_qkv.weight
        swapped = torch.cat([w[2 * d :], w[d : 2 * d], w[:d]])
        with torch.no_grad():
            original = w.clone()
            w.copy_(swapped)
            try:
                return super().forward(x, mask, causal)
            finally:
                w.copy_(original)


def _to_official_without_batch_first(custom):
    official = S.to_official(custom)
    official.batch_first = False
    return official


def _inverted_apply_padding(scores, mask):
    return S.apply_padding_mask(scores, ~mask)


def _causal_mask_without_diagonal(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(-1)


def _apply_causal_masking_the_diagonal(scores):
    S_ = scores.shape[-1]
    return scores.masked_fill(torch.ones(S_, S_, dtype=torch.bool).triu(0), float("-inf"))


def _merge_without_transpose(x):
    B, H, S_, hd = x.shape
    return x.reshape(B, S_, H * hd)


BUGS = [
    ("check_attention_weights", (_softmax_over_queries,), "dim=-1"),
    ("check_scaled_scores", (_unscaled,), "sqrt(d_k)"),
    ("check_apply_padding_mask", (_four_d_mask_on_everything,), "[B, 1, S_k]"),
    ("check_split_heads", (_permute_then_view,), "View as [B, S, H, head_dim] first"),
    ("check_padding_mask", (_inverted_padding,), "expected True"),
    ("check_sdpa_attention", (_sdpa_with_inverted_mask,), "True = real token"),
    ("check_chunked_attention", (_chunked_local_causal,), "causal=True"),
    ("check_attention_matrix_bytes", (_bytes_of_fp32_always,), "float16"),
    ("check_self_attention", (_NoCausal,), "causal=True"),
    ("check_multihead", (_QKVOrderSwapped,), "q, k, v order"),
    ("check_to_official", (_to_official_without_batch_first,), "batch_first=True"),
    ("check_apply_padding_mask", (_inverted_apply_padding,), "the mask is inverted"),
    ("check_causal_mask", (_causal_mask_without_diagonal,), "the diagonal should be True"),
    ("check_apply_causal_mask", (_apply_causal_masking_the_diagonal,), "the diagonal is -inf"),
    ("check_merge_heads", (_merge_without_transpose,), "with no transpose"),
]


@pytest.mark.parametrize("check_name,args,needle", BUGS, ids=[b[0] + "-" + b[1][0].__name__.strip("_") for b in BUGS])
def test_visible_check_rejects_a_common_bug_with_a_clear_message(vc, check_name, args, needle):
    with pytest.raises(AssertionError) as info:
        getattr(vc, check_name)(*args)
    assert needle in str(info.value), str(info.value)


# --------------------------------------------------------------------------- #
# The mistakes the course teaches: one plain sentence each, never a raw error
# --------------------------------------------------------------------------- #


def _scores_with_dot_T(Q, K):
    return Q @ K.T / math.sqrt(Q.shape[-1])


def _scores_with_dot_T_on_4d_keys(Q, K):
    keys_t = K.T if K.dim() == 4 else K.transpose(-2, -1)
    return Q @ keys_t / math.sqrt(Q.shape[-1])


def _scores_with_transpose_1_2(Q, K):
    return Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])


def _padding_for_3d_scores_only(scores, mask):
    return scores.masked_fill(~mask[:, None, :], float("-inf"))


class _SeedMaskSelfAttention(S.SelfAttention):
    """The seed's [B, 1, 1, S] padding mask on single-head [B, S, S] scores."""

    def forward(self, x, mask=None, causal=False):
        Q, K, V = self.W_q(x), self.W_k(x), self.W_v(x)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(1).unsqueeze(1), float("-inf"))
        return self.W_o(self.dropout(torch.softmax(scores, dim=-1)) @ V)


def _split_without_transpose(x, num_heads):
    B, S_, D = x.shape
    return x.view(B, num_heads, S_, D // num_heads)


def _seed_weight_copy(custom):
    d = custom.W_q.weight.shape[1]
    official = torch.nn.MultiheadAttention(d, num_heads=1, batch_first=True)
    with torch.no_grad():
        official.in_proj_weight.view(3, d, d).copy_(torch.cat([custom.W_q.weight, custom.W_k.weight, custom.W_v.weight], dim=0))
    return official


class _RaisingSelfAttention(S.SelfAttention):
    def forward(self, x, mask=None, causal=False):
        return self.W_o(x, mask)  # a TypeError inside the student's module


# (check, the student's code, sentences the message must contain)
TAUGHT_MISTAKES = [
    ("check_scaled_scores", (_scores_with_dot_T,),
     ["your `scaled_scores` raised RuntimeError on Q [2, 3, 4], K [2, 5, 4], in the line `return Q @ K.T / math.sqrt(Q.shape[-1])`",
      "`.T` reverses every axis", "`K.transpose(-2, -1)` or `K.mT`"]),
    ("check_scaled_scores", (_scores_with_dot_T_on_4d_keys,),
     ["raised RuntimeError on Q [2, 3, 4, 16], K [2, 3, 6, 16]", "`.T` reverses every axis"]),
    ("check_scaled_scores", (_scores_with_transpose_1_2,),
     ["raised RuntimeError on Q [2, 3, 4, 16], K [2, 3, 6, 16]", "on 4-D keys [B, H, S_k, d_k], swaps heads and positions"]),
    ("check_apply_padding_mask", (_padding_for_3d_scores_only,),
     ["your `apply_padding_mask` raised RuntimeError on scores [3, 2, 4, 5], mask [3, 5]",
      "It handles 3-D scores but not 4-D ones", "[B, 1, 1, S_k]"]),
    ("check_self_attention", (_SeedMaskSelfAttention,),
     ["your SelfAttention returned [3, 3, 6, 12] instead of [3, 6, 12]", "broadcasts against single-head scores [B, S, S] to [B, B, S, S]",
      "view it as [B, 1, S]"]),
    ("check_split_heads", (_split_without_transpose,), ["x.view(B, H, S, head_dim) with no transpose", ".transpose(1, 2)"]),
    ("check_split_heads", (_permute_then_view,), ["split_heads permutes before it views"]),
    ("check_to_official", (_seed_weight_copy,),
     ["your `to_official` raised RuntimeError", ".view(3, d, d).copy_(", "`copy_` needs a source whose shape broadcasts"]),
    ("check_self_attention", (_RaisingSelfAttention,), ["your `SelfAttention` raised TypeError on x [3, 6, 12], in the line `return self.W_o(x, mask)"]),
]


@pytest.mark.parametrize("check_name,args,needles", TAUGHT_MISTAKES,
                         ids=[f"{m[0]}-{m[1][0].__name__.strip('_')}" for m in TAUGHT_MISTAKES])
def test_visible_check_names_a_taught_mistake_in_one_plain_assertion(vc, capsys, check_name, args, needles):
    with warnings.catch_warnings(), pytest.raises(AssertionError) as info:
        warnings.simplefilter("ignore")  # torch's deprecation warning for .T on more than two axes
        getattr(vc, check_name)(*args)
    assert type(info.value) is AssertionError
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    assert "\n" not in message and "visible_checks" not in message, message
    assert info.value.__cause__ is None and (info.value.__context__ is None or info.value.__suppress_context__), (
        "the raw error must not be chained under the sentence"
    )
    assert capsys.readouterr().out == ""


def test_visible_check_folds_torchs_dot_t_warning_into_its_sentence_instead_of_printing_it(vc):
    """torch warns about `.T` once per process: the sentence says it is deprecated whether or not it warned now."""
    with warnings.catch_warnings(record=True) as caught, pytest.raises(AssertionError) as info:
        warnings.simplefilter("always")
        vc.check_scaled_scores(_scores_with_dot_T)
    assert not caught, [str(w.message) for w in caught]
    assert "`.T` reverses every axis" in str(info.value) and "and PyTorch deprecates it there" in str(info.value)


def _scores_that_warn(Q, K):
    warnings.warn("a warning of the student's own", UserWarning, stacklevel=2)
    return S.scaled_scores(Q, K)


def test_visible_check_lets_the_other_warnings_of_the_students_code_through(vc, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vc.check_scaled_scores(_scores_that_warn)
    assert capsys.readouterr().out.startswith("✓")
    assert {str(w.message) for w in caught} == {"a warning of the student's own"}


def _returns_a_list(Q, K):
    return [[0.0]]


def test_visible_check_turns_an_unusable_return_value_into_a_sentence_not_a_crash_of_its_own(vc):
    with pytest.raises(AssertionError) as info:
        vc.check_scaled_scores(_returns_a_list)
    assert type(info.value) is AssertionError and "should be a torch.Tensor, got list" in str(info.value)


def test_visible_check_failures_render_in_ipython_without_the_frames_of_the_checks(vc):
    with pytest.raises(AssertionError) as info:
        vc.check_attention_weights(_softmax_over_queries)
    assert callable(getattr(info.value, "_render_traceback_", None)), "IPython shows a failure through _render_traceback_"


@pytest.fixture
def no_failed_check(vc):
    """The harness as in a fresh kernel: no check has failed yet (earlier tests here ran failing checks)."""
    failing = vc.harness.failing
    before = dict(failing)
    failing.clear()
    yield failing
    failing.clear()
    failing.update(before)


def test_uses_your_code_prints_one_line_for_a_stub_and_lets_other_errors_through(vc, no_failed_check, capsys):
    with vc.uses_your_code():
        _stub(torch.zeros(1))
        raise AssertionError("never reached")
    assert capsys.readouterr().out == (
        "This demo needs your `_stub`, which is not implemented yet: fill it in above, then run this cell again.\n"
    )
    with pytest.raises(ValueError):
        with vc.uses_your_code():
            raise ValueError("a demo's own error")
    with vc.uses_your_code():
        print("ran")
    assert capsys.readouterr().out == "ran\n"


def test_uses_your_code_turns_a_demos_error_into_one_line_naming_the_check_that_fails(vc, no_failed_check, capsys):
    no_failed_check["check_attend"] = None
    with vc.uses_your_code():
        raise ValueError("x and y must have the same first dimension")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "check_attend" in out and "x and y must have the same first dimension" in out, out
