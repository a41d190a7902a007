"""The ways a check fails, each with a message written for the student (str() of the exception).

Raised by the trusted side's session and student handle when the student's code misbehaves,
and by the hidden checks when a result is wrong. The check runner turns every one of them
into the check's message.
"""
from __future__ import annotations


class CheckFailure(AssertionError):
    """A check failed; str() is the message shown to the student."""


class MissingName(CheckFailure):
    """The submission does not define a name the check needs."""


class StudentRaised(CheckFailure):
    """The student's code raised; `kind` is the exception's type name (e.g. "NotImplementedError")."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


class PartStopped(CheckFailure):
    """The part ran out of time, or the worker died: the rest of the part is not run."""


def student_error(what: str, err: dict) -> StudentRaised:
    """The failure for an error that the worker reported from the student's code."""
    kind, message, where = err.get("type", "Error"), err.get("message", ""), err.get("where", "")
    if kind == "NotImplementedError":
        return StudentRaised(f"{what} is not implemented yet (it raises NotImplementedError)", kind)
    at = f" at {where}" if where else ""
    if kind == "SystemExit":
        return StudentRaised(f"{what} called exit() ({message}){at}; a function must return its result", kind)
    return StudentRaised(f"{what} raised {kind}: {message}{at}", kind)
