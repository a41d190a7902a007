"""The `efficient` notebooks run, in both editions: solved ones cleanly to the end, untouched released ones to
the end with one line per stub; their visible checks pass on the reference and name common bugs in one plain
sentence (in Chinese in the Chinese edition); every text the demos print through `say` is in the catalog.

Eight notebooks (the four solved and the four untouched released English ones) run once, concurrently, in a
module fixture, with COURSE_SKIP_COMPILE set (the flex notebook then prints why it skips torch.compile instead
of compiling for half a minute) and one thread per kernel. The Chinese edition runs the same code cells: its
solved notebooks are read as `make release` executed and committed them (the build stops on any error or
stderr; tests/test_editions.py runs the Chinese release of the first assignment).
"""
from __future__ import annotations

import ast
import math
import os
import re
import shutil

import nbformat
import pytest
import torch
import torch.nn.functional as F

from course.build import REPO, TARGET_BY_ID, execute_notebooks
from course.content import efficient
from course.efficient_demo_text import DEMO_TEXT
from solutions import efficient as E
from tests import release_import
from tests.notebook_outputs import code_cells, stream_text

EDITIONS = {"en": TARGET_BY_ID["efficient"], "zh": TARGET_BY_ID["efficient_zh"]}
NOTEBOOKS = [m.NAME for m in efficient.MODULES]
CHINESE = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("efficient-run")
    paths = []
    target = EDITIONS["en"]
    for kind, folder in (("solved", target.solved), ("released", target.release)):
        shutil.copytree(REPO / folder, tmp / "en" / kind, ignore=shutil.ignore_patterns("zh"))
        paths += [tmp / "en" / kind / f"{name}.ipynb" for name in NOTEBOOKS]
    saved = {key: os.environ.get(key) for key in ("COURSE_SKIP_COMPILE", "OMP_NUM_THREADS")}
    os.environ.update(COURSE_SKIP_COMPILE="1", OMP_NUM_THREADS="1")  # the kernels inherit them
    try:
        results = execute_notebooks(paths, allow_errors=True, timeout=300)
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    notebooks = {(p.parent.parent.name, p.parent.name, p.stem): nb for p, nb in results.items()}
    committed = EDITIONS["zh"].solved
    notebooks.update({("zh", "solved", name): nbformat.read(REPO / committed / f"{name}.ipynb", as_version=4)
                      for name in NOTEBOOKS})
    return notebooks


@pytest.mark.parametrize("lang,kind", [("en", "solved"), ("zh", "solved"), ("en", "released")])
def test_every_efficient_notebook_runs_to_the_end_without_errors_or_stderr(executed, lang, kind):
    for name in NOTEBOOKS:
        for cell in code_cells(executed[(lang, kind, name)]):
            assert cell.execution_count is not None, f"{lang} {kind} {name} cell {cell.id} did not run"
            for out in cell.outputs:
                assert out.output_type != "error", f"{lang} {kind} {name} {cell.id}: {out.ename}: {out.evalue}"
                assert not (out.output_type == "stream" and out.name == "stderr"), f"{lang} {kind} {name} {cell.id}: {out.text!r}"


def test_checks_pass_when_solved_in_both_editions_and_say_not_implemented_in_one_line_when_released(executed):
    for name in NOTEBOOKS:
        solved = {lang: list(code_cells(executed[(lang, "solved", name)], "check")) for lang in EDITIONS}
        released = list(code_cells(executed[("en", "released", name)], "check"))
        assert solved["en"] and len(solved["en"]) == len(solved["zh"]) == len(released)
        for lang, cells in solved.items():
            for cell in cells:
                assert stream_text(cell).startswith("✓"), f"{lang} {name} {cell.id}: {stream_text(cell)!r}"
        for cell in released:
            text = stream_text(cell).strip()
            assert len(text.splitlines()) == 1 and "not implemented yet" in text, text


def test_released_demos_print_one_line_per_missing_function_and_draw_no_plot(executed):
    for name in NOTEBOOKS:
        for cell in code_cells(executed[("en", "released", name)]):
            text = stream_text(cell)
            if "with uses_your_code():" in cell.source and "torch.compile skipped" not in text:
                assert text.count("not implemented yet") == 1, f"{name} {cell.id}: {text!r}"
                assert not any("image/png" in o.get("data", {}) for o in cell.outputs), f"{name} {cell.id}: empty plot"


