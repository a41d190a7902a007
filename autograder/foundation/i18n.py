"""What a student reads from the grader, in the submission's language: gettext catalogs managed with Babel.

A message is made where a failure is found (a hidden check, the student handle, the scan) as a
`Message`: its English text, which is the msgid, with named placeholders, and the values that fill
them. Nothing there needs to know the language: a `Message` is rendered in the submission's language
only where a result is made (check.py, scoring.py, grade.py, report.py), with `render(message, lang)`.
`str()` of a message is its English text, exactly as the grader wrote it before it spoke Chinese.

    _ = i18n.message   # (one line per module: pybabel extracts the calls of `_`)
    raise CheckFailure(_("the weights of row {row} sum to {total:.3f}, not 1").format(row=r, total=t))

A value may itself be a Message (a hint inside a failure): it is rendered in the same language.

The catalogs: autograder/locale/<locale>/LC_MESSAGES/autograder.po, the source (msgid = the English
text), from autograder/locale/autograder.pot (`make messages`: pybabel extract + update, babel.cfg). A
.po is compiled when the grader first needs its language, once per process (Babel's own compiler, in
memory, ~10 ms): no compiled binary is kept in git, so none can go stale. A fuzzy or empty entry is not
compiled (gettext then falls back to the English text); tests/test_i18n.py fails on one.
"""
from __future__ import annotations

import ast
import functools
import gettext
import io
import re
from pathlib import Path

from .spec import DEFAULT_LANGUAGE

DOMAIN = "autograder"
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
LOCALES = {"zh": "zh_CN"}  # a course language -> the gettext locale of its catalog


class Message:
    """A message for the student: the English text (msgid) and the values of its named placeholders."""

    __slots__ = ("msgid", "params")

    def __init__(self, msgid: str, params: tuple[tuple[str, object], ...] = ()):
        self.msgid = msgid
        self.params = params

    def format(self, **params) -> Message:
        """The message with its placeholders' values (named only, so that a translation may reorder them)."""
        return Message(self.msgid, tuple(params.items()))

    def render(self, lang: str = DEFAULT_LANGUAGE) -> str:
        text = translations(lang).gettext(self.msgid)
        if not self.params:
            return text
        return text.format(**{name: value.render(lang) if isinstance(value, Message) else value
                              for name, value in self.params})

    def __str__(self) -> str:
        return self.render(DEFAULT_LANGUAGE)

    def __repr__(self) -> str:
        return f"Message({self.msgid!r}, {self.params!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Message) and (self.msgid, str(self)) == (other.msgid, str(other))

    def __hash__(self) -> int:
        return hash((self.msgid, str(self)))


def message(msgid: str) -> Message:
    """The message `msgid` (the English text); `.format(name=value, ...)` fills its placeholders."""
    return Message(msgid)


def render(text, lang: str = DEFAULT_LANGUAGE) -> str:
    """A Message in `lang`; anything else (the student's own text, a name) as it is."""
    return text.render(lang) if isinstance(text, Message) else str(text)


def join(messages, lang: str = DEFAULT_LANGUAGE, sep: str = "; ") -> str:
    return sep.join(render(m, lang) for m in messages)


CHECK_PARAMS = re.compile(r"^(?P<title>.*?)(?P<params> \[[^\[\]]*\])?$", re.S)


def check_title(name: str, lang: str = DEFAULT_LANGUAGE) -> str:
    """A check's name (the first line of its docstring, maybe with its parameters: "... [3-D]") in `lang`, for
    the reports people read; results and the JSON keep the English name, the same in every language."""
    if lang == DEFAULT_LANGUAGE:
        return name
    whole = translations(lang).gettext(name)  # (a name may end in brackets of its own: "... x [B, S, d_model]")
    if whole != name:
        return whole
    match = CHECK_PARAMS.match(name)
    params = match["params"]  # " [padding mask]": its words translated too (an id such as "1-6" has no entry)
    return translations(lang).gettext(match["title"]) + (f" [{translations(lang).gettext(params[2:-1])}]" if params else "")


def check_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of each check of a hidden-check file, named as check.check_name names them."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            doc = ast.get_docstring(node, clean=False)
            name = doc.strip().splitlines()[0].strip() if doc else node.name.removeprefix("test_").replace("_", " ")
            found.append((node.lineno, name))
    return found


def _strings(node) -> list[str]:
    """The string constants of a literal list, tuple or set, or the string keys of a literal dict."""
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", [])
    return [item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)]


def check_params(source: str) -> list[tuple[int, str]]:
    """(line, id) of each word-bearing parameter id of a hidden-check file's `pytest.mark.parametrize`: its `ids=[...]`,
    its literal list of strings, or `list(NAME)` of a module-level literal (a check's name ends in " [id]")."""
    tree = ast.parse(source)
    literals = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "parametrize"):
            continue
        ids = next((kw.value for kw in node.keywords if kw.arg == "ids"), None)
        values = node.args[1] if len(node.args) > 1 else None
        if ids is None and isinstance(values, ast.Call) and getattr(values.func, "id", "") == "list" and values.args:
            values = literals.get(getattr(values.args[0], "id", ""))
        found += [(node.lineno, text) for text in _strings(ids if ids is not None else values) if re.search("[A-Za-z]", text)]
    return found


def extract_messages(fileobj, keywords, comment_tags, options):
    """pybabel's extraction method for the grader (babel-autograder.cfg): every `_("...")`, and in a hidden
    check file (test_*.py) every check's name, which the reports show translated."""
    from babel.messages.extract import extract_python  # noqa: PLC0415 - only when pybabel extracts

    source = fileobj.read()
    yield from extract_python(io.BytesIO(source), keywords, comment_tags, options)
    if Path(getattr(fileobj, "name", "")).name.startswith("test_"):
        for line, name in check_names(source.decode("utf-8")):
            yield line, None, name, ["the name of a hidden check"]
        for line, param in check_params(source.decode("utf-8")):
            yield line, None, param, ["a parameter of a hidden check's name, in its brackets"]


def catalog_path(lang: str) -> Path:
    return LOCALE_DIR / LOCALES[lang] / "LC_MESSAGES" / f"{DOMAIN}.po"


@functools.lru_cache(maxsize=None)
def translations(lang: str) -> gettext.NullTranslations:
    """The compiled catalog of `lang` (English: the msgids themselves). The language was checked where the edition
    was resolved (edition.py)."""
    if lang == DEFAULT_LANGUAGE:
        return gettext.NullTranslations()
    from babel.messages.mofile import write_mo  # noqa: PLC0415 - Babel only for a language with a catalog
    from babel.messages.pofile import read_po  # noqa: PLC0415

    with catalog_path(lang).open("rb") as po:
        catalog = read_po(po, locale=LOCALES[lang], domain=DOMAIN)
    compiled = io.BytesIO()
    write_mo(compiled, catalog, use_fuzzy=False)
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)
