"""The machinery every assignment's visible checks share (shipped next to each assignment's
visible_checks.py, as graded_cells.py is; pure Python and torch, no solutions inside).

A visible_checks.py holds its assignment's checks only, on one `Harness`:

    from check_harness import Harness, NotReady, close, ok

    harness = Harness(__file__)          # this file (and any other named) is never "the student's code";
                                         # its folder holds the catalog (locale/zh_CN/LC_MESSAGES/visible_checks.mo)
    _ = harness.gettext                  # every message: _("... {name} ...").format(name=...)
    use_language, uses_your_code, say = harness.use_language, harness.uses_your_code, harness.say

    @harness.check("attend")             # the label the messages use
    def check_attend(attend):
        attend = harness.watch(attend, "attend")       # an error inside it: one sentence with its line and inputs
        out = harness.expect_shape(attend(w, V), [2, 4, 3], "attend(weights, V)")
        assert close(out, w @ V), _("attend: ...")     # a failed assert: that sentence, alone
        ok(_("attend: ..."))                           # the ✓ line

    graded_part = harness.graded_part(PART_CHECKS, globals(), "... workspace/<assignment>{suffix}/{notebook}.ipynb",
                                      PART_NOTEBOOKS)   # {suffix}: "_zh" after use_language("zh")

What a check wrapped by `Harness.check` does with what happens inside it:
  * returns: the check printed its ✓ line;
  * your function raised NotImplementedError (a stub): one line, "<label>: not implemented yet";
  * NotReady("why"): one line, "<label>: why" (another function the check needs is a stub);
  * an AssertionError of the check: that sentence, as one plain AssertionError;
  * any error raised inside your code: one sentence naming the error, your own line, the inputs
    when `watch` saw them, and the mistake it points to (`Harness(explain=...)`, `advice(...)`);
  * anything else: "the check of <label> could not use what your code returned (...)".
A plain AssertionError renders as its one sentence in a notebook (IPython's `_render_traceback_`). `Harness(
folded_warning=..., warning_note=...)` keeps one warning (torch's about `.T`) out of the output while a check runs and
words it into the failure's sentence. An assignment with more checks than one file holds splits them by notebook: the
harness lives in the file the others import (self_attention's does so).

Language: messages are English msgids of the gettext domain `visible_checks` (course/locale; the build compiles the
catalog into locale/ next to this file). `use_language("zh")` switches the harness's messages, its checks' messages
and `say` (the demos' printed text and plot labels) to Chinese, and gives matplotlib a CJK font when one is installed
(else it stays quiet). Each Harness keeps its own language: two assignments' checks in one process do not interfere.
"""
from __future__ import annotations

import contextlib
import functools
import gettext
import inspect
import os
import sysconfig
import traceback
import warnings

import torch
import torch.nn as nn
from graded_cells import graded_part_function  # next to this file in the assignment's folder

DOMAIN = "visible_checks"
LOCALES = {"en": None, "zh": "zh_CN"}  # the course's languages and their catalog's locale (None: the msgids)
# Fonts that draw Chinese, as matplotlib names them (the first one installed is used; Debian: fonts-wqy-microhei),
# and parts of the file names they are installed under (for a font added after matplotlib built its font cache).
CJK_FONTS = ("WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC",
             "Source Han Sans CN", "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC", "Arial Unicode MS")
