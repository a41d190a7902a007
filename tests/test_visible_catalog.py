"""The visible checks in both languages: their gettext catalog (course/locale), and what a student sees.

The released visible_checks.py (either assignment's) speaks English until the notebook calls
use_language("zh"), which loads locale/zh_CN/LC_MESSAGES/visible_checks.mo from its folder.
These tests build such a folder (the checks, graded_cells.py and the compiled catalog) in tmp_path.
"""
from __future__ import annotations

import importlib.util
import io
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg

from course import catalogs
from course.targets import TARGET_BY_ID
from tests import release_import

REPO = Path(__file__).resolve().parent.parent
COURSE = REPO / "course"
CATALOGUE = REPO / "tests" / "catalogue" / "submissions"
CHINESE = re.compile(r"[\u4e00-\u9fff]")
CHECK_FILES = {"self_attention": "visible_checks.py", "generation": "visible_checks_generation.py"}  # the assignments tested here


def zh_catalog():
    return catalogs.read_catalog(catalogs.po_path("zh"))


# --------------------------------------------------------------------------- #
# The catalog
# --------------------------------------------------------------------------- #


def test_every_message_has_a_non_empty_chinese_translation_and_none_is_fuzzy():
    found = [p for p in catalogs.problems(zh_catalog()) if p.startswith(("not translated", "fuzzy"))]
    assert not found, "\n".join(found)


def test_the_catalog_problems_catch_a_missing_an_empty_and_a_fuzzy_translation(tmp_path):
    catalog = zh_catalog()
    messages = [m for m in catalog if m.id and not isinstance(m.id, tuple)]
    messages[0].string = ""
    messages[1].string = "   "
    messages[2].flags.add("fuzzy")
    messages[3].string = messages[3].string + " {extra}"
    found = catalogs.problems(catalog)
    assert sum(p.startswith("not translated") for p in found) == 2, found
    assert sum(p.startswith("fuzzy") for p in found) == 1, found
    assert sum(p.startswith("placeholders differ") for p in found) == 1, found


def _extracted_ids() -> set:
    with (COURSE / "babel.cfg").open(encoding="utf-8") as handle:
        method_map, options_map = parse_mapping_cfg(handle)
    return {message for _, _, message, _, _ in extract_from_dir(str(COURSE), method_map, options_map)}


def test_the_template_and_the_translation_hold_exactly_the_messages_of_the_sources():
    sources = _extracted_ids()
    template = {m.id for m in catalogs.read_catalog(catalogs.TEMPLATE) if m.id}
    translated = {m.id for m in zh_catalog() if m.id}
    assert len(sources) > 150  # both visible_checks files and graded_cells.py
    assert template == sources, f"run `make messages-visible`: new {sorted(sources - template)}, gone {sorted(template - sources)}"
    assert translated == sources, f"run `make messages-visible`: new {sorted(sources - translated)}, gone {sorted(translated - sources)}"


def test_every_message_extracted_is_marked_in_the_released_files_and_the_demo_text():
    locations = {Path(path).name for m in catalogs.read_catalog(catalogs.TEMPLATE) for path, _ in m.locations}
    assert locations == {"visible_checks.py", "visible_checks_scores_masks.py", "visible_checks_module.py",
                         "visible_checks_generation.py",
                         "visible_checks_efficient.py", "check_harness.py", "graded_cells.py", "efficient_demo_text.py",
                         "visible_checks_flash.py", "visible_checks_flash_backward.py", "visible_checks_decoder.py",
                         "visible_checks_flex.py", "visible_checks_real_models.py", "visible_checks_real_models_llama.py",
                         "visible_checks_real_models_interface.py",
                         "visible_checks_serving.py", "visible_checks_serving_batching.py", "visible_checks_serving_sinks.py",
                         "visible_checks_real_models_gpt2.py"}


def _sample(name: str, conversion: str, spec: str):
    if spec and spec[-1] in "efg%":
        return 0.125
    if "," in spec:
        return 4096
    return 3 if name in ("number", "count", "got", "length", "first", "last", "head", "token", "sample", "chunk") else "x"


def _values(text: str) -> dict:
    return {name: _sample(name, conversion, spec) for name, conversion, spec in catalogs.placeholders(text)}


@pytest.mark.parametrize("english,chinese", catalogs.message_pairs(zh_catalog()), ids=lambda text: text[:40])
def test_every_message_formats_in_both_languages_with_the_same_placeholders(english, chinese):
    assert catalogs.placeholders(chinese) == catalogs.placeholders(english)
    values = _values(english)
    english.format(**values)
    rendered = chinese.format(**values)
    assert CHINESE.search(rendered) or not CHINESE.search(english), rendered


