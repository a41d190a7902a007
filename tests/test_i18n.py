"""The grader's feedback in every course language: the gettext catalog (autograder/locale) is complete,
up to date with the sources, and renders; the language is chosen per submission, never changing a score."""
from __future__ import annotations

import ast
import json
import re
import string
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from autograder.commands import cli, document
from autograder.foundation import edition, i18n, spec
from autograder.foundation.extract import extract

ROOT = Path(__file__).resolve().parent.parent
POT = i18n.LOCALE_DIR / f"{i18n.DOMAIN}.pot"
CHINESE = re.compile(r"[\u4e00-\u9fff]")
TRANSLATED = [lang for lang in spec.LANGUAGES if lang != spec.DEFAULT_LANGUAGE]


def catalog(lang: str):
    with i18n.catalog_path(lang).open("rb") as f:
        return read_po(f, locale=i18n.LOCALES[lang])


def template_ids() -> set[str]:
    with POT.open("rb") as f:
        return {m.id for m in read_po(f) if m.id}


def fields(text: str) -> set[tuple[str, str, str]]:
    return {(name, conv or "", spec_) for _, name, spec_, conv in string.Formatter().parse(text) if name is not None}


@pytest.mark.parametrize("lang", TRANSLATED)
def test_every_message_has_a_translation_that_is_neither_empty_nor_fuzzy(lang):
    entries = {m.id: m for m in catalog(lang) if m.id}
    assert template_ids() - set(entries) == set(), "run `make messages`, then translate the new messages"
    empty = [m.id for m in entries.values() if not (m.string or "").strip()]
    fuzzy = [m.id for m in entries.values() if m.fuzzy]
    assert empty == [] and fuzzy == [], {"empty": empty, "fuzzy": fuzzy}


def extracted_from_sources() -> set[str]:
    cfg = (ROOT / "babel-autograder.cfg").read_text()
    assert "autograder.foundation.i18n:extract_messages" in cfg  # the method the template was made with
    return {message for _file, _line, message, _comments, _context in extract_from_dir(
        str(ROOT / "autograder"), method_map=[("**.py", "autograder.foundation.i18n:extract_messages")],
        keywords={"_": None, "Refused": None})}


def test_the_template_and_the_catalogs_hold_exactly_the_messages_of_the_sources():
    """`make messages` was run after the last change of a message (an obsolete entry is as stale as a missing one)"""
    in_sources = extracted_from_sources()
    assert len(in_sources) > 300
    assert template_ids() == in_sources, "run `make messages` (and translate what it adds)"
    for lang in TRANSLATED:
        assert {m.id for m in catalog(lang) if m.id} == in_sources, lang


@pytest.mark.parametrize("lang", TRANSLATED)
def test_translations_keep_the_placeholders_and_speak_the_language(lang):
    wrong, untranslated = [], []
    for m in catalog(lang):
        if not m.id:
            continue
        # a translation may leave out an English plural ending ({plural}), nothing else
        if fields(m.string) != {f for f in fields(m.id) if f[0] != "plural"}:
            wrong.append((m.id, m.string))
        if lang == "zh" and len(re.sub(r"\{[^}]*\}|[\s\W]", "", m.id)) > 3 and not CHINESE.search(m.string):
            untranslated.append(m.id)
    assert wrong == [] and untranslated == []


def sample(name_spec: tuple[str, str, str]):
    """A value a placeholder accepts: a number where it has a format spec, else a text."""
    return 1.5 if name_spec[2] else "X"


@pytest.mark.parametrize("lang", spec.LANGUAGES)
def test_every_message_renders_in_every_language(lang):
    for msgid in template_ids():
        message = i18n.message(msgid).format(**{f[0]: sample(f) for f in fields(msgid)})
        text = message.render(lang)
        assert text and "{" not in text.replace("{{", "").replace("{X", "")  # (an unfilled placeholder)


def test_english_rendering_is_the_msgid_itself():
    message = i18n.message("{what} is off by up to {diff:.3g}").format(what="attend(weights, V)", diff=0.123456)
    assert str(message) == message.render("en") == "attend(weights, V) is off by up to 0.123"
    assert "0.123" in message.render("zh") and CHINESE.search(message.render("zh"))


def test_a_message_inside_a_message_is_rendered_in_the_same_language():
    hint = i18n.message("your mask is transposed")
    outer = i18n.message("{message}: {hint}").format(message="causal_mask(5)", hint=hint)
    assert str(outer) == "causal_mask(5): your mask is transposed"
    assert outer.render("zh") == "causal_mask(5)：你的掩码转置了"


def test_check_names_are_translated_for_reports_with_their_parameters_words_and_all():
    name = "rows of the attention weights sum to 1 (softmax over the key dimension)"
    assert i18n.check_title(f"{name} [3-D]", "en") == f"{name} [3-D]"
    zh = i18n.check_title(f"{name} [3-D]", "zh")
    assert CHINESE.search(zh) and zh.endswith(" [3 维]")
    assert i18n.check_title("forward matches reference [padding mask]", "zh").endswith(" [填充掩码]")
    assert i18n.check_title("the cache grows [1-6]", "zh").endswith(" [1-6]")  # an id of numbers has no words to translate


