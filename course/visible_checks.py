"""Quick visible checks for the self-attention course (pure torch, no solutions inside).

Each `check_*` function takes your function or class, runs it on small seeded inputs and
prints one "✓" line when the basic properties hold. When something is off it raises an
AssertionError whose one sentence says what went wrong in your code (and, when your code
itself raised, which line and why); when you have not written the code yet it prints
"<name>: not implemented yet". Passing these checks is necessary, not sufficient: the
hidden autograder runs many more cases.

`with uses_your_code():` wraps a demo cell that calls your functions: while one of them is
still a stub, the cell prints one line saying which, instead of stopping Run All.

`use_language("zh")` prints every message in Simplified Chinese (the Chinese edition's first
cell calls it); `use_language("en")` switches back. The translations are the gettext catalog
locale/zh_CN/LC_MESSAGES/visible_checks.mo next to this file.
"""
from __future__ import annotations

import contextlib
import functools
import gettext
import inspect
import math
import os
import re
import sysconfig
import traceback
import warnings

import torch
import torch.nn as nn
from graded_cells import graded_part_function  # next to this file in the assignment's folder

__all__ = [
    "check_make_projections", "check_project_qkv",
    "check_scaled_scores", "check_attention_weights", "check_attend",
    "check_padding_mask", "check_causal_mask", "check_apply_padding_mask", "check_apply_causal_mask",
    "check_self_attention", "check_to_official", "check_parity_error",
    "check_split_heads", "check_merge_heads", "check_multihead",
    "check_attention_matrix_bytes", "check_sdpa_attention", "check_chunked_attention",
    "graded_part", "uses_your_code", "use_language",
]


class _NotReady(Exception):
    """Something the check needs (another of your functions) is not written yet."""


# --------------------------------------------------------------------------- #
# The language of the messages (gettext; the catalog is course/locale/zh_CN/LC_MESSAGES/visible_checks.po)
# --------------------------------------------------------------------------- #

DOMAIN = "visible_checks"
LOCALES = {"en": None, "zh": "zh_CN"}  # the course's languages and their catalog's locale (None: the msgids)
_LOCALE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "locale")
_translation = gettext.NullTranslations()  # the language use_language chose (student side only)


def _(message: str) -> str:
    """`message` in the language chosen with use_language (English until then)."""
    return _translation.gettext(message)


# Fonts that draw Chinese, as matplotlib names them (the first one installed is used), and the file
# names they are installed under (for a font added after matplotlib built its font cache).
CJK_FONTS = ("WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC",
             "Source Han Sans CN", "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC", "Arial Unicode MS")
CJK_FONT_FILES = ("wqy-microhei", "wqy-zenhei", "notosanscjk", "sourcehansans", "simhei", "msyh")


def _chinese_plots() -> None:
    """Plots in the Chinese edition draw their titles and labels with a Chinese font when one is installed
    (Debian: fonts-wqy-microhei); without one, they still draw, quietly (no warning per missing glyph)."""
    try:
        import matplotlib
        from matplotlib import font_manager
    except ImportError:  # no plots without matplotlib
        return
    installed = {font.name for font in font_manager.fontManager.ttflist}
    found = [name for name in CJK_FONTS if name in installed]
    if not found:
        for path in font_manager.findSystemFonts():
            if any(part in os.path.basename(path).lower() for part in CJK_FONT_FILES):
                font_manager.fontManager.addfont(path)
        found = [name for name in CJK_FONTS if name in {font.name for font in font_manager.fontManager.ttflist}]
    if found:
        matplotlib.rcParams["font.sans-serif"] = [found[0], *matplotlib.rcParams["font.sans-serif"]]
        matplotlib.rcParams["axes.unicode_minus"] = False  # the CJK fonts may lack the Unicode minus
    else:
        warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)


def use_language(lang: str) -> None:
    """Print the checks' messages in `lang`: "en" (the default) or "zh" (简体中文, with a Chinese font for plots)."""
    global _translation
    if lang not in LOCALES:
        raise ValueError(f"use_language({lang!r}): the visible checks speak {' or '.join(map(repr, LOCALES))}")
    if LOCALES[lang] is None:
        _translation = gettext.NullTranslations()
        return
    _chinese_plots()
    try:
        _translation = gettext.translation(DOMAIN, localedir=_LOCALE_DIR, languages=[LOCALES[lang]], fallback=False)
    except Exception as error:  # a missing or unreadable catalog: English, and one line that says why
        _translation = gettext.NullTranslations()
        catalog = os.path.join(_LOCALE_DIR, LOCALES[lang], "LC_MESSAGES", DOMAIN + ".mo")
        why = "is missing" if isinstance(error, FileNotFoundError) else f"cannot be read ({type(error).__name__})"
        print(f"use_language({lang!r}): the message catalog {catalog} {why}, so the visible checks speak English "
              "(找不到中文消息目录，检查信息将以英文显示).")


# --------------------------------------------------------------------------- #
# Whose code raised, and a short traceback in the notebook
# --------------------------------------------------------------------------- #