def test_the_compiled_catalog_is_the_same_bytes_every_time_and_leaves_fuzzy_entries_english(tmp_path):
    first, second = tmp_path / "a.mo", tmp_path / "b.mo"
    catalogs.compile_catalog(catalogs.po_path("zh"), first)
    catalogs.compile_catalog(catalogs.po_path("zh"), second)
    assert first.read_bytes() == second.read_bytes() and len(first.read_bytes()) > 10_000


def test_a_po_file_with_a_wrong_placeholder_is_refused_in_one_line_naming_it(tmp_path):
    po = tmp_path / "visible_checks.po"
    text = catalogs.po_path("zh").read_text(encoding="utf-8")
    po.write_text(text.replace('msgstr "{name}：可见检查没有通过"', 'msgstr "{nom}：可见检查没有通过"'), encoding="utf-8")
    with pytest.raises(ValueError) as info:
        catalogs.compile_catalog(po, tmp_path / "out.mo")
    assert str(po) in str(info.value) and "placeholders differ" in str(info.value) and "\n" not in str(info.value)
    garbage = tmp_path / "garbage.po"
    garbage.write_text("these are not the messages you are looking for\n", encoding="utf-8")
    for bad in (garbage, tmp_path / "absent.po"):
        with pytest.raises(ValueError, match="not a readable message catalog"):
            catalogs.compile_catalog(bad, tmp_path / "out.mo")
    assert not (tmp_path / "out.mo").exists()


def test_release_catalogs_are_written_for_chinese_only(tmp_path):
    assert catalogs.write_release_catalogs(tmp_path, "en") == []
    written = catalogs.write_release_catalogs(tmp_path, "zh")
    assert written == [tmp_path / "locale" / "zh_CN" / "LC_MESSAGES" / "visible_checks.mo"] and written[0].is_file()


# --------------------------------------------------------------------------- #
# The released checks in a folder of the Chinese edition
# --------------------------------------------------------------------------- #


def _release_folder(root: Path, assignment: str, with_catalog: bool = True) -> Path:
    folder = root / assignment
    folder.mkdir(parents=True, exist_ok=True)
    for name, origin in TARGET_BY_ID[assignment].support.items():  # the files the build ships beside the notebooks
        shutil.copy(origin, folder / name)
    if with_catalog:
        catalogs.write_release_catalogs(folder, "zh")
    return folder


def _load(folder: Path, tag: str):
    return release_import.load(folder, f"visible_checks_{tag}")


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """assignment -> (English module, Chinese module), each a fresh import of the released file."""
    root = tmp_path_factory.mktemp("release")
    loaded = {}
    for assignment in CHECK_FILES:
        folder = _release_folder(root, assignment)
        english, chinese = _load(folder, f"{assignment}_en"), _load(folder, f"{assignment}_zh")
        chinese.use_language("zh")
        loaded[assignment] = (english, chinese)
    return loaded


