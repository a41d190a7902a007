"""The static scan for torch's fused attention in from-scratch parts (autograder/grading/grade.py).

It must flag torch's kernel and official module however they are named or imported, and
never a student's own helper that happens to carry the textbook name.
"""
from __future__ import annotations

import textwrap

import pytest

from autograder.foundation.extract import Source, Extracted
from autograder.grading.scan import forbidden_in_source
from autograder.worker.names import is_forbidden_name

HELPER = '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    return torch.softmax(scores, dim=-1) @ V
'''


def scan(code: str) -> set[str]:
    source = Source("submission", "submission.py", (textwrap.dedent(code),))
    return forbidden_in_source(Extracted("submission.py", (source,))).get("scaled_scores", set())


def attend_body(line: str, prelude: str = "") -> str:
    return prelude + f"\ndef attend(weights, V):\n    {line}\n    return weights @ V\n"


@pytest.mark.parametrize("prelude, line, flagged", [
    ("", "F.scaled_dot_product_attention(V, V, V)", "scaled_dot_product_attention"),
    ("", "torch.nn.functional.scaled_dot_product_attention(V, V, V)", "scaled_dot_product_attention"),
    ("", "torch._scaled_dot_product_attention_math(V, V, V)", "_scaled_dot_product_attention_math"),
    ("", "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(V, V, V)",
     "_scaled_dot_product_flash_attention_for_cpu"),
    ("", "nn.MultiheadAttention(8, 1)", "MultiheadAttention"),
    ("", "torch._native_multi_head_attention", "_native_multi_head_attention"),
    ("", "getattr(F, 'scaled_dot_product_attention')(V, V, V)", "scaled_dot_product_attention"),
    ("import torch.nn.functional as fn\n", "fn.scaled_dot_product_attention(V, V, V)", "scaled_dot_product_attention"),
    ("from torch import nn as tnn\n", "tnn.MultiheadAttention(8, 1)", "MultiheadAttention"),
    ("from torch.nn.functional import scaled_dot_product_attention as sdpa\n", "sdpa(V, V, V)",
     "scaled_dot_product_attention"),
])
def test_torch_fused_attention_is_flagged_however_it_is_reached(prelude, line, flagged):
    assert scan(attend_body(line, prelude)) == {flagged}


def test_a_helper_of_the_students_own_named_like_torchs_kernel_is_followed_not_flagged():
    assert scan(HELPER + attend_body("weights = scaled_dot_product_attention(V, V, V)")) == set()


def test_the_students_own_helper_is_looked_into():
    helper = HELPER.replace("return torch.softmax(scores, dim=-1) @ V", "return F.scaled_dot_product_attention(Q, K, V)")
    assert scan(helper + attend_body("weights = scaled_dot_product_attention(V, V, V)")) == {
        "scaled_dot_product_attention"}


def test_a_method_of_the_students_own_class_is_not_torch():
    code = attend_body("weights = self_like.scaled_dot_product_attention(V)", "self_like = None\n")
    assert scan(code) == set()


def test_names_only_mentioned_outside_the_parts_definitions_do_not_count():
    code = "def unrelated(q):\n    return F.scaled_dot_product_attention(q, q, q)\n" + attend_body("pass")
    assert scan(code) == set()


@pytest.mark.parametrize("name, forbidden", [
    ("scaled_dot_product_attention", True), ("_scaled_dot_product_flash_attention_for_cpu", True),
    ("MultiheadAttention", True), ("multi_head_attention_forward", True), ("_flash_attention_forward", True),
    ("MultiHeadSelfAttention", False), ("scaled_scores", False), ("attend", False), ("split_heads", False),
])
def test_forbidden_names_are_torchs_not_the_course_api(name, forbidden):
    assert is_forbidden_name(name) is forbidden


def cross_scan(line: str) -> set[str]:
    from autograder.foundation import spec

    code = f"class CrossAttention(nn.Module):\n    def forward(self, x, context, context_mask=None):\n        return {line}\n"
    source = Source("submission", "submission.py", (code,))
    parts = spec.assignment("generation").parts
    return forbidden_in_source(Extracted("submission.py", (source,)), parts).get("cross_attention", set())


def test_cross_attention_may_not_wrap_the_official_module_but_may_call_the_fused_kernel():
    """per-part forbidden names: cross_attention forbids nn.MultiheadAttention, not F.scaled_dot_product_attention"""
    assert cross_scan("nn.MultiheadAttention(8, 2)(x, context, context)[0]") == {"MultiheadAttention"}
    assert cross_scan("F.multi_head_attention_forward(x, context, context)") == {"multi_head_attention_forward"}
    assert cross_scan("F.scaled_dot_product_attention(x, context, context)") == set()


@pytest.mark.parametrize("name, label", [
    ("scaled_dot_product_attention", "F.scaled_dot_product_attention"),
    ("_scaled_dot_product_attention_math", "torch._scaled_dot_product_attention_math"),
    ("multi_head_attention_forward", "F.multi_head_attention_forward"),
    ("flash_attention", None), ("scaled_scores", None), ("matmul", None),
])
def test_the_watch_labels_torchs_functions_never_a_students_own_names(name, label):
    """the worker's watch names the torch function called; a plain function (a student's own, even one called
    scaled_dot_product_attention) is never torch's"""
    import torch

    from autograder.worker.watch import torch_label

    func = getattr(torch.nn.functional, name, None) or getattr(torch, name, None)
    assert torch_label(func) == label
    own = type("Own", (), {"__name__": "flash_attention"})()
    assert torch_label(own) is None  # (a student's name that no pattern of torch's holds)


WATCHED = '''
import torch, warnings
warnings.simplefilter("ignore")
from autograder.worker.watch import ForbiddenCallWatch
from torch.nn.attention.flex_attention import flex_attention
watch = ForbiddenCallWatch()
q = torch.randn(1, 2, 4, 8)
def flash_attention(q, k, v):  # a student's own function of that name: computes from scratch
    return torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, dim=-1) @ v