def test_every_plot_of_the_demos_takes_its_title_and_labels_through_say():
    """say() is the catalog: the Chinese edition's plots are titled and labelled in Chinese (kv_idx, q_idx stay code)"""
    for module in efficient.MODULES:
        for cell in module.cells():
            for node in ast.walk(ast.parse(cell.source)) if cell.kind == "code" else ():
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("set", "plot", "imshow"):
                    for keyword in node.keywords:
                        if keyword.arg in ("title", "xlabel", "ylabel", "label") and isinstance(keyword.value, ast.Constant):
                            assert keyword.value.value in ("kv_idx", "q_idx"), f"{module.NAME}: {keyword.value.value!r}"


def test_the_english_edition_prints_no_chinese_through_say(executed):
    """(the Chinese edition's output: tests/test_editions.py checks every printing cell of every assignment)"""
    english = [c for name in NOTEBOOKS for c in code_cells(executed[("en", "solved", name)]) if "say(" in c.source]
    assert english and not any(CHINESE.search(stream_text(c)) for c in english)


def test_the_notebooks_print_the_memory_and_exactness_they_claim(executed):
    """flash and sliding windows stay far below the score matrix; merged shards equal the whole; compile skipped;
    FlashAttentionFunction keeps O(S) for backward, recomputes one matrix product per tile and trains as plain attention"""
    text = {name: "".join(stream_text(c) for c in code_cells(executed[("en", "solved", name)])) for name in NOTEBOOKS}
    peaks = re.findall(r"S =  2048: plain attention +([\d.]+) MiB, SDPA +([\d.]+) MiB, flash_attention +([\d.]+) MiB",
                       text["01_flash"])
    assert peaks and float(peaks[0][2]) < float(peaks[0][0]) / 10, text["01_flash"]
    assert "4096 additions of 1: float16 gives 2048.0, float32 gives 4096.0" in text["01_flash"]
    assert "28 skipped" in text["01_flash"]
    flash = text["01_flash"]  # issue 47: the loop orders' traffic, the meter's blind spot, memory-bound, o / l, float16
    assert "FlashAttention-1) 2.1 MiB, query blocks outside (FlashAttention-2, yours) 0.13 MiB" in flash
    assert "the meter sees 0.06 MiB, torch.profiler a temporary of 64 MiB inside it" in flash
    assert "Q K^T 62, softmax 1.25" in flash
    assert "o / l = 0.0 for values of both signs" in flash and "nan for values all 1 (o = inf)" in flash
    same, floor = map(float, re.findall(r"same float16 inputs ([\d.e+-]+), rounding that exact output to float16 "
                                        r"alone ([\d.e+-]+)", flash)[0])
    before, inputs = map(float, re.findall(r"before rounding: ([\d.e+-]+), of which the rounding of the inputs alone "
                                           r"accounts for ([\d.e+-]+)", flash)[0])
    assert same < 2 * floor and inputs > before / 2 > same, flash
    band = re.findall(r"S =  4096: masked full attention +([\d.]+) MiB, chunked +([\d.]+) MiB", text["02_sliding_window"])
    assert band and float(band[0][1]) < float(band[0][0]) / 50
    assert "Mistral 7B: 32 layers x (4096 - 1) = 131,040 tokens of reach" in text["02_sliding_window"]
    assert "the paper's count (W = 4096 keys before the query, one more than the code's): 32 x 4096 = 131,072" in \
        text["02_sliding_window"]
    grows = re.findall(r"S x 8: masked full attention x ([\d.]+), chunked x ([\d.]+): its output x 8, the rest x ([\d.]+)",
                       text["02_sliding_window"])
    assert grows and float(grows[0][0]) > 50 and 0.9 < float(grows[0][2]) < 1.1, text["02_sliding_window"]  # not S
    assert "recurrent state 2.02 MiB" in text["03_linear"]
    wide = re.findall(r"D = 64, S = 1024: softmax +([\d.]+) MiB, linear +([\d.]+) MiB, linear causal +([\d.]+) MiB; "
                      r"sums at every position +([\d.]+) MiB", text["03_linear"])
    soft, _plain, causal, sums = map(float, wide[0])
    assert causal < soft / 4 < sums / 4, text["03_linear"]  # chunkwise: far below softmax; per-position sums above it
    assert "torch.compile skipped: COURSE_SKIP_COMPILE is set" in text["04_flex"]
    kept = re.findall(r"S =  4096: plain attention keeps +([\d.]+) MiB, FlashAttentionFunction +([\d.]+) MiB",
                      text["05_flash_backward"])
    assert kept and float(kept[0][0]) > 100 and float(kept[0][1]) < 5, text["05_flash_backward"]
    assert re.search(r"S = 16384: plain attention keeps +(\d{4,})\.\d\d MiB", text["05_flash_backward"])  # > 1 GiB
    assert "matrix products per tile: forward 2, backward 5" in text["05_flash_backward"]
    assert "gradcheck (float64, 5 queries, 7 keys, causal): True" in text["05_flash_backward"]
    step = re.findall(r"weights after the step differ by at most ([\d.e+-]+)", text["05_flash_backward"])
    assert step and float(step[0]) < 1e-6


