"""The GPU stage on a real device: the reference and broken submissions, one table of figures.

Run through scripts/device_check.sh (which first checks that python3 has torch and sees
CUDA). For each submission (the reference solution, one that builds the full S x S
matrix, one with an inverted padding mask), the GPU stage runs at S in {4096, 16384,
32768}; the S = 32768 cases are exactly the graded ones. Prints a table (GPU, torch,
peak extra device memory and time per implementation, mode and S), checks what must hold
(the reference earns every point; the full matrix fails every memory check; the inverted
mask fails the padding cases, naming the convention), and writes device_check.md and
device_check.json to $OUT (or the current folder). Exit status 1 if an expectation fails.

Then the `efficient` assignment's rows (scripts/device_check_efficient.py, not a graded part):
the reference flash_attention (no mask, causal) and sliding_window_attention at the same S, next
to a dense S x S baseline, with peak memory, time and correctness (SDPA / a masked reference).
DEVICE_CHECK_PARTS=gpu_stage or =efficient runs only one of the two (default: both).
"""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from autograder.foundation.extract import extract  # noqa: E402
from autograder.grading.gpu import stage  # noqa: E402
from autograder.grading.gpu.config import MODE_LABEL, GpuConfig, fmt_bytes  # noqa: E402
from autograder.grading.gpu.known_submissions import write_variants  # noqa: E402
from autograder.foundation.limits import Limits  # noqa: E402
from autograder.sandbox.pool import Zygote  # noqa: E402

import device_check_efficient as efficient  # noqa: E402 - scripts/, next to this file

SEQ_LENS = tuple(int(s) for s in os.environ.get("DEVICE_CHECK_SEQ_LENS", "4096,16384,32768").split(","))
DEVICE = os.environ.get("DEVICE_CHECK_DEVICE", "cuda")  # "cpu": a dry run of this script at small sizes
GRADED_S = GpuConfig().seq_lens[-1] if DEVICE != "cpu" else max(SEQ_LENS)
SUBMISSIONS = ("reference", "full_matrix", "inverted_mask")
PARTS = tuple(os.environ.get("DEVICE_CHECK_PARTS", "gpu_stage,efficient").split(","))
OUT = Path(os.environ.get("OUT") or ".")


def log(*args) -> None:
    print(*args, flush=True)


def grade(zygote: Zygote, limits: Limits, path, cfg: GpuConfig) -> stage.StageRun:
    """The GPU stage on one submission: the same public function as `grade --gpu` and grade-gpu."""
    return stage.run(zygote, limits, extract(path), config=cfg)


def expectations(name: str, part) -> list[tuple[bool, str]]:
    graded = [c for c in part.checks if f"S={GRADED_S}]" in c.name]
    memory = [c for c in graded if c.name.startswith("peak extra device memory")]
    out = []
    if name == "reference":
        out.append((bool(graded) and all(c.passed for c in graded),
                    f"reference passes every graded check at S={GRADED_S}"))
    if name == "full_matrix":
        out.append((bool(memory) and not any(c.passed for c in memory),
                    f"full matrix fails every memory check at S={GRADED_S}"))
        out.append((all("must not build the S x S matrix" in c.message or "never hold the whole S x S" in c.message
                        or "ran out of device memory" in c.message for c in memory),
                    "its memory messages name the S x S matrix"))
    if name == "inverted_mask":
        bad = [c for c in graded if not c.passed]
        out.append((bool(bad) and all("padding mask" in c.name for c in bad),
                    f"inverted mask fails only padding-mask cases at S={GRADED_S}"))
        sdpa = [c for c in bad if c.name.startswith("the output") and "sdpa_attention" in c.name]
        out.append((bool(sdpa) and "True = may attend" in sdpa[0].message,
                    "its sdpa_attention message names the convention (True = may attend)"))
    return out


def diagnose_sandbox(path, cfg, limits, results) -> None:
    """The reference failed: was it the sandbox (namespaces, covered paths) or the device? Rerun without it."""
    log("   the reference failed: rerunning it with the namespaces off (diagnosis only, not the graded setup)")
    zygote = Zygote()
    try:
        part = grade(zygote, replace(limits, namespaces=False, unsafe_no_sandbox=True), path, cfg).part
    finally:
        zygote.close()
    log(f"   without namespaces: {part.score:g} / {part.max_score:g}")
    for c in part.checks:
        if not c.passed:
            log(f"   x {c.name}: {c.message}")
    results["reference_without_namespaces"] = {"score": part.score, "checks": [c.__dict__ for c in part.checks]}


