"""The GPU stage's inputs and the exact values it compares with.

The trusted side builds q, k, v (seeded) on its CPU, the worker runs the student's function
on the device and sends back only ~64 sampled query rows of the output; those rows are
computed here exactly, in fp32, with the reference solution's functions, and compared. A
wrong output is tested against the usual mistakes, to name the one that fits.
"""
from __future__ import annotations

import math

import torch

from ...foundation import i18n
from .config import MODE_NAME, MODES, Case, GpuConfig

_ = i18n.message


def real_length(cfg: GpuConfig, seq_len: int) -> int:
    return max(1, min(seq_len - 1, int(seq_len * cfg.real_fraction)))


def make_inputs(cfg: GpuConfig, seq_len: int):
    """(q, k, v, mask) on the CPU, seeded; mask is [B, S] bool, True = real token (right padding)."""
    gen = torch.Generator().manual_seed(cfg.seed + seq_len)
    shape = (cfg.batch, cfg.heads, seq_len, cfg.head_dim)
    scale = math.sqrt(cfg.sharpness)  # q.k / sqrt(d) then has std `sharpness`
    q = (torch.randn(shape, generator=gen) * scale).to(cfg.torch_dtype)
    k = (torch.randn(shape, generator=gen) * scale).to(cfg.torch_dtype)
    v = torch.randn(shape, generator=gen).to(cfg.torch_dtype)
    mask = torch.arange(seq_len)[None, :].expand(cfg.batch, seq_len) < real_length(cfg, seq_len)
    return q, k, v, mask.contiguous()


class Inputs:
    """make_inputs, kept for one size at a time (at S = 32768 they are 3 x 64 MiB): the cases of a
    run share them, and so do the submissions of a course graded in one process."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.value: tuple | None = None

    def get(self, cfg: GpuConfig, seq_len: int):
        key = (cfg.batch, cfg.heads, seq_len, cfg.head_dim, cfg.dtype, cfg.sharpness, cfg.real_fraction, cfg.seed)
        if key != self.key:
            self.key, self.value = None, None  # free the old size first
            self.key, self.value = key, make_inputs(cfg, seq_len)
        return self.value


def sample_rows(cfg: GpuConfig, seq_len: int, mode: str) -> torch.Tensor:
    """Sorted query rows to compare: the first and last ones, the edges of the padding, the rest at random.

    In padding mode only real query rows are compared: what a padded query sees is not graded.
    """
    top = real_length(cfg, seq_len) if mode == "padding" else seq_len
    must = {0, 1, top - 1, top // 2}
    if mode == "padding":
        must |= {top - 2}
    gen = torch.Generator().manual_seed(cfg.seed + 7 * seq_len + MODES.index(mode))
    rest = torch.randperm(top, generator=gen)[: cfg.rows].tolist()
    rows = sorted(r for r in must if 0 <= r < top)
    for r in rest:
        if len(rows) >= min(cfg.rows, top):
            break
        if r not in rows:
            rows.append(r)
    return torch.tensor(sorted(rows), dtype=torch.long)


def reference_rows(q, k, v, rows, mask=None, causal=False) -> torch.Tensor:
    """Exact attention for the query rows `rows`, in fp32, with the reference solution's functions."""
    import solutions as ref  # noqa: PLC0415 - the trusted side only; the repository root is on sys.path

    q32, k32, v32 = (t.float() for t in (q, k, v))
    scores = ref.scaled_scores(q32.index_select(-2, rows), k32)  # [B, H, R, S]
    if mask is not None:
        scores = ref.apply_padding_mask(scores, mask)
    if causal:
        future = torch.arange(k.shape[-2])[None, :] > rows[:, None]  # [R, S]: key j after query i
        scores = scores.masked_fill(future, float("-inf"))
    return ref.attend(ref.attention_weights(scores), v32)


def close_enough(got: torch.Tensor, want: torch.Tensor, cfg: GpuConfig) -> bool:
    return bool(torch.isclose(got, want, atol=cfg.atol, rtol=cfg.rtol).all())


def max_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).abs().nan_to_num(float("inf")).max())


def diagnose(cfg: GpuConfig, case: Case, got: torch.Tensor, q, k, v, rows, mask) -> i18n.Message:
    """Why the sampled rows differ: test the usual mistakes against the output, name the one that fits."""
    where = {"function": case.function, "mode": MODE_NAME[case.mode], "seq_len": case.seq_len}
    if not torch.isfinite(got).all():
        head = _("your {function} ({mode}, S={seq_len}) returned {count} NaN or inf values on sampled query "
                 "rows").format(**where, count=int((~torch.isfinite(got)).sum()))
    else:
        err = max_error(got, reference_rows(q, k, v, rows, mask if case.mode == "padding" else None,
                                            case.mode == "causal"))
        head = _("your {function} ({mode}, S={seq_len}) is off by up to {error:.3g} on sampled query rows").format(
            **where, error=err)
    return mistake(cfg, case, got, q, k, v, rows, mask).format(head=head, atol=cfg.atol)


def mistake(cfg: GpuConfig, case: Case, got: torch.Tensor, q, k, v, rows, mask) -> i18n.Message:
    """The usual mistake that fits the rows: a message of {head} (by how much they are off) and {atol}."""
    if case.mode == "padding":
        if close_enough(got, reference_rows(q, k, v, rows, ~mask), cfg):
            if case.function == "sdpa_attention":
                return _("{head}: it attends to the padded keys and ignores the real ones. "
                         "F.scaled_dot_product_attention's boolean attn_mask means True = may attend (the same sense "
                         "as our padding mask, True = real token, and the opposite of nn.MultiheadAttention's "
                         "key_padding_mask): pass mask[:, None, None, :] as it is, without inverting it")
            return _("{head}: it attends to the padded keys and ignores the real ones; the padding mask is "
                     "True = real token, so -inf goes where the mask is False")
        if close_enough(got, reference_rows(q, k, v, rows), cfg):
            return _("{head}: it ignores the padding mask (padded keys still get attention)")
    if case.mode == "causal" and close_enough(got, reference_rows(q, k, v, rows), cfg):
        return _("{head}: it ignores causal=True (queries still see later keys)")
    if case.mode == "causal":
        anti = reference_rows(q.flip(-2), k.flip(-2), v.flip(-2), (q.shape[-2] - 1 - rows), None, True)
        if close_enough(got, anti, cfg):
            return _("{head}: its causal mask is the wrong way round (a query must see keys j <= i, not j >= i)")
    if case.mode == "none" and close_enough(got, reference_rows(q, k, v, rows, None, True), cfg):
        return _("{head}: it applies a causal mask although causal=False")
    return _("{head}: it must equal plain softmax(q k^T / sqrt(head_dim)) v (compared in fp32, tolerance "
             "{atol:g})")
