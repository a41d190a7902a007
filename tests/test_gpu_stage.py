"""The GPU stage (part long_sequence_gpu), tested on the CPU.

What needs no device is tested for real: the not-run report, the budgets and their
messages, the sampled-row comparison and its diagnoses, the worker's device_call request
(driven with GpuConfig(device="cpu") at small sizes: the same checks, the same worker code,
memory from the live-tensor meter instead of torch.cuda), the gradebook write and the
grade-gpu command. What needs a GPU waits for scripts/device_check.sh (docs/gpu.md).
"""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from autograder.foundation import edition
from autograder.commands import gradebook
from autograder.commands.document import to_json
from autograder.foundation.extract import extract
from autograder.grading.gpu import config as gpu_config, reference as gpu_reference, stage as gpu_stage
from autograder.commands import gpucourse as gpu_course
from autograder.grading.gpu.known_submissions import write_variants
from autograder.foundation.results import PartResult
from autograder.foundation.spec import ASSIGNMENT, GPU_PART, NOTEBOOKS, PARTS, SELF_ATTENTION

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
# Small enough for a CPU, shaped like the real thing: chunk_size < S, head_dim < chunk_size.
SMALL = gpu_config.GpuConfig(device="cpu", seq_lens=(256,), heads=2, head_dim=16, dtype="float32", chunk_size=32,
                      rows=16, warmup=64)
GIB, MIB = 2**30, 2**20

# The figures of the issue (one H200, torch 2.11, B=1, H=16, head_dim=64, fp16, S=32768): not measured by us.
ISSUE_PLAIN_PEAK = 64 * GIB
ISSUE_SDPA_PEAK = 64 * MIB
ISSUE_CHUNKED_PEAK = int(3.1 * GIB)



@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    return write_variants(tmp_path_factory.mktemp("gpu_variants"))


def grade_small(grader, path) -> PartResult:
    return gpu_stage.run(grader.zygote, grader.limits, extract(path), config=SMALL).part


def failed(part: PartResult) -> dict[str, str]:
    return {c.name: c.message for c in part.checks if not c.passed}


# --------------------------------------------------------------------------- no device
def test_without_cuda_grade_reports_the_gpu_part_not_run_with_the_reason_outside_the_score(grader, monkeypatch,
                                                                                              tmp_path):
    monkeypatch.setattr(gpu_stage, "cuda_available", lambda: False)
    sub = tmp_path / "sub.py"
    sub.write_text(Path(REPO / "solutions" / "attention.py").read_text())
    part_ids = ["qkv_projection"]  # any CPU part: the claim is about the GPU part next to it
    result = grader.grade(sub, gpu=True, part_ids=part_ids)
    doc = json.loads(json.dumps(to_json(result)))
    ids = [p["id"] for p in doc["parts"]]
    assert ids == part_ids + [GPU_PART.id]
    gpu_doc = doc["parts"][-1]
    assert gpu_doc["ran"] is False and gpu_doc["score"] == 0 and gpu_doc["checks"] == []
    assert gpu_doc["notes"] == [gpu_stage.NO_CUDA] and "torch.cuda.is_available() is False" in gpu_stage.NO_CUDA
    assert gpu_doc["max_score"] == GPU_PART.points
    cpu_points = sum(p.points for p in PARTS if p.id in part_ids)
    assert doc["max_score"] == cpu_points  # the GPU part is outside max_score ...
    assert doc["score"] == sum(p["score"] for p in doc["parts"][:-1])  # ... and outside score
    assert not result.gpu.passed


def test_without_cuda_grade_gpu_command_refuses_with_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpu_stage, "cuda_available", lambda: False)
    assert gpu_course.main(str(tmp_path), edition.resolve(SELF_ATTENTION.id)) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "--from-csv" in err


