"""The notebooks run: solved ones cleanly, released ones with only NotImplementedError and friendly checks.

All ten notebooks are executed once, concurrently (one kernel each), by a module-scoped fixture.
The visible checks are also tested directly: they pass on the reference, reject common bugs with
a clear AssertionError and report stubs without a traceback.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch

import solutions as S
from autograder.spec import NOTEBOOKS
from course.build import REPO, RELEASE_DIR, SOLVED_DIR, execute_notebooks

SOLVED = [REPO / SOLVED_DIR / f"{name}.ipynb" for name in NOTEBOOKS]
RELEASED = [REPO / RELEASE_DIR / f"{name}.ipynb" for name in NOTEBOOKS]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Run copies of the solved and released folders, so nothing in the repository is touched."""
    tmp = tmp_path_factory.mktemp("run")
    shutil.copytree(REPO / SOLVED_DIR, tmp / "solved")
    shutil.copytree(REPO / RELEASE_DIR, tmp / "released")
    paths = [tmp / "solved" / p.name for p in SOLVED] + [tmp / "released" / p.name for p in RELEASED]
    results = execute_notebooks(paths, allow_errors=True, timeout=300)
    return {(path.parent.name, path.stem): nb for path, nb in results.items()}


def code_cells(nb, role=None):
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id", "")
        if role is None or (role == "check" and gid.startswith("check_")) or (role == "graded" and meta.get("grade")):
            yield cell


def stream_text(cell, name="stdout"):
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == name)


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


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_released_notebook_fails_only_with_not_implemented_error(executed, name):
    nb = executed[("released", name)]
    errors = [(cell.id, out.ename) for cell in code_cells(nb) for out in cell.outputs if out.output_type == "error"]
    assert all(ename == "NotImplementedError" for _, ename in errors), f"{name}: unexpected errors {errors}"
    for cell in code_cells(nb):
        assert not any(o.output_type == "stream" and o.name == "stderr" for o in cell.outputs), f"{name} cell {cell.id} wrote to stderr"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_released_notebook_checks_report_stubs_in_one_friendly_line(executed, name):
    for cell in code_cells(executed[("released", name)], "check"):
        assert not any(o.output_type == "error" for o in cell.outputs), f"{name} check cell {cell.id} raised"
        text = stream_text(cell).strip()
        assert "not implemented yet" in text or "first" in text, f"{name} cell {cell.id}: {text!r}"
        assert len(text.splitlines()) == 1, f"{name} cell {cell.id}: expected one line, got {text!r}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_graded_cells_point_to_the_hidden_autograder_in_both_versions(executed, name):
    for kind in ("solved", "released"):
        graded = list(code_cells(executed[(kind, name)], "graded"))
        assert graded, f"{name} has no graded cell"
        for cell in graded:
            assert "hidden autograder" in stream_text(cell), f"{kind} {name} cell {cell.id}"
            assert not any(o.output_type == "error" for o in cell.outputs)


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


@pytest.mark.parametrize("mode,expect_stderr", [(None, False), ("validate", False), ("autograde", True)])
def test_graded_part_writes_stderr_only_under_stock_nbgrader_autograde(mode, expect_stderr):
    env = {k: v for k, v in os.environ.items() if k != "NBGRADER_EXECUTION"}
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
    sys.path.insert(0, str(REPO / RELEASE_DIR))
    try:
        import visible_checks
    finally:
        sys.path.remove(str(REPO / RELEASE_DIR))
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
]


@pytest.mark.parametrize("check_name,args,needle", BUGS, ids=[b[0] + "-" + b[1][0].__name__.strip("_") for b in BUGS])
def test_visible_check_rejects_a_common_bug_with_a_clear_message(vc, check_name, args, needle):
    with pytest.raises(AssertionError) as info:
        getattr(vc, check_name)(*args)
    assert needle in str(info.value), str(info.value)
