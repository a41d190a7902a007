"""Quick visible checks for the `real_models` notebooks (torch and the `transformers` library; no solutions inside).

Each `check_*` function takes your function or class, loads tiny models of the library built from configs with
random weights (nothing is downloaded), compares your layer with the library's own layer on seeded inputs, and
prints one "✓" line when they agree. When something is off it stops with one AssertionError sentence that says
what is wrong; when you have not written the code yet it prints "<name>: not implemented yet". Passing these
checks is necessary, not sufficient: the hidden autograder runs many more cases (and whole models).

The library's layers are the references, in float32 with `attn_implementation="eager"`, each given the additive
mask it expects (0 where a key may be seen, the dtype's most negative number elsewhere), as its model would give it.
`show_lines(cls, {...})` prints the lines of the installed library's source that a demo maps to yours.
The checks of notebook 03 (Llama) are in visible_checks_real_models_llama.py, built on this harness.
"""
from __future__ import annotations

import inspect
import os
import unicodedata

import torch
import torch.nn as nn
from check_harness import DOMAIN, LOCALES, Harness, NotReady, close, ok  # noqa: F401 - DOMAIN, LOCALES: for the tests
from visible_checks_real_models_gpt2 import gpt2_diagnoses  # notebook 01's named mistakes, built on this harness
from visible_checks_real_models_interface import interface_checks  # the second edition's new pieces
from visible_checks_real_models_llama import llama_checks, llama_reference  # notebook 03's checks, built on this harness

__all__ = [
    "check_split_c_attn", "check_gpt2_attention",
    "check_extended_attention_mask", "check_bert_self_attention",
    "check_interleaved_to_half_split", "check_rope_permutation", "check_from_hf_llama",
    "check_rope_inv_freq", "check_course_attention", "check_register_course_attention", "check_from_hf_llama_current",
    "show_source", "show_lines", "library_mask",
    "graded_part", "uses_your_code", "use_language",
]

harness = Harness(__file__, *(os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
                              for name in ("visible_checks_real_models_llama.py", "visible_checks_real_models_gpt2.py",
                                           "visible_checks_real_models_interface.py")))
_ = harness.gettext
gpt2_cause = gpt2_diagnoses(harness, close)
use_language, uses_your_code = harness.use_language, harness.uses_your_code


# --------------------------------------------------------------------------- #
# Reading the library's code
# --------------------------------------------------------------------------- #


def _unwrapped(obj):
    """The class or function whose source `obj` shows: itself, or the function the library wraps in a module of its
    own (a hub-kernel decorator turns `apply_rotary_pos_emb` into an instance of a class named `Func`)."""
    try:
        inspect.getsourcelines(obj)
        return obj
    except TypeError:
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is None:
            forward = getattr(type(obj), "forward", None)
            closure = inspect.getclosurevars(forward).nonlocals if forward else {}
            wrapped = next((v for v in closure.values() if inspect.isfunction(v)), None)
        if wrapped is None:
            raise
        return wrapped


def _source(obj) -> tuple[list[str], int]:
    """The source lines of a class or function of the library and its first line number (a function that the
    library wraps in a module of its own is read through the function it wraps)."""
    return inspect.getsourcelines(_unwrapped(obj))


def _library_version() -> str:
    try:
        import transformers
    except ImportError:  # pragma: no cover - the notebooks need it
        return "?"
    return transformers.__version__


def _width(text: str) -> int:
    """The columns `text` takes on screen: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def show_source(obj) -> None:
    """The installed library's source of a class or function, with the line numbers of its file."""
    shown = _unwrapped(obj)
    lines, first = inspect.getsourcelines(shown)
    name = f"{getattr(shown, '__module__', '')}.{getattr(shown, '__qualname__', type(shown).__name__)}"
    print(_("{name} as installed (transformers {version}), with the line numbers of its file:").format(
        name=name, version=_library_version()))
    for number, line in enumerate(lines, start=first):
        print(f"{number:>5}  {line.rstrip()}")


