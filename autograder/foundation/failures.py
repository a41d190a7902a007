"""The ways a check fails, each with a message written for the student (str() of the exception).

Raised by the trusted side's session and student handle when the student's code misbehaves,
and by the hidden checks when a result is wrong. The check runner turns every one of them
into the check's message.
"""
from __future__ import annotations

from . import i18n

_ = i18n.message


class CheckFailure(AssertionError):
    """A check failed; its one argument is the message shown to the student (an i18n.Message, or plain
    text that needs no translation), str() its English text."""

    @property
    def message(self):
        return self.args[0] if self.args else ""


class MissingName(CheckFailure):
    """The submission does not define a name the check needs."""


class StudentRaised(CheckFailure):
    """The student's code raised; `kind` is the exception's type name (e.g. "NotImplementedError")."""

    def __init__(self, message, kind: str):
        super().__init__(message)
        self.kind = kind


class WorkerEnded(CheckFailure):
    """The student's code ended the worker (os._exit, a crash, the memory limit) during a request."""


class PartStopped(CheckFailure):
    """The part ran out of time, or the worker died: the rest of the part is not run."""


# what torch.compile's dynamo and inductor raise when compiling fails (torch._dynamo.exc, torch._inductor.exc)
COMPILE_ERRORS = ("BackendCompilerFailed", "CppCompileError", "InductorError", "InternalTorchDynamoError",
                  "TorchRuntimeError", "Unsupported")

GRADER_LACKS = "GraderLacks"  # autograder/worker/hflike.py: a name of the library's module its copy could not provide


def student_error(what: str, err: dict) -> StudentRaised:
    """The failure for an error that the worker reported from the student's code."""
    kind, message, where = err.get("type", "Error"), err.get("message", ""), err.get("where", "")
    if kind == "NotImplementedError":
        return StudentRaised(_("{what} is not implemented yet (it raises NotImplementedError)").format(what=what), kind)
    if kind == GRADER_LACKS:
        return StudentRaised(_("{what} read {name} of the library's module, which the grader could not provide in its "
                               "copy of that module: not a mistake of yours (tell your instructor)").format(
            what=what, name=message), kind)
    at = _(" at {where}").format(where=where) if where else ""
    if kind in COMPILE_ERRORS:
        return StudentRaised(_("{what} failed while torch.compile compiled it ({kind}: {message}){at}; the grader runs "
                               "your torch.compile calls eagerly, so this compile came another way (torch._dynamo, a "
                               "backend): keep the graded functions plain").format(
            what=what, kind=kind, message=message, at=at), kind)
    if kind == "SystemExit":
        return StudentRaised(_("{what} called exit() ({message}){at}; a function must return its result").format(
            what=what, message=message, at=at), kind)
    return StudentRaised(_("{what} raised {kind}: {message}{at}").format(what=what, kind=kind, message=message, at=at),
                         kind)
