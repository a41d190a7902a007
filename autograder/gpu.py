"""The GPU stage (part `long_sequence_gpu`): sdpa_attention and chunked_attention at long sequence length.

`python -m autograder grade SUBMISSION --gpu` calls `grade_gpu`. The stage runs only where
this trusted process sees a CUDA device (`torch.cuda.is_available()`); elsewhere it is
reported as not run, with the reason, and never counted as passed.

How it grades, per function (sdpa_attention, chunked_attention) and per mode (no mask,
padding mask, causal), at S = 32768, B = 1, H = 16, head_dim = 64, fp16:

- the trusted side builds q, k, v (seeded) and sends them to a sandboxed worker that sees
  the GPU; the worker moves them to the device, runs the student's function once on a short
  prefix (warm-up: kernel loading stays out of the figures), then once for real, and sends
  back only ~64 sampled query rows of the output, the peak of extra device memory
  (`torch.cuda.max_memory_allocated` after `reset_peak_memory_stats`, minus the inputs) and the
  time (runtime.Worker.handle_device_call);
- the trusted side computes those rows exactly, in fp32 on its CPU, with the reference
  solution's functions, and compares;
- the memory is compared with a budget that the reference meets with room and that plain
  attention (which holds the S x S matrix) misses by a wide margin (see `sdpa_budget` and
  `chunk_budget`). Memory earns its points only for a correct output.

The checks themselves are autograder/checks/test_long_sequence_gpu.py (thin: the logic is
here, so that the CPU test-suite can drive it with `GpuConfig(device="cpu", ...)` at small sizes).

`grade_course` / `record_in_gradebook` bring the stage's score into nbgrader's gradebook
(`python -m autograder grade-gpu COURSE_DIR`): see docs/gpu.md.
"""
from __future__ import annotations

import csv
import math
import resource
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from .results import CheckResult, Limits, PartResult
from .session import CheckFailure, MissingName, StudentRaised
from .spec import ASSIGNMENT, GPU_PART

PART_ID = GPU_PART.id
FUNCTIONS = ("sdpa_attention", "chunked_attention")
MODES = ("none", "padding", "causal")
MODE_LABEL = {"none": "no mask", "padding": "padding mask", "causal": "causal"}
NO_CUDA = "not run: no CUDA device on this machine (torch.cuda.is_available() is False)"
CSV_NAME = "long_sequence_gpu.csv"
CSV_FIELDS = ("student_id", "ran", "score", "max_score", "failed_checks", "notes")
GRADE_CELL = "long_sequence"  # the gradebook cell whose extra_credit holds the GPU stage's score
GRADE_NOTEBOOK = "05_long_sequence"


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


@dataclass
class Measurement:
    """What one run of a student function on the device gave (one per Case)."""

    case: Case
    peak_bytes: int | None = None
    seconds: float | None = None
    budget: int = 0
    device_name: str = ""
    error: str | None = None  # the student-facing reason the output could not be compared
    oom: str | None = None
    max_error: float | None = None
    correct: bool = False
    mismatch: str | None = None  # the student-facing reason the output is wrong


# Set by grade_gpu for the duration of one run of the checks (the checks read it).
CONFIG: GpuConfig | None = None
MEASUREMENTS: dict[Case, Measurement] = {}
_INPUTS: dict[tuple, tuple] = {}


# --------------------------------------------------------------------------- figures
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