import sys, types  # a stand-in for the transformers library: its code's module names (real_models' rule)
library = types.ModuleType("transformers.models.fake")
exec("import torch\\ndef eager_attention_forward(q):\\n    return torch.matmul(q, q.transpose(-2, -1))", library.__dict__)
sys.modules["transformers"], sys.modules["transformers.models.fake"] = types.ModuleType("transformers"), library
student = {"library": library}
exec(compile("def forward(q):\\n    return library.eager_attention_forward(q)", "<student:1>", "exec"), student)
with watch.watching():
    flash_attention(q, q, q)
    own = sorted(watch.calls)
    flex_attention(q, q, q)
    torch.ops.aten._scaled_dot_product_attention_math(q, q, q)
    student["forward"](q)
print(own, sorted(label for _, label in watch.calls), sorted(c for c, label in watch.calls if "fake" in label))
'''


def test_the_watch_runs_flex_attention_and_sees_it_and_torch_ops_aten(tmp_path):
    """in a fresh process: under the watch, flex_attention still runs (it compiles even in eager mode) and is
    recorded, as is torch.ops.aten's kernel; a student's own flash_attention is not a call of torch's; a student's
    function that calls the transformers library's code is recorded under the library's module and function"""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", WATCHED], capture_output=True, text=True, cwd=root, timeout=240,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == (
        "[] ['torch.nn.attention.flex_attention', 'torch.ops.aten._scaled_dot_product_attention_math', "
        "'transformers.models.fake.eager_attention_forward'] ['forward']")


def efficient_scan(code: str) -> dict[str, set[str]]:
    from autograder.foundation import spec

    source = Source("submission", "submission.py", (textwrap.dedent(code),))
    return forbidden_in_source(Extracted("submission.py", (source,)), spec.assignment("efficient").parts)


def test_efficient_never_flags_the_students_own_flash_attention():
    """flash_attention is part flash's API: calling it, or a helper named after a kernel, is the student's own code"""
    found = efficient_scan('''
        def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
            return _flash_attention_forward(q, k, v), None

        def _flash_attention_forward(q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v

        def merge_attention(out_a, lse_a, out_b, lse_b):
            return flash_attention(out_a, out_a, out_b)
        ''')
    assert found == {}


@pytest.mark.parametrize("line, part, name", [
    ("F.scaled_dot_product_attention(q, k, v)", "linear", "scaled_dot_product_attention"),
    ("torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[0]", "linear",
     "_scaled_dot_product_flash_attention_for_cpu"),
    ("torch.nn.attention.flex_attention.flex_attention(q, k, v)", "linear", "flex_attention"),
])
def test_efficient_flags_the_fused_attention_and_flex_attention_in_parts_that_build_attention(line, part, name):
    """flash, sliding_window and linear may call neither torch's fused attention nor flex_attention"""
    found = efficient_scan(f"def linear_attention(q, k, v, causal=False, eps=1e-6):\n    return {line}\n")
    assert found == {part: {name}}


def test_efficient_flex_part_may_call_flex_attention():
    """the flex part's subject is flex_attention itself: it forbids nothing"""
    found = efficient_scan('''
        from torch.nn.attention.flex_attention import flex_attention

        def softcap_score_mod(cap):
            flex_attention(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2))
            return lambda score, b, h, q_idx, kv_idx: cap * torch.tanh(score / cap)
        ''')
    assert found == {}


def grader_reach(code: str) -> dict[str, set[tuple[str, str]]]:
    from autograder.grading.scan import grader_reach_in_source

    source = Source("submission", "submission.py", (textwrap.dedent(code),))
    return grader_reach_in_source(Extracted("submission.py", (source,)))


@pytest.mark.parametrize("prelude, line, reached", [
    ("import autograder.worker.standins as s\n", "s.StandInSelfAttention.forward(weights, V)",
     ("attend", "autograder.worker.standins")),
    ("from autograder.worker import standins\n", "standins.flex_attend(weights, V, V)",
     ("attend", "autograder.worker.standins")),
    ("import sys\n", "sys.modules['autograder.worker.standins']", ("attend", "autograder.worker.standins")),
    ("import sys\n_grader = sys.modules.get('autograder' + '.worker.runtime')\n", "_grader.Worker",
     ("_grader", "autograder")),  # (in the helper the part's function uses)
    ("", "import autograder.worker.watch", ("attend", "autograder.worker.watch")),
])
def test_code_that_reaches_into_the_graders_modules_is_named_with_its_part(prelude, line, reached):
    assert grader_reach(attend_body(line, prelude)) == {"scaled_scores": {reached}}


def test_a_students_own_names_and_text_about_the_grader_are_not_a_reach():
    code = attend_body("note = 'the autograder checks this (autograder.py)'", "autograder_ready = True\n") + \
        "\ndef attention_weights(scores):\n    return autograder_ready\n"
    assert grader_reach(code) == {}


def test_a_reach_is_flagged_for_review_with_a_note_and_costs_nothing_by_itself():
    from autograder.foundation.results import CheckResult, PartResult
    from autograder.grading.scan import note_grader_reach

    part = PartResult("module", 20, (CheckResult("forward", True, 20, 20, ""),))
    noted = note_grader_reach(part, {("SelfAttention", "autograder.worker.standins")})
    assert noted.score == part.score and noted.review == ("SelfAttention (autograder.worker.standins)",)
    assert "reaches into the grader's own modules" in noted.notes[-1]
    assert "评分器自己的模块" in note_grader_reach(part, {("SelfAttention", "autograder")}, "zh").notes[-1]