def main() -> int:
    started = time.perf_counter()
    header = {
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "seq_lens": SEQ_LENS, "config": GpuConfig().__dict__,
    }
    log(f"GPU: {header['gpu']}  torch {header['torch']} (CUDA {header['cuda']})  python {header['python']}")
    if DEVICE == "cpu":  # dry run: the same code path, CPU sizes, memory from the live-tensor meter
        cfg = GpuConfig(device="cpu", seq_lens=SEQ_LENS, heads=2, head_dim=16, dtype="float32", chunk_size=32,
                            rows=16, warmup=64)
        header["gpu"] = "none (dry run on the CPU)"
    elif not torch.cuda.is_available():
        log("no CUDA device: nothing to measure")
        return 2
    else:
        cfg = GpuConfig(seq_lens=SEQ_LENS)
    limits = Limits(part_seconds=150.0)  # 4 x 150 s for the 18 cases of one submission (3 sizes)
    paths = write_variants(tempfile.mkdtemp(prefix="device_check_"))
    rows, results, verdicts = [], {}, []
    have_pytest = importlib.util.find_spec("pytest") is not None
    runner = "pytest (as graded)" if have_pytest else "direct calls (pytest is not installed here)"
    log(f"checks run through {runner}")
    header["runner"] = runner
    zygote = Zygote() if "gpu_stage" in PARTS else None
    try:
        for name in SUBMISSIONS if zygote else ():
            t0 = time.perf_counter()
            log(f"\n== {name} ({paths[name].name}) ...")
            run = grade(zygote, limits, paths[name], cfg)
            part, ms = run.part, list(run.measurements.values())
            log(f"   {part.score:g} / {part.max_score:g} in {time.perf_counter() - t0:.1f} s")
            for c in part.checks:
                if not c.passed:
                    log(f"   x {c.name}: {c.message}")
            for note in part.notes:
                if "of extra device memory" not in note:
                    log(f"   ! {note}")
            for m in ms:
                rows.append({"submission": name, "function": m.case.function, "mode": m.case.mode,
                             "S": m.case.seq_len, "peak_bytes": m.peak_bytes, "peak": fmt_bytes(m.peak_bytes)
                             if m.peak_bytes is not None else "-", "ms": round(m.seconds * 1000, 1)
                             if m.seconds is not None else None, "budget": fmt_bytes(m.budget),
                             "correct": m.correct, "max_error": m.max_error, "oom": m.oom,
                             "error": str(m.error) if m.error else None})
            results[name] = {"score": part.score, "max_score": part.max_score, "ran": part.ran,
                             "checks": [c.__dict__ for c in part.checks], "notes": list(part.notes)}
            verdicts += expectations(name, part)
            if name == "reference" and not part.passed:
                diagnose_sandbox(paths[name], cfg, limits, results)
            write(header, rows, results, verdicts, time.perf_counter() - started)  # partial results survive a kill
    finally:
        if zygote:
            zygote.close()
    if "efficient" in PARTS:
        efficient_rows(rows, verdicts)
    write(header, rows, results, verdicts, time.perf_counter() - started)
    log("\n" + (OUT / "device_check.md").read_text())
    return 0 if verdicts and all(ok for ok, _ in verdicts) else 1


def efficient_rows(rows: list, verdicts: list) -> None:
    """The efficient assignment's rows, in this process (reference code only), added to the same table."""
    cfg = efficient.DRY_RUN if DEVICE == "cpu" else efficient.EfficientConfig()
    log(f"\n== efficient: flash_attention and sliding_window_attention (block {cfg.block}, chunk_size "
        f"{cfg.chunk_size}, window {cfg.window}) ...")
    found = efficient.rows(cfg, SEQ_LENS, log)
    rows += found
    verdicts += efficient.expectations(found, max(SEQ_LENS))


def write(header, rows, results, verdicts, seconds) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    lines = [f"GPU: {header['gpu']}, torch {header['torch']} (CUDA {header['cuda']}), "
             f"B=1, H=16, head_dim=64, fp16, forward only; {seconds:.0f} s in all"
             + (" (DRY RUN on the CPU: B=1, H=2, head_dim=16, fp32)" if DEVICE == "cpu" else ""), "",
             "| submission | function | mode | S | peak extra device memory | budget | time (ms) | correct |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        correct = "OOM" if r["oom"] else ("yes" if r["correct"] else ("error" if r["error"] else "no"))
        lines.append(f"| {r['submission']} | {r['function']} | {MODE_LABEL.get(r['mode'], r['mode'])} | {r['S']} | {r['peak']} "
                     f"| {r['budget']} | {r['ms'] if r['ms'] is not None else '-'} | {correct} |")
    lines += ["", "Expectations:"] + [f"- {'PASS' if ok else 'FAIL'}: {what}" for ok, what in verdicts]
    (OUT / "device_check.md").write_text("\n".join(lines) + "\n")
    (OUT / "device_check.json").write_text(json.dumps({**header, "seconds": seconds, "rows": rows,
                                                       "results": results, "expectations": verdicts}, indent=1,
                                                      default=str))


if __name__ == "__main__":
    sys.exit(main())