CJK_FONT_FILES = ("wqy-microhei", "wqy-zenhei", "notosanscjk", "sourcehansans", "simhei", "msyh")
_LIBRARY_DIRS = tuple(
    {os.path.join(os.path.abspath(sysconfig.get_paths()[key]), "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__))), "")}
)
# The files shipped next to the notebooks, never the student's code (wherever a test loaded them from).
_SUPPORT_NAMES = ("check_harness.py", "graded_cells.py", "memory_meter.py", "visible_checks.py")


class NotReady(Exception):
    """Something the check needs (another of your functions) is not written yet: one line, no failure."""


# Values (no language state: the caller words the message)


def ok(message: str) -> None:
    """The ✓ line of a check that passed."""
    print(f"✓ {message}")


def shape_of(value) -> str:
    return str(list(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    """Same shape and equal within `tol` (compared in float64, so half inputs compare fairly)."""
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=tol, rtol=tol, equal_nan=False)


def first_sentence(error: BaseException, empty: str = "") -> str:
    """The first line of an error's message, without its final full stop."""
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else empty


def plain(message: str) -> AssertionError:
    """An AssertionError whose notebook rendering is the sentence alone (IPython calls
    `_render_traceback_` when an exception has it; elsewhere the attribute is ignored)."""
    failure = AssertionError(message)
    failure._render_traceback_ = lambda: [f"AssertionError: {message}"]
    return failure


class Harness:
    """One assignment's visible checks: their language, and how a failure becomes one sentence."""

    def __init__(self, *support_files: str, explain=None, folded_warning: str = "", warning_note=None) -> None:
        """support_files: files whose frames are never the student's, the checks file first (its folder holds
        the catalog, locale/); explain(error) -> a sentence naming a mistake the course teaches, or '' (optional);
        folded_warning: the start of a warning (torch's about `.T`, say) that is not printed while a check runs:
        when the check fails after it, warning_note(sentence) -> what follows the sentence ('' for nothing)."""
        # the catalog lies next to the checks file (this harness may have been imported from another folder)
        home = os.path.dirname(os.path.abspath(support_files[0] if support_files else __file__))
        self.locale_dir = os.path.join(home, "locale")
        self.support = {os.path.abspath(f) for f in support_files}
        self.support_names = set(_SUPPORT_NAMES) | {os.path.basename(f) for f in support_files}
        self.explain = explain
        self.folded_warning, self.warning_note = folded_warning, warning_note
        self.language = "en"
        self.translation = gettext.NullTranslations()
        self.failing: dict[str, None] = {}  # the checks whose last run failed, in the order they failed (uses_your_code)

    # --- Language

    def gettext(self, message: str) -> str:
        """`message` in the language chosen with use_language (English until then)."""
        return self.translation.gettext(message)

    def ngettext(self, singular: str, plural: str, count: int) -> str:
        return self.translation.ngettext(singular, plural, count)

    def say(self, message: str, /, **fields) -> str:
        """A demo's printed text or plot label in the notebook's language: say("peak {mib:.1f} MiB", mib=x)."""
        translated = self.gettext(message)
        return translated.format(**fields) if fields else translated

    def use_language(self, lang: str) -> None:
        """Print the checks' messages (and the demos' text) in `lang`: "en" (the default) or "zh" (简体中文)."""
        if lang not in LOCALES:
            raise ValueError(f"use_language({lang!r}): the visible checks speak {' or '.join(map(repr, LOCALES))}")
        self.language = lang
        if LOCALES[lang] is None:
            self.translation = gettext.NullTranslations()
            return
        try:
            self.translation = gettext.translation(DOMAIN, localedir=self.locale_dir, languages=[LOCALES[lang]],
                                                   fallback=False)
        except Exception as error:  # noqa: BLE001 - a missing or unreadable catalog: English, and one line that says why
            self.translation = gettext.NullTranslations()
            catalog = os.path.join(self.locale_dir, LOCALES[lang], "LC_MESSAGES", DOMAIN + ".mo")
            why = "is missing" if isinstance(error, FileNotFoundError) else f"cannot be read ({type(error).__name__})"
            print(f"use_language({lang!r}): the message catalog {catalog} {why}, so the visible checks speak English "
                  "(找不到中文消息目录，检查信息将以英文显示).")
        if lang == "zh":
            use_cjk_font()

    # --- Whose code raised

    def is_student_file(self, filename: str) -> bool:
        """A notebook cell or a file of the student's: not a shipped file, not torch, not the standard library."""
        if filename.startswith("<frozen"):
            return False
        path = os.path.abspath(filename)
        shipped = path in self.support or os.path.basename(path) in self.support_names
        return not shipped and not path.startswith(_LIBRARY_DIRS)

    def student_frames(self, error: BaseException) -> list:
        """The traceback entries (outermost first) that lie in the student's code."""
        found, tb = [], error.__traceback__
        while tb is not None:
            if self.is_student_file(tb.tb_frame.f_code.co_filename):
                found.append(tb)
            tb = tb.tb_next
        return found

    def student_line(self, error: BaseException) -> str:
        """The line of the student's code where `error` was raised (the innermost one), or ''."""
        frames = [f for f in traceback.extract_tb(error.__traceback__) if self.is_student_file(f.filename)]
        return (frames[-1].line or "").strip() if frames else ""

    def student_function_source(self, error: BaseException) -> str:
        """The source of the student's function in which `error` was raised, or ''."""
        frames = self.student_frames(error)
        try:
            return "".join(inspect.getsourcelines(frames[-1].tb_frame.f_code)[0]) if frames else ""
        except (OSError, TypeError):
            return ""

    def stub_name(self, error: NotImplementedError) -> str:
        """The student's function or class that raised NotImplementedError ('KVCache' for its __init__), or ''."""
        frames = self.student_frames(error)
        if not frames:
            return ""
        code = frames[-1].tb_frame.f_code
        return getattr(code, "co_qualname", code.co_name).removesuffix(".__init__")

    # --- Sentences

    def describe_call(self, fn, args, kwargs) -> str:
        """'q [2, 3, 4], window=3': the arguments by the names of the student's own signature."""
        _ = self.gettext
        try:
            target = fn.forward if isinstance(fn, nn.Module) else fn
            items = list(inspect.signature(target).bind(*args, **kwargs).arguments.items())
        except (TypeError, ValueError):
            items = [(_("argument {number}").format(number=i + 1), a) for i, a in enumerate(args)] + list(kwargs.items())
        return ", ".join(f"{name} {shape_of(v)}" if isinstance(v, torch.Tensor) else f"{name}={_short_repr(v)}"
                         for name, v in items)

    def raised(self, name: str, error: BaseException, inputs: str = "", advice: str = "") -> AssertionError:
        """The failure for an error raised inside the student's code: kind, line, inputs, and the mistake."""
        _ = self.gettext
        kind, text, line = type(error).__name__, first_sentence(error, _("(no message)")), self.student_line(error)
        if inputs and line:
            sentence = _("your `{name}` raised {kind} on {inputs}, in the line `{line}`: {text}.")
        elif inputs:
            sentence = _("your `{name}` raised {kind} on {inputs}: {text}.")
        elif line:
            sentence = _("your `{name}` raised {kind} in the line `{line}`: {text}.")
        else:
            sentence = _("your `{name}` raised {kind}: {text}.")
        sentence = sentence.format(name=name, kind=kind, inputs=inputs, line=line, text=text)
        advice = advice or getattr(error, "check_advice", "") or (self.explain(error) if self.explain else "")
        return plain(_("{sentence} {advice}").format(sentence=sentence, advice=advice) if advice else sentence)

    def expect_tensor(self, value, what: str) -> torch.Tensor:
        assert isinstance(value, torch.Tensor), self.gettext("{what} should be a torch.Tensor, got {type}").format(
            what=what, type=type(value).__name__)
        return value

    def expect_shape(self, value, shape, what: str) -> torch.Tensor:
        value = self.expect_tensor(value, what)
        assert list(value.shape) == list(shape), self.gettext("{what} has shape {shape}, expected {expected}").format(
            what=what, shape=shape_of(value), expected=list(shape))
        return value

    def no_nan(self, value: torch.Tensor, what: str) -> None:
        assert not torch.isnan(value).any(), self.gettext("{what} contains NaN").format(what=what)

    def check_broke(self, name: str, error: BaseException) -> AssertionError:
        _ = self.gettext
        return plain(_("the check of `{name}` could not use what your code returned ({kind}: {text}).").format(
            name=name, kind=type(error).__name__, text=first_sentence(error, _("(no message)"))))

    def watch(self, fn, name: str, advise=None):
        """`fn` as the checks call it: an error raised inside it becomes one sentence naming the inputs.

        advise(error, args) may return a sentence naming the mistake for these inputs (or '')."""

        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (NotImplementedError, NotReady):
                raise
            except Exception as error:  # noqa: BLE001 - raised by calling your function (a bad signature too)
                advice = advise(error, args) if advise else ""
                raise self.raised(name, error, self.describe_call(fn, args, kwargs), advice) from None

        return call

    @contextlib.contextmanager
    def advice(self, sentence: str):
        """An error the student's code raises inside this block is reported with this sentence after it."""
        try:
            yield
        except (NotImplementedError, NotReady, AssertionError):
            raise
        except Exception as error:  # annotated, then passed on to the check's wrapper
            error.check_advice = sentence
            raise

    # --- The wrapper of every check, the demo guard, the graded cell

    def check(self, label: str):
        """Decorator of a check function: a stub gives one line; any failure one plain AssertionError sentence."""

        def wrap(check_function):
            @functools.wraps(check_function)
            def run(*args, **kwargs):
                __tracebackhide__ = True  # pytest and IPython leave this frame out
                seen = []
                self.failing[label] = None  # until it has run through
                try:
                    with self.warnings_folded(seen):
                        self.run_check(label, check_function, args, kwargs)
                except AssertionError as failure:
                    note = self.warning_note(str(failure)) if seen and self.warning_note else ""
                    if not note:
                        raise
                    raise plain(self.gettext("{sentence} {advice}").format(sentence=failure, advice=note)) from None
                self.failing.pop(label, None)

            return run

        return wrap

    def run_check(self, label: str, check_function, args, kwargs) -> None:
        """One check, seeded: a stub prints one line; every failure is raised as one plain AssertionError sentence."""
        __tracebackhide__ = True
        _ = self.gettext
        try:
            with torch.random.fork_rng():
                torch.manual_seed(1234)
                check_function(*args, **kwargs)
        except NotImplementedError as error:
            if not self.stub_name(error):
                raise self.check_broke(label, error) from None
            print(_("{name}: not implemented yet (replace the `raise NotImplementedError` with your code)").format(
                name=label))
        except NotReady as why:
            print(_("{name}: {reason}").format(name=label, reason=why))
        except AssertionError as failure:
            if self.student_frames(failure):  # an assert in the student's own code
                raise self.raised(label, failure) from None
            raise plain(str(failure)) from None
        except Exception as error:  # noqa: BLE001 - every failure becomes one sentence
            if self.student_frames(error):
                raise self.raised(label, error) from None
            raise self.check_broke(label, error) from None

    @contextlib.contextmanager
    def warnings_folded(self, seen: list):
        """Inside: a warning starting with `folded_warning` is recorded in `seen` instead of printed; the others
        are issued again once the block is left."""
        if not self.folded_warning:
            yield
            return
        caught = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                yield
        finally:
            for entry in caught:
                if str(entry.message).startswith(self.folded_warning):
                    seen.append(entry)
                else:
                    warnings.warn_explicit(entry.message, entry.category, entry.filename, entry.lineno)

    @contextlib.contextmanager
    def uses_your_code(self):
        """`with uses_your_code():` around a demo: a stub it calls, or an error while a check fails (a plot fed
        what a broken function returned), gives one line instead of a traceback; any other error is raised."""
        try:
            yield
        except NotImplementedError as error:
            if not (name := self.stub_name(error)):
                raise
            print(self.gettext("This demo needs your `{name}`, which is not implemented yet: fill it in above, "
                               "then run this cell again.").format(name=name))
        except Exception as error:  # explained when a failed check explains it, else raised
            if not self.failing:
                raise
            print(self.gettext("This demo stopped ({kind}: {text}): it uses your code, and the check of `{names}` above "
                               "fails. Fix what that check says, then run this cell again.").format(kind=type(error).__name__,
                  text=first_sentence(error, self.gettext("(no message)")), names="`, `".join(self.failing)))

    def graded_part(self, part_checks: dict[str, tuple[str, ...]], checks: dict, grade_command: str,
                    part_notebooks: dict[str, str] | None = None):
        """The `graded_part` of an assignment (see graded_cells.py), speaking this harness's language; `{suffix}`
        in grade_command is the edition's folder suffix ("_zh" after use_language("zh")), `{notebook}` the part's."""
        return graded_part_function(part_checks, checks, grade_command, self.gettext, part_notebooks,
                                    self.edition_suffix)

    def edition_suffix(self) -> str:
        """The folder suffix of the edition the notebook speaks: "_zh" after use_language("zh"), else ""."""
        return "" if LOCALES[self.language] is None else "_" + self.language


def _short_repr(value) -> str:
    if isinstance(value, nn.Module):
        return f"<{type(value).__name__}>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def use_cjk_font() -> str | None:
    """Give matplotlib the first installed CJK font (returned), so that Chinese labels render; when none is
    installed, labels render as boxes and matplotlib's missing-glyph warnings stay quiet. Needs no pyplot."""
    try:
        import matplotlib
        from matplotlib import font_manager
    except ImportError:
        return None
    warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from (current )?font", category=UserWarning)
    installed = {font.name for font in font_manager.fontManager.ttflist}
    if not any(name in installed for name in CJK_FONTS):  # installed after matplotlib cached its font list?
        for path in font_manager.findSystemFonts():
            if any(part in os.path.basename(path).lower() for part in CJK_FONT_FILES):
                font_manager.fontManager.addfont(path)
        installed = {font.name for font in font_manager.fontManager.ttflist}
    found = next((name for name in CJK_FONTS if name in installed), None)
    if found:
        families = [name for name in matplotlib.rcParams["font.sans-serif"] if name != found]
        matplotlib.rcParams["font.sans-serif"] = [found, *families]
        matplotlib.rcParams["font.family"] = "sans-serif"
        matplotlib.rcParams["axes.unicode_minus"] = False  # CJK fonts often lack the minus sign
    return found