def test_every_worded_parameter_of_a_hidden_check_name_is_in_the_catalog():
    found = {param for path in (ROOT / "autograder" / "checks").rglob("test_*.py")
             for _, param in i18n.check_params(path.read_text(encoding="utf-8"))}
    assert {"no mask", "padding mask", "context mask", "no_scale", "3-D", "plain"} <= found
    assert found <= template_ids(), f"run `make messages`: {sorted(found - template_ids())}"


def test_an_unknown_language_is_refused_in_one_line():
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        edition.resolve(spec.DEFAULT.id, "fr")  # (where the edition is resolved: nothing below checks it again)


SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def own_nodes(fn):
    """The nodes of a function's own scope (not of its comprehensions or nested functions)."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def test_no_grader_function_rebinds_the_message_function():
    """`_` is the message function in every module that has one: a function that also binds `_` (a throwaway
    `x, _ = ...`) would call that value instead (the trap of adding a message to such a function)"""
    found = []
    for path in (ROOT / "autograder").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_" for t in n.targets)
                   for n in tree.body):
            continue
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                stores = [n for n in own_nodes(fn) if isinstance(n, ast.Name) and n.id == "_"
                          and isinstance(n.ctx, ast.Store)]
                calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                         and n.func.id == "_"]
                if stores and calls:
                    found.append(f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name}")
    assert found == []


def test_grade_takes_a_language_and_the_json_says_which():
    args = cli.build_parser().parse_args(["grade", "x.ipynb", "--lang", "zh"])
    assert args.lang == "zh"
    assert edition.resolve("self_attention_zh").lang == "zh" and edition.resolve("self_attention").lang == "en"


# --------------------------------------------------------------------------- graded, in both languages
def chinese_notebook(folder: Path, name: str = "02_masks", lang: str | None = "zh") -> Path:
    """The released notebook `name`, as the Chinese edition marks its notebooks (metadata course.lang)."""
    nb = json.loads((ROOT / "assignments" / "self_attention" / f"{name}.ipynb").read_text(encoding="utf-8"))
    if lang:
        nb["metadata"]["course"] = {"lang": lang}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_the_language_comes_from_the_notebooks_metadata_else_the_editions_folder_name(private_tmp):
    def submission_language(extracted):
        return edition.resolve(notebooks=extracted.lang, folder=extracted.path).lang

    marked = chinese_notebook(private_tmp / "anywhere")
    assert extract(marked).lang == "zh" and submission_language(extract(marked)) == "zh"
    plain = chinese_notebook(private_tmp / spec.edition_id("self_attention", "zh"), lang=None)
    assert extract(plain).lang is None and submission_language(extract(plain.parent)) == "zh"
    english = chinese_notebook(private_tmp / "self_attention", lang=None)
    assert submission_language(extract(english.parent)) == "en"


def test_the_untouched_chinese_release_scores_zero_with_chinese_messages(grader, private_tmp):
    path = chinese_notebook(private_tmp / "release-zh")
    result = grader.grade(path, part_ids=["masks"])
    assert result.lang == "zh" and document.to_json(result)["lang"] == "zh"
    [part] = result.parts
    assert part.score == 0 and part.checks
    assert all(CHINESE.search(c.message) for c in part.checks), [c.message for c in part.checks]
    english = grader.grade(path, part_ids=["masks"], lang="en")
    assert english.lang == "en" and document.to_json(english)["lang"] == "en"
    assert [c.name for c in english.parts[0].checks] == [c.name for c in part.checks]
    assert not any(CHINESE.search(c.message) for c in english.parts[0].checks)


def test_nbgrader_feedback_speaks_the_editions_language():
    from autograder.foundation.extract import notebook_language
    from autograder.nbgrader_plugin import part_report
    from autograder.foundation.results import CheckResult, PartResult

    def feedback_language(nb, assignment_id):  # (as the preprocessor resolves it)
        return edition.resolve(notebooks=notebook_language(nb), folder=assignment_id).lang

    assert feedback_language({"metadata": {"course": {"lang": "zh"}}}, "self_attention") == "zh"
    assert feedback_language({"metadata": {}}, spec.edition_id("generation", "zh")) == "zh"
    assert feedback_language({"metadata": {}}, "self_attention") == "en"
    name = "causal_mask(S) is True where key j <= query i, diagonal included"
    part = PartResult("masks", 15, (CheckResult(name, False, 0.0, 2.0, "……"),), ("备注",))
    english, chinese = part_report(part), part_report(part, "zh")
    assert "[FAIL] " + name in english and "points" in english
    assert "[未通过]" in chinese and "分" in chinese and name not in chinese and "备注：备注" in chinese


def test_the_gradescope_bundle_of_a_chinese_edition_carries_the_catalog(private_tmp):
    import zipfile

    from autograder.commands.gradescope import build_bundle

    path = build_bundle(private_tmp / "zh-bundle.zip", edition.resolve(spec.DEFAULT.id, "zh"))
    with zipfile.ZipFile(path) as z:
        assert "autograder/locale/zh_CN/LC_MESSAGES/autograder.po" in z.namelist()
        assert "Babel==" in z.read("requirements.txt").decode()
        assert spec.edition_id(spec.DEFAULT.id, "zh") in z.read("run_autograder").decode()
