"""The GPU stage's messages in every course language, without a GPU: a stand-in student replies as a device
would (what the worker sends back from torch.cuda), so the stage's own code makes each message it can make:
a crash, out of memory, a wrong type, shape, dtype or device, each usual mistake of a wrong output, a peak over
the budget, and the figures of the notes. In English each reads exactly as before the grader spoke Chinese."""
from __future__ import annotations

import re

import pytest

from autograder.foundation.failures import CheckFailure, student_error
from autograder.grading.gpu import config as gpu_config, reference as gpu_reference, stage as gpu_stage
from autograder.grading.scoring import failure_message

CHINESE = re.compile(r"[\u4e00-\u9fff]")
GIB, MIB = 2**30, 2**20
S = 128
CFG = gpu_config.GpuConfig(device="cuda", seq_lens=(S,), heads=2, head_dim=8, dtype="float32", rows=16, warmup=0)
SHAPE = [CFG.batch, CFG.heads, S, CFG.head_dim]
OUT_OF_MEMORY = "CUDA error: out of memory"  # torch's own words, quoted as they are
# What may stay in Latin letters in a Chinese message: code (names, arguments, values, units), the device's name.
CODE = {"sdpa_attention", "chunked_attention", "chunk_size", "heads", "batch", "F", "scaled_dot_product_attention",
        "is_causal", "True", "False", "None", "causal", "mask", "attn_mask", "key_padding_mask", "nn",
        "MultiheadAttention", "softmax", "sqrt", "head_dim", "T", "inf", "NaN", "torch", "Tensor", "list", "float64",
        "float32", "fp32", "cpu", "GPU", "NVIDIA", "H200", "GiB", "MiB", "KiB", "ms", "token", "os", "_exit",
        "ValueError", "bad", "value", "q", "k", "v", "i", "j", "x", "S"}


class DeviceStandIn:
    """The student handle's call_on_device, answered with `reply(kwargs, rows)` instead of a device's reply."""

    def __init__(self, reply):
        self.reply = reply

    def call_on_device(self, name, args, kwargs, device, rows):
        return self.reply(kwargs, rows)


WRONG_ROWS = {  # a usual mistake: the rows it gives, from (q, k, v, mask, rows)
    "inverted mask": lambda q, k, v, mask, rows: gpu_reference.reference_rows(q, k, v, rows, ~mask),
    "no mask": lambda q, k, v, mask, rows: gpu_reference.reference_rows(q, k, v, rows),
    "anti-causal": lambda q, k, v, mask, rows: gpu_reference.reference_rows(
        q.flip(-2), k.flip(-2), v.flip(-2), S - 1 - rows, None, True),
    "causal": lambda q, k, v, mask, rows: gpu_reference.reference_rows(q, k, v, rows, None, True),
    "noise": lambda q, k, v, mask, rows: gpu_reference.reference_rows(q, k, v, rows) + 0.5,
    "nan": lambda q, k, v, mask, rows: gpu_reference.reference_rows(q, k, v, rows) * float("nan"),
}


def answered(output=None, **info):
    """A device's reply: an output of the right shape, dtype and device whose sampled rows are `output`
    (from the inputs and the rows), with `info` over it."""
    def reply(kwargs, rows):
        q, k, v, mask = gpu_reference.make_inputs(CFG, S)
        mode = "padding" if "mask" in kwargs else "causal" if kwargs.get("causal") else "none"
        right = gpu_reference.reference_rows(q, k, v, rows, kwargs.get("mask"), mode == "causal")
        got = right if output is None else WRONG_ROWS[output](q, k, v, mask, rows)
        return {"shape": SHAPE, "dtype": CFG.dtype, "device": "cuda:0", "rows": got, "peak_bytes": 12 * 2**10,
                "seconds": 0.01234, "device_name": "NVIDIA H200", **info}
    return reply


def raising(failure):
    def reply(kwargs, rows):
        raise failure
    return reply


