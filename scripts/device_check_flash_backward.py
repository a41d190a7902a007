"""The reference FlashAttention backward on a CUDA device (not graded): scripts/device_check.sh runs it after the GPU
stage, or alone:

    python3 scripts/device_check_flash_backward.py            # CUDA, S = 4096 and 16384; writes $OUT/flash_backward.md
    python3 scripts/device_check_flash_backward.py --dry-run  # the CPU, small S: the script itself is right

For each S, causal, fp16 inputs [1, 16, S, 64]: the reference flash_attention_backward (solutions/efficient.py,
blocks of 512) given the reference forward's out and lse, next to autograd through SDPA's math (the dense
backward, which holds [B, H, S, S]); the peak of extra device memory of each backward (max_memory_allocated after
reset_peak_memory_stats, minus what was allocated before; the live-tensor meter on the CPU), its time, and the
largest error of the three gradients against autograd through SDPA in fp32, relative to the largest gradient. Exit status 1 when a gradient is wrong or
the tiled backward is not far below the dense one.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from autograder.worker.meter import LiveMemoryMeter
from solutions import efficient as ref


def measured(device: str, fn):
    """(value, peak extra bytes, seconds) of fn()."""
    cuda = device.startswith("cuda")
    meter = contextlib.nullcontext() if cuda else LiveMemoryMeter()
    base = 0
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    started = time.perf_counter()
    with meter:
        value = fn()
        if cuda:
            torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base if cuda else meter.peak_bytes
    return value, int(peak), time.perf_counter() - started


def dense_backward(q, k, v, grad_out):
    """Autograd through plain causal attention (the [B, H, S, S] probabilities kept for backward)."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        S = q.shape[-2]
        scores = leaves[0] @ leaves[1].transpose(-2, -1) / q.shape[-1] ** 0.5  # [B, H, S, S]
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        out = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ leaves[2]
        out.backward(grad_out)
    return tuple(leaf.grad for leaf in leaves)


def truth(q, k, v, grad_out):
    """Autograd through SDPA in fp32 (PyTorch's own kernels): the gradients the rows are compared with."""
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        F.scaled_dot_product_attention(*leaves, is_causal=True).backward(grad_out.float())
    return tuple(leaf.grad for leaf in leaves)


def backward(name: str, block: int, q, k, v, out, lse, grad_out):
    if name == "dense autograd":
        return dense_backward(q, k, v, grad_out)
    return ref.flash_attention_backward(q, k, v, out, lse, grad_out, causal=True, block_q=block, block_k=block)


def rows(device: str, seq_lens, heads: int, head_dim: int, dtype, block: int, log=print) -> list[dict]:
    found = []
    for S in seq_lens:
        gen = torch.Generator().manual_seed(S)
        q, k, v, grad_out = (torch.randn(1, heads, S, head_dim, generator=gen).to(dtype).to(device) for _ in range(4))
        with torch.no_grad():
            out, lse = ref.flash_attention(q, k, v, causal=True, block_q=block, block_k=block)
        want = truth(q, k, v, grad_out)
        tensors = (q, k, v, out, lse, grad_out)
        for name in ("flash_attention_backward", "dense autograd"):
            grads, peak, seconds = measured(device, lambda name=name, t=tensors: backward(name, block, *t))
            err = max(float((g.float() - w).abs().max() / w.abs().max()) for g, w in zip(grads, want))  # relative
            row = {"S": S, "backward": name, "peak_MiB": round(peak / 2**20, 1), "ms": round(seconds * 1000, 1),
                   "max_error": err}
            log(f"   S={S} {name}: peak {row['peak_MiB']} MiB, {row['ms']} ms, largest gradient error {err:.2e} (of the largest gradient)")
            found.append(row)
            grads = None
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="on the CPU, at small S (checks the script)")
    args = parser.parse_args(argv)
    if args.dry_run:
        device, seq_lens, heads, head_dim, dtype, block, atol = "cpu", (256, 512), 2, 16, torch.float32, 64, 1e-5
    elif torch.cuda.is_available():
        device, seq_lens, heads, head_dim, dtype, block, atol = "cuda", (4096, 16384), 16, 64, torch.float16, 512, 1e-2
    else:
        print("RESULT: no CUDA device (use --dry-run on the CPU)")
        return 4
    found = rows(device, seq_lens, heads, head_dim, dtype, block)
    failures = [f"S={r['S']} {r['backward']}: max gradient error {r['max_error']:.2e} > {atol}"
                for r in found if r["max_error"] > atol]
    for S in seq_lens:
        tiled, dense = (next(r for r in found if r["S"] == S and r["backward"] == b)
                        for b in ("flash_attention_backward", "dense autograd"))
        if not tiled["peak_MiB"] * 4 < dense["peak_MiB"]:
            failures.append(f"S={S}: the tiled backward's peak {tiled['peak_MiB']} MiB is not far below the dense "
                            f"{dense['peak_MiB']} MiB")
    out = Path(os.environ.get("OUT", "device_check_out"))
    out.mkdir(parents=True, exist_ok=True)
    table = ["| S | backward | peak (MiB) | ms | gradient error (relative) |", "|---|---|---|---|---|"]
    table += [f"| {r['S']} | {r['backward']} | {r['peak_MiB']} | {r['ms']} | {r['max_error']:.2e} |" for r in found]
    (out / "flash_backward.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    (out / "flash_backward.json").write_text(json.dumps({"device": device, "rows": found, "failures": failures},
                                                        indent=1), encoding="utf-8")
    for line in failures:
        print("FAIL", line)
    print("RESULT:", "every expectation holds" if not failures else f"{len(failures)} expectation(s) failed",
          f"(table in {out / 'flash_backward.md'})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