def _submission(path: Path):
    """The catalogue's file as a notebook holds it: after the first cell's imports (torch.nn.functional as F)."""
    spec = importlib.util.spec_from_file_location(f"catalogue_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    module.F = torch.nn.functional
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec.loader.exec_module(module)
    return module


# (assignment, catalogue case, check, its arguments by name)
WRONG = [
    ("self_attention", "scores_no_scale", "check_scaled_scores", ("scaled_scores",)),
    ("self_attention", "scores_transpose_1_2", "check_scaled_scores", ("scaled_scores",)),
    ("self_attention", "softmax_over_queries", "check_attention_weights", ("attention_weights",)),
    ("self_attention", "padding_fill_inverted", "check_apply_padding_mask", ("apply_padding_mask",)),
    ("self_attention", "module_seed_broadcast", "check_self_attention", ("SelfAttention",)),
    ("self_attention", "split_without_transpose", "check_split_heads", ("split_heads",)),
    ("self_attention", "chunked_causal_restarts", "check_chunked_attention", ("chunked_attention",)),
    ("self_attention", "module_scale_d_model", "check_self_attention", ("SelfAttention",)),
    ("self_attention", "multihead_scale_d_model", "check_multihead", ("MultiHeadSelfAttention",)),
    ("self_attention", "module_dropout_on_output", "check_self_attention", ("SelfAttention",)),
    ("self_attention", "multihead_no_dropout", "check_multihead", ("MultiHeadSelfAttention",)),
    ("self_attention", "parity_no_eval", "check_parity_error", ("parity_error", "SelfAttention")),
    ("self_attention", "apply_causal_square_only", "check_apply_causal_mask", ("apply_causal_mask",)),
    ("self_attention", "apply_causal_bottom_right", "check_apply_causal_mask", ("apply_causal_mask",)),
    ("self_attention", "sdpa_is_causal_alone", "check_sdpa_attention", ("sdpa_attention",)),
    ("generation", "decode_mask_top_left", "check_decode_causal_mask", ("decode_causal_mask",)),
    ("generation", "cache_on_head_axis", "check_kv_cache", ("KVCache",)),
    ("generation", "kv_bytes_without_values", "check_kv_cache_bytes", ("kv_cache_bytes",)),
    ("generation", "repeat_kv_tiled", "check_repeat_kv", ("repeat_kv",)),
    ("generation", "cross_ignores_d_context", "check_cross_attention", ("CrossAttention",)),
    ("generation", "cached_hf_is_causal_q_len", "check_cached_self_attention", ("CachedSelfAttention", "KVCache")),
    ("generation", "cached_scale_d_model", "check_cached_self_attention", ("CachedSelfAttention", "KVCache")),
    ("generation", "cached_scale_by_heads", "check_cached_self_attention", ("CachedSelfAttention", "KVCache")),
    ("generation", "decoder_caches_unrotated_keys_when_cached", "check_decoder_attention", ("DecoderAttention",)),
]


# The cause each of these failures names (English, Chinese): issue 47's visible checks that passed what the grader charges
NAMED = {
    "cached_scale_d_model": ("you scaled by sqrt(d_model) = sqrt(24)", "你除以的是 sqrt(d_model) = sqrt(24)"),
    "cached_scale_by_heads": ("you scaled by sqrt(num_heads) = sqrt(4)", "你除以的是 sqrt(num_heads) = sqrt(4)"),
    "module_scale_d_model": ("divided by sqrt(d_model) = sqrt(12); divide them by sqrt(d_k) = sqrt(8)", "sqrt(d_k) = sqrt(8)"),
    "multihead_scale_d_model": ("divided by sqrt(d_model) = sqrt(12); divide them by sqrt(head_dim) = sqrt(3)",
                                "sqrt(head_dim) = sqrt(3)"),
    "module_dropout_on_output": ("dropout seems to act on the values, on weights @ V or on the output", "dropout"),
    "multihead_no_dropout": ("gives exactly its eval-mode output", "dropout"),
    "parity_no_eval": ("Switch both modules to eval() before comparing", "eval()"),
    "apply_causal_square_only": ("Your mask is square", "scores.shape[-2]"),
    "apply_causal_bottom_right": ("your mask is bottom-right aligned", "S_k - S_q"),
    "sdpa_is_causal_alone": ("ignores the padding mask (is_causal=True alone)", "is_causal=True"),
}


def _failure(module, check: str, args: tuple, capsys) -> AssertionError:
    with warnings.catch_warnings(), pytest.raises(AssertionError) as info:
        warnings.simplefilter("ignore")
        getattr(module, check)(*args)
    assert capsys.readouterr().out == ""
    return info.value


@pytest.mark.parametrize("assignment,case,check,names", WRONG, ids=[f"{w[0]}-{w[1]}" for w in WRONG])
def test_a_wrong_submission_fails_its_visible_check_in_one_chinese_sentence(released, capsys, assignment, case, check, names):
    folder = CATALOGUE / "generation" if assignment == "generation" else CATALOGUE
    submission = _submission(folder / f"{case}.py")
    args = tuple(getattr(submission, name) for name in names)
    english, chinese = released[assignment]
    in_english = _failure(english, check, args, capsys)
    in_chinese = _failure(chinese, check, args, capsys)
    for failure in (in_english, in_chinese):
        assert type(failure) is AssertionError and "\n" not in str(failure) and "visible_checks" not in str(failure)
        assert failure.__cause__ is None and (failure.__context__ is None or failure.__suppress_context__)
    assert CHINESE.search(str(in_chinese)), str(in_chinese)
    assert not CHINESE.search(str(in_english)), str(in_english)
    english_words, chinese_words = NAMED.get(case, ("", ""))
    assert english_words in str(in_english) and chinese_words in str(in_chinese), (str(in_english), str(in_chinese))
    assert "raised AssertionError in the line" not in str(in_english), str(in_english)  # the check's own sentence


def _padding_in_place(scores, mask):  # masked_fill_: what it returns is right (the grader gives full marks)
    return scores.masked_fill_(~mask.reshape(mask.shape[0], *([1] * (scores.dim() - 2)), mask.shape[1]), float("-inf"))


def _sdpa_mask_with_is_causal(q, k, v, mask=None, causal=False):  # right on the CPU kernel, refused by the math backend
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[:, None, None, :],
                                          is_causal=causal)