def show_lines(objs, wanted: dict) -> None:
    """For each label of `wanted`, the first line of the installed source of `objs` (one object or a list, read in
    order; None is skipped) that holds its piece of code (a string, or a tuple of alternatives: what different versions write), with
    the name of the object and its line number; a piece this version of the library does not have says so."""
    sources = []
    for obj in objs if isinstance(objs, (list, tuple)) else [objs]:
        if obj is None:  # a function this version does not have
            continue
        lines, first = _source(obj)
        sources.append((getattr(obj, "__name__", type(obj).__name__), lines, first))
    for label, pieces in wanted.items():
        pieces = (pieces,) if isinstance(pieces, str) else pieces
        found = next((f"{name}:{first + n:<5} {line.strip()}" for piece in pieces for name, lines, first in sources
                      for n, line in enumerate(lines) if piece in line), None)
        pad = " " * max(1, 31 - _width(label))  # the lines' second column lines up in Chinese too
        print(label + pad + (found or _("(not in this version of the library)")))


def library_mask(allowed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive mask the library's eager attention adds to its scores: 0 where `allowed`, finfo(dtype).min elsewhere."""
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)


def _linear(module, name: str, d_in: int, d_out: int, owner: str, bias: bool) -> None:
    layer = getattr(module, name, None)
    assert isinstance(layer, nn.Linear), _("{owner} needs a submodule {name} (an nn.Linear)").format(owner=owner, name=name)
    assert (layer.bias is not None) == bias, (
        _("{owner}.{name} needs a bias (bias=True): the library's layer has one") if bias
        else _("{owner}.{name} should have no bias (bias=False)")).format(owner=owner, name=name)
    assert (layer.in_features, layer.out_features) == (d_in, d_out), _(
        "{owner}.{name} maps {fan_in} -> {fan_out} features, expected {want_in} -> {want_out}").format(
        owner=owner, name=name, fan_in=layer.in_features, fan_out=layer.out_features, want_in=d_in, want_out=d_out)


# --------------------------------------------------------------------------- #
# 01 gpt2
# --------------------------------------------------------------------------- #


def _gpt2_attention(d_model: int, num_heads: int, seed: int):
    """The library's GPT2Attention of a tiny config (eager), with random weights and random biases."""
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    torch.manual_seed(seed)
    config = GPT2Config(n_embd=d_model, n_head=num_heads, n_layer=1, n_positions=64, vocab_size=50, bos_token_id=0, eos_token_id=0,
                        attn_pdrop=0.0, resid_pdrop=0.0, attn_implementation="eager")
    attn = GPT2Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for parameter in attn.parameters():
            parameter.normal_(0.0, 0.3)  # biases too: the library starts them at 0, where a dropped bias hides
    return attn


