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
cell calls it); `use_language("en")` switches back. The checks of notebooks 01 and 02 are in
visible_checks_scores_masks.py, those of 03 and 04 in visible_checks_module.py; the machinery (one sentence
per failure, your own line, the language) is check_harness.py's.
"""
from __future__ import annotations

import torch
from check_harness import DOMAIN, LOCALES, close, ok  # noqa: F401 - DOMAIN, LOCALES: for the tests
from visible_checks_scores_masks import (  # the harness, and the checks of notebooks 01 and 02
    check_apply_causal_mask, check_apply_padding_mask, check_attend, check_attention_weights, check_causal_mask,
    check_make_projections, check_padding_mask, check_project_qkv, check_scaled_scores, harness,
)
from visible_checks_module import (  # the checks of notebooks 03 and 04
    check_merge_heads, check_multihead, check_parity_error, check_self_attention, check_split_heads, check_to_official,
    lengths_mask,
)

__all__ = [
    "check_make_projections", "check_project_qkv",
    "check_scaled_scores", "check_attention_weights", "check_attend",
    "check_padding_mask", "check_causal_mask", "check_apply_padding_mask", "check_apply_causal_mask",
    "check_self_attention", "check_to_official", "check_parity_error",
    "check_split_heads", "check_merge_heads", "check_multihead",
    "check_attention_matrix_bytes", "check_sdpa_attention", "check_chunked_attention",
    "graded_part", "uses_your_code", "use_language",
]

_ = harness.gettext
use_language, uses_your_code = harness.use_language, harness.uses_your_code


# --------------------------------------------------------------------------- #
# 05 long sequences
# --------------------------------------------------------------------------- #


@harness.check("attention_matrix_bytes")
def check_attention_matrix_bytes(attention_matrix_bytes) -> None:
    attention_matrix_bytes = harness.watch(attention_matrix_bytes, "attention_matrix_bytes")
    got = attention_matrix_bytes(1, 1, 4)
    assert got == 64, _("one 4 x 4 float32 matrix is 16 numbers x 4 bytes = 64 bytes, got {got}").format(got=got)
    got = attention_matrix_bytes(2, 3, 5, torch.float16)
    assert got == 2 * 3 * 25 * 2, _("B=2, H=3, S=5 in float16 is 2*3*5*5*2 = 300 bytes, got {got}").format(got=got)
    assert isinstance(got, int), _("return a Python int, got {type}").format(type=type(got).__name__)
    ok(_("attention_matrix_bytes: B * H * S^2 * bytes per element"))


def _qkv(B=2, H=3, S=7, D=4, dtype=torch.float32):
    return (torch.randn(B, H, S, D, dtype=dtype) for _ in range(3))


def _mask_direction(fn, label: str) -> None:
    q, k, v = _qkv()
    only_first = torch.zeros(2, 7, dtype=torch.bool)
    only_first[:, 0] = True  # just key 0 is a real token
    out = harness.expect_shape(fn(q, k, v, mask=only_first), [2, 3, 7, 4], _("{name} with a padding mask").format(name=label))
    harness.no_nan(out, _("{name} output with a padding mask").format(name=label))
    assert close(out, v[:, :, :1].expand_as(v), 1e-5), _(
        "{name}: when only key 0 is a real token every query must output v[key 0]. "
        "Our mask uses True = real token; SDPA's boolean attn_mask uses True = may attend (the same sense), "
        "and it must broadcast as [B, 1, 1, S]"
    ).format(name=label)
    with_causal = _("{name} with causal=True").format(name=label)
    out_c = harness.expect_shape(fn(q, k, v, causal=True), [2, 3, 7, 4], with_causal)
    assert close(out_c[:, :, 0], v[:, :, 0], 1e-5), _("{name}: with causal=True query 0 can only see key 0").format(name=label)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4:], v2[:, :, 4:] = 9.0, 9.0
    later = harness.expect_shape(fn(q, k2, v2, causal=True), [2, 3, 7, 4], with_causal)
    assert close(later[:, :, :4], out_c[:, :, :4], 1e-5), _("{name}: with causal=True queries 0..3 must ignore keys 4..6").format(
        name=label)
    padded = lengths_mask([7, 3], 7)
    both = harness.expect_shape(fn(q, k, v, mask=padded, causal=True), [2, 3, 7, 4],
                         _("{name} with a padding mask and causal=True").format(name=label))
    harness.no_nan(both, _("{name} output with mask and causal=True").format(name=label))
    allowed = padded[:, None, None, :] & torch.ones(7, 7, dtype=torch.bool).tril()  # [B, 1, S, S]: both masks
    want = torch.softmax((q @ k.transpose(-2, -1) / 2.0).masked_fill(~allowed, float("-inf")), dim=-1) @ v  # sqrt(4) = 2
    if not close(both, want, 1e-5):
        if close(both, out_c, 1e-5):
            raise AssertionError(_(
                "{name} with a padding mask and causal=True ignores the padding mask (is_causal=True alone): the rows "
                "of padded queries (sample 1, queries 3..6) then read padded keys. Every row is compared: fold the "
                "padding mask [B, 1, 1, S] and the causal mask [S, S] into one boolean mask"
            ).format(name=label))
        raise AssertionError(_(
            "{name} with a padding mask and causal=True differs from attention under both masks by up to {error:.2e}: "
            "a query i sees the real keys j <= i"
        ).format(name=label, error=(both - want).abs().max().item()))


@harness.check("sdpa_attention")
def check_sdpa_attention(sdpa_attention) -> None:
    import torch.nn.functional as F

    watched = harness.watch(sdpa_attention, "sdpa_attention")
    q, k, v = _qkv()
    out = harness.expect_shape(watched(q, k, v), [2, 3, 7, 4], _("sdpa_attention output"))
    assert close(out, F.scaled_dot_product_attention(q, k, v), 1e-5), _("without a mask the result should be plain attention")
    _mask_direction(watched, "sdpa_attention")
    ok(_("sdpa_attention: plain, padded and causal attention through F.scaled_dot_product_attention"))
    if note := _math_backend_note(sdpa_attention, q, k, v):
        print(note)


def _math_backend_note(sdpa_attention, q, k, v) -> str:
    """A line (or '') for code that SDPA's math backend refuses: attn_mask together with is_causal=True, which the
    CPU kernel accepts (the grader does too) but the fallback that takes any input does not."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        with sdpa_kernel(SDPBackend.MATH):
            sdpa_attention(q, k, v, mask=lengths_mask([7, 3], 7), causal=True)
    except RuntimeError as error:
        if "is_causal" not in str(error):
            return ""  # (anything else: the check above passed on the default backend)
        return _("  note: under SDPA's math backend (the fallback that takes any input) your sdpa_attention raises "
                 "\"{error}\": this CPU's kernel accepts attn_mask together with is_causal=True, the math backend "
                 "does not. Folding the causal mask into attn_mask runs on every backend").format(error=str(error).strip())
    return ""