def memory_message(cfg: GpuConfig, case: Case, peak: int, limit: int) -> str:
    """The student-facing text when a function used more device memory than its budget."""
    matrix = matrix_bytes(cfg, case.seq_len)
    head = (f"your {case.function} peaked at {fmt_bytes(peak)} of extra device memory "
            f"({MODE_LABEL[case.mode]}, S={case.seq_len}), the budget is {fmt_bytes(limit)}")
    if case.function == "chunked_attention":
        head += (f" ({cfg.chunk_factor:g} x chunk_size x S x heads x batch x {cfg.element_size} bytes with "
                 f"chunk_size={cfg.chunk_size}, plus 4 x the output)")
    if peak >= matrix * 0.9:
        head += f"; one S x S score matrix alone is {fmt_bytes(matrix)}"
    if case.function == "sdpa_attention":
        how = {"none": "call F.scaled_dot_product_attention(q, k, v) directly",
               "padding": "pass the mask to F.scaled_dot_product_attention instead of masking scores yourself",
               "causal": "use is_causal=True instead of building a causal mask or masking scores yourself"}[case.mode]
        return f"{head}: it must not build the S x S matrix ({how})"
    return (f"{head}: it must compute the scores of one block of chunk_size queries at a time and never hold "
            "the whole S x S matrix")


def oom_message(case: Case, detail: str, device_bytes: int) -> str:
    gpu = f" ({fmt_bytes(device_bytes)} on this GPU)" if device_bytes else ""
    fix = ("pass the mask to F.scaled_dot_product_attention, or is_causal=True, instead of masking scores yourself"
           if case.function == "sdpa_attention" else "compute the scores of one block of chunk_size queries at a time")
    return (f"your {case.function} ran out of device memory{gpu} at S={case.seq_len} ({MODE_LABEL[case.mode]}): "
            f"it must not build the S x S matrix; {fix} [{detail}]")


# --------------------------------------------------------------------------- inputs and reference
def cases(cfg: GpuConfig | None = None) -> list[Case]:
    cfg = cfg or CONFIG or GpuConfig()
    return [Case(f, m, s) for s in cfg.seq_lens for f in FUNCTIONS for m in MODES]


def real_length(cfg: GpuConfig, seq_len: int) -> int:
    return max(1, min(seq_len - 1, int(seq_len * cfg.real_fraction)))


def make_inputs(cfg: GpuConfig, seq_len: int):
    """(q, k, v, mask) on the CPU, seeded; mask is [B, S] bool, True = real token (right padding)."""
    key = (cfg.batch, cfg.heads, seq_len, cfg.head_dim, cfg.dtype, cfg.sharpness, cfg.real_fraction, cfg.seed)
    if key not in _INPUTS:
        _INPUTS.clear()  # one size at a time: at S = 32768 these are 3 x 64 MiB
        gen = torch.Generator().manual_seed(cfg.seed + seq_len)
        shape = (cfg.batch, cfg.heads, seq_len, cfg.head_dim)
        scale = math.sqrt(cfg.sharpness)  # q.k / sqrt(d) then has std `sharpness`
        q = (torch.randn(shape, generator=gen) * scale).to(cfg.torch_dtype)
        k = (torch.randn(shape, generator=gen) * scale).to(cfg.torch_dtype)
        v = torch.randn(shape, generator=gen).to(cfg.torch_dtype)
        mask = torch.arange(seq_len)[None, :].expand(cfg.batch, seq_len) < real_length(cfg, seq_len)
        _INPUTS[key] = (q, k, v, mask.contiguous())
    return _INPUTS[key]


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


def _close(got: torch.Tensor, want: torch.Tensor, cfg: GpuConfig) -> bool:
    return bool(torch.isclose(got, want, atol=cfg.atol, rtol=cfg.rtol).all())


def max_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).abs().nan_to_num(float("inf")).max())