@pytest.mark.parametrize("kind", ["solved", "released"])
def test_efficient_graded_cells_point_to_the_hidden_autograder(executed, kind):
    graded = {name: list(code_cells(executed[("en", kind, name)], "graded")) for name in NOTEBOOKS}
    assert all(len(cells) == 1 for cells in graded.values())
    assert all(f"autograder grade workspace/efficient/{name}.ipynb\n" in stream_text(graded[name][0]) for name in NOTEBOOKS)


def test_every_say_text_of_the_demos_is_listed_for_the_catalog_and_nothing_else():
    said = []
    for module in efficient.MODULES:
        for cell in module.cells():
            if cell.kind == "code":
                said += [node.args[0].value for node in ast.walk(ast.parse(cell.source))
                         if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "say"]
    assert list(dict.fromkeys(said)) == list(DEMO_TEXT), "update course/efficient_demo_text.py, then make messages-visible"


# --------------------------------------------------------------------------- #
# The visible checks, called directly
# --------------------------------------------------------------------------- #


def _load(folder, lang):
    module = release_import.load(folder, f"visible_checks_efficient_{lang}")
    if lang == "zh":
        module.use_language("zh")
    return module


@pytest.fixture(scope="module")
def vc():
    return {lang: _load(REPO / target.release, lang) for lang, target in EDITIONS.items()}


CHECK_ARGS = {f"check_{name}": getattr(E, name) for name in (
    "flash_attention", "merge_attention", "sliding_window_mask", "sliding_window_attention", "elu_feature_map",
    "linear_attention", "linear_attention_step", "document_causal_mask_mod", "prefix_lm_mask_mod",
    "sliding_window_mask_mod", "alibi_score_mod", "softcap_score_mod", "flash_attention_backward")}
CHECK_ARGS["check_flash_attention_function"] = E.FlashAttentionFunction


def test_every_efficient_visible_check_passes_on_the_reference(vc, capsys):
    for check_name, function in CHECK_ARGS.items():
        getattr(vc["en"], check_name)(function)
        out = capsys.readouterr().out
        assert out.startswith("✓") and out.count("\n") == 1, f"{check_name}: {out!r}"


def _flash_full_matrix(q, k, v, causal=False, block_q=64, block_k=64):  # right numbers, S^2 memory
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2]),
                                    float("-inf"))
    return torch.softmax(scores, -1).nan_to_num(0.0) @ v, torch.logsumexp(scores.float(), -1)  # 0 without keys


def _flash_lse_without_max(q, k, v, causal=False, block_q=64, block_k=64):
    out, lse = E.flash_attention(q, k, v, causal, block_q, block_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2]),
                                    float("-inf"))
    return out, lse - scores.amax(-1)


def _merge_plain_exp(out_a, lse_a, out_b, lse_b):
    w_a, w_b = torch.exp(lse_a)[..., None], torch.exp(lse_b)[..., None]
    return (w_a * out_a + w_b * out_b) / (w_a + w_b), torch.log(torch.exp(lse_a) + torch.exp(lse_b))