def test_cli_parser_knows_grade_gpu_and_its_options():
    from autograder.commands.cli import build_parser

    args = build_parser().parse_args(["grade-gpu", "course", "--from-csv", "x.csv", "--student", "a",
                                      "--student", "b", "--no-gradebook"])
    assert args.course_dir == "course" and args.from_csv == "x.csv" and args.student == ["a", "b"]
    assert args.no_gradebook and args.assignment == ASSIGNMENT


def test_worker_code_does_not_initialise_cuda_before_fork():
    """The zygote forks workers: CUDA must be initialised in a worker, never in the zygote or at import."""
    code = textwrap.dedent("""
        import socket, torch, torch.cuda
        def refuse(*a, **k):
            raise SystemExit("CUDA initialised: " + repr(a))
        torch.cuda._lazy_init = refuse
        torch._C._cuda_init = refuse
        from autograder.worker import zygote, runtime, standins, meter, sandbox  # noqa: F401
        a, b = socket.socketpair()
        runtime.Worker(a)
        print("clean", torch.cuda.is_initialized())
    """)
    out = subprocess.run([PY, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "clean False"


# --------------------------------------------------------------------------- figures and messages
def test_budgets_at_the_graded_size_pass_the_issue_reference_figures_and_fail_plain_attention():
    cfg = gpu_config.GpuConfig()
    assert (cfg.batch, cfg.heads, cfg.head_dim, cfg.dtype, cfg.seq_lens) == (1, 16, 64, "float16", (32768,))
    S = 32768
    assert gpu_config.output_bytes(cfg, S) == 64 * MIB
    assert gpu_config.matrix_bytes(cfg, S) == 32 * GIB  # plain attention holds two: the issue's 64 GiB
    assert gpu_config.sdpa_budget(cfg, S) == 256 * MIB
    assert gpu_config.chunk_budget(cfg, S) == 8 * GIB + 256 * MIB  # 8 blocks of [1, 16, 1024, 32768] fp16 + 4 outputs
    assert ISSUE_SDPA_PEAK * 4 <= gpu_config.sdpa_budget(cfg, S)  # room: 4x
    assert ISSUE_CHUNKED_PEAK * 2 <= gpu_config.chunk_budget(cfg, S)  # room: 2x
    assert ISSUE_PLAIN_PEAK >= 200 * gpu_config.sdpa_budget(cfg, S)  # plain misses by orders of magnitude
    assert ISSUE_PLAIN_PEAK >= 7 * gpu_config.chunk_budget(cfg, S)


def test_budgets_scale_with_the_sizes_they_name():
    cfg = gpu_config.GpuConfig(batch=2, heads=4, head_dim=32, dtype="float32", chunk_size=128)
    S = 1000
    out = 2 * 4 * S * 32 * 4
    assert gpu_config.sdpa_budget(cfg, S) == 4 * out
    assert gpu_config.chunk_budget(cfg, S) == 8 * (128 * S * 4 * 2 * 4) + 4 * out
    assert gpu_config.chunk_budget(cfg, 100) == 8 * (100 * 100 * 4 * 2 * 4) + 4 * (2 * 4 * 100 * 32 * 4)  # chunk > S


def test_memory_message_names_the_peak_the_budget_and_the_fix():
    cfg = gpu_config.GpuConfig()
    case = gpu_config.Case("sdpa_attention", "padding", 32768)
    msg = str(gpu_config.memory_message(cfg, case, ISSUE_PLAIN_PEAK, gpu_config.budget(cfg, case)))
    assert msg.startswith("your sdpa_attention peaked at 64.0 GiB of extra device memory")
    assert "the budget is 256 MiB" in msg and "one S x S score matrix alone is 32.0 GiB" in msg
    assert msg.endswith("it must not build the S x S matrix (pass the mask to F.scaled_dot_product_attention "
                        "instead of masking scores yourself)")
    causal = str(gpu_config.memory_message(cfg, gpu_config.Case("sdpa_attention", "causal", 32768), ISSUE_PLAIN_PEAK,
                                           256 * MIB))
    assert "is_causal=True" in causal
    case = gpu_config.Case("chunked_attention", "none", 32768)
    msg = str(gpu_config.memory_message(cfg, case, ISSUE_PLAIN_PEAK, gpu_config.budget(cfg, case)))
    assert "the budget is 8.2 GiB (8 x chunk_size x S x heads x batch x 2 bytes with chunk_size=1024" in msg
    assert "one block of chunk_size queries at a time" in msg


def test_fmt_bytes_reads_like_the_figures():
    assert [gpu_config.fmt_bytes(n) for n in (64 * GIB, int(3.1 * GIB), 256 * MIB, 64 * MIB, 3 * MIB // 2, 2048, 12)] == \
        ["64.0 GiB", "3.1 GiB", "256 MiB", "64 MiB", "1.5 MiB", "2.0 KiB", "12 B"]


def test_oom_message_says_out_of_memory_and_how_to_avoid_it():
    msg = str(gpu_config.oom_message(gpu_config.Case("chunked_attention", "causal", 32768), "CUDA out of memory",
                                     141 * GIB))
    assert "ran out of device memory (141.0 GiB on this GPU) at S=32768 (causal)" in msg
    assert "one block of chunk_size queries" in msg and "[CUDA out of memory]" in msg


# --------------------------------------------------------------------------- sampled rows
def test_sampled_rows_are_sorted_distinct_and_padding_mode_samples_only_real_queries():
    cfg = gpu_config.GpuConfig(rows=64)
    for mode in gpu_config.MODES:
        rows = gpu_reference.sample_rows(cfg, 32768, mode).tolist()
        assert rows == sorted(set(rows)) and len(rows) == 64 and rows[0] == 0
        top = gpu_reference.real_length(cfg, 32768) if mode == "padding" else 32768
        assert rows[-1] == top - 1 and all(0 <= r < top for r in rows)


def test_reference_rows_equal_the_reference_solution_on_those_rows():
    import solutions as ref

    cfg = gpu_config.GpuConfig(seq_lens=(64,), heads=2, head_dim=8, dtype="float32", rows=10)
    q, k, v, mask = gpu_reference.make_inputs(cfg, 64)
    for mode in gpu_config.MODES:
        rows = gpu_reference.sample_rows(cfg, 64, mode)
        kw = {"mask": mask} if mode == "padding" else {"causal": mode == "causal"}
        full = ref.chunked_attention(q, k, v, chunk_size=16, **kw)
        got = gpu_reference.reference_rows(q, k, v, rows, mask if mode == "padding" else None, mode == "causal")
        torch.testing.assert_close(got, full.index_select(-2, rows), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mistake, mode, expected", [
    ("inverted", "padding", "True = may attend"),
    ("no_mask", "padding", "ignores the padding mask"),
    ("no_causal", "causal", "ignores causal=True"),
    ("anti_causal", "causal", "wrong way round"),
    ("causal_anyway", "none", "applies a causal mask although causal=False"),
    ("noise", "none", "it must equal plain softmax"),
])
def test_diagnose_names_the_mistake_that_fits_the_rows(mistake, mode, expected):
    cfg = gpu_config.GpuConfig(seq_lens=(128,), heads=2, head_dim=8, dtype="float32", rows=16)
    q, k, v, mask = gpu_reference.make_inputs(cfg, 128)
    rows = gpu_reference.sample_rows(cfg, 128, mode)
    got = {
        "inverted": lambda: gpu_reference.reference_rows(q, k, v, rows, ~mask),
        "no_mask": lambda: gpu_reference.reference_rows(q, k, v, rows),
        "no_causal": lambda: gpu_reference.reference_rows(q, k, v, rows),
        "anti_causal": lambda: gpu_reference.reference_rows(q.flip(-2), k.flip(-2), v.flip(-2), 127 - rows, None, True),
        "causal_anyway": lambda: gpu_reference.reference_rows(q, k, v, rows, None, True),
        "noise": lambda: gpu_reference.reference_rows(q, k, v, rows) + 0.5,
    }[mistake]()
    case = gpu_config.Case("sdpa_attention", mode, 128)
    right = gpu_reference.reference_rows(q, k, v, rows, mask if mode == "padding" else None, mode == "causal")
    assert not gpu_reference.close_enough(got, right, cfg)  # the mistake is visible at these inputs
    msg = str(gpu_reference.diagnose(cfg, case, got, q, k, v, rows, mask))
    assert expected in msg and msg.startswith(f"your sdpa_attention ({gpu_config.MODE_LABEL[mode]}, S=128) ")


def test_fp16_rounding_of_a_correct_output_stays_within_tolerance():
    cfg = gpu_config.GpuConfig(seq_lens=(512,), heads=2, rows=32)
    q, k, v, mask = gpu_reference.make_inputs(cfg, 512)  # fp16 inputs, as graded
    for mode in gpu_config.MODES:
        rows = gpu_reference.sample_rows(cfg, 512, mode)
        want = gpu_reference.reference_rows(q, k, v, rows, mask if mode == "padding" else None, mode == "causal")
        assert gpu_reference.close_enough(want.half().float(), want, cfg)
        assert gpu_reference.max_error(want.half().float(), want) < cfg.atol / 4


# --------------------------------------------------------------------------- the stage, end to end on the CPU
def test_reference_solution_earns_every_gpu_point(grader, variants):
    part = grade_small(grader, variants["reference"])
    assert part.ran and failed(part) == {}
    assert part.score == GPU_PART.points
    assert len(part.checks) == 2 * len(gpu_config.cases(SMALL))
    assert any("of extra device memory (budget" in n for n in part.notes)


def test_full_matrix_is_correct_but_fails_every_memory_check_with_the_figures(grader, variants):
    part = grade_small(grader, variants["full_matrix"])
    bad = failed(part)
    assert len(bad) == len(gpu_config.cases(SMALL)) and all("peak extra device memory" in n for n in bad)
    for msg in bad.values():
        assert "of extra device memory" in msg and "the budget is" in msg
        assert "must not build the S x S matrix" in msg or "never hold the whole S x S matrix" in msg
    assert part.score == pytest.approx(GPU_PART.points / 2)


def test_inverted_mask_fails_the_padding_cases_naming_the_mask_convention(grader, variants):
    part = grade_small(grader, variants["inverted_mask"])
    bad = failed(part)
    assert set(bad) == {f"{check} [{fn}, padding mask, S=256]" for fn in gpu_config.FUNCTIONS for check in (
        "the output equals exact attention on sampled query rows", "peak extra device memory stays within the budget")}
    sdpa = bad["the output equals exact attention on sampled query rows [sdpa_attention, padding mask, S=256]"]
    assert "True = may attend" in sdpa and "key_padding_mask" in sdpa
    assert "only for a correct output" in bad["peak extra device memory stays within the budget "
                                              "[sdpa_attention, padding mask, S=256]"]


def test_without_pytest_the_stage_grades_the_same_checks_with_the_same_points_and_messages(grader, variants,
                                                                                            monkeypatch):
    """A device machine may lack pytest (scripts/device_check.sh): the stage then calls the checks itself."""
    graded = grade_small(grader, variants["inverted_mask"])
    find_spec = gpu_stage.importlib.util.find_spec
    monkeypatch.setattr(gpu_stage.importlib.util, "find_spec", lambda name, *a: None if name == "pytest" else
                        find_spec(name, *a))
    direct = grade_small(grader, variants["inverted_mask"])
    assert [(c.name, c.passed, c.points, c.message) for c in direct.checks] == \
        [(c.name, c.passed, c.points, c.message) for c in graded.checks]
    assert direct.score == graded.score < GPU_PART.points


def test_out_of_memory_in_one_case_fails_that_case_with_a_clear_message_and_grading_goes_on(grader, tmp_path):
    sub = tmp_path / "oom.py"
    sub.write_text(Path(REPO / "solutions" / "attention.py").read_text() + textwrap.dedent('''

        _sdpa = sdpa_attention

        def sdpa_attention(q, k, v, mask=None, causal=False):
            if mask is not None and q.shape[-2] > 64:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")
            return _sdpa(q, k, v, mask, causal)
    '''))
    part = grade_small(grader, sub)
    bad = failed(part)
    assert len(bad) == 2 and all("sdpa_attention, padding mask" in n for n in bad)
    for msg in bad.values():
        assert msg.startswith("your sdpa_attention ran out of device memory at S=256 (padding mask)")
        assert "Tried to allocate 64.00 GiB" in msg
    assert part.score == pytest.approx(GPU_PART.points * (len(part.checks) - 2) / len(part.checks), abs=1e-3)


def test_missing_functions_fail_with_their_names(grader, tmp_path):
    sub = tmp_path / "nothing.py"
    sub.write_text("def helper():\n    return 1\n")
    part = grade_small(grader, sub)
    assert part.score == 0 and part.checks
    assert all("is not defined in your submission" in c.message or "not measured" in c.message for c in part.checks)
    assert any("chunked_attention is not defined" in c.message for c in part.checks)


# --------------------------------------------------------------------------- into nbgrader's gradebook
@pytest.fixture(scope="module")
def gradebook_template(tmp_path_factory):
    """A gradebook with the assignment's cells and four students: alice, bob, eve autograded; dora not.

    Built once, then copied for each test that writes to it. nbgrader stamps a new database
    with the schema version by running the `alembic` command (seconds, and it must be on PATH);
    the stamp is not what is tested here, so the fixture gives a fixed one.
    """
    import nbgrader.api
    from nbgrader.api import Gradebook

    path = tmp_path_factory.mktemp("gradebook") / "gradebook.db"
    mp = pytest.MonkeyPatch()
    mp.setattr(nbgrader.api, "get_alembic_version", lambda: "test-fixture")
    try:
        # nbgrader's own add_submission triggers SQLAlchemy autoflush warnings (as in gradebook.opened)
        with warnings.catch_warnings(), Gradebook(f"sqlite:///{path}") as gb:
            warnings.filterwarnings("ignore", message=".*not in session.*")
            gb.add_assignment(ASSIGNMENT)
            for nb in NOTEBOOKS:
                gb.add_notebook(nb, ASSIGNMENT)
            for part in PARTS:
                gb.add_grade_cell(part.id, part.notebook, ASSIGNMENT, max_score=part.points, cell_type="code")
            for sid in ("alice", "bob", "dora", "eve"):
                gb.add_student(sid)
                gb.add_submission(ASSIGNMENT, sid)
                if sid != "dora":
                    for part in PARTS:
                        gb.find_grade(part.id, part.notebook, ASSIGNMENT, sid).auto_score = part.points / 2
            gb.db.commit()
    finally:
        mp.undo()
    return path


def _gradebook(template: Path, folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(template, folder / "gradebook.db")
    return f"sqlite:///{folder / 'gradebook.db'}"


def test_gradebook_gets_the_gpu_score_as_extra_credit_of_long_sequence(tmp_path, gradebook_template):
    from nbgrader.api import Gradebook

    cell, notebook = gpu_course.credited_cell(SELF_ATTENTION)
    assert (cell, notebook) in {(p.id, p.notebook) for p in PARTS}
    url = _gradebook(gradebook_template, tmp_path)
    rows = [gpu_course.result_row("alice", PartResult(GPU_PART.id, GPU_PART.points, (), ())),
            gpu_course.result_row("bob", gpu_stage.not_run(GPU_PART)),
            {"student_id": "carol", "ran": "True", "score": "3", "max_score": "10"},
            {"student_id": "dora", "ran": "True", "score": "4", "max_score": "10"}]
    rows[0]["score"] = 7.5
    path = gpu_course.write_csv(rows, tmp_path / gpu_course.csv_name(SELF_ATTENTION))
    back = gpu_course.read_csv(path)
    assert [r["student_id"] for r in back] == ["alice", "bob", "carol", "dora"] and back[1]["ran"] == "False"
    recorded, skipped = gpu_course.record_in_gradebook(gradebook.Location(url, "default_course"), back)
    assert recorded == ["alice"]
    assert any(s.startswith("bob: the GPU stage did not run") for s in skipped)
    assert any(s.startswith("carol: no self_attention") for s in skipped)
    assert any(s.startswith("dora:") and "not autograded" in s for s in skipped)
    with Gradebook(url) as gb:
        grade = gb.find_grade(cell, notebook, ASSIGNMENT, "alice")
        assert grade.extra_credit == 7.5
        sub = gb.find_submission(ASSIGNMENT, "alice")
        cpu_max = sum(p.points for p in PARTS)
        assert sub.max_score == cpu_max  # extra credit: outside the maximum
        assert sub.score == pytest.approx(cpu_max / 2 + 7.5)
        assert gb.find_grade(cell, notebook, ASSIGNMENT, "bob").extra_credit is None


def test_grade_course_grades_each_submitted_folder_writes_the_csv_and_the_gradebook(tmp_path, grader,
                                                                                     gradebook_template):
    course = tmp_path / "course"
    code = Path(REPO / "solutions" / "attention.py").read_text()
    for sid, source in (("alice", code), ("bob", "def nothing():\n    pass\n")):
        folder = course / "submitted" / sid / ASSIGNMENT
        folder.mkdir(parents=True)
        nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
                         "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        (folder / "05_long_sequence.ipynb").write_text(json.dumps(nb))
    url = _gradebook(gradebook_template, course)
    result = gpu_course.grade_course(course, location=gradebook.Location(url, "default_course"), config=SMALL,
                                     zygote=grader.zygote)  # reuse the warm zygote
    with open(result.csv_path, newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert result.csv_path == course / gpu_course.csv_name(SELF_ATTENTION)
    assert float(rows["alice"]["score"]) == GPU_PART.points and rows["alice"]["failed_checks"] == ""
    assert float(rows["bob"]["score"]) == 0 and "exact attention" in rows["bob"]["failed_checks"]
    assert sorted(result.recorded) == ["alice", "bob"]


def test_a_cuda_session_exposes_dev_and_torch_and_lifts_the_address_space_limit(grader, monkeypatch, variants):
    """CUDA needs /dev/nvidia*, torch's lazily loaded CUDA libraries and far more address space than RLIMIT_AS allows."""
    import resource

    seen = {}

    class Stop(Exception):
        pass

    class FakeSession(gpu_stage.Session):
        def start(self):
            seen["config"], seen["device"] = self.config, self.device
            raise Stop

    monkeypatch.setattr(gpu_stage, "cuda_available", lambda: True)
    monkeypatch.setattr(gpu_stage, "Session", FakeSession)
    with pytest.raises(Stop):
        gpu_stage.run(grader.zygote, grader.limits, extract(variants["reference"]))
    cfg = seen["config"]
    assert seen["device"] == "cuda" and "/dev" in cfg.expose and gpu_stage.torch_paths()[0] in cfg.expose
    assert cfg.memory_bytes == resource.RLIM_INFINITY


# ------------------------------------------------------------------ the prepared device script
def test_device_check_script_dry_run_on_cpu_meets_every_expectation(tmp_path):
    """scripts/device_check.py, the device run's script, runs its whole code path on the CPU at S = 256
    (DEVICE_CHECK_DEVICE=cpu): the reference passes, the full matrix and the inverted mask fail as expected."""
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "DEVICE_CHECK_DEVICE": "cpu", "DEVICE_CHECK_SEQ_LENS": "256"}
    proc = subprocess.run([PY, "scripts/device_check.py"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = (tmp_path / "device_check.md").read_text()
    assert "DRY RUN on the CPU" in table
    assert table.count("- PASS:") == 5 + 3 and "- FAIL:" not in table, table  # the GPU stage's, the efficient rows'
    rows = json.loads((tmp_path / "device_check.json").read_text())["rows"]
    stage_rows = [r for r in rows if not r["submission"].startswith("efficient")]
    assert len(stage_rows) == 3 * 2 * 3  # submissions x functions x modes, at one S
    assert {r["submission"] for r in stage_rows} == {"reference", "full_matrix", "inverted_mask"}
    assert len(rows) - len(stage_rows) == 2 * 3  # efficient: reference and dense x (flash twice, sliding window)


def test_device_check_dry_run_of_the_efficient_rows_checks_flash_and_sliding_window_at_long_s(tmp_path):
    """DEVICE_CHECK_PARTS=efficient: the reference flash_attention (its out and lse) and sliding_window_attention
    are right and within their budgets, and the dense S x S baseline misses every budget."""
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "DEVICE_CHECK_DEVICE": "cpu", "DEVICE_CHECK_SEQ_LENS": "256",
           "DEVICE_CHECK_PARTS": "efficient"}
    proc = subprocess.run([PY, "scripts/device_check.py"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = (tmp_path / "device_check.md").read_text()
    assert table.count("- PASS:") == 3 and "- FAIL:" not in table, table
    assert "| efficient reference | flash_attention | causal | 256 |" in table
    assert "| efficient reference | sliding_window_attention | window=48 | 256 |" in table
    rows = json.loads((tmp_path / "device_check.json").read_text())["rows"]
    mine = [r for r in rows if r["submission"] == "efficient reference"]
    dense = [r for r in rows if r["submission"] == "efficient dense"]
    assert [(r["function"], r["mode"]) for r in mine] == [("flash_attention", "none"), ("flash_attention", "causal"),
                                                          ("sliding_window_attention", "window=48")]
    assert all(r["correct"] and r["peak_bytes"] <= r["budget_bytes"] for r in mine)
    assert all(r["lse_error"] < 1e-4 for r in mine if r["function"] == "flash_attention")
    assert all(r["correct"] and r["peak_bytes"] > 2 * r["budget_bytes"] for r in dense)


def test_device_check_efficient_expectations_fail_on_a_wrong_output_or_a_peak_over_budget():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import device_check_efficient as efficient
    finally:
        sys.path.remove(str(REPO / "scripts"))

    def row(submission, function, correct=True, peak=1):
        return {"submission": submission, "function": function, "S": 256, "correct": correct, "peak_bytes": peak,
                "budget_bytes": 10, "oom": None}

    def table(**change):
        mine = [row("efficient reference", f) for f in ("flash_attention", "flash_attention", "sliding_window_attention")]
        mine[-1].update(change)
        dense = [row("efficient dense", f, peak=100) for f in ("flash_attention", "flash_attention",
                                                                "sliding_window_attention")]
        return [ok for ok, _ in efficient.expectations(mine + dense, 256)]

    assert table() == [True, True, True]
    assert table(correct=False) == [False, True, True]
    assert table(peak_bytes=11) == [True, False, True]


def test_device_check_shell_script_stops_with_a_clear_result_without_cuda(tmp_path):
    """scripts/device_check.sh on a machine without CUDA says so in one RESULT line and exits 4."""
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "PYTHON": PY, "CUDA_VISIBLE_DEVICES": ""}  # no device
    proc = subprocess.run(["bash", "scripts/device_check.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "RESULT: torch.cuda.is_available() is False" in proc.stdout
    assert "RESULT:" in (tmp_path / "device_check.log").read_text()