def diagnose(cfg: GpuConfig, case: Case, got: torch.Tensor, q, k, v, rows, mask) -> str:
    """Why the sampled rows differ: test the usual mistakes against the output, name the one that fits."""
    fn, label = case.function, MODE_LABEL[case.mode]
    err = max_error(got, reference_rows(q, k, v, rows, mask if case.mode == "padding" else None,
                                        case.mode == "causal"))
    head = f"your {fn} ({label}, S={case.seq_len}) is off by up to {err:.3g} on sampled query rows"
    if not torch.isfinite(got).all():
        bad = int((~torch.isfinite(got)).sum())
        head = f"your {fn} ({label}, S={case.seq_len}) returned {bad} NaN or inf values on sampled query rows"
    if case.mode == "padding":
        if _close(got, reference_rows(q, k, v, rows, ~mask), cfg):
            if fn == "sdpa_attention":
                return (f"{head}: it attends to the padded keys and ignores the real ones. "
                        "F.scaled_dot_product_attention's boolean attn_mask means True = may attend (the same sense "
                        "as our padding mask, True = real token, and the opposite of nn.MultiheadAttention's "
                        "key_padding_mask): pass mask[:, None, None, :] as it is, without inverting it")
            return (f"{head}: it attends to the padded keys and ignores the real ones; the padding mask is "
                    "True = real token, so -inf goes where the mask is False")
        if _close(got, reference_rows(q, k, v, rows), cfg):
            return f"{head}: it ignores the padding mask (padded keys still get attention)"
    if case.mode == "causal" and _close(got, reference_rows(q, k, v, rows), cfg):
        return f"{head}: it ignores causal=True (queries still see later keys)"
    if case.mode == "causal":
        anti = reference_rows(q.flip(-2), k.flip(-2), v.flip(-2), (q.shape[-2] - 1 - rows), None, True)
        if _close(got, anti, cfg):
            return f"{head}: its causal mask is the wrong way round (a query must see keys j <= i, not j >= i)"
    if case.mode == "none" and _close(got, reference_rows(q, k, v, rows, None, True), cfg):
        return f"{head}: it applies a causal mask although causal=False"
    return f"{head}: it must equal plain softmax(q k^T / sqrt(head_dim)) v (compared in fp32, tolerance {cfg.atol:g})"


# --------------------------------------------------------------------------- running the student's code
def _request(student, case: Case, name: str, q, k, v, mask, rows, cfg: GpuConfig) -> dict:
    session = student.session
    ns = session.namespace_for(name)
    if ns is None:
        raise MissingName(f"{name} is not defined in your submission{session._load_hint()}")
    from .session import _decode, _encode  # noqa: PLC0415

    kwargs: dict = {}
    if case.mode == "padding":
        kwargs["mask"] = mask
    if case.mode == "causal":
        kwargs["causal"] = True
    if name == "chunked_attention":
        kwargs["chunk_size"] = cfg.chunk_size
    message = {"kind": "device_call", "ns": ns, "target": name, "args": _encode([q, k, v]),
               "kwargs": _encode(kwargs), "device": cfg.device, "rows": {"__tensor__": rows.clone()}}
    try:
        reply = session.request(message, name)
    except CheckFailure as exc:
        text = str(exc)
        if "ended the grading process" in text and cfg.device != "cpu":
            text = (f"{name} ended the grading process on the GPU machine (os._exit, a crash, or the host "
                    "ran out of memory)")
            raise CheckFailure(text) from None
        raise
    info = dict(reply["value"])
    if "rows" in info:
        info["rows"] = _decode(info["rows"], session.device)
    return info