def _merge_nan_when_both_empty(out_a, lse_a, out_b, lse_b):  # right unless both sides are -inf: then NaN
    m = torch.maximum(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    part_a = torch.where(w_a[..., None] > 0, w_a[..., None] * out_a, 0.0)
    part_b = torch.where(w_b[..., None] > 0, w_b[..., None] * out_b, 0.0)
    return (part_a + part_b) / (w_a + w_b)[..., None], m + torch.log(w_a + w_b)


def _window_too_wide(S, window):
    return E.sliding_window_mask(S, window + 1)


def sliding_window_mask(S, window):  # one key too wide, as a notebook's global that the attention below calls
    return E.sliding_window_mask(S, window + 1)


def _sliding_reuses_a_wide_mask(q, k, v, window, chunk_size=128):  # right, but with the wide mask above
    out = torch.empty(*q.shape[:-1], v.shape[-1])
    for i0 in range(0, q.shape[-2], chunk_size):
        i1, j0 = min(i0 + chunk_size, q.shape[-2]), max(0, i0 - window + 1)
        scores = q[:, :, i0:i1] @ k[:, :, j0:i1].transpose(-2, -1) / math.sqrt(q.shape[-1])
        visible = sliding_window_mask(i1 - j0, window)[i0 - j0:]  # [chunk, keys read]: positions j0 .. i1 - 1
        out[:, :, i0:i1] = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1) @ v[:, :, j0:i1]
    return out


def _sliding_full_matrix(q, k, v, window, chunk_size=128):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~E.sliding_window_mask(q.shape[-2], window),
                                                                            float("-inf"))
    return torch.softmax(scores, -1) @ v


def _sliding_mask_in_the_loop(q, k, v, window, chunk_size=128):  # right numbers, an [S, S] mask at every chunk
    out = torch.empty(*q.shape[:-1], v.shape[-1])
    for i0 in range(0, q.shape[-2], chunk_size):
        i1, j0 = min(i0 + chunk_size, q.shape[-2]), max(0, i0 - window + 1)
        scores = q[:, :, i0:i1] @ k[:, :, j0:i1].transpose(-2, -1) / math.sqrt(q.shape[-1])
        visible = E.sliding_window_mask(q.shape[-2], window)[i0:i1, j0:i1]
        out[:, :, i0:i1] = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1) @ v[:, :, j0:i1]
    return out


def _sliding_every_key(q, k, v, window, chunk_size=128):  # each chunk against every key, masked
    out, key = torch.empty(*q.shape[:-1], v.shape[-1]), torch.arange(q.shape[-2])[None, :]
    for i0 in range(0, q.shape[-2], chunk_size):
        i1 = min(i0 + chunk_size, q.shape[-2])
        query = torch.arange(i0, i1)[:, None]
        scores = (q[:, :, i0:i1] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(
            ~((key <= query) & (key > query - window)), float("-inf"))
        out[:, :, i0:i1] = torch.softmax(scores, -1) @ v
    return out


def _sliding_per_query(q, k, v, window, chunk_size=128):  # correct, written differently: one query at a time
    rows = []
    for i in range(q.shape[-2]):
        j0 = max(0, i - window + 1)
        scores = q[:, :, i:i + 1] @ k[:, :, j0:i + 1].transpose(-2, -1) / math.sqrt(q.shape[-1])
        rows.append(torch.softmax(scores, -1) @ v[:, :, j0:i + 1])
    return torch.cat(rows, dim=2)


def _linear_scaled_before_phi(q, k, v, causal=False, eps=1e-6):
    return E.linear_attention(q / math.sqrt(q.shape[-1]), k, v, causal, eps)


def _linear_python_loop(q, k, v, causal=False, eps=1e-6):  # correct, written differently: a loop over positions
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    kv, z, rows = torch.zeros(*q.shape[:2], q.shape[-1], v.shape[-1]), torch.zeros(*q.shape[:2], q.shape[-1]), []

    def add(j):
        return kv + phi_k[:, :, j, :, None] * v[:, :, j, None, :], z + phi_k[:, :, j]

    for j in range(0 if causal else q.shape[-2]):
        kv, z = add(j)
    for t in range(q.shape[-2]):
        if causal:
            kv, z = add(t)
        rows.append((phi_q[:, :, t, :, None] * kv).sum(-2) / ((phi_q[:, :, t] * z).sum(-1)[..., None] + eps))
    return torch.stack(rows, dim=2)


def _linear_cumsum(q, k, v, causal=False, eps=1e-6):  # correct, written differently: sums at every position
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    outer = phi_k[..., :, None] * v[..., None, :]  # [B, H, S, D, D_v]
    kv = outer.cumsum(2) if causal else outer.sum(2, keepdim=True)
    z = phi_k.cumsum(2) if causal else phi_k.sum(2, keepdim=True)
    return (phi_q[..., :, None] * kv).sum(-2) / ((phi_q * z).sum(-1)[..., None] + eps)


def _linear_chunks_without_state(q, k, v, causal=False, eps=1e-6):  # each chunk of 64 alone
    if not causal:
        return E.linear_attention(q, k, v, False, eps)
    return torch.cat([E.linear_attention(q[:, :, i:i + 64], k[:, :, i:i + 64], v[:, :, i:i + 64], True, eps)
                      for i in range(0, q.shape[-2], 64)], dim=2)


def _step_reads_before_adding(state, q_t, k_t, v_t, eps=1e-6):
    phi_q, phi_k = F.elu(q_t) + 1, F.elu(k_t) + 1
    kv, z = state if state is not None else (torch.zeros(*k_t.shape, v_t.shape[-1]), torch.zeros_like(k_t))
    out = (phi_q[..., :, None] * kv).sum(-2) / ((phi_q * z).sum(-1)[..., None] + eps)
    return out, (kv + phi_k[..., :, None] * v_t[..., None, :], z + phi_k)


def _alibi_slopes_in_a_list(num_heads):
    slopes = [2 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)]

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return score_mod