def _gpt2_reference(attn, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    B, S, _d = x.shape
    causal = torch.ones(S, S, dtype=torch.bool).tril()  # [S, S]
    allowed = causal & key_mask[:, None, None, :]  # [B, 1, S, S]
    with torch.no_grad():
        return attn(x, attention_mask=library_mask(allowed))[0]


@harness.check("split_c_attn")
def check_split_c_attn(split_c_attn) -> None:
    d = 4
    torch.manual_seed(0)
    weight, bias = torch.randn(d, 3 * d), torch.randn(3 * d)  # Conv1D layout: [d_model, 3 d_model], y = x @ weight + b
    got = split_c_attn(weight, bias)
    assert isinstance(got, tuple) and len(got) == 6, _(
        "split_c_attn should return the tuple (W_q, W_k, W_v, b_q, b_k, b_v)")
    names = ("W_q", "W_k", "W_v", "b_q", "b_k", "b_v")
    for name, value, shape in zip(names, got, [[d, d]] * 3 + [[d]] * 3):
        harness.expect_shape(value, shape, _("{name} of split_c_attn(weight [4, 12], bias [12])").format(name=name))
    x = torch.randn(3, d)
    for i, name in enumerate(("W_q", "W_k", "W_v")):
        W, b = got[i], got[3 + i]
        want = x @ weight[:, i * d:(i + 1) * d] + bias[i * d:(i + 1) * d]
        if torch.equal(W, weight[:, i * d:(i + 1) * d]):
            raise AssertionError(_("{name} is a slice of the Conv1D weight as it is stored ([in, out]); nn.Linear "
                                   "keeps [out, in]: transpose it").format(name=name))
        exact = torch.equal(W, weight[:, i * d:(i + 1) * d].T) and torch.equal(b, bias[i * d:(i + 1) * d])
        assert exact and close(x @ W.T + b, want, 1e-6), _(
            "{name}: nn.Linear with your weight and bias (x @ {name}.T + b) differs from columns {lo}:{hi} of "
            "c_attn (x @ weight[:, {lo}:{hi}] + bias[{lo}:{hi}]): the columns of c_attn are q, then k, then v"
        ).format(name=name, lo=i * d, hi=(i + 1) * d)
    ok(_("split_c_attn: three [4, 4] weights in nn.Linear layout (the Conv1D weight transposed) and their biases, "
          "in the order q, k, v"))


@harness.check("GPT2StyleAttention")
def check_gpt2_attention(GPT2StyleAttention) -> None:
    owner = "GPT2StyleAttention(24, 4)"  # head_dim 6: no two sizes equal (B 3, S 5, H 4)
    fresh = GPT2StyleAttention(24, 4)
    for name in ("W_q", "W_k", "W_v", "W_o"):
        _linear(fresh, name, 24, 24, owner, bias=True)
    attn = _gpt2_attention(24, 4, seed=1)
    layer = GPT2StyleAttention.from_hf(attn)
    assert isinstance(layer, GPT2StyleAttention), _(
        "GPT2StyleAttention.from_hf(attn) should return a GPT2StyleAttention (a classmethod: cls(d_model, num_heads))")
    layer.eval()
    torch.manual_seed(2)
    x = torch.randn(3, 5, 24)
    key_mask = torch.tensor([[True] * 5, [False] * 2 + [True] * 3, [True] * 4 + [False]])  # left, right padding
    want = _gpt2_reference(attn, x, key_mask)
    with torch.no_grad():
        got = harness.expect_shape(layer(x, key_mask=key_mask), [3, 5, 24], "forward(x [3, 5, 24], key_mask [3, 5])")
        no_mask = harness.expect_shape(layer(x), [3, 5, 24], "forward(x [3, 5, 24])")
    real = key_mask  # the positions whose outputs count
    for i, name in enumerate(("W_q", "W_k", "W_v")):
        assert close(getattr(layer, name).bias, attn.c_attn.bias[i * 24:(i + 1) * 24], 1e-7), _(
            "from_hf did not put c_attn.bias[{lo}:{hi}] into {name}.bias: the library's layer adds its biases, "
            "yours must too").format(lo=i * 24, hi=(i + 1) * 24, name=name)
    bad = ~((got - want).abs().amax(-1) <= 1e-5) & real  # [B, S]: real tokens whose outputs differ (or are NaN)
    if bad.any():
        nan = torch.isnan(got).any(-1) & real  # [B, S]
        sample, token = (nan if nan.any() else bad).nonzero()[0].tolist()
        assert not nan.any(), _(
            "your layer's output is NaN at real tokens (first at sample {sample}, token {token}): a row of scores is "
            "-inf everywhere there; is key_mask used the wrong way round (True = real token)?").format(
            sample=sample, token=token)
        with torch.no_grad():
            cause = gpt2_cause(layer, attn, x, key_mask, got)
        if cause:
            raise AssertionError(_("GPT2StyleAttention(24, 4) from from_hf: {cause}").format(cause=cause))
        no_bias = GPT2StyleAttention.from_hf(attn)
        with torch.no_grad():
            for name in ("W_q", "W_k", "W_v", "W_o"):
                getattr(no_bias, name).bias.zero_()
            assert not close(got[real], no_bias.eval()(x, key_mask=key_mask)[real], 1e-6), _(
                "your layer gives the same output with its biases set to 0: its forward drops the biases")
        raise AssertionError(_(
            "your layer from from_hf(GPT2Attention) differs from the library's layer by up to {gap:.3g} at real "
            "tokens (first at sample {sample}, token {token}): check c_attn's transpose and split (q, k, v), "
            "c_proj's transpose, the causal mask with key_mask and the scale 1 / sqrt(head_dim)").format(
            gap=(got - want)[real].abs().max().item(), sample=sample, token=token))
    gap = (got - want)[real].abs().max().item()
    assert close(no_mask[0], want[0], 1e-5), _(
        "forward(x) without key_mask should equal the library's layer with every token real (a causal mask only)")
    ok_parity = gap
    copy = GPT2StyleAttention(24, 4)
    with torch.no_grad():
        for parameter in copy.parameters():
            parameter.normal_(0.0, 0.3)
    target = _gpt2_attention(24, 4, seed=3)
    returned = copy.to_hf(target)
    assert returned is target or returned is None, _("to_hf(attn) should write into attn and return it")
    back = GPT2StyleAttention.from_hf(target)
    for name in ("W_q", "W_k", "W_v", "W_o"):
        assert close(getattr(back, name).weight, getattr(copy, name).weight, 1e-7) and close(
            getattr(back, name).bias, getattr(copy, name).bias, 1e-7), _(
            "from_hf(to_hf(...)) does not give back {name}: to_hf must write the inverse of what from_hf reads "
            "(Conv1D weights are [in, out]; c_attn holds q, k, v side by side)").format(name=name)
    all_real = torch.ones(3, 5, dtype=torch.bool)
    with torch.no_grad():
        assert close(copy.eval()(x), _gpt2_reference(target, x, all_real), 1e-5), _(
            "after layer.to_hf(attn), the library's layer does not compute what your layer computes")
    ok(_("GPT2StyleAttention: from_hf equals the library's GPT2Attention (largest difference {gap:.1e}, with left "
          "and right padding); to_hf then from_hf gives your weights back").format(gap=ok_parity))


# --------------------------------------------------------------------------- #
# 02 bert
# --------------------------------------------------------------------------- #


@harness.check("extended_attention_mask")
def check_extended_attention_mask(extended_attention_mask) -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    out = harness.expect_shape(extended_attention_mask(mask, torch.float32), [2, 1, 1, 4],
                               "extended_attention_mask(mask [2, 4], torch.float32)")
    assert out.dtype == torch.float32, _("the mask should have the dtype it is given ({want}), got {got}").format(
        want=torch.float32, got=out.dtype)
    lowest = torch.finfo(torch.float32).min
    if torch.isinf(out).any():
        raise AssertionError(_("your mask holds -inf: the library adds torch.finfo(dtype).min, a finite number, so that "
                               "a row of padding only gives equal weights instead of NaN"))
    want = torch.tensor([[0.0, 0.0, 0.0, lowest], [0.0, 0.0, lowest, lowest]]).view(2, 1, 1, 4)
    if torch.equal(out, want.flip(-1)) or torch.equal((out == 0), (want != 0)):
        raise AssertionError(_("your mask is inverted: 1 in attention_mask is a real token and gets 0; 0 is padding "
                               "and gets finfo(dtype).min"))
    assert torch.equal(out, want), _(
        "extended_attention_mask([[1, 1, 1, 0], [1, 1, 0, 0]]) gave {got}, expected 0 for a real key and "
        "torch.finfo(torch.float32).min = {low:.4g} for padding").format(got=out.view(2, 4).tolist(), low=lowest)
    half = extended_attention_mask(mask.bool(), torch.float16)
    assert half.dtype == torch.float16 and torch.equal(half.view(2, 4).float(), (1 - mask.float()) * torch.finfo(
        torch.float16).min), _("with a bool mask and torch.float16 the padding gets torch.finfo(torch.float16).min = "
                               "-65504 (each dtype has its own finfo.min)")
    bf16 = extended_attention_mask(mask, torch.bfloat16)
    assert bf16.dtype == torch.bfloat16 and torch.equal(bf16.view(2, 4).float(), (1 - mask.float()) * torch.finfo(
        torch.bfloat16).min), _("with an int mask and torch.bfloat16 the padding gets torch.finfo(torch.bfloat16).min "
                                "= {low:.4g}, in bfloat16 (each dtype has its own finfo.min)").format(
        low=torch.finfo(torch.bfloat16).min)
    ok(_("extended_attention_mask: [2, 4] -> [2, 1, 1, 4]: 0 for real keys, finfo(dtype).min (finite) for padding, "
          "int or bool, float32, float16 or bfloat16"))


def _bert_self_attention(d_model: int, num_heads: int, seed: int):
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertSelfAttention

    torch.manual_seed(seed)
    config = BertConfig(hidden_size=d_model, num_attention_heads=num_heads, num_hidden_layers=1,
                        intermediate_size=2 * d_model, vocab_size=50, attention_probs_dropout_prob=0.0,
                        attn_implementation="eager")
    return BertSelfAttention(config).eval()


@harness.check("BertStyleSelfAttention")
def check_bert_self_attention(BertStyleSelfAttention) -> None:
    owner = "BertStyleSelfAttention(10, 2)"
    fresh = BertStyleSelfAttention(10, 2)
    for name in ("W_q", "W_k", "W_v"):
        _linear(fresh, name, 10, 10, owner, bias=True)
    attn = _bert_self_attention(10, 2, seed=4)
    layer = BertStyleSelfAttention.from_hf(attn)
    assert isinstance(layer, BertStyleSelfAttention), _(
        "BertStyleSelfAttention.from_hf(attn) should return a BertStyleSelfAttention (a classmethod)")
    layer.eval()
    torch.manual_seed(5)
    x = torch.randn(3, 4, 10)  # B 3, S 4, H 2, head_dim 5
    attention_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])  # sample 2: nothing but padding
    additive = library_mask(attention_mask.bool()[:, None, None, :])  # [B, 1, 1, S], as BERT's model makes it
    with torch.no_grad():
        want = attn(x, attention_mask=additive)[0]
        got = harness.expect_shape(layer(x, attention_mask=attention_mask), [3, 4, 10],
                                   "forward(x [3, 4, 10], attention_mask [3, 4])")
    if torch.isnan(got[2]).all() and not torch.isnan(got[:2]).any():
        raise AssertionError(_("sample 2 is all padding and your layer gives NaN there; the library's gives finite "
                               "outputs (equal weights over the padding): add finfo.min, do not fill -inf"))
    gap = (got[:2] - want[:2]).abs().max().item()
    assert gap < 1e-5, _(
        "your layer from from_hf(BertSelfAttention) differs from the library's by up to {gap:.3g} on the samples "
        "with real tokens: check the biases, the split into heads, the scale and that padding keys are masked (a "
        "BERT layer is not causal)").format(gap=gap)
    tail = (got[2] - want[2]).abs().max().item()
    assert tail < 1e-5, _(
        "on the sample that is all padding your layer differs from the library's by {gap:.3g}: the library adds "
        "finfo.min to every key, which leaves the scores' differences as they are (finfo.min + s rounds to "
        "finfo.min: equal weights)").format(gap=tail)
    with torch.no_grad():
        unmasked = layer(x)
        assert close(unmasked[0], want[0], 1e-5), _(
            "forward(x) without attention_mask should let every token see every other one")
    ok(_("BertStyleSelfAttention: from_hf equals the library's BertSelfAttention (largest difference {gap:.1e}), "
          "padding masked, and the sample made of padding only is finite, as in the library").format(gap=gap))