def measure(student, case: Case, cfg: GpuConfig | None = None) -> Measurement:
    """Run one case (once per grading: the two checks of a case share it) and compare its rows."""
    cfg = cfg or CONFIG or GpuConfig()
    if case in MEASUREMENTS:
        return MEASUREMENTS[case]
    m = Measurement(case, budget=budget(cfg, case))
    MEASUREMENTS[case] = m
    q, k, v, mask = make_inputs(cfg, case.seq_len)
    rows = sample_rows(cfg, case.seq_len, case.mode)
    try:
        if cfg.warmup and case.seq_len > cfg.warmup:  # load kernels and handles outside the measurement
            w = cfg.warmup
            try:
                _request(student, case, case.function, q[..., :w, :], k[..., :w, :], v[..., :w, :], mask[:, :w],
                         rows[rows < w][:4], cfg)
            except StudentRaised:
                pass  # the measured call below raises it again, with the full-size inputs
        info = _request(student, case, case.function, q, k, v, mask, rows, cfg)
    except CheckFailure as exc:
        m.error = str(exc)
        return m
    m.peak_bytes, m.seconds, m.device_name = info.get("peak_bytes"), info.get("seconds"), info.get("device_name", "")
    if info.get("oom"):
        m.oom = info["oom"]
        m.error = oom_message(case, info["oom"], info.get("device_bytes", 0))
        return m
    want_shape = [cfg.batch, cfg.heads, case.seq_len, cfg.head_dim]
    if "shape" not in info:
        m.error = f"your {case.function} returned {info.get('type')}, not a torch.Tensor"
        return m
    if info["shape"] != want_shape:
        m.error = f"your {case.function} returned shape {info['shape']}, expected {want_shape} (the shape of q)"
        return m
    if info["dtype"] != cfg.dtype:
        m.error = (f"your {case.function} returned dtype {info['dtype']} for {cfg.dtype} inputs: keep the "
                   "inputs' dtype")
        return m
    if cfg.device != "cpu" and not str(info["device"]).startswith(cfg.device):
        m.error = f"your {case.function} returned a tensor on {info['device']}: keep it on the inputs' device"
        return m
    got = info.get("rows")
    if not isinstance(got, torch.Tensor):
        m.error = f"your {case.function}'s output could not be read back"
        return m
    want = reference_rows(q, k, v, rows, mask if case.mode == "padding" else None, case.mode == "causal")
    m.max_error = max_error(got.float(), want)
    m.correct = _close(got.float(), want, cfg)
    if not m.correct:
        m.mismatch = diagnose(cfg, case, got.float(), q, k, v, rows, mask)
    return m


def check_correct(student, case: Case) -> None:
    m = measure(student, case)
    if m.error:
        raise CheckFailure(m.error)
    if not m.correct:
        raise CheckFailure(m.mismatch or "the output is wrong")


def check_memory(student, case: Case) -> None:
    cfg = CONFIG or GpuConfig()
    m = measure(student, case)
    if m.error:
        raise CheckFailure(f"not measured: {m.error}" if not m.oom else m.error)
    if not m.correct:
        raise CheckFailure(f"memory earns points only for a correct output ({case.function}, "
                           f"{MODE_LABEL[case.mode]}, S={case.seq_len}, see the check above)")
    if m.peak_bytes is None or m.peak_bytes > m.budget:
        raise CheckFailure(memory_message(cfg, case, int(m.peak_bytes or 0), m.budget))


def measurement_notes(measurements) -> tuple[str, ...]:
    notes = []
    for m in measurements:
        if m.peak_bytes is None:
            continue
        where = f" on {m.device_name}" if m.device_name and m.device_name != "cpu" else ""
        ms = f", {m.seconds * 1000:.1f} ms" if m.seconds is not None else ""
        notes.append(f"{m.case.id}: {fmt_bytes(m.peak_bytes)} of extra device memory (budget {fmt_bytes(m.budget)})"
                     f"{ms}{where}" + (" [out of memory]" if m.oom else ""))
    return tuple(notes)


# --------------------------------------------------------------------------- the stage
def cuda_available() -> bool:
    return torch.cuda.is_available()


def not_run(reason: str = NO_CUDA) -> PartResult:
    return PartResult(id=PART_ID, max_score=GPU_PART.points, ran=False, notes=(reason,))


def gpu_limits(limits: Limits, device: str) -> Limits:
    """CUDA reserves far more address space than any RLIMIT_AS would allow: lift it for a GPU worker."""
    if device == "cpu":
        return limits
    return replace(limits, memory_bytes=resource.RLIM_INFINITY)


def torch_paths() -> tuple[str, ...]:
    """Where torch and its CUDA libraries live: read-only in a GPU worker even if outside the Python prefix."""
    import os  # noqa: PLC0415

    site = os.path.dirname(os.path.dirname(os.path.realpath(torch.__file__)))
    return (site,)


