"""The GPU stage of one submission: the assignment's GPU part, graded in a worker that sees the device.

`python -m autograder grade SUBMISSION --gpu`, `grade-gpu` (course.py) and the device script
(scripts/device_check.py) all call `run`. The stage runs only where this trusted process sees
a CUDA device (`torch.cuda.is_available()`); elsewhere it is reported as not run, with the
reason, and never counted as passed. `GpuConfig(device="cpu", ...)` runs the same code on the
CPU at small sizes (the CPU test-suite and the device script's dry run).

Per case (config.py), the worker moves q, k, v to the device, runs the student's function
once on a short prefix (warm-up: kernel loading stays out of the figures), then once for
real, and sends back only the sampled rows of the output, the peak of extra device memory
(`torch.cuda.max_memory_allocated` after `reset_peak_memory_stats`, minus the inputs) and the
time (runtime.Worker.handle_device_call); the rows are compared with the exact ones
(reference.py). Memory earns its points only for a correct output. The checks
(autograder/checks/self_attention/test_long_sequence_gpu.py) get the run as the fixture
`gpu_run` and each case as the parameter `case`.
"""
from __future__ import annotations

import importlib.util
import os
import resource
import time
from dataclasses import dataclass, field, replace

import torch

from ...foundation import i18n, spec
from ...foundation.edition import Edition, resolve
from ...foundation.extract import Extracted
from ...foundation.failures import CheckFailure, StudentRaised
from ...foundation.limits import Limits
from ...sandbox.pool import Zygote
from ...foundation.results import PartResult
from ..scoring import CheckRecord, failure_message, score_part, unreadable
from ...sandbox.session import Session
from ...sandbox.student import Student
from .config import MODE_NAME, Case, GpuConfig, budget, cases, fmt_bytes, memory_message, oom_message
from .reference import Inputs, close_enough, diagnose, max_error, reference_rows, sample_rows

_ = i18n.message
NOT_RUN_WITHOUT_CUDA = _("not run: no CUDA device on this machine (torch.cuda.is_available() is False)")
NO_CUDA = NOT_RUN_WITHOUT_CUDA.msgid  # (in English)


@dataclass
class Measurement:
    """What one run of a student function on the device gave (one per Case)."""

    case: Case
    peak_bytes: int | None = None
    seconds: float | None = None
    budget: int = 0
    device_name: str = ""
    error: i18n.Message | str | None = None  # the student-facing reason the output could not be compared
    oom: str | None = None  # torch's own words
    max_error: float | None = None
    correct: bool = False
    mismatch: i18n.Message | None = None  # the student-facing reason the output is wrong


@dataclass
class StageRun:
    """One run of the stage on one submission: its configuration, its cases, what each case measured,
    and at the end the part's result. The checks get it as the fixture `gpu_run`."""

    config: GpuConfig
    cases: list[Case]
    inputs: Inputs = field(default_factory=Inputs)
    measurements: dict[Case, Measurement] = field(default_factory=dict)
    part: PartResult | None = None


# --------------------------------------------------------------------------- one case
def _device_call(cfg: GpuConfig, student: Student, case: Case, q, k, v, mask, rows) -> dict:
    kwargs: dict = {}
    if case.mode == "padding":
        kwargs["mask"] = mask
    if case.mode == "causal":
        kwargs["causal"] = True
    if case.function == "chunked_attention":
        kwargs["chunk_size"] = cfg.chunk_size
    try:
        return student.call_on_device(case.function, [q, k, v], kwargs, cfg.device, rows)
    except CheckFailure as exc:
        if "ended the grading process" in str(exc) and cfg.device != "cpu":
            raise CheckFailure(_("{function} ended the grading process on the GPU machine (os._exit, a crash, "
                                 "or the host ran out of memory)").format(function=case.function)) from None
        raise


