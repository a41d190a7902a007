"""The `efficient` assignment's long-sequence rows of the device check (scripts/device_check.py).

Not a graded part (the contract fixes the part ids, and `efficient` has no GPU part): the
reference `flash_attention` (it returns `(out, lse)`) and `sliding_window_attention`
(solutions/efficient.py) run in this trusted process, on the device, at the device check's
long S, next to a dense baseline that holds the whole [B, H, S, S] matrix. Each row gives the
peak of extra device memory (CUDA: `max_memory_allocated` after `reset_peak_memory_stats`,
minus what was allocated before; the CPU dry run: the live-tensor meter), the time, and
whether the output is right:

- flash_attention (no mask, causal): `out` against `F.scaled_dot_product_attention` on the
  whole output, and `lse` against the exact log-sum-exp of sampled query rows in fp32;
- sliding_window_attention: against SDPA with the boolean window mask, one chunk of queries
  at a time (a masked dense reference that never holds S x S either).

Budgets: flash 8 tiles of fp32 scores [B, H, block_q, block_k]; sliding window 8 x the
scores of one chunk [B, H, chunk, chunk + window - 1]; both plus 6 x the output (the output,
lse, and on the CPU dry run the slices of q, k, v, which the live-tensor meter counts as their
whole storage: 3 x the output). The dense baseline must miss them by far (a budget that
passes everything cannot hide here).
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from autograder.grading.gpu.config import fmt_bytes
from autograder.worker.meter import LiveMemoryMeter
from solutions import efficient as ref

SUBMISSIONS = ("efficient reference", "efficient dense")


@dataclass(frozen=True)
class EfficientConfig:
    device: str = "cuda"
    batch: int = 1
    heads: int = 16
    head_dim: int = 64
    dtype: str = "float16"
    block: int = 512  # flash_attention's block_q = block_k (the default 64 is a Python loop of (S/64)^2 tiles)
    chunk_size: int = 512  # sliding_window_attention's chunk of queries
    window: int = 4096
    rows: int = 64  # query rows whose lse is compared exactly
    warmup: int = 1024  # positions of the warm-up call (kernels load outside the figures)
    atol: float = 2e-2
    seed: int = 0

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


DRY_RUN = EfficientConfig(device="cpu", heads=2, head_dim=16, dtype="float32", block=32, chunk_size=32, window=48,
                          rows=16, warmup=64)


def inputs(cfg: EfficientConfig, S: int):
    gen = torch.Generator().manual_seed(cfg.seed + S)
    shape = (cfg.batch, cfg.heads, S, cfg.head_dim)
    q, k, v = (torch.randn(shape, generator=gen) * (1.5 if i < 2 else 1.0) for i in range(3))  # scores' std 2.25
    return tuple(t.to(cfg.torch_dtype).to(cfg.device) for t in (q, k, v))


def output_bytes(cfg: EfficientConfig, S: int) -> int:
    return cfg.batch * cfg.heads * S * cfg.head_dim * torch.empty((), dtype=cfg.torch_dtype).element_size()


def budget(cfg: EfficientConfig, function: str, S: int) -> int:
    element = torch.empty((), dtype=cfg.torch_dtype).element_size()
    if function == "flash_attention":
        tile = cfg.batch * cfg.heads * min(cfg.block, S) ** 2 * 4  # fp32 scores of one tile
    else:
        tile = cfg.batch * cfg.heads * min(cfg.chunk_size, S) * min(cfg.chunk_size + cfg.window - 1, S) * element
    return 8 * tile + 6 * output_bytes(cfg, S)


def dense(q, k, v, causal=False, window=None):
    """The baseline: the whole [B, H, S, S] matrix of scores, masked, softmaxed, times v."""
    S = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, S, S]
    if causal or window:
        i, j = torch.arange(S, device=q.device)[:, None], torch.arange(S, device=q.device)[None, :]
        hidden = j > i  # [S, S]: key j after query i
        if window:
            hidden = hidden | (j <= i - window)  # ... or too far before it
        scores = scores.masked_fill(hidden, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def call(submission: str, function: str, mode: str, cfg: EfficientConfig, q, k, v):
    """(out, lse or None) of one function, the reference's or the dense baseline's."""
    causal = mode == "causal"
    if submission == "efficient dense":
        return dense(q, k, v, causal=causal, window=cfg.window if function == "sliding_window_attention" else None), None
    if function == "flash_attention":
        result = ref.flash_attention(q, k, v, causal=causal, block_q=cfg.block, block_k=cfg.block)
        out, lse = result if isinstance(result, tuple) else (result, None)  # the reference returns (out, lse)
        return out, lse
    return ref.sliding_window_attention(q, k, v, window=cfg.window, chunk_size=cfg.chunk_size), None


def measured(cfg: EfficientConfig, fn):
    """(value, peak extra bytes, seconds, oom) of fn()."""
    cuda = cfg.device.startswith("cuda")
    meter = contextlib.nullcontext() if cuda else LiveMemoryMeter()
    base = 0
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    started, value, oom = time.perf_counter(), None, None
    try:
        with meter, torch.no_grad():
            value = fn()
            if cuda:
                torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as exc:
        oom = (str(exc).strip().splitlines() or ["out of memory"])[0][:300]
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() - base if cuda else meter.peak_bytes
    return value, int(peak), seconds, oom


def sdpa_reference(function: str, mode: str, cfg: EfficientConfig, q, k, v) -> torch.Tensor:
    """What the output must be: SDPA, whole (flash) or one chunk of queries at a time with the window mask."""
    if function == "flash_attention":
        return F.scaled_dot_product_attention(q, k, v, is_causal=mode == "causal")
    S, out = q.shape[-2], torch.empty_like(q)
    for i0 in range(0, S, cfg.chunk_size):
        i1 = min(i0 + cfg.chunk_size, S)
        i, j = torch.arange(i0, i1, device=q.device)[:, None], torch.arange(S, device=q.device)[None, :]
        visible = (j <= i) & (j > i - cfg.window)  # [chunk, S], True = may attend
        out[:, :, i0:i1] = F.scaled_dot_product_attention(q[:, :, i0:i1], k, v, attn_mask=visible)
    return out


def exact_lse(cfg: EfficientConfig, q, k, rows: torch.Tensor, causal: bool) -> torch.Tensor:
    """log sum_j exp(q_i . k_j / sqrt(D)) of the query rows `rows`, in fp32: [B, H, R]."""
    scores = q.float().index_select(-2, rows) @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, R, S]
    if causal:
        scores = scores.masked_fill(torch.arange(k.shape[-2], device=q.device)[None, :] > rows[:, None], float("-inf"))
    return torch.logsumexp(scores, dim=-1)


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).abs().nan_to_num(float("inf")).max())


def one_row(submission, function, mode, S, cfg, q, k, v) -> dict:
    w = min(cfg.warmup, S)
    measured(cfg, lambda: call(submission, function, mode, cfg, q[..., :w, :], k[..., :w, :], v[..., :w, :]))
    value, peak, seconds, oom = measured(cfg, lambda: call(submission, function, mode, cfg, q, k, v))
    row = {"submission": submission, "function": function, "mode": mode, "S": S, "peak_bytes": peak,
           "peak": fmt_bytes(peak), "ms": round(seconds * 1000, 1), "budget": fmt_bytes(budget(cfg, function, S)),
           "budget_bytes": budget(cfg, function, S), "correct": False, "max_error": None, "oom": oom, "error": None}
    if oom:
        return row
    out, lse = value
    value = None
    row["max_error"] = error(out, sdpa_reference(function, mode, cfg, q, k, v))
    ok = row["max_error"] <= cfg.atol
    if lse is not None:
        rows = torch.linspace(0, S - 1, min(cfg.rows, S), device=q.device).long().unique()
        row["lse_error"] = error(lse.index_select(-1, rows), exact_lse(cfg, q, k, rows, mode == "causal"))
        ok = ok and row["lse_error"] <= cfg.atol
    row["correct"] = bool(ok and out.shape == q.shape and out.dtype == q.dtype)
    return row


def rows(cfg: EfficientConfig, seq_lens, log=print) -> list[dict]:
    """Every row: the reference and the dense baseline, each function and mode, each S."""
    out = []
    cases = (("flash_attention", "none"), ("flash_attention", "causal"), ("sliding_window_attention", f"window={cfg.window}"))
    for S in seq_lens:
        q, k, v = inputs(cfg, S)
        for submission in SUBMISSIONS:
            for function, mode in cases:
                row = one_row(submission, function, mode, S, cfg, q, k, v)
                log(f"   {submission}: {function} ({mode}, S={S}): {row['peak']} (budget {row['budget']}), "
                    f"{row['ms']} ms, max error {row['max_error']}" + (f" [OOM: {row['oom']}]" if row["oom"] else ""))
                out.append(row)
        q = k = v = None
    return out


def expectations(found: list[dict], graded_s: int) -> list[tuple[bool, str]]:
    at = [r for r in found if r["S"] == graded_s]
    mine = [r for r in at if r["submission"] == "efficient reference"]
    base = [r for r in at if r["submission"] == "efficient dense"]
    fits = [r for r in mine if r["peak_bytes"] <= r["budget_bytes"] and not r["oom"]]
    return [
        (len(mine) == 3 and all(r["correct"] for r in mine),
         f"efficient reference: flash_attention (out and lse) and sliding_window_attention are right at S={graded_s}"),
        (len(mine) == 3 and len(fits) == 3, f"efficient reference stays within every budget at S={graded_s}"),
        (len(base) == 3 and all(r["oom"] or r["peak_bytes"] > r["budget_bytes"] for r in base),
         f"the dense S x S baseline exceeds every efficient budget at S={graded_s}"),
    ]