# --------------------------------------------------------------------------- #
# 03 llama (its checks live in visible_checks_real_models_llama.py, built on this harness)
# --------------------------------------------------------------------------- #

check_interleaved_to_half_split, check_rope_permutation, check_from_hf_llama = llama_checks(
    harness, close, ok, library_mask)
# rope_inv_freq (03) and 04's course_attention, register_course_attention: visible_checks_real_models_interface.py
(check_course_attention, check_register_course_attention, check_rope_inv_freq,
 check_from_hf_llama_current) = interface_checks(harness, close, ok, library_mask, llama_reference)


# --------------------------------------------------------------------------- #
# Graded cells
# --------------------------------------------------------------------------- #

# The check cells above each graded cell, which nbgrader's Validate runs again (see graded_cells.py).
PART_CHECKS = {
    "gpt2": ("check_split_c_attn(split_c_attn)", "check_gpt2_attention(GPT2StyleAttention)"),
    "bert": ("check_extended_attention_mask(extended_attention_mask)",
             "check_bert_self_attention(BertStyleSelfAttention)"),
    "rope_permutation": ("check_interleaved_to_half_split(interleaved_to_half_split)",
                         "check_rope_permutation(interleaved_to_half_split, half_split_to_interleaved)",
                         "check_rope_inv_freq(rope_inv_freq)"),
    "llama": ("check_from_hf_llama(from_hf_llama)", "check_from_hf_llama_current(from_hf_llama)"),
    "attention_interface": ("check_course_attention(course_attention)",
                            "check_register_course_attention(register_course_attention)"),
}

# The notebook of each part (the command that grades one notebook names it).
PART_NOTEBOOKS = {"gpt2": "01_gpt2", "bert": "02_bert", "rope_permutation": "03_llama", "llama": "03_llama",
                  "attention_interface": "04_interface"}

graded_part = harness.graded_part(
    PART_CHECKS, globals(), ".venv/bin/python -m autograder grade workspace/real_models{suffix}/{notebook}.ipynb",
    PART_NOTEBOOKS)