def _window_with_an_if(window):
    def mask_mod(b, h, q_idx, kv_idx):
        if kv_idx <= q_idx:
            return q_idx - kv_idx < window
        return False

    return mask_mod


def _alibi_with_where(num_heads):  # correct, written differently
    n = 2 ** int(math.log2(num_heads))
    slopes = torch.cat([torch.exp2(-8.0 * torch.arange(1, n + 1) / n),
                        torch.exp2(-4.0 * torch.arange(1, 2 * n + 1) / n)[0::2][:num_heads - n]])

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.where(kv_idx <= q_idx, score - slopes[h] * (q_idx - kv_idx), score + slopes[h] * (kv_idx - q_idx))

    return score_mod


def _elu_only(x):
    return F.elu(x)


def _linear_no_normaliser(q, k, v, causal=False, eps=1e-6):
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    weights = phi_q @ phi_k.transpose(-2, -1)
    return (weights.tril() if causal else weights) @ v


def _step_forgets(state, q_t, k_t, v_t, eps=1e-6):
    return E.linear_attention_step(None, q_t, k_t, v_t, eps)


def _document_mask_of_sample_0(document_ids):
    def mask_mod(b, h, q_idx, kv_idx):
        return (document_ids[0, q_idx] == document_ids[0, kv_idx]) & (kv_idx <= q_idx)

    return mask_mod


def _alibi_bonus(num_heads):
    slopes = torch.exp2(-8.0 * torch.arange(1, num_heads + 1) / num_heads)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (q_idx - kv_idx)

    return score_mod


def _alibi_formula(num_heads):
    slopes = torch.exp2(-8.0 * torch.arange(1, num_heads + 1) / num_heads)  # the paper's only for a power of two

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return score_mod


def _softcap_clamp(cap):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score.clamp(-cap, cap)

    return score_mod


def _backward_without_delta(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return _dense_backward(q, k, v, lse, grad_out, causal, delta=False)


def _dense_backward(q, k, v, lse, grad_out, causal, delta=True, scale_q=True, p_scale=1.0):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2]),
                          float("-inf"))
    p = torch.exp(s * p_scale - lse.to(s.dtype).masked_fill(lse == float("-inf"), float("inf"))[..., None])
    dp = grad_out @ v.transpose(-2, -1)
    ds = p * (dp - ((p * dp).sum(-1, keepdim=True) if delta else 0))
    scale = 1 / math.sqrt(q.shape[-1])
    return ds @ k * (scale if scale_q else 1), ds.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ grad_out