def grade_gpu(grader, extracted, config: GpuConfig | None = None) -> PartResult:
    """The GPU stage for one extracted submission; `config` is the CPU tests' hook (device="cpu", small S)."""
    global CONFIG
    from . import check  # noqa: PLC0415
    from .session import Session  # noqa: PLC0415

    cfg = config or GpuConfig()
    if cfg.device.startswith("cuda") and not cuda_available():
        return not_run()
    readable = [s for s in extracted.sources if s.error is None]
    if not readable:
        reason = "; ".join(s.error for s in extracted.sources if s.error) or "no code found"
        return PartResult(PART_ID, GPU_PART.points, (CheckResult("your submission can be read", False, 0.0,
                                                                 GPU_PART.points, reason),), (reason,))
    session = Session(grader.zygote, extracted.sources, gpu_limits(grader.limits, cfg.device), device=cfg.device)
    if cfg.device != "cpu":  # CUDA loads torch's libraries (libcudart, cuBLAS, ...) only now, in the worker
        session.config = replace(session.config, expose=tuple(dict.fromkeys(session.config.expose + torch_paths())))
    CONFIG = cfg
    MEASUREMENTS.clear()
    try:
        session.start()
        [part] = check.run_checks(session, [PART_ID])
        notes = part.notes + measurement_notes(MEASUREMENTS.values())
        if session.load_failure:
            notes = (session.load_failure,) + notes
        return replace(part, notes=tuple(dict.fromkeys(notes)))
    finally:
        session.close()
        CONFIG = None


def measurements_of_last_run() -> list[Measurement]:
    return list(MEASUREMENTS.values())


# --------------------------------------------------------------------------- a whole class, into nbgrader
@dataclass
class CourseResult:
    rows: list[dict] = field(default_factory=list)
    csv_path: Path | None = None
    recorded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def submissions(course_dir: Path, assignment: str = ASSIGNMENT) -> dict[str, Path]:
    """student id -> the folder of notebooks the student submitted (nbgrader's submitted/ layout)."""
    base = Path(course_dir) / "submitted"
    if not base.is_dir():
        return {}
    return {d.name: d / assignment for d in sorted(base.iterdir()) if (d / assignment).is_dir()}


def result_row(student_id: str, part: PartResult) -> dict:
    failed = [c.name for c in part.checks if not c.passed]
    return {"student_id": student_id, "ran": part.ran, "score": part.score if part.ran else "",
            "max_score": part.max_score, "failed_checks": " | ".join(failed), "notes": " | ".join(part.notes)}


def write_csv(rows: list[dict], path: Path) -> Path:
    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in CSV_FIELDS})
    return path