_HERE = os.path.abspath(__file__)
_NOT_STUDENT_FILES = {_HERE, os.path.join(os.path.dirname(_HERE), "memory_meter.py")}
_LIBRARY_DIRS = tuple(
    {os.path.join(os.path.abspath(sysconfig.get_paths()[key]), "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__))), "")}
)


def _is_student_file(filename: str) -> bool:
    """A notebook cell or a file of the student's, not this file, the meter, torch or the standard library."""
    if filename.startswith("<frozen"):
        return False
    path = os.path.abspath(filename)
    return path not in _NOT_STUDENT_FILES and not path.startswith(_LIBRARY_DIRS)


def _student_frames(error: BaseException) -> list:
    """The traceback entries (outermost first) that lie in the student's code."""
    found, tb = [], error.__traceback__
    while tb is not None:
        if _is_student_file(tb.tb_frame.f_code.co_filename):
            found.append(tb)
        tb = tb.tb_next
    return found


def _student_line(error: BaseException) -> str:
    """The line of the student's code where `error` was raised (the innermost one), or ''."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if _is_student_file(f.filename)]
    return (frames[-1].line or "").strip() if frames else ""


def _plain(failure: AssertionError) -> AssertionError:
    """Mark a failure so that a notebook shows its sentence alone, `AssertionError: ...`, as the generation
    assignment's checks do (one look for every failed check of the course).

    IPython renders an exception through its `_render_traceback_` method when it has one;
    outside IPython (pytest, a script) the attribute is ignored."""
    failure._render_traceback_ = functools.partial(_one_line, failure)
    return failure


def _one_line(failure: AssertionError) -> list[str]:
    return [f"{type(failure).__name__}: {failure}"]


# --------------------------------------------------------------------------- #
# Messages about the student's code raising (each a whole sentence, built here)
# --------------------------------------------------------------------------- #

_DOT_T = re.compile(r"\.T\b")
_SWAP_1_2 = re.compile(r"transpose\(\s*(1\s*,\s*2|2\s*,\s*1)\s*\)|permute\(\s*0\s*,\s*2\s*,\s*1\s*\)")
_MASK_3D_VIEW = re.compile(r"\[\s*:\s*,\s*None\s*,\s*:\s*\]")


def _shape(t) -> str:
    return str(list(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else _("(no message)")


def _describe_call(fn, args, kwargs) -> str:
    """'Q [2, 3, 4], K [2, 5, 4]': the arguments by the names of the student's own signature."""
    try:
        target = fn.forward if isinstance(fn, nn.Module) else fn
        items = list(inspect.signature(target).bind(*args, **kwargs).arguments.items())
    except (TypeError, ValueError):
        items = [(_("argument {number}").format(number=i + 1), a) for i, a in enumerate(args)] + list(kwargs.items())
    return ", ".join(f"{name} {_shape(v)}" if isinstance(v, torch.Tensor) else f"{name}={_short_repr(v)}" for name, v in items)


def _short_repr(value) -> str:
    if isinstance(value, nn.Module):
        return f"<{type(value).__name__}>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _raised_sentence(name: str, error: BaseException, inputs: str = "") -> str:
    kind, text, line = type(error).__name__, _first_line(error), _student_line(error)
    if inputs and line:
        sentence = _("your `{name}` raised {kind} on {inputs}, in the line `{line}`: {text}.")
    elif inputs:
        sentence = _("your `{name}` raised {kind} on {inputs}: {text}.")
    elif line:
        sentence = _("your `{name}` raised {kind} in the line `{line}`: {text}.")
    else:
        sentence = _("your `{name}` raised {kind}: {text}.")
    return sentence.format(name=name, kind=kind, inputs=inputs, line=line, text=text)


def _student_function_source(error: BaseException) -> str:
    """The source of the student's function in which `error` was raised, or ''."""
    frames = _student_frames(error)
    try:
        return "".join(inspect.getsourcelines(frames[-1].tb_frame.f_code)[0]) if frames else ""
    except (OSError, TypeError):
        return ""


def _known_mistake(error: BaseException) -> str:
    """A sentence naming a mistake the course teaches, read from the student's line (or else the
    function it is in) and the error; or ''."""
    error_line = _student_line(error)
    code = error_line
    if not any(pattern.search(code) for pattern in (_DOT_T, _SWAP_1_2, _MASK_3D_VIEW)):
        code = _student_function_source(error) or code
    if _DOT_T.search(code):
        return _("`.T` reverses every axis of a tensor with more than two (keys [B, S_k, d_k] become "
                 "[d_k, S_k, B]), and PyTorch deprecates it there: transpose only the last two axes, "
                 "`K.transpose(-2, -1)` or `K.mT`.")
    if _SWAP_1_2.search(code):
        return _("Swapping axes 1 and 2 transposes 3-D keys [B, S_k, d_k] but, on 4-D keys [B, H, S_k, d_k], "
                 "swaps heads and positions: transpose the last two axes, `K.transpose(-2, -1)`.")
    if _MASK_3D_VIEW.search(code):
        return _("A mask viewed as [B, 1, S_k] lines up with 3-D scores [B, S_q, S_k] only; 4-D scores "
                 "[B, H, S_q, S_k] need [B, 1, 1, S_k].")
    if "copy_" in error_line and "leaf Variable" in str(error):
        return _("Change parameters in place inside `with torch.no_grad():`; outside it, autograd refuses.")
    if "copy_" in error_line:
        return _("`copy_` needs a source whose shape broadcasts to its destination's shape: print both shapes.")
    return ""


def _student_raised(name: str, error: BaseException, inputs: str = "", advice: str = "") -> AssertionError:
    """The failure for an error raised inside the student's code, with the sentence that names the mistake."""
    hint = advice or _known_mistake(error)
    sentence = _raised_sentence(name, error, inputs)
    return _plain(AssertionError(_("{sentence} {advice}").format(sentence=sentence, advice=hint) if hint else sentence))


def _check_broke(name: str, error: BaseException) -> AssertionError:
    kind, text = type(error).__name__, _first_line(error)
    return _plain(AssertionError(
        _("the check of `{name}` could not use what your code returned ({kind}: {text}).").format(name=name, kind=kind, text=text)
    ))


def _watch(fn, name: str, advise=None):
    """`fn` as the checks call it: an error raised inside it becomes one sentence about the student's code.

    advise(error, args) may return a sentence naming the mistake for these inputs (or '')."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (NotImplementedError, _NotReady):
            raise
        except Exception as error:
            advice = advise(error, args) if advise else ""
            raise _student_raised(name, error, _describe_call(fn, args, kwargs), advice) from None

    return call


# --------------------------------------------------------------------------- #
# The wrapper of every check, and the demo guard
# --------------------------------------------------------------------------- #


def _stub_name(error: NotImplementedError) -> str:
    """The student's function that raised NotImplementedError ('SelfAttention' for its __init__), or ''."""
    frames = _student_frames(error)
    if not frames:
        return ""
    code = frames[-1].tb_frame.f_code
    return getattr(code, "co_qualname", code.co_name).removesuffix(".__init__")


# The start of torch's UserWarning for `.T` on a tensor of more than two dimensions.
_DOT_T_WARNING = "The use of `x.T` on tensors of dimension other than 2"


@contextlib.contextmanager
def _dot_t_warning_caught(seen: list):
    """Inside: torch's `.T` deprecation warning is recorded in `seen` instead of printed; other warnings pass
    (issued again once the block is left)."""
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        for entry in caught:
            if str(entry.message).startswith(_DOT_T_WARNING):
                seen.append(entry)
            else:
                warnings.warn_explicit(entry.message, entry.category, entry.filename, entry.lineno)


def _with_dot_t_note(failure: AssertionError, seen: list) -> AssertionError:
    """The failure, its sentence followed by the note that torch warned about `.T` (when it did, once per
    process, and the sentence does not say so already)."""
    if not seen or "deprecat" in str(failure):
        return failure
    note = _("(PyTorch also warned that `.T` on a tensor of more than two dimensions is deprecated.)")
    return _plain(AssertionError(_("{sentence} {advice}").format(sentence=failure, advice=note)))


def _friendly(label: str):
    """Run a check: a stub gives one line; a failure ends in one plain AssertionError sentence."""

    def wrap(check):
        @functools.wraps(check)
        def run(*args, **kwargs):
            seen = []
            try:
                with _dot_t_warning_caught(seen):
                    _run_check(label, check, args, kwargs)
            except AssertionError as failure:
                raise _with_dot_t_note(failure, seen) from None

        return run

    return wrap


def _run_check(label: str, check, args, kwargs) -> None:
    """One check, seeded: a stub prints one line; every failure is raised as one plain AssertionError sentence."""
    try:
        with torch.random.fork_rng():
            torch.manual_seed(1234)
            check(*args, **kwargs)
    except NotImplementedError as error:
        if not _stub_name(error):
            raise _check_broke(label, error) from None
        print(_("{name}: not implemented yet (replace the `raise NotImplementedError` with your code)").format(name=label))
    except _NotReady as why:
        print(_("{name}: {reason}").format(name=label, reason=why))
    except AssertionError as failure:
        if _student_frames(failure):  # an assert in the student's own code
            raise _student_raised(label, failure) from None
        raise _plain(failure)
    except Exception as error:
        if _student_frames(error):
            raise _student_raised(label, error) from None
        raise _check_broke(label, error) from None


@contextlib.contextmanager
def uses_your_code():
    """`with uses_your_code():` around a demo: while a function it calls is a stub, print one line instead of an error."""
    try:
        yield
    except NotImplementedError as error:
        name = _stub_name(error)
        if not name:
            raise
        print(_("This demo needs your `{name}`, which is not implemented yet: fill it in above, then run this cell again.").format(
            name=name))


def _ok(message: str) -> None:
    print(f"✓ {message}")


def _expect_tensor(value, what: str) -> torch.Tensor:
    assert isinstance(value, torch.Tensor), _("{what} should be a torch.Tensor, got {type}").format(
        what=what, type=type(value).__name__)
    return value


def _expect_shape(value, shape, what: str) -> torch.Tensor:
    value = _expect_tensor(value, what)
    assert list(value.shape) == list(shape), _("{what} has shape {shape}, expected {expected}").format(
        what=what, shape=_shape(value), expected=list(shape))
    return value


def _no_nan(value: torch.Tensor, what: str) -> None:
    assert not torch.isnan(value).any(), _("{what} contains NaN").format(what=what)


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=tol, rtol=tol)


# --------------------------------------------------------------------------- #
# 01 scores: qkv_projection and scaled_scores
# --------------------------------------------------------------------------- #


@_friendly("make_projections")
def check_make_projections(make_projections) -> None:
    result = _watch(make_projections, "make_projections")(12, 8, 6)
    assert isinstance(result, tuple) and len(result) == 3, _("make_projections should return a tuple (W_q, W_k, W_v)")
    expected = {"W_q": (12, 8), "W_k": (12, 8), "W_v": (12, 6)}
    for (name, (fan_in, fan_out)), layer in zip(expected.items(), result):
        assert isinstance(layer, nn.Linear), _("{name} should be an nn.Linear, got {type}").format(
            name=name, type=type(layer).__name__)
        assert layer.bias is None, _("{name} has a bias: create it with bias=False").format(name=name)
        assert (layer.in_features, layer.out_features) == (fan_in, fan_out), _(
            "{name} maps {fan_in} -> {fan_out}, expected {want_in} -> {want_out}"
        ).format(name=name, fan_in=layer.in_features, fan_out=layer.out_features, want_in=fan_in, want_out=fan_out)
    W_q, W_k, W_v = result
    assert W_q is not W_k and W_q.weight is not W_k.weight, _("W_q and W_k are the same layer: each projection needs its own weights")
    assert not torch.equal(W_q.weight, W_k.weight), _("W_q and W_k start with identical weights: create three independent layers")
    _ok(_("make_projections: three independent bias-free layers, 12 -> 8, 12 -> 8, 12 -> 6"))


@_friendly("project_qkv")
def check_project_qkv(project_qkv) -> None:
    project_qkv = _watch(project_qkv, "project_qkv")
    B, S, d_model, d_k, d_v = 2, 5, 12, 8, 6
    W_q, W_k, W_v = nn.Linear(d_model, d_k, bias=False), nn.Linear(d_model, d_k, bias=False), nn.Linear(d_model, d_v, bias=False)
    x = torch.randn(B, S, d_model)
    result = project_qkv(x, W_q, W_k, W_v)
    assert isinstance(result, tuple) and len(result) == 3, _("project_qkv should return a tuple (Q, K, V)")
    Q, K, V = result
    _expect_shape(Q, [B, S, d_k], "Q")
    _expect_shape(K, [B, S, d_k], "K")
    _expect_shape(V, [B, S, d_v], "V")
    for name, got, layer in (("Q", Q, W_q), ("K", K, W_k), ("V", V, W_v)):
        assert _close(got, layer(x)), _("{name} is not {layer} applied to x (did you swap the layers?)").format(
            name=name, layer="W_" + name.lower())
    _ok(_("project_qkv: x {x} -> Q {Q}, K {K}, V {V}").format(x=list(x.shape), Q=list(Q.shape), K=list(K.shape), V=list(V.shape)))


@_friendly("scaled_scores")
def check_scaled_scores(scaled_scores) -> None:
    scaled_scores = _watch(scaled_scores, "scaled_scores")
    # 3-D: B=2, S_q=3, S_k=5, d_k=4
    Q, K = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    scores = _expect_shape(scaled_scores(Q, K), [2, 3, 5], _("scores for Q [2, 3, 4], K [2, 5, 4]"))
    one = (Q[1, 2] * K[1, 4]).sum() / 2.0  # query 2 against key 4 in sample 1, sqrt(4) = 2
    got = scores[1, 2, 4].item()
    if not math.isclose(got, one.item(), rel_tol=1e-4, abs_tol=1e-5):
        raw = (Q[1, 2] * K[1, 4]).sum().item()
        if math.isclose(got, raw, rel_tol=1e-4, abs_tol=1e-5):
            raise AssertionError(_("scores are not scaled: divide the dot products by sqrt(d_k)"))
        if math.isclose(got, raw / 4, rel_tol=1e-4, abs_tol=1e-5):
            raise AssertionError(_("scores are divided by d_k; divide by sqrt(d_k) instead"))
        raise AssertionError(_(
            "scores[1, 2, 4] = {got:.4f}, expected the dot product of query 2 and key 4 divided by sqrt(d_k) = {want:.4f}"
        ).format(got=got, want=one.item()))
    # 4-D: B=2, H=3, S_q=4, S_k=6, d_k=16
    Q4, K4 = torch.randn(2, 3, 4, 16), torch.randn(2, 3, 6, 16)
    scores4 = _expect_shape(scaled_scores(Q4, K4), [2, 3, 4, 6], _("scores for 4-D Q [2, 3, 4, 16], K [2, 3, 6, 16]"))
    want = (Q4[1, 2, 3] * K4[1, 2, 5]).sum().item() / 4.0
    assert math.isclose(scores4[1, 2, 3, 5].item(), want, rel_tol=1e-4, abs_tol=1e-5), _(
        "4-D scores are wrong: transpose only the last two axes of K (a plain .T also swaps batch and heads)"
    )
    _ok(_("scaled_scores: [2,3,4]x[2,5,4] -> [2,3,5] and [2,3,4,16]x[2,3,6,16] -> [2,3,4,6], scaled by 1/sqrt(d_k)"))


@_friendly("attention_weights")
def check_attention_weights(attention_weights) -> None:
    attention_weights = _watch(attention_weights, "attention_weights")
    scores = torch.randn(2, 3, 4, 5) * 3  # [B, H, S_q, S_k], S_q != S_k
    w = _expect_shape(attention_weights(scores), [2, 3, 4, 5], _("weights"))
    _no_nan(w, _("weights"))
    assert (w >= 0).all(), _("weights must not be negative: use a softmax")
    row_sums = w.sum(dim=-1)
    if not torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-5):
        worst = row_sums.flatten()[(row_sums.flatten() - 1).abs().argmax()].item()
        raise AssertionError(_(
            "rows of your weights sum to {total:.2f}: softmax must run over the key dimension, dim=-1"
        ).format(total=worst))
    uniform = _expect_shape(attention_weights(torch.zeros(2, 4, 6)), [2, 4, 6], _("weights of 3-D scores [2, 4, 6]"))
    assert _close(uniform, torch.full((2, 4, 6), 1 / 6)), _("equal scores should give uniform weights 1/S_k")
    masked = torch.randn(1, 2, 3)
    masked[0, :, 0] = float("-inf")
    wm = _expect_shape(attention_weights(masked), [1, 2, 3], _("weights of 3-D scores [1, 2, 3]"))
    assert (wm[0, :, 0] == 0).all() and not torch.isnan(wm).any(), _("a -inf score must get weight exactly 0")
    _ok(_("attention_weights: every row sums to 1 over the keys, -inf gets weight 0"))