def measure_case(run: StageRun, student: Student, case: Case) -> Measurement:
    """Run one case (once per run: the two checks of a case share it) and compare its rows."""
    if case in run.measurements:
        return run.measurements[case]
    cfg = run.config
    m = Measurement(case, budget=budget(cfg, case))
    run.measurements[case] = m
    q, k, v, mask = run.inputs.get(cfg, case.seq_len)
    rows = sample_rows(cfg, case.seq_len, case.mode)
    try:
        if cfg.warmup and case.seq_len > cfg.warmup:  # load kernels and handles outside the measurement
            w = cfg.warmup
            try:
                _device_call(cfg, student, case, q[..., :w, :], k[..., :w, :], v[..., :w, :], mask[:, :w],
                             rows[rows < w][:4])
            except StudentRaised:
                pass  # the measured call below raises it again, with the full-size inputs
        info = _device_call(cfg, student, case, q, k, v, mask, rows)
    except CheckFailure as exc:
        m.error = exc.message
        return m
    m.peak_bytes, m.seconds, m.device_name = info.get("peak_bytes"), info.get("seconds"), info.get("device_name", "")
    m.error = reply_problem(cfg, case, info)
    if info.get("oom"):
        m.oom = info["oom"]
    if m.error:
        return m
    got = info["rows"].float()
    want = reference_rows(q, k, v, rows, mask if case.mode == "padding" else None, case.mode == "causal")
    m.max_error = max_error(got, want)
    m.correct = close_enough(got, want, cfg)
    if not m.correct:
        m.mismatch = diagnose(cfg, case, got, q, k, v, rows, mask)
    return m


def reply_problem(cfg: GpuConfig, case: Case, info: dict) -> i18n.Message | None:
    """Why the reply of a device call cannot be compared with the reference, or None."""
    fn = case.function
    if info.get("oom"):
        return oom_message(case, info["oom"], info.get("device_bytes", 0))
    want_shape = [cfg.batch, cfg.heads, case.seq_len, cfg.head_dim]
    if "shape" not in info:
        return _("your {function} returned {kind}, not a torch.Tensor").format(function=fn, kind=info.get("type"))
    if info["shape"] != want_shape:
        return _("your {function} returned shape {shape}, expected {expected} (the shape of q)").format(
            function=fn, shape=info["shape"], expected=want_shape)
    if info["dtype"] != cfg.dtype:
        return _("your {function} returned dtype {dtype} for {expected} inputs: keep the inputs' dtype").format(
            function=fn, dtype=info["dtype"], expected=cfg.dtype)
    if cfg.device != "cpu" and not str(info["device"]).startswith(cfg.device):
        return _("your {function} returned a tensor on {device}: keep it on the inputs' device").format(
            function=fn, device=info["device"])
    if not isinstance(info.get("rows"), torch.Tensor):
        return _("your {function}'s output could not be read back").format(function=fn)
    return None


def check_correct(run: StageRun, student: Student, case: Case) -> None:
    m = measure_case(run, student, case)
    if m.error:
        raise CheckFailure(m.error)
    if not m.correct:
        raise CheckFailure(m.mismatch or _("the output is wrong"))


def check_memory(run: StageRun, student: Student, case: Case) -> None:
    m = measure_case(run, student, case)
    if m.error:
        raise CheckFailure(_("not measured: {reason}").format(reason=m.error) if not m.oom else m.error)
    if not m.correct:
        raise CheckFailure(_("memory earns points only for a correct output ({function}, {mode}, S={seq_len}, see "
                             "the check above)").format(function=case.function, mode=MODE_NAME[case.mode],
                                                        seq_len=case.seq_len))
    if m.peak_bytes is None or m.peak_bytes > m.budget:
        raise CheckFailure(memory_message(run.config, case, int(m.peak_bytes or 0), m.budget))


def measurement_note(m: Measurement) -> i18n.Message:
    """The figures of one measured case: its peak of extra device memory, its budget, its time, the device."""
    return _("{function}, {mode}, S={seq_len}: {peak} of extra device memory (budget {budget}){time}{device}"
             "{oom}").format(
        function=m.case.function, mode=MODE_NAME[m.case.mode], seq_len=m.case.seq_len, peak=fmt_bytes(m.peak_bytes),
        budget=fmt_bytes(m.budget),
        time=_(", {ms:.1f} ms").format(ms=m.seconds * 1000) if m.seconds is not None else "",
        device=_(" on {device}").format(device=m.device_name) if m.device_name and m.device_name != "cpu" else "",
        oom=_(" [out of memory]") if m.oom else "")


def measurement_notes(measurements, lang: str = spec.DEFAULT_LANGUAGE) -> tuple[str, ...]:
    """The figures of every measured case, in `lang`."""
    return tuple(measurement_note(m).render(lang) for m in measurements if m.peak_bytes is not None)