def _backward_grad_q_unscaled(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return _dense_backward(q, k, v, lse, grad_out, causal, scale_q=False)


def _backward_p_scaled_twice(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return _dense_backward(q, k, v, lse, grad_out, causal, p_scale=1 / math.sqrt(q.shape[-1]))  # exp(s * scale - lse)


def _backward_p_unscaled(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return _dense_backward(q, k, v, lse, grad_out, causal, p_scale=math.sqrt(q.shape[-1]))  # exp(q k^T - lse)


BUGS = [
    ("check_flash_attention_backward", _backward_without_delta, "subtract delta"),
    ("check_flash_attention_backward", _backward_p_scaled_twice, "you scaled the scores twice"),
    ("check_flash_attention_backward", _backward_p_unscaled, "you left the scale out of the recomputed scores"),
    ("check_flash_attention_backward", _backward_grad_q_unscaled, "sqrt(D) times too large"),
    ("check_flash_attention", _flash_full_matrix, "MiB"),
    ("check_flash_attention", _flash_lse_without_max, "without the running max"),
    ("check_merge_attention", _merge_plain_exp, "never exp(lse) alone"),
    ("check_merge_attention", _merge_nan_when_both_empty, "subtract 0 where both are -inf"),
    ("check_sliding_window_mask", _window_too_wide, "four keys"),
    ("check_sliding_window_attention", _sliding_full_matrix, "the whole score matrix"),
    ("check_sliding_window_attention", _sliding_reuses_a_wide_mask, "but it calls yours, which is wrong"),
    ("check_sliding_window_attention", _sliding_mask_in_the_loop, "boolean mask: the whole band"),
    ("check_sliding_window_attention", _sliding_every_key, "against every key"),
    ("check_linear_attention", _linear_scaled_before_phi, "divided by sqrt(D) before phi"),
    ("check_linear_attention", _linear_chunks_without_state, "your chunks of 64 positions each start from zero sums"),
    ("check_linear_attention_step", _step_reads_before_adding, "before this step's key is added"),
    ("check_alibi_score_mod", _alibi_slopes_in_a_list, "neither a Python list"),
    ("check_sliding_window_mask_mod", _window_with_an_if, "`&` and `|`, or choose with `torch.where`"),
    ("check_elu_feature_map", _elu_only, "elu(x) + 1, not elu(x)"),
    ("check_linear_attention", _linear_no_normaliser, "not normalised"),
    ("check_linear_attention_step", _step_forgets, "state you were given"),
    ("check_document_causal_mask_mod", _document_mask_of_sample_0, "document_ids[b]"),
    ("check_alibi_score_mod", _alibi_bonus, "penalises distance"),
    ("check_alibi_score_mod", _alibi_formula, "power of two"),
    ("check_softcap_score_mod", _softcap_clamp, "clamped"),
]


@pytest.mark.parametrize("check_name,wrong,needle", BUGS, ids=[b[1].__name__.strip("_") for b in BUGS])
def test_an_efficient_visible_check_names_a_common_bug_in_one_plain_sentence_in_both_languages(vc, check_name, wrong, needle):
    for lang in EDITIONS:
        with pytest.raises(AssertionError) as info:
            getattr(vc[lang], check_name)(wrong)
        message = str(info.value)
        assert "\n" not in message and info.value._render_traceback_() == [f"AssertionError: {message}"]
        assert (needle in message) if lang == "en" else bool(CHINESE.search(message)), message


CORRECT_VARIANTS = [("check_sliding_window_attention", _sliding_per_query), ("check_linear_attention", _linear_python_loop),
                    ("check_linear_attention", _linear_cumsum), ("check_alibi_score_mod", _alibi_with_where)]


@pytest.mark.parametrize("check_name,right", CORRECT_VARIANTS, ids=[v[1].__name__.strip("_") for v in CORRECT_VARIANTS])
def test_an_efficient_visible_check_passes_a_right_function_written_differently(vc, capsys, check_name, right):
    """a query at a time, a Python loop over positions, the running sums at every position, slopes through torch.where"""
    getattr(vc["en"], check_name)(right)
    assert capsys.readouterr().out.startswith("✓")


def test_a_stub_prints_one_line_and_an_error_in_student_code_names_its_line(vc, capsys):
    def elu_feature_map(x):
        raise NotImplementedError

    vc["en"].check_elu_feature_map(elu_feature_map)
    assert capsys.readouterr().out == "elu_feature_map: not implemented yet (replace the `raise NotImplementedError` with your code)\n"

    def broken(x):
        return x @ torch.ones(3, 3)  # a shape error of the student's own

    with pytest.raises(AssertionError) as info:
        vc["en"].check_elu_feature_map(broken)
    assert str(info.value).startswith("your `elu_feature_map` raised RuntimeError on x [5], in the line `return x @ torch.ones(3, 3)")