@_friendly("attend")
def check_attend(attend) -> None:
    attend = _watch(attend, "attend")
    V = torch.randn(2, 5, 3)  # [B, S_k, d_v]
    weights = torch.softmax(torch.randn(2, 4, 5), dim=-1)  # [B, S_q, S_k]
    _expect_shape(attend(weights, V), [2, 4, 3], _("attend(weights [2, 4, 5], V [2, 5, 3])"))
    one_hot = torch.zeros(2, 4, 5)
    one_hot[:, :, 2] = 1.0  # every query looks only at key 2
    picked = attend(one_hot, V)
    assert _close(picked, V[:, 2:3].expand(2, 4, 3)), _("a query with all its weight on key 2 should output exactly V[key 2]")
    out4 = attend(torch.softmax(torch.randn(2, 3, 4, 5), -1), torch.randn(2, 3, 5, 7))
    _expect_shape(out4, [2, 3, 4, 7], _("attend with 4-D inputs"))
    _ok(_("attend: [2,4,5] x [2,5,3] -> [2,4,3], and each output is a weighted mix of value rows"))


# --------------------------------------------------------------------------- #
# 02 masks
# --------------------------------------------------------------------------- #


@_friendly("padding_mask")
def check_padding_mask(padding_mask) -> None:
    lengths = torch.tensor([3, 1, 5])
    mask = _expect_shape(_watch(padding_mask, "padding_mask")(lengths, 5), [3, 5], _("padding_mask(lengths=[3, 1, 5], seq_len=5)"))
    assert mask.dtype == torch.bool, _("the mask should be torch.bool, got {dtype}").format(dtype=mask.dtype)
    expected = torch.tensor(
        [[True, True, True, False, False], [True, False, False, False, False], [True, True, True, True, True]]
    )
    assert torch.equal(mask, expected), _(
        "padding_mask(lengths=[3, 1, 5], 5) gave\n{got}\nexpected True (1) for the first `length` positions:\n{expected}"
    ).format(got=mask.int(), expected=expected.int())
    _ok(_("padding_mask: [B, seq_len] bool, True on real tokens"))