def read_csv(path: Path) -> list[dict]:
    with Path(path).open(newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [k for k in ("student_id", "ran", "score") if rows and k not in rows[0]]
    if missing:
        raise ValueError(f"{path} is not a {CSV_NAME} file: columns {missing} are missing")
    return rows


def record_in_gradebook(db_url: str, rows: list[dict], assignment: str = ASSIGNMENT) -> tuple[list[str], list[str]]:
    """Write each student's GPU score as the extra credit of their `long_sequence` grade.

    nbgrader has no place for a grade without a cell; the GPU stage is outside the 100
    points, which is what extra credit is: it adds to the assignment's score, not to its
    maximum. A row that did not run clears nothing and writes nothing. Returns (recorded,
    skipped with the reason).
    """
    from nbgrader.api import Gradebook, MissingEntry  # noqa: PLC0415 - nbformat is slow to import

    recorded, skipped = [], []
    with Gradebook(db_url) as gb:
        for row in rows:
            sid = str(row["student_id"])
            if str(row.get("ran")).lower() not in ("true", "1"):
                skipped.append(f"{sid}: the GPU stage did not run")
                continue
            try:
                grade = gb.find_grade(GRADE_CELL, GRADE_NOTEBOOK, assignment, sid)
            except MissingEntry:
                skipped.append(f"{sid}: no {assignment}/{GRADE_NOTEBOOK} submission in the gradebook "
                               "(run nbgrader autograde first)")
                continue
            if grade.auto_score is None and grade.manual_score is None:
                skipped.append(f"{sid}: {GRADE_NOTEBOOK} is not autograded yet (nbgrader counts extra credit "
                               "only on a graded cell)")
                continue
            grade.extra_credit = float(row["score"])
            recorded.append(sid)
        gb.db.commit()
    return recorded, skipped


def grade_course(course_dir, *, gradebook: str | None = None, csv_path=None, students=None, limits=None,
                 config: GpuConfig | None = None, assignment: str = ASSIGNMENT) -> CourseResult:
    """Grade every submitted notebook folder of a course on the GPU, write the CSV, update the gradebook."""
    from .extract import extract  # noqa: PLC0415
    from .grade import Grader  # noqa: PLC0415

    course_dir = Path(course_dir)
    found = submissions(course_dir, assignment)
    if students:
        found = {s: p for s, p in found.items() if s in set(students)}
    out = CourseResult()
    with Grader(limits) as grader:
        for sid, folder in found.items():
            try:
                part = grade_gpu(grader, extract(folder), config)
            except Exception as exc:  # noqa: BLE001 - one broken submission must not stop the class
                part = PartResult(PART_ID, GPU_PART.points, (CheckResult("your submission can be graded", False, 0.0,
                                                                         GPU_PART.points, str(exc)[:300]),))
            out.rows.append(result_row(sid, part))
    out.csv_path = write_csv(out.rows, Path(csv_path) if csv_path else course_dir / CSV_NAME)
    if gradebook:
        out.recorded, out.skipped = record_in_gradebook(gradebook, out.rows, assignment)
    return out


def default_gradebook(course_dir: Path) -> str | None:
    db = Path(course_dir) / "gradebook.db"
    return f"sqlite:///{db.resolve()}" if db.is_file() else None


def main_grade_gpu(args) -> int:
    """`python -m autograder grade-gpu COURSE_DIR`: see docs/gpu.md."""
    course_dir = Path(args.course_dir)
    if not course_dir.is_dir():
        print(f"error: {course_dir} is not a directory", file=sys.stderr)
        return 2
    gradebook = None if args.no_gradebook else (args.gradebook or default_gradebook(course_dir))
    if args.from_csv:
        if not gradebook:
            print(f"error: no gradebook: {course_dir}/gradebook.db does not exist (give --gradebook URL)",
                  file=sys.stderr)
            return 2
        recorded, skipped = record_in_gradebook(gradebook, read_csv(Path(args.from_csv)), args.assignment)
        _print_recorded(recorded, skipped)
        return 0
    if not cuda_available():
        print("error: no CUDA device on this machine (torch.cuda.is_available() is False): run grade-gpu on a GPU "
              "machine, then `grade-gpu COURSE_DIR --from-csv long_sequence_gpu.csv` where the gradebook is",
              file=sys.stderr)
        return 2
    found = submissions(course_dir, args.assignment)
    if not found:
        print(f"error: no submissions under {course_dir}/submitted/*/{args.assignment}", file=sys.stderr)
        return 2
    result = grade_course(course_dir, gradebook=gradebook, csv_path=args.csv, students=args.student or None,
                          assignment=args.assignment)
    for row in result.rows:
        state = f"{row['score']}/{row['max_score']}" if str(row["ran"]) == "True" else "not run"
        print(f"{row['student_id']}: {state}" + (f"  failed: {row['failed_checks']}" if row["failed_checks"] else ""))
    print(f"wrote {result.csv_path}")
    if gradebook:
        _print_recorded(result.recorded, result.skipped)
    return 0


def _print_recorded(recorded: list[str], skipped: list[str]) -> None:
    print(f"gradebook: extra credit of {GRADE_NOTEBOOK}/{GRADE_CELL} set for {len(recorded)} student(s)")
    for s in skipped:
        print(f"  skipped {s}")