def test_what_the_grader_accepts_passes_visibly_and_a_portability_trap_is_said_in_both_languages(released, capsys):
    english, chinese = released["self_attention"]
    for module in (english, chinese):
        module.check_apply_padding_mask(_padding_in_place)
    said = capsys.readouterr().out.splitlines()
    assert len(said) == 2 and all(line.startswith("✓ ") for line in said), said
    english.check_sdpa_attention(_sdpa_mask_with_is_causal)
    chinese.check_sdpa_attention(_sdpa_mask_with_is_causal)
    said = capsys.readouterr().out.splitlines()
    assert [line[:2] for line in said] == ["✓ ", "  ", "✓ ", "  "], said
    assert "math backend" in said[1] and "Explicit attn_mask should not be set when is_causal=True" in said[1], said
    assert CHINESE.search(said[3]) and "is_causal=True" in said[3], said


def scaled_scores(Q, K):  # the notebook's stub (a top-level function, as in a notebook cell)
    raise NotImplementedError


def test_a_stub_and_a_demo_of_a_stub_say_so_in_chinese(released, capsys):
    _, chinese = released["self_attention"]
    chinese.check_scaled_scores(scaled_scores)
    with chinese.uses_your_code():
        scaled_scores(None, None)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "scaled_scores：还没有实现（把 `raise NotImplementedError` 换成你的代码）", out
    assert out[1].startswith("这个演示需要你的 `scaled_scores`"), out


def test_a_passing_check_prints_its_tick_line_in_chinese(released, capsys):
    from solutions import attention, generation

    released["self_attention"][1].check_attend(attention.attend)
    released["generation"][1].check_repeat_kv(generation.repeat_kv)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("✓ ") and CHINESE.search(line) for line in lines), lines


def test_a_demo_fed_by_a_function_whose_check_fails_ends_in_one_sentence_naming_that_check(tmp_path, capsys):
    from solutions import attention

    module = _load(_release_folder(tmp_path, "self_attention"), "demo_after_failure")
    with pytest.raises(TypeError):  # no check failed: a demo's error is the course's, raised as it is
        with module.uses_your_code():
            raise TypeError("Invalid shape (2, 3, 4) for image data")
    for lang in ("en", "zh"):
        module.use_language(lang)
        with pytest.raises(AssertionError):
            module.check_attention_weights(lambda scores: scores)  # not a softmax
        with module.uses_your_code():  # what matplotlib's imshow raises on what the broken function returned
            raise TypeError("Invalid shape (2, 3, 4) for image data")
    english, chinese = capsys.readouterr().out.splitlines()
    assert english.startswith("This demo stopped (TypeError: Invalid shape (2, 3, 4) for image data)"), english
    assert "`attention_weights`" in english and "`attention_weights`" in chinese and CHINESE.search(chinese), chinese
    module.check_attention_weights(attention.attention_weights)  # fixed: the next demo error is raised again
    with pytest.raises(TypeError), module.uses_your_code():
        raise TypeError("a demo's own bug")


def test_graded_part_speaks_chinese_in_the_notebook_and_under_validate(released, capsys, monkeypatch):
    _, chinese = released["self_attention"]
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    chinese.graded_part("scaled_scores")
    assert capsys.readouterr().out.startswith("评分部分 `scaled_scores` 由课程的自动评分器")
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    namespace = {"graded_part": chinese.graded_part, "scaled_scores": lambda Q, K: Q @ K.transpose(-2, -1),
                 "attention_weights": lambda s: s.softmax(-1), "attend": lambda w, V: w @ V}
    exec("graded_part('scaled_scores')", namespace)  # the notebook's namespace, as Validate runs it
    captured = capsys.readouterr()
    assert captured.err.startswith("scaled_scores：上面的可见检查还没有全部通过：") and "分数没有缩放" in captured.err, captured.err


def test_use_language_switches_back_to_english_byte_for_byte(tmp_path, capsys):
    from solutions import attention

    module = _load(_release_folder(tmp_path, "self_attention"), "switch")
    module.check_attend(attention.attend)
    english = capsys.readouterr().out
    module.use_language("zh")
    module.check_attend(attention.attend)
    assert capsys.readouterr().out != english
    module.use_language("en")
    module.check_attend(attention.attend)
    assert capsys.readouterr().out == english