@_friendly("causal_mask")
def check_causal_mask(causal_mask) -> None:
    mask = _expect_shape(_watch(causal_mask, "causal_mask")(4), [4, 4], "causal_mask(4)")
    assert mask.dtype == torch.bool, _("the mask should be torch.bool, got {dtype}").format(dtype=mask.dtype)
    assert mask.diagonal().all(), _("a query must be allowed to see its own position (the diagonal should be True)")
    assert not mask[0, 1:].any(), _("query 0 can see future keys: True must mean key j <= query i")
    assert mask[3].all(), _("the last query should see every key")
    assert mask.sum().item() == 10, _("causal_mask(4) should have 10 True entries, has {count}").format(count=mask.sum().item())
    _ok(_("causal_mask: [S, S] bool, lower triangle (past and present) True"))


def _padding_advice(error: BaseException, args) -> str:
    """apply_padding_mask raised: on 4-D scores (the 3-D case ran first and passed), name the 3-D-only view."""
    scores = args[0] if args else None
    if isinstance(scores, torch.Tensor) and scores.dim() == 4:
        return _("It handles 3-D scores but not 4-D ones: a mask viewed as [B, 1, S_k] lines up with "
                 "[B, S_q, S_k] only; 4-D scores [B, H, S_q, S_k] need [B, 1, 1, S_k] "
                 "(insert scores.dim() - 2 singleton axes after the batch axis).")
    return ""


