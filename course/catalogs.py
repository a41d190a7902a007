"""The visible checks' message catalogs: read a translation, say what is wrong with it, compile it.

The source of truth of a translation is its .po file, course/locale/<locale>/LC_MESSAGES/visible_checks.po
(gettext domain `visible_checks`: the messages of the files course/babel.cfg lists, every assignment's
visible checks, check_harness.py and graded_cells.py). `make messages-visible` extracts the messages into course/locale/visible_checks.pot
(map: course/babel.cfg) and merges the template into each .po; a translator fills in the new entries.
The build puts the compiled catalog into each folder of the edition in that language:

    write_release_catalogs(folder, "zh")   # folder/locale/zh_CN/LC_MESSAGES/visible_checks.mo

where the released check_harness.py finds it when the notebook calls `use_language("zh")`.

A third language (say French, fr_FR): add it to LOCALES here and in check_harness.py (and to
autograder/foundation/spec.py's LANGUAGES), run `.venv/bin/pybabel init -i course/locale/visible_checks.pot
-d course/locale -D visible_checks -l fr_FR`, translate the new .po, then `make release`;
tests/test_visible_catalog.py holds every catalog to the same rules.
"""
from __future__ import annotations

import io
import string
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.mofile import write_mo
from babel.messages.pofile import PoFileError, read_po

DOMAIN = "visible_checks"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
TEMPLATE = LOCALE_DIR / f"{DOMAIN}.pot"
# An edition's language -> the locale of its catalog (English is the msgids themselves: no catalog).
LOCALES = {"zh": "zh_CN"}


def catalog_name(locale: str, suffix: str) -> str:
    """Where a catalog lies under a locale folder: 'zh_CN/LC_MESSAGES/visible_checks.mo'."""
    return f"{locale}/LC_MESSAGES/{DOMAIN}{suffix}"


def po_path(lang: str) -> Path:
    """The translation (.po) of an edition's language, e.g. course/locale/zh_CN/LC_MESSAGES/visible_checks.po."""
    return LOCALE_DIR / catalog_name(LOCALES[lang], ".po")


def read_catalog(path: Path) -> Catalog:
    """The catalog in a .po or .pot file; a file that is not one raises ValueError in one line naming it."""
    try:
        with path.open("rb") as handle:
            return read_po(handle, abort_invalid=True)
    except (OSError, PoFileError) as error:
        raise ValueError(f"{path}: not a readable message catalog ({error})") from None


def placeholders(text: str) -> set[tuple[str, str, str]]:
    """The {name!conversion:spec} fields of a str.format message, as (name, conversion, spec)."""
    return {(name, conversion or "", spec or "") for _, name, spec, conversion in string.Formatter().parse(text)
            if name is not None}


def message_pairs(catalog: Catalog) -> list[tuple[str, str]]:
    """Each (English text, translation) of the catalog; a plural message gives one pair per form."""
    pairs = []
    for message in catalog:
        if not message.id:
            continue
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        pairs += [(ids[min(i, len(ids) - 1)], text) for i, text in enumerate(strings)]
    return pairs


def problems(catalog: Catalog) -> list[str]:
    """What keeps a translation from being complete and safe, one line each: missing or empty
    translations, fuzzy entries, placeholders that differ from the English ones, Babel's own checks."""
    found = []
    for message in catalog:
        if not message.id:
            continue
        english = message.id[0] if isinstance(message.id, tuple) else message.id
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        if not all(s and s.strip() for s in strings):
            found.append(f"not translated: {english!r}")
        if message.fuzzy:
            found.append(f"fuzzy (review the translation, then remove the flag): {english!r}")
        found += [f"{english!r}: {error}" for error in message.check(catalog)]
    for english, text in message_pairs(catalog):
        if text.strip() and placeholders(text) != placeholders(english):
            found.append(f"placeholders differ from the English: {english!r} -> {text!r}")
    return found


def mo_bytes(po: Path) -> bytes:
    """The compiled (.mo) form of a .po file (fuzzy entries left out, so they stay English); deterministic."""
    catalog = read_catalog(po)
    unsafe = [p for p in problems(catalog) if p.startswith("placeholders differ")]
    if unsafe:
        raise ValueError(f"{po}: {unsafe[0]}")
    out = io.BytesIO()
    write_mo(out, catalog, use_fuzzy=False)
    return out.getvalue()


def compile_catalog(po: Path, mo: Path) -> None:
    """Compile the translation `po` into `mo` (its folders made as needed)."""
    data = mo_bytes(po)
    mo.parent.mkdir(parents=True, exist_ok=True)
    mo.write_bytes(data)


def write_release_catalogs(folder: Path, lang: str) -> list[Path]:
    """Put the compiled catalog of `lang` next to the visible checks in `folder` (nothing for English);
    returns the files written, e.g. [folder/locale/zh_CN/LC_MESSAGES/visible_checks.mo]."""
    if lang not in LOCALES:
        return []
    mo = folder / "locale" / catalog_name(LOCALES[lang], ".mo")
    compile_catalog(po_path(lang), mo)
    return [mo]
