"""What the GPU stage grades and how strictly: sizes, tolerances, memory budgets, and the messages about memory.

Per function (sdpa_attention, chunked_attention) and per mode (no mask, padding mask,
causal), at S = 32768, B = 1, H = 16, head_dim = 64, fp16: the output must match exact
attention on sampled rows, and the peak of extra device memory must stay within a budget
that the reference meets with room and that plain attention (which holds the S x S matrix)
misses by a wide margin (`sdpa_budget`, `chunk_budget`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...foundation import i18n

_ = i18n.message
FUNCTIONS = ("sdpa_attention", "chunked_attention")  # the GPU part's names (spec.py), each with its own budget
MODES = ("none", "padding", "causal")
MODE_NAME = {"none": _("no mask"), "padding": _("padding mask"), "causal": _("causal")}  # in a message
MODE_LABEL = {mode: name.msgid for mode, name in MODE_NAME.items()}  # in English: a case's id (the checks' names)


@dataclass(frozen=True)
class GpuConfig:
    """Sizes, tolerances and budgets of the stage. The defaults are the graded ones."""

    device: str = "cuda"
    seq_lens: tuple[int, ...] = (32768,)
    batch: int = 1
    heads: int = 16
    head_dim: int = 64
    dtype: str = "float16"
    chunk_size: int = 1024
    rows: int = 64  # sampled query rows compared with the exact result
    real_fraction: float = 0.7  # padding mode: the first 70 % of the positions are real tokens
    sharpness: float = 2.5  # std of the scores: attention concentrates on a few keys, so a wrong key set shows
    warmup: int = 512  # positions of the warm-up call
    atol: float = 2e-2
    rtol: float = 2e-2
    sdpa_factor: float = 4.0  # sdpa_attention: at most 4 x the output's bytes
    chunk_factor: float = 8.0  # chunked_attention: at most 8 x (chunk_size x S x H x B x element size) + 4 x output
    seed: int = 0

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.torch_dtype).element_size()


@dataclass(frozen=True)
class Case:
    function: str
    mode: str
    seq_len: int

    @property
    def id(self) -> str:
        return f"{self.function}, {MODE_LABEL[self.mode]}, S={self.seq_len}"


def cases(cfg: GpuConfig, functions: tuple[str, ...] = FUNCTIONS) -> list[Case]:
    return [Case(f, m, s) for s in cfg.seq_lens for f in functions for m in MODES]


def fmt_bytes(n: float) -> str:
    """64.0 GiB, 256 MiB, 12 KiB: the unit in which the figure reads best."""
    n = float(n)
    if abs(n) >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    for size, unit in ((2**20, "MiB"), (2**10, "KiB")):
        if abs(n) >= size:
            return f"{n / size:.0f} {unit}" if abs(n) >= 10 * size else f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def output_bytes(cfg: GpuConfig, seq_len: int) -> int:
    return cfg.batch * cfg.heads * seq_len * cfg.head_dim * cfg.element_size


def matrix_bytes(cfg: GpuConfig, seq_len: int) -> int:
    """One [B, H, S, S] score matrix in the inputs' dtype: what plain attention holds (at least once)."""
    return cfg.batch * cfg.heads * seq_len * seq_len * cfg.element_size


def sdpa_budget(cfg: GpuConfig, seq_len: int) -> int:
    """The fused kernel needs little more than its output (64 MiB at S = 32768): allow 4 x the output."""
    return int(cfg.sdpa_factor * output_bytes(cfg, seq_len))


def chunk_budget(cfg: GpuConfig, seq_len: int) -> int:
    """chunk_factor x one block of scores [B, H, chunk_size, S], plus 4 x the output.

    The reference holds ~3 such blocks at once (scores, scaled scores, softmax; 3.1 GiB at
    S = 32768, chunk_size = 1024 on an H200): 8 blocks leave room for a softmax in fp32 and a
    mask, while plain attention (two S x S matrices, 64 GiB) is far over. The 4 outputs' worth
    covers the output itself and input-sized temporaries (a contiguous copy of k^T, ...),
    which matter only when chunk_size is small.
    """
    block = cfg.batch * cfg.heads * min(cfg.chunk_size, seq_len) * seq_len * cfg.element_size
    return int(cfg.chunk_factor * block + 4 * output_bytes(cfg, seq_len))


def budget(cfg: GpuConfig, case: Case) -> int:
    return sdpa_budget(cfg, case.seq_len) if case.function == "sdpa_attention" else chunk_budget(cfg, case.seq_len)


def memory_message(cfg: GpuConfig, case: Case, peak: int, limit: int) -> i18n.Message:
    """The student-facing message when a function used more device memory than its budget."""
    matrix = matrix_bytes(cfg, case.seq_len)
    formula = _(" ({factor:g} x chunk_size x S x heads x batch x {element_size} bytes with chunk_size={chunk_size}, "
                "plus 4 x the output)").format(factor=cfg.chunk_factor, element_size=cfg.element_size,
                                               chunk_size=cfg.chunk_size)
    head = _("your {function} peaked at {peak} of extra device memory ({mode}, S={seq_len}), the budget is "
             "{budget}{formula}{matrix}").format(
        function=case.function, peak=fmt_bytes(peak), mode=MODE_NAME[case.mode], seq_len=case.seq_len,
        budget=fmt_bytes(limit), formula=formula if case.function == "chunked_attention" else "",
        matrix=_("; one S x S score matrix alone is {matrix}").format(matrix=fmt_bytes(matrix))
        if peak >= matrix * 0.9 else "")
    if case.function == "sdpa_attention":
        how = {"none": _("call F.scaled_dot_product_attention(q, k, v) directly"),
               "padding": _("pass the mask to F.scaled_dot_product_attention instead of masking scores yourself"),
               "causal": _("use is_causal=True instead of building a causal mask or masking scores yourself"),
               }[case.mode]
        return _("{head}: it must not build the S x S matrix ({how})").format(head=head, how=how)
    return _("{head}: it must compute the scores of one block of chunk_size queries at a time and never hold the "
             "whole S x S matrix").format(head=head)


def oom_message(case: Case, detail: str, device_bytes: int) -> i18n.Message:
    """The student-facing message when a function ran out of device memory (`detail`: torch's own words)."""
    gpu = _(" ({memory} on this GPU)").format(memory=fmt_bytes(device_bytes)) if device_bytes else ""
    fix = (_("pass the mask to F.scaled_dot_product_attention, or is_causal=True, instead of masking scores yourself")
           if case.function == "sdpa_attention" else _("compute the scores of one block of chunk_size queries at a time"))
    return _("your {function} ran out of device memory{gpu} at S={seq_len} ({mode}): it must not build the S x S "
             "matrix; {fix} [{detail}]").format(function=case.function, gpu=gpu, seq_len=case.seq_len,
                                                mode=MODE_NAME[case.mode], fix=fix, detail=detail)
