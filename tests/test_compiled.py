"""torch.compile in student code runs the same code eagerly in the worker (autograder/worker/compiled.py)."""
from __future__ import annotations

from autograder.worker import compiled

STUDENT = '''
@torch.compile
def plain(x):
    return x + 1


@torch.compile(mode="max-autotune", dynamic=True)
def with_options(x):
    return x * 2


called = torch.compile(plain, fullgraph=True)
'''


class FakeTorch:
    """A torch whose compile records what it compiled."""

    def __init__(self):
        self.compiled = []

        def compile(model=None, **kwargs):
            self.compiled.append(model)
            return "compiled"

        self.compile = compile


def test_a_students_torch_compile_hands_back_the_same_function_in_every_form():
    """@torch.compile, @torch.compile(mode=...) and torch.compile(fn, ...) in student code: the function itself,
    never compiled"""
    torch = FakeTorch()
    compiled.install(torch)
    ns = {"torch": torch}
    exec(compile(STUDENT, "<student:03_flash>", "exec"), ns)
    assert ns["plain"](1) == 2 and ns["with_options"](3) == 6 and ns["called"] is ns["plain"]
    assert torch.compiled == []


def test_torch_itself_still_gets_the_real_compile():
    """a call from outside student code (flex_attention compiles its own wrapper) reaches torch.compile"""
    torch = FakeTorch()
    compiled.install(torch)
    compiled.install(torch)  # (once: not wrapped twice)
    assert torch.compile(len) == "compiled" and torch.compiled == [len]


def test_a_failed_compile_is_named_as_torch_compile():
    """an error of dynamo or inductor (BackendCompilerFailed, CppCompileError, ...) says torch.compile failed, never
    just the exception's name"""
    from autograder.foundation.failures import student_error

    failure = student_error("flash_attention_backward", {"type": "BackendCompilerFailed", "message": "backend='inductor'"
                                                         " raised: CppCompileError", "where": ""})
    assert "failed while torch.compile compiled it" in str(failure.message), failure.message
    assert "raised BackendCompilerFailed" not in str(failure.message)