# --------------------------------------------------------------------------- the stage
def cuda_available() -> bool:
    return torch.cuda.is_available()


def not_run(part: spec.Part, reason: str = NO_CUDA) -> PartResult:
    return PartResult(id=part.id, max_score=part.points, ran=False, notes=(reason,))


def gpu_limits(limits: Limits, device: str) -> Limits:
    """CUDA reserves far more address space than any RLIMIT_AS would allow: lift it for a GPU worker."""
    if device == "cpu":
        return limits
    return replace(limits, memory_bytes=resource.RLIM_INFINITY)


def torch_paths() -> tuple[str, ...]:
    """Where torch and its CUDA libraries live: read-only in a GPU worker even if outside the Python prefix."""
    site = os.path.dirname(os.path.dirname(os.path.realpath(torch.__file__)))
    return (site,)


def run(zygote: Zygote, limits: Limits, extracted: Extracted, edition: Edition | None = None,
        config: GpuConfig | None = None, inputs: Inputs | None = None) -> StageRun:
    """The GPU stage for one extracted submission of `edition` (default: the default assignment's English
    one), its messages in the edition's language; the result is the returned run's `part`.
    `config` defaults to the graded sizes on CUDA; `inputs` may be shared by the runs of a course."""
    edition = edition or resolve()
    part, lang = edition.assignment.gpu_part, edition.lang
    cfg = config or GpuConfig()
    stage = StageRun(cfg, cases(cfg, part.names), inputs or Inputs())
    if cfg.device.startswith("cuda") and not cuda_available():
        stage.part = not_run(part, NOT_RUN_WITHOUT_CUDA.render(lang))
        return stage
    if not any(s.error is None for s in extracted.sources):
        [stage.part] = unreadable(extracted, [part], lang)
        return stage
    session = Session(zygote, extracted.sources, gpu_limits(limits, cfg.device), edition.assignment,
                      device=cfg.device)
    if cfg.device != "cpu":  # CUDA loads torch's libraries (libcudart, cuBLAS, ...) only now, in the worker
        session.config = replace(session.config, expose=tuple(dict.fromkeys(session.config.expose + torch_paths())))
    try:
        session.start()
        result = _run_checks(session, part, stage, lang)
        notes = result.notes + measurement_notes(stage.measurements.values(), lang)
        if session.load_failure:
            notes = (i18n.render(session.load_failure, lang),) + notes
        stage.part = replace(result, notes=tuple(dict.fromkeys(notes)))
    finally:
        session.close()
    return stage


def _run_checks(session: Session, part: spec.Part, stage: StageRun, lang: str) -> PartResult:
    """The part's checks through pytest, as graded; on a device machine without pytest, directly. In `lang`."""
    if importlib.util.find_spec("pytest") is None:
        return _run_without_pytest(session, part, stage, lang)
    from .. import check  # noqa: PLC0415 - check imports pytest, which a device machine may lack

    [result] = check.run_checks(session, [part], fixtures={"gpu_run": stage}, params={"case": stage.cases},
                                lang=lang)
    return result


def _run_without_pytest(session: Session, part: spec.Part, stage: StageRun, lang: str) -> PartResult:
    """What check.run_checks does for this part, for a check file that needs no pytest: each test_*
    function over each case, in file order, named by its docstring, weight 1."""
    module_spec = importlib.util.spec_from_file_location("autograder_gpu_checks", session.assignment.check_file(part))
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    tests = [f for name, f in vars(module).items() if name.startswith("test_") and callable(f)]
    student, records, started = Student(session), [], time.perf_counter()
    session.enter_part(part.id)
    for test in tests:
        name = test.__doc__.strip().splitlines()[0].strip()
        for case in stage.cases:
            try:
                test(student=student, case=case, gpu_run=stage)
                records.append(CheckRecord(f"{name} [{case.id}]", 1.0, True, ""))
            except Exception as exc:  # noqa: BLE001 - as pytest would: any failure is the check's failure
                records.append(CheckRecord(f"{name} [{case.id}]", 1.0, False, failure_message(exc, lang)))
    return score_part(part, records, session, time.perf_counter() - started, lang)