def test_a_missing_catalog_gives_one_line_and_english_not_a_traceback(tmp_path, capsys):
    from solutions import attention

    module = _load(_release_folder(tmp_path, "self_attention", with_catalog=False), "missing")
    module.use_language("zh")
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and "visible_checks.mo is missing" in said and "speak English" in said, said
    module.check_attend(attention.attend)
    assert capsys.readouterr().out.startswith("✓ attend: [2,4,5] x [2,5,3]")


def test_a_corrupt_catalog_gives_one_line_and_english(tmp_path, capsys):
    folder = _release_folder(tmp_path, "generation", with_catalog=False)
    mo = folder / "locale" / "zh_CN" / "LC_MESSAGES" / "visible_checks.mo"
    mo.parent.mkdir(parents=True)
    mo.write_bytes(b"not a catalog")
    module = _load(folder, "corrupt")
    module.use_language("zh")
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and "cannot be read" in said, said


def test_the_checks_and_the_build_know_the_same_languages_and_catalog_locales(released):
    from autograder.foundation import spec

    for english, _ in released.values():
        assert set(english.LOCALES) == set(spec.LANGUAGES)
        assert {lang: locale for lang, locale in english.LOCALES.items() if locale} == catalogs.LOCALES
        assert english.DOMAIN == catalogs.DOMAIN


def test_use_language_refuses_a_language_the_checks_do_not_speak(released):
    with pytest.raises(ValueError, match="speak 'en' or 'zh'"):
        released["generation"][0].use_language("fr")


# --------------------------------------------------------------------------- #
# torch's UserWarning for `.T` on more than two axes: no more of it in Chinese than in English
# --------------------------------------------------------------------------- #


DOT_T_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
from visible_checks import *
if sys.argv[2] == "zh":
    use_language("zh")

def scaled_scores(Q, K):
    return Q @ K.T / Q.shape[-1] ** 0.5

try:
    check_scaled_scores(scaled_scores)
except AssertionError as failure:
    print(failure)
"""


def _run_dot_T(folder: Path, lang: str) -> subprocess.CompletedProcess:
    """A fresh process, as a notebook kernel is (torch warns about `.T` once per process)."""
    script = folder.parent / "student.py"  # a file, so that the check can read the student's line
    script.write_text(DOT_T_SCRIPT, encoding="utf-8")
    return subprocess.run([sys.executable, str(script), str(folder), lang], capture_output=True, text=True,
                          timeout=120, check=True)


def test_the_dot_T_warning_is_not_repeated_or_joined_by_others_in_chinese(tmp_path):
    folder = _release_folder(tmp_path, "self_attention")
    english, chinese = _run_dot_T(folder, "en"), _run_dot_T(folder, "zh")
    assert "`.T` reverses every axis" in english.stdout and "`.T` 会把所有维度倒过来" in chinese.stdout, chinese.stdout
    assert chinese.stderr == english.stderr, chinese.stderr
    warned = [line for line in chinese.stderr.splitlines() if "Warning" in line]
    assert len(warned) <= 1 and all("x.T" in line for line in warned), chinese.stderr


def test_switching_language_warns_about_nothing(tmp_path):
    module = _load(_release_folder(tmp_path, "self_attention"), "quiet")
    stdout = io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.stdout, saved = stdout, sys.stdout
        try:
            module.use_language("zh")
            module.use_language("en")
        finally:
            sys.stdout = saved
    assert caught == [] and stdout.getvalue() == ""


@pytest.mark.parametrize("assignment", sorted(CHECK_FILES))
def test_chinese_plots_draw_without_a_warning_with_or_without_a_chinese_font(tmp_path, assignment, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    module = _load(_release_folder(tmp_path, assignment), f"fonts_{assignment}")
    harness = type(module.harness).use_language.__globals__  # check_harness.py's, whose fonts these are
    for fonts in (harness["CJK_FONTS"], ()):  # an installed font if the machine has one, then none at all
        monkeypatch.setitem(harness, "CJK_FONTS", fonts)
        monkeypatch.setitem(harness, "CJK_FONT_FILES", harness["CJK_FONT_FILES"] if fonts else ())
        with warnings.catch_warnings(record=True) as caught, matplotlib.rc_context():
            warnings.simplefilter("always")
            module.use_language("zh")  # a Chinese font, or else silence for the glyphs the default font lacks
            fig, ax = plt.subplots()
            ax.set(title="注意力权重", xlabel="键 j", ylabel="查询 i")
            fig.savefig(tmp_path / "plot.png")
            plt.close(fig)
        assert [str(w.message) for w in caught] == []
    module.use_language("en")