@harness.check("chunked_attention")
def check_chunked_attention(chunked_attention) -> None:
    import torch.nn.functional as F

    chunked_attention = harness.watch(chunked_attention, "chunked_attention")
    q, k, v = _qkv()
    for chunk in (1, 3, 7, 64):
        out = harness.expect_shape(chunked_attention(q, k, v, chunk_size=chunk), [2, 3, 7, 4], f"chunked_attention(chunk_size={chunk})")
        assert close(out, F.scaled_dot_product_attention(q, k, v), 1e-5), _(
            "chunk_size={chunk}: the result differs from plain attention (is the last, shorter chunk handled?)"
        ).format(chunk=chunk)
        out_c = harness.expect_shape(chunked_attention(q, k, v, causal=True, chunk_size=chunk), [2, 3, 7, 4],
                              f"chunked_attention(causal=True, chunk_size={chunk})")
        assert close(out_c, F.scaled_dot_product_attention(q, k, v, is_causal=True), 1e-5), _(
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
        block = 2 * chunk * S * 4  # [1, 2, chunk, S] float32: one block of queries against every key
        assert meter.peak_bytes < full / 4, _(
            "chunked_attention(S={S}, chunk_size={chunk}) peaked at {peak:.2f} MiB, more than a quarter of a whole "
            "score matrix ({full:.2f} MiB), while one block of {chunk} queries against every key is {block:.2f} MiB: "
            "compute one block of queries at a time"
        ).format(S=S, chunk=chunk, peak=meter.peak_bytes / 2**20, full=full / 2**20, block=block / 2**20)
        ok(_("chunked_attention: equals plain attention for chunk sizes 1, 3, 7, 64; peak {peak:.2f} MiB "
              "vs {full:.2f} MiB for one full score matrix").format(peak=meter.peak_bytes / 2**20, full=full / 2**20))
    else:
        ok(_("chunked_attention: equals plain attention for chunk sizes 1, 3, 7, 64"))


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


graded_part = harness.graded_part(
    PART_CHECKS, globals(), ".venv/bin/python -m autograder grade workspace/self_attention{suffix}/{notebook}.ipynb",
    PART_NOTEBOOKS)