SITUATIONS = {  # name: (function, mode, the device's reply)
    "crash": ("sdpa_attention", "none", raising(CheckFailure("sdpa_attention ended the grading process"))),
    "student error": ("sdpa_attention", "none", raising(student_error("sdpa_attention", {
        "type": "ValueError", "message": "bad value"}))),
    "out of memory, sdpa": ("sdpa_attention", "padding", answered(oom=OUT_OF_MEMORY,
                                                                   device_bytes=141 * GIB)),
    "out of memory, chunked": ("chunked_attention", "causal", answered(oom=OUT_OF_MEMORY)),
    "not a tensor": ("sdpa_attention", "none", lambda kwargs, rows: {"type": "list"}),
    "shape": ("sdpa_attention", "none", answered(shape=[1, 2, S, 4])),
    "dtype": ("chunked_attention", "none", answered(dtype="float64")),
    "device": ("chunked_attention", "none", answered(device="cpu", seconds=None, device_name="")),
    "unreadable": ("chunked_attention", "none", answered(rows=None)),
    "inverted mask, sdpa": ("sdpa_attention", "padding", answered("inverted mask")),
    "inverted mask, chunked": ("chunked_attention", "padding", answered("inverted mask")),
    "mask ignored": ("chunked_attention", "padding", answered("no mask")),
    "causal ignored": ("sdpa_attention", "causal", answered("no mask")),
    "anti-causal": ("chunked_attention", "causal", answered("anti-causal")),
    "causal anyway": ("sdpa_attention", "none", answered("causal")),
    "noise": ("chunked_attention", "none", answered("noise")),
    "nan": ("sdpa_attention", "causal", answered("nan")),
    "over budget, sdpa": ("sdpa_attention", "none", answered(peak_bytes=100 * 2**10)),
    "over budget, sdpa, padding mask": ("sdpa_attention", "padding", answered(peak_bytes=64 * GIB)),
    "over budget, sdpa, causal": ("sdpa_attention", "causal", answered(peak_bytes=64 * GIB, device_name="cpu")),
    "over budget, chunked": ("chunked_attention", "padding", answered(peak_bytes=3 * MIB // 2)),
}


def stage_messages(name: str, lang: str) -> list[str]:
    """What the two checks of the situation's case say (as the check runner renders a failure), then its note."""
    function, mode, reply = SITUATIONS[name]
    run, case = gpu_stage.StageRun(CFG, []), gpu_config.Case(function, mode, S)
    said = []
    for check in (gpu_stage.check_correct, gpu_stage.check_memory):
        try:
            check(run, DeviceStandIn(reply), case)
        except CheckFailure as exc:
            said.append(failure_message(exc, lang))
    return said + list(gpu_stage.measurement_notes(run.measurements.values(), lang))


# What the stage said in English before it spoke Chinese (the same inputs through the code of 4c87bcd).
ENGLISH = {
    "crash": [
        "sdpa_attention ended the grading process on the GPU machine (os._exit, a crash, or the host ran out of memory)",
        "not measured: sdpa_attention ended the grading process on the GPU machine (os._exit, a crash, or the host ran out of memory)",
    ],
    "student error": [
        "sdpa_attention raised ValueError: bad value",
        "not measured: sdpa_attention raised ValueError: bad value",
    ],
    "out of memory, sdpa": [
        "your sdpa_attention ran out of device memory (141.0 GiB on this GPU) at S=128 (padding mask): it must not build the S x S matrix; pass the mask to F.scaled_dot_product_attention, or is_causal=True, instead of masking scores yourself [CUDA error: out of memory]",
        "your sdpa_attention ran out of device memory (141.0 GiB on this GPU) at S=128 (padding mask): it must not build the S x S matrix; pass the mask to F.scaled_dot_product_attention, or is_causal=True, instead of masking scores yourself [CUDA error: out of memory]",
        "sdpa_attention, padding mask, S=128: 12 KiB of extra device memory (budget 32 KiB), 12.3 ms on NVIDIA H200 [out of memory]",
    ],
    "out of memory, chunked": [
        "your chunked_attention ran out of device memory at S=128 (causal): it must not build the S x S matrix; compute the scores of one block of chunk_size queries at a time [CUDA error: out of memory]",
        "your chunked_attention ran out of device memory at S=128 (causal): it must not build the S x S matrix; compute the scores of one block of chunk_size queries at a time [CUDA error: out of memory]",
        "chunked_attention, causal, S=128: 12 KiB of extra device memory (budget 1.0 MiB), 12.3 ms on NVIDIA H200 [out of memory]",
    ],
    "not a tensor": [
        "your sdpa_attention returned list, not a torch.Tensor",
        "not measured: your sdpa_attention returned list, not a torch.Tensor",
    ],
    "shape": [
        "your sdpa_attention returned shape [1, 2, 128, 4], expected [1, 2, 128, 8] (the shape of q)",
        "not measured: your sdpa_attention returned shape [1, 2, 128, 4], expected [1, 2, 128, 8] (the shape of q)",
        "sdpa_attention, no mask, S=128: 12 KiB of extra device memory (budget 32 KiB), 12.3 ms on NVIDIA H200",
    ],
    "dtype": [
        "your chunked_attention returned dtype float64 for float32 inputs: keep the inputs' dtype",
        "not measured: your chunked_attention returned dtype float64 for float32 inputs: keep the inputs' dtype",
        "chunked_attention, no mask, S=128: 12 KiB of extra device memory (budget 1.0 MiB), 12.3 ms on NVIDIA H200",
    ],
    "device": [
        "your chunked_attention returned a tensor on cpu: keep it on the inputs' device",
        "not measured: your chunked_attention returned a tensor on cpu: keep it on the inputs' device",
        "chunked_attention, no mask, S=128: 12 KiB of extra device memory (budget 1.0 MiB)",
    ],
    "unreadable": [
        "your chunked_attention's output could not be read back",
        "not measured: your chunked_attention's output could not be read back",
        "chunked_attention, no mask, S=128: 12 KiB of extra device memory (budget 1.0 MiB), 12.3 ms on NVIDIA H200",
    ],
    "inverted mask, sdpa": [
        "your sdpa_attention (padding mask, S=128) is off by up to 2.95 on sampled query rows: it attends to the padded keys and ignores the real ones. F.scaled_dot_product_attention's boolean attn_mask means True = may attend (the same sense as our padding mask, True = real token, and the opposite of nn.MultiheadAttention's key_padding_mask): pass mask[:, None, None, :] as it is, without inverting it",
        "memory earns points only for a correct output (sdpa_attention, padding mask, S=128, see the check above)",
        "sdpa_attention, padding mask, S=128: 12 KiB of extra device memory (budget 32 KiB), 12.3 ms on NVIDIA H200",
    ],
    "inverted mask, chunked": [
        "your chunked_attention (padding mask, S=128) is off by up to 2.95 on sampled query rows: it attends to the padded keys and ignores the real ones; the padding mask is True = real token, so -inf goes where the mask is False",
        "memory earns points only for a correct output (chunked_attention, padding mask, S=128, see the check above)",
        "chunked_attention, padding mask, S=128: 12 KiB of extra device memory (budget 1.0 MiB), 12.3 ms on NVIDIA H200",
    ],
    "mask ignored": [
        "your chunked_attention (padding mask, S=128) is off by up to 1.95 on sampled query rows: it ignores the padding mask (padded keys still get attention)",
        "memory earns points only for a correct output (chunked_attention, padding mask, S=128, see the check above)",
        "chunked_attention, padding mask, S=128: 12 KiB of extra device memory (budget 1.0 MiB), 12.3 ms on NVIDIA H200",
    ],
    "causal ignored": [
        "your sdpa_attention (causal, S=128) is off by up to 3.36 on sampled query rows: it ignores causal=True (queries still see later keys)",
        "memory earns points only for a correct output (sdpa_attention, causal, S=128, see the check above)",
        "sdpa_attention, causal, S=128: 12 KiB of extra device memory (budget 32 KiB), 12.3 ms on NVIDIA H200",
    ],
    "anti-causal": [
        "your chunked_attention (causal, S=128) is off by up to 3.36 on sampled query rows: its causal mask is the wrong way round (a query must see keys j <= i, not j >= i)",
        "memory earns points only for a correct output (chunked_attention, causal, S=128, see the check above)",
        "chunked_attention, causal, S=128: 12 KiB of extra device memory (budget 1.0 MiB), 12.3 ms on NVIDIA H200",
    ],
    "causal anyway": [
        "your sdpa_attention (no mask, S=128) is off by up to 3.36 on sampled query rows: it applies a causal mask although causal=False",
        "memory earns points only for a correct output (sdpa_attention, no mask, S=128, see the check above)",
        "sdpa_attention, no mask, S=128: 12 KiB of extra device memory (budget 32 KiB), 12.3 ms on NVIDIA H200",
    ],
    "noise": [
        "your chunked_attention (no mask, S=128) is off by up to 0.5 on sampled query rows: it must equal plain softmax(q k^T / sqrt(head_dim)) v (compared in fp32, tolerance 0.02)",
        "memory earns points only for a correct output (chunked_attention, no mask, S=128, see the check above)",
        "chunked_attention, no mask, S=128: 12 KiB of extra device memory (budget 1.0 MiB), 12.3 ms on NVIDIA H200",
    ],
    "nan": [
        "your sdpa_attention (causal, S=128) returned 256 NaN or inf values on sampled query rows: it must equal plain softmax(q k^T / sqrt(head_dim)) v (compared in fp32, tolerance 0.02)",
        "memory earns points only for a correct output (sdpa_attention, causal, S=128, see the check above)",
        "sdpa_attention, causal, S=128: 12 KiB of extra device memory (budget 32 KiB), 12.3 ms on NVIDIA H200",
    ],
    "over budget, sdpa": [
        "your sdpa_attention peaked at 100 KiB of extra device memory (no mask, S=128), the budget is 32 KiB: it must not build the S x S matrix (call F.scaled_dot_product_attention(q, k, v) directly)",
        "sdpa_attention, no mask, S=128: 100 KiB of extra device memory (budget 32 KiB), 12.3 ms on NVIDIA H200",
    ],
    "over budget, sdpa, padding mask": [
        "your sdpa_attention peaked at 64.0 GiB of extra device memory (padding mask, S=128), the budget is 32 KiB; one S x S score matrix alone is 128 KiB: it must not build the S x S matrix (pass the mask to F.scaled_dot_product_attention instead of masking scores yourself)",
        "sdpa_attention, padding mask, S=128: 64.0 GiB of extra device memory (budget 32 KiB), 12.3 ms on NVIDIA H200",
    ],
    "over budget, sdpa, causal": [
        "your sdpa_attention peaked at 64.0 GiB of extra device memory (causal, S=128), the budget is 32 KiB; one S x S score matrix alone is 128 KiB: it must not build the S x S matrix (use is_causal=True instead of building a causal mask or masking scores yourself)",
        "sdpa_attention, causal, S=128: 64.0 GiB of extra device memory (budget 32 KiB), 12.3 ms",
    ],
    "over budget, chunked": [
        "your chunked_attention peaked at 1.5 MiB of extra device memory (padding mask, S=128), the budget is 1.0 MiB (8 x chunk_size x S x heads x batch x 4 bytes with chunk_size=1024, plus 4 x the output); one S x S score matrix alone is 128 KiB: it must compute the scores of one block of chunk_size queries at a time and never hold the whole S x S matrix",
        "chunked_attention, padding mask, S=128: 1.5 MiB of extra device memory (budget 1.0 MiB), 12.3 ms on NVIDIA H200",
    ],
}


@pytest.mark.parametrize("name", SITUATIONS)
def test_in_english_each_gpu_stage_message_reads_exactly_as_before(name):
    assert stage_messages(name, "en") == ENGLISH[name]


@pytest.mark.parametrize("name", SITUATIONS)
def test_in_chinese_each_gpu_stage_message_is_chinese_down_to_its_inner_parts(name):
    chinese = stage_messages(name, "zh")
    assert len(chinese) == len(ENGLISH[name])
    for text in chinese:
        assert CHINESE.search(text), text
        latin = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text.replace(OUT_OF_MEMORY, "")))
        assert latin <= CODE, (latin - CODE, text)  # no English left: not a mode's name, not a piece of the figures


def test_graded_in_chinese_the_stage_says_every_failure_and_every_figure_in_chinese(grader, private_tmp):
    """End to end on the CPU (the same worker code as on a GPU): the inverted mask fails the padding cases."""
    from autograder.foundation import edition
    from autograder.foundation.extract import extract
    from autograder.grading.gpu.known_submissions import write_variants

    small = gpu_config.GpuConfig(device="cpu", seq_lens=(256,), heads=2, head_dim=16, dtype="float32", chunk_size=32,
                                 rows=16, warmup=64)
    path = write_variants(private_tmp / "gpu_variants")["inverted_mask"]
    graded = {lang: gpu_stage.run(grader.zygote, grader.limits, extract(path),
                                  edition.resolve(spec_id, lang), config=small).part
              for lang, spec_id in (("en", "self_attention"), ("zh", "self_attention_zh"))}
    english, chinese = graded["en"], graded["zh"]
    assert chinese.score == english.score < chinese.max_score
    failed = [c.message for c in chinese.checks if not c.passed]
    assert len(failed) == 4 and len(chinese.notes) == len(english.notes) == len(gpu_config.cases(small))
    assert all(CHINESE.search(text) for text in failed + list(chinese.notes)), failed + list(chinese.notes)