def _check_padding_case(apply_padding_mask, scores: torch.Tensor, mask: torch.Tensor, label: str) -> None:
    original = scores.clone()
    out = apply_padding_mask(scores, mask)
    out = _expect_tensor(out, label)
    if out.dim() == scores.dim() + 1 and out.shape[1] == mask.shape[0]:
        raise AssertionError(_(
            "{case}: the output grew from {before} to {after}: your mask broadcast against "
            "the batch axis. Reshape [B, S_k] so that only the key axis lines up: [B, 1, S_k] for 3-D "
            "scores, [B, 1, 1, S_k] for 4-D scores"
        ).format(case=label, before=_shape(scores), after=_shape(out)))
    _expect_shape(out, scores.shape, label)
    assert torch.equal(scores, original), _("{case}: your function changed its input in place; return a new tensor").format(
        case=label)
    keep = mask.reshape(mask.shape[0], *([1] * (scores.dim() - 2)), mask.shape[1]).expand_as(scores)
    if torch.isneginf(out[keep]).all() and not torch.isneginf(out[~keep]).any():
        raise AssertionError(_(
            "{case}: your function hides the real tokens and keeps the padding: the mask is inverted. "
            "In this course True means a real token (keep), so -inf goes where the mask is False"
        ).format(case=label))
    assert torch.isneginf(out[~keep]).all(), _("{case}: padded keys (mask False) must become -inf in every row").format(
        case=label)
    assert torch.equal(out[keep], scores[keep]), _(
        "{case}: scores of real tokens (mask True) changed: True means keep (did you invert the mask?)"
    ).format(case=label)


@_friendly("apply_padding_mask")
def check_apply_padding_mask(apply_padding_mask) -> None:
    apply_padding_mask = _watch(apply_padding_mask, "apply_padding_mask", _padding_advice)
    mask = torch.tensor([[True, True, True, False, False], [True, True, True, True, True], [True, False, False, False, False]])
    _check_padding_case(apply_padding_mask, torch.randn(3, 4, 5), mask, _("3-D scores [B=3, S_q=4, S_k=5]"))
    _check_padding_case(apply_padding_mask, torch.randn(3, 2, 4, 5), mask, _("4-D scores [B=3, H=2, S_q=4, S_k=5]"))
    _ok(_("apply_padding_mask: -inf at padded keys for [B, S_q, S_k] and [B, H, S_q, S_k], shape unchanged"))


@_friendly("apply_causal_mask")
def check_apply_causal_mask(apply_causal_mask) -> None:
    apply_causal_mask = _watch(apply_causal_mask, "apply_causal_mask")
    for shape in ([2, 5, 5], [2, 3, 5, 5]):
        scores = torch.randn(*shape)
        out = _expect_shape(apply_causal_mask(scores), shape, _("apply_causal_mask on {shape}").format(shape=shape))
        future = torch.ones(5, 5, dtype=torch.bool).triu(1).expand(*shape)
        assert torch.isneginf(out[future]).all(), _(
            "{shape}: some query still sees a future key (key j > query i must be -inf)"
        ).format(shape=shape)
        assert not torch.isneginf(out.diagonal(dim1=-2, dim2=-1)).any(), _(
            "{shape}: the diagonal is -inf, so no query sees its own position: mask only key j > query i, "
            "the strict upper triangle (triu with diagonal=1)"
        ).format(shape=shape)
        assert torch.equal(out[~future], scores[~future]), _("{shape}: scores of past and present keys must stay unchanged").format(
            shape=shape)
    _ok(_("apply_causal_mask: no query sees a future key, for 3-D and 4-D scores"))


# --------------------------------------------------------------------------- #
# 03 module: SelfAttention, to_official, parity_error
# --------------------------------------------------------------------------- #


def _lengths_mask(lengths, S):
    return torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]


@_friendly("SelfAttention")
def check_self_attention(SelfAttention) -> None:
    B, S, d_model, d_k, d_v = 3, 6, 12, 8, 10
    make = _watch(SelfAttention, "SelfAttention")
    attn = make(d_model, d_k=d_k, d_v=d_v, dropout=0.0)
    for name, (fan_in, fan_out) in {"W_q": (d_model, d_k), "W_k": (d_model, d_k), "W_v": (d_model, d_v), "W_o": (d_v, d_model)}.items():
        layer = getattr(attn, name, None)
        assert isinstance(layer, nn.Linear), _("SelfAttention needs a submodule {name} (nn.Linear)").format(name=name)
        assert layer.bias is None, _("{name} should have no bias").format(name=name)
        assert (layer.in_features, layer.out_features) == (fan_in, fan_out), _(
            "{name} maps {fan_in} -> {fan_out}, expected {want_in} -> {want_out}"
        ).format(name=name, fan_in=layer.in_features, fan_out=layer.out_features, want_in=fan_in, want_out=fan_out)
    assert isinstance(getattr(attn, "dropout", None), nn.Dropout), _("SelfAttention needs self.dropout = nn.Dropout(dropout)")
    default = make(d_model)
    assert all(isinstance(getattr(default, n, None), nn.Linear) for n in ("W_q", "W_v")), _("SelfAttention(d_model) needs W_q and W_v too")
    assert default.W_q.out_features == d_model and default.W_v.out_features == d_model, _("d_k and d_v default to d_model")
    attn.eval()
    forward = _watch(attn, "SelfAttention")
    x = torch.randn(B, S, d_model)
    out = _expect_shape(forward(x), [B, S, d_model], _("SelfAttention output"))
    _no_nan(out, _("output"))
    mask = _lengths_mask([6, 3, 1], S)
    with torch.no_grad():
        out_mask = _expect_tensor(forward(x, mask), _("SelfAttention output with a padding mask"))
        if list(out_mask.shape) == [B, B, S, d_model]:
            raise AssertionError(_(
                "with a padding mask [B={B}, S={S}] your SelfAttention returned {got} instead of "
                "{expected}: the mask viewed as [B, 1, 1, S] (the multi-head view) broadcasts against "
                "single-head scores [B, S, S] to [B, B, S, S]; view it as [B, 1, S]"
            ).format(B=B, S=S, got=_shape(out_mask), expected=[B, S, d_model]))
        _expect_shape(out_mask, [B, S, d_model], _("SelfAttention output with a padding mask"))
        _no_nan(out_mask, _("output with a padding mask"))
        x2 = x.clone()
        x2[~mask] = 100.0  # change only the padded tokens
        out_mask2 = _expect_shape(forward(x2, mask), [B, S, d_model], _("SelfAttention output with a padding mask"))
    assert _close(out_mask[mask], out_mask2[mask], 1e-4), _("real tokens still look at padded tokens: apply the padding mask to the keys")
    with torch.no_grad():
        out_c = _expect_shape(forward(x, causal=True), [B, S, d_model], _("SelfAttention output with causal=True"))
        x3 = x.clone()
        x3[:, 3:] = -50.0  # change only the future of positions 0..2
        out_c3 = forward(x3, causal=True)
    assert _close(out_c[:, :3], out_c3[:, :3], 1e-4), _("with causal=True, position i must not depend on tokens after i")
    _ok(_("SelfAttention: submodules W_q, W_k, W_v, W_o, dropout; [3, 6, 12] -> [3, 6, 12]; padding and causal masks respected"))


