"""torch.compile in student code: the same code, run eagerly.

Compiling inside the sandbox cannot be relied on: inductor builds C++ with a compiler in a private 64 MB /tmp, under
a seccomp filter and the part's 20 s, and dynamo's tracing alone takes seconds a function. A submission that keeps
its `@torch.compile` (or `torch.compile(fn, mode=...)`) is graded as the code it compiles: this wrapper, in place of
torch.compile in the worker before the student's code is loaded, hands a student's function or module back
unchanged. Calls from torch itself (flex_attention compiles its own wrapper) get the real torch.compile.
"""
from __future__ import annotations

import functools
import sys

from .names import STUDENT_PREFIX



def from_student(depth: int = 2) -> bool:
    """Whether the caller `depth` frames up runs the student's code."""
    return sys._getframe(depth).f_code.co_filename.startswith(STUDENT_PREFIX)


def eager_for_students(compile_):
    """torch.compile that returns a student's model (or a decorator that returns it) as it is."""

    @functools.wraps(compile_)
    def compile(model=None, *args, **kwargs):
        if not from_student():
            return compile_(model, *args, **kwargs)
        if model is None:  # @torch.compile(mode=...): the decorator
            return lambda fn: fn
        return model

    compile.eager_for_students = True
    return compile


def install(torch) -> None:
    """torch.compile eager for student code, once per process."""
    if not getattr(torch.compile, "eager_for_students", False):
        torch.compile = eager_for_students(torch.compile)