class _Holder(nn.Module):
    """Just the four projections of a single-head module (no forward needed)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.dropout = nn.Dropout(0.0)


@_friendly("to_official")
def check_to_official(to_official) -> None:
    d_model = 8
    holder = _Holder(d_model)
    official = _watch(to_official, "to_official")(holder)
    assert isinstance(official, nn.MultiheadAttention), _("to_official should return nn.MultiheadAttention, got {type}").format(
        type=type(official).__name__)
    assert official.num_heads == 1, _("use one head, got num_heads={heads}").format(heads=official.num_heads)
    assert official.batch_first, _("create it with batch_first=True: our tensors are [B, S, d_model]")
    assert official.in_proj_weight is not None and list(official.in_proj_weight.shape) == [3 * d_model, d_model], _(
        "expected in_proj_weight [3 * d_model, d_model] (d_k == d_v == d_model)"
    )
    w = official.in_proj_weight.detach()
    for i, name in enumerate(("W_q", "W_k", "W_v")):
        block = w[i * d_model : (i + 1) * d_model]
        assert torch.equal(block, getattr(holder, name).weight), _(
            "rows {first}..{last} of in_proj_weight should hold {name}.weight (order q, k, v)"
        ).format(first=i * d_model, last=(i + 1) * d_model - 1, name=name)
    if official.in_proj_bias is not None:
        assert not official.in_proj_bias.any(), _("in_proj_bias must be zero (our projections have no bias)")
    assert torch.equal(official.out_proj.weight, holder.W_o.weight), _("out_proj.weight should hold W_o.weight")
    if official.out_proj.bias is not None:
        assert not official.out_proj.bias.any(), _("out_proj.bias must be zero")
    _ok(_("to_official: one head, batch_first, in_proj_weight = [W_q; W_k; W_v], out_proj = W_o, biases zero"))


@_friendly("parity_error")
def check_parity_error(parity_error, SelfAttention) -> None:
    try:
        custom = _watch(SelfAttention, "SelfAttention")(8, dropout=0.0)
    except NotImplementedError:
        raise _NotReady(_("write SelfAttention first: parity_error needs a module to compare")) from None
    parity_error = _watch(parity_error, "parity_error")
    x = torch.randn(3, 5, 8)
    mask = _lengths_mask([5, 2, 4], 5)
    err = parity_error(custom, x)
    float_please = _("parity_error should return a Python float (use .item()), got {type}")
    assert isinstance(err, float), float_please.format(type=type(err).__name__)
    err_mask = parity_error(custom, x, mask)
    assert isinstance(err_mask, float), float_please.format(type=type(err_mask).__name__)
    if max(err, err_mask) > 1e-4:
        raise AssertionError(_(
            "parity_error is {plain:.2e} without a mask and {masked:.2e} with one: a correct module gives < 1e-5. "
            "Either SelfAttention or to_official is off, or the mask was not converted (key_padding_mask: True = ignore)"
        ).format(plain=err, masked=err_mask))

    class Broken(SelfAttention):
        def forward(self, x, mask=None, causal=False):
            return super().forward(x, mask, causal) + 0.5

    broken = Broken(8, dropout=0.0)
    broken.load_state_dict(custom.state_dict())
    bad = parity_error(broken, x)
    assert isinstance(bad, float), float_please.format(type=type(bad).__name__)
    assert bad > 0.1, _(
        "parity_error says {error:.2e} for a module whose output is shifted by 0.5: a parity check must be able to fail"
    ).format(error=bad)
    _ok(_("parity_error: {plain:.1e} for your module ({masked:.1e} with padding), {broken:.2f} for a broken one").format(
        plain=err, masked=err_mask, broken=bad))


# --------------------------------------------------------------------------- #
# 04 multihead
# --------------------------------------------------------------------------- #


@_friendly("split_heads")
def check_split_heads(split_heads) -> None:
    B, S, H, hd = 2, 3, 4, 5
    x = torch.arange(B * S * H * hd, dtype=torch.float32).reshape(B, S, H * hd)
    out = _expect_shape(_watch(split_heads, "split_heads")(x, H), [B, H, S, hd], f"split_heads([{B}, {S}, {H * hd}], num_heads={H})")
    if torch.equal(out, x.view(B, H, S, hd)):
        raise AssertionError(_(
            "split_heads gives x.view(B, H, S, head_dim) with no transpose: that cuts each sequence's memory into H "
            "consecutive pieces, so head 0 holds only features of token 0 ({values} ...). "
            "View as [B, S, H, head_dim] first, then move the head axis forward with .transpose(1, 2)"
        ).format(values=out[0, 0].int().flatten()[:8].tolist()))
    if torch.equal(out, x.permute(0, 2, 1).reshape(B, H, S, hd)):
        raise AssertionError(_(
            "split_heads permutes before it views (x.permute(0, 2, 1) then a view or reshape to [B, H, S, head_dim]): "
            "each row of a head then mixes numbers from different tokens. "
            "View as [B, S, H, head_dim] first, then move the head axis forward with .transpose(1, 2)"
        ))
    for b in range(B):
        for h in range(H):
            for s in range(S):
                want = x[b, s, h * hd : (h + 1) * hd]
                if not torch.equal(out[b, h, s], want):
                    raise AssertionError(_(
                        "head {head} of token {token} holds {got}, expected features "
                        "{first}..{last} of that token: {expected}. "
                        "View as [B, S, H, head_dim] first, then move the head axis forward with .transpose(1, 2)"
                    ).format(head=h, token=s, got=out[b, h, s].int().tolist(), first=h * hd, last=(h + 1) * hd - 1,
                             expected=want.int().tolist()))
    _ok(_("split_heads: {before} -> {after}, each head gets its own block of features").format(
        before=[B, S, H * hd], after=[B, H, S, hd]))


@_friendly("merge_heads")
def check_merge_heads(merge_heads) -> None:
    merge_heads = _watch(merge_heads, "merge_heads")
    B, H, S, hd = 2, 4, 3, 5
    heads = torch.arange(B * H * S * hd, dtype=torch.float32).reshape(B, H, S, hd)
    out = _expect_shape(merge_heads(heads), [B, S, H * hd], f"merge_heads([{B}, {H}, {S}, {hd}])")
    if torch.equal(out, heads.reshape(B, S, H * hd)):
        raise AssertionError(_(
            "merge_heads reshapes [B, H, S, head_dim] to [B, S, H * head_dim] with no transpose: each output token then "
            "holds pieces of several positions of one head. Move the head axis back next to head_dim first, "
            ".transpose(1, 2), then reshape"
        ))
    for h in range(H):
        assert torch.equal(out[:, :, h * hd : (h + 1) * hd], heads[:, h]), _(
            "features {first}..{last} of each token should come from head {head}: "
            "move the head axis back next to head_dim before reshaping"
        ).format(first=h * hd, last=(h + 1) * hd - 1, head=h)
    noncontig = heads.transpose(1, 2).contiguous().transpose(1, 2)  # same values, different strides
    assert torch.equal(merge_heads(noncontig), out), _("merge_heads must also work on non-contiguous input (use reshape)")
    _ok(_("merge_heads: {before} -> {after}, the inverse of split_heads").format(before=[B, H, S, hd], after=[B, S, H * hd]))


@_friendly("MultiHeadSelfAttention")
def check_multihead(MultiHeadSelfAttention) -> None:
    B, S, d_model, H = 3, 6, 12, 4
    mha = _watch(MultiHeadSelfAttention, "MultiHeadSelfAttention")(d_model, H)
    W_qkv = getattr(mha, "W_qkv", None)
    assert isinstance(W_qkv, nn.Linear) and W_qkv.bias is None, _("needs W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)")
    assert (W_qkv.in_features, W_qkv.out_features) == (d_model, 3 * d_model), _(
        "{name} maps {fan_in} -> {fan_out}, expected {want_in} -> {want_out}"
    ).format(name="W_qkv", fan_in=W_qkv.in_features, fan_out=W_qkv.out_features, want_in=d_model, want_out=3 * d_model)
    W_o = getattr(mha, "W_o", None)
    assert isinstance(W_o, nn.Linear) and W_o.bias is None and W_o.in_features == W_o.out_features == d_model, _(
        "needs W_o = nn.Linear(d_model, d_model, bias=False)"
    )
    assert isinstance(getattr(mha, "dropout", None), nn.Dropout), _("needs self.dropout = nn.Dropout(dropout)")
    mha.eval()
    forward = _watch(mha, "MultiHeadSelfAttention")
    x = torch.randn(B, S, d_model)
    with torch.no_grad():
        out = _expect_shape(forward(x), [B, S, d_model], _("MultiHeadSelfAttention output"))
        _no_nan(out, _("output"))
        # Q = K = 0 (uniform weights), V = x, W_o = identity: every position outputs the mean token.
        mha.W_qkv.weight.zero_()
        mha.W_qkv.weight[2 * d_model :] = torch.eye(d_model)
        mha.W_o.weight.copy_(torch.eye(d_model))
        mean = _expect_shape(forward(x), [B, S, d_model], _("MultiHeadSelfAttention output"))
        assert _close(mean, x.mean(dim=1, keepdim=True).expand_as(x), 1e-5), _(
            "with Q = K = 0 every head should average the values uniformly: check the q, k, v order "
            "of W_qkv's rows and that the softmax runs over the keys"
        )
        mask = _lengths_mask([6, 2, 4], S)
        masked = _expect_shape(forward(x, mask), [B, S, d_model], _("MultiHeadSelfAttention output with a padding mask"))
        for b, n in enumerate([6, 2, 4]):
            assert _close(masked[b], x[b, :n].mean(0, keepdim=True).expand(S, d_model), 1e-5), _(
                "sample {sample} has {count} real tokens: with uniform weights its outputs should average only those"
            ).format(sample=b, count=n)
        causal = _expect_shape(forward(x, causal=True), [B, S, d_model], _("MultiHeadSelfAttention output with causal=True"))
        assert _close(causal[:, 2], x[:, :3].mean(1), 1e-5), _("with causal=True position 2 should average tokens 0, 1, 2 only")
    _ok(_("MultiHeadSelfAttention: W_qkv [36, 12], W_o [12, 12]; [3, 6, 12] -> [3, 6, 12]; padding and causal masks respected"))


# --------------------------------------------------------------------------- #
# 05 long sequences
# --------------------------------------------------------------------------- #


@_friendly("attention_matrix_bytes")
def check_attention_matrix_bytes(attention_matrix_bytes) -> None:
    attention_matrix_bytes = _watch(attention_matrix_bytes, "attention_matrix_bytes")
    got = attention_matrix_bytes(1, 1, 4)
    assert got == 64, _("one 4 x 4 float32 matrix is 16 numbers x 4 bytes = 64 bytes, got {got}").format(got=got)
    got = attention_matrix_bytes(2, 3, 5, torch.float16)
    assert got == 2 * 3 * 25 * 2, _("B=2, H=3, S=5 in float16 is 2*3*5*5*2 = 300 bytes, got {got}").format(got=got)
    assert isinstance(got, int), _("return a Python int, got {type}").format(type=type(got).__name__)
    _ok(_("attention_matrix_bytes: B * H * S^2 * bytes per element"))


def _qkv(B=2, H=3, S=7, D=4, dtype=torch.float32):
    return (torch.randn(B, H, S, D, dtype=dtype) for _ in range(3))


def _mask_direction(fn, label: str) -> None:
    q, k, v = _qkv()
    only_first = torch.zeros(2, 7, dtype=torch.bool)
    only_first[:, 0] = True  # just key 0 is a real token
    out = _expect_shape(fn(q, k, v, mask=only_first), [2, 3, 7, 4], _("{name} with a padding mask").format(name=label))
    _no_nan(out, _("{name} output with a padding mask").format(name=label))
    assert _close(out, v[:, :, :1].expand_as(v), 1e-5), _(
        "{name}: when only key 0 is a real token every query must output v[key 0]. "
        "Our mask uses True = real token; SDPA's boolean attn_mask uses True = may attend (the same sense), "
        "and it must broadcast as [B, 1, 1, S]"
    ).format(name=label)
    with_causal = _("{name} with causal=True").format(name=label)
    out_c = _expect_shape(fn(q, k, v, causal=True), [2, 3, 7, 4], with_causal)
    assert _close(out_c[:, :, 0], v[:, :, 0], 1e-5), _("{name}: with causal=True query 0 can only see key 0").format(name=label)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4:], v2[:, :, 4:] = 9.0, 9.0
    later = _expect_shape(fn(q, k2, v2, causal=True), [2, 3, 7, 4], with_causal)
    assert _close(later[:, :, :4], out_c[:, :, :4], 1e-5), _("{name}: with causal=True queries 0..3 must ignore keys 4..6").format(
        name=label)
    lengths_mask = _lengths_mask([7, 3], 7)
    both = _expect_shape(fn(q, k, v, mask=lengths_mask, causal=True), [2, 3, 7, 4],
                         _("{name} with a padding mask and causal=True").format(name=label))
    _no_nan(both, _("{name} output with mask and causal=True").format(name=label))


@_friendly("sdpa_attention")
def check_sdpa_attention(sdpa_attention) -> None:
    import torch.nn.functional as F

    sdpa_attention = _watch(sdpa_attention, "sdpa_attention")
    q, k, v = _qkv()
    out = _expect_shape(sdpa_attention(q, k, v), [2, 3, 7, 4], _("sdpa_attention output"))
    assert _close(out, F.scaled_dot_product_attention(q, k, v), 1e-5), _("without a mask the result should be plain attention")
    _mask_direction(sdpa_attention, "sdpa_attention")
    _ok(_("sdpa_attention: plain, padded and causal attention through F.scaled_dot_product_attention"))


@_friendly("chunked_attention")
def check_chunked_attention(chunked_attention) -> None:
    import torch.nn.functional as F

    chunked_attention = _watch(chunked_attention, "chunked_attention")
    q, k, v = _qkv()
    for chunk in (1, 3, 7, 64):
        out = _expect_shape(chunked_attention(q, k, v, chunk_size=chunk), [2, 3, 7, 4], f"chunked_attention(chunk_size={chunk})")
        assert _close(out, F.scaled_dot_product_attention(q, k, v), 1e-5), _(
            "chunk_size={chunk}: the result differs from plain attention (is the last, shorter chunk handled?)"
        ).format(chunk=chunk)
        out_c = _expect_shape(chunked_attention(q, k, v, causal=True, chunk_size=chunk), [2, 3, 7, 4],
                              f"chunked_attention(causal=True, chunk_size={chunk})")
        assert _close(out_c, F.scaled_dot_product_attention(q, k, v, is_causal=True), 1e-5), _(
            "chunk_size={chunk}, causal=True: wrong result. A query at absolute position i sees keys 0..i, "
            "whatever chunk it is in"
        ).format(chunk=chunk)
    _mask_direction(lambda *a, **kw: chunked_attention(*a, chunk_size=3, **kw), "chunked_attention")
    try:
        from memory_meter import LiveMemoryMeter
    except ImportError:  # the meter ships next to 05_long_sequence.ipynb
        LiveMemoryMeter = None
    if LiveMemoryMeter is not None:
        S, chunk = 1024, 64
        q, k, v = (torch.randn(1, 2, S, 8) for _ in range(3))
        with LiveMemoryMeter() as meter:
            chunked_attention(q, k, v, chunk_size=chunk)
        full = 2 * S * S * 4
        assert meter.peak_bytes < full / 4, _(
            "chunked_attention(S={S}, chunk_size={chunk}) peaked at {peak:.2f} MiB, as much as "
            "a whole score matrix ({full:.2f} MiB): compute one block of queries at a time"
        ).format(S=S, chunk=chunk, peak=meter.peak_bytes / 2**20, full=full / 2**20)
        _ok(_("chunked_attention: equals plain attention for chunk sizes 1, 3, 7, 64; peak {peak:.2f} MiB "
              "vs {full:.2f} MiB for one full score matrix").format(peak=meter.peak_bytes / 2**20, full=full / 2**20))
    else:
        _ok(_("chunked_attention: equals plain attention for chunk sizes 1, 3, 7, 64"))


# --------------------------------------------------------------------------- #
# Graded cells
# --------------------------------------------------------------------------- #


# The check cells above each graded cell, which nbgrader's Validate runs again (see graded_cells.py;
# tests/test_validate.py keeps this table equal to the notebooks' check cells).
PART_CHECKS = {
    "qkv_projection": ("check_make_projections(make_projections)", "check_project_qkv(project_qkv)"),
    "scaled_scores": (
        "check_scaled_scores(scaled_scores)", "check_attention_weights(attention_weights)", "check_attend(attend)",
    ),
    "masks": (
        "check_padding_mask(padding_mask)", "check_apply_padding_mask(apply_padding_mask)",
        "check_causal_mask(causal_mask)", "check_apply_causal_mask(apply_causal_mask)",
    ),
    "module": ("check_self_attention(SelfAttention)",),
    "official_parity": ("check_to_official(to_official)", "check_parity_error(parity_error, SelfAttention)"),
    "multihead": (
        "check_split_heads(split_heads)", "check_merge_heads(merge_heads)", "check_multihead(MultiHeadSelfAttention)",
    ),
    "long_sequence": (
        "check_attention_matrix_bytes(attention_matrix_bytes)", "check_sdpa_attention(sdpa_attention)",
        "check_chunked_attention(chunked_attention)",
    ),
}


# The notebook of each part (the command that grades one notebook names it).
PART_NOTEBOOKS = {"qkv_projection": "01_scores", "scaled_scores": "01_scores", "masks": "02_masks", "module": "03_module",
                  "official_parity": "03_module", "multihead": "04_multihead", "long_sequence": "05_long_sequence"}


def _edition_suffix() -> str:
    """The folder suffix of the edition the notebook speaks: "_zh" after use_language("zh"), else ""."""
    return "_zh" if isinstance(_translation, gettext.GNUTranslations) else ""


graded_part = graded_part_function(
    PART_CHECKS, globals(), ".venv/bin/python -m autograder grade workspace/self_attention{suffix}/{notebook}.ipynb", _,
    PART_NOTEBOOKS, _edition_suffix,
)
