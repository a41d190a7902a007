"""The ways a check fails, each with a message written for the student (str() of the exception).

Raised by the trusted side's session and student handle when the student's code misbehaves,
and by the hidden checks when a result is wrong. The check runner turns every one of them
into the check's message.
"""
from __future__ import annotations

import re

from . import i18n
from ..worker import hfshell, rules

_ = i18n.message

# hfshell.RULE, what the worker's `transformers` shell raises for anything but a registration (tests/test_hfshell.py
# keeps the two equal): the student reads it in the submission's language
LIBRARY_ABSENT = _("{name} is not available: the transformers library does not run in the grader's sandbox, a graded "
                   "forward is plain torch (only AttentionInterface, AttentionMaskInterface and masking_utils' "
                   "eager_mask, sdpa_mask and flex_attention_mask are there, to register your attention)")
# rules.NOT_THE_GRADERS_CALL: a grader's helper that computes attention, called by the student's code
NOT_THE_GRADERS_CALL = _("the grader's {name} runs only inside the grader's own checks, never for your code: compute "
                         "the attention yourself")
# what the trusted side answers the grader's stand-in SelfAttention outside the part that hands it out (session.py)
STANDIN_ELSEWHERE = _("the grader's stand-in SelfAttention computes only where the grader hands it to your code "
                      "(to_official, parity_error): your code ran it itself, which earns nothing")
_NAME = r"(?P<name>[\w.]{1,200})"
# a worker's text -> the message it is: the pattern its English text matches
_WORKER_TEXTS = ((re.compile(re.escape(hfshell.RULE).replace(re.escape("{name}"), _NAME)), LIBRARY_ABSENT),
                 (re.compile(re.escape(rules.NOT_THE_GRADERS_CALL).replace(re.escape("{name}"), _NAME)),
                  NOT_THE_GRADERS_CALL),
                 (re.compile(re.escape(f"the grader's {rules.STANDIN_FORWARD}: {STANDIN_ELSEWHERE.msgid}")), STANDIN_ELSEWHERE))


class CheckFailure(AssertionError):
    """A check failed; its one argument is the message shown to the student (an i18n.Message, or plain
    text that needs no translation), str() its English text."""

    @property
    def message(self):
        return self.args[0] if self.args else ""


class MissingName(CheckFailure):
    """The submission does not define a name the check needs."""


class StudentRaised(CheckFailure):
    """The student's code raised; `kind` is the exception's type name (e.g. "NotImplementedError"); `in_standin`:
    the error came from a call of a grader's stand-in that the reference could not answer (a call the student's
    own piece takes and the reference's does not, e.g. Mistral's repeat_kv(keys, values, repeats))."""

    def __init__(self, message, kind: str, in_standin: bool = False):
        super().__init__(message)
        self.kind = kind
        self.in_standin = in_standin


STANDIN_ERROR = "the grader's "  # how autograder/worker/borrowed.py begins an error that a stand-in's call raised


def raised_in_standin(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from or while handling, is an error of a grader's stand-in."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, StudentRaised) and exc.in_standin:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class WorkerEnded(CheckFailure):
    """The student's code ended the worker (os._exit, a crash, the memory limit) during a request."""


class PartStopped(CheckFailure):
    """The part ran out of time, or the worker died: the rest of the part is not run."""


# what torch.compile's dynamo and inductor raise when compiling fails (torch._dynamo.exc, torch._inductor.exc)
COMPILE_ERRORS = ("BackendCompilerFailed", "CppCompileError", "InductorError", "InternalTorchDynamoError",
                  "TorchRuntimeError", "Unsupported")

GRADER_LACKS = "GraderLacks"  # autograder/worker/hflike.py: a name of the library's module its copy could not provide


def worker_text(text):
    """A message the worker reported, as the student reads it: the grader's own rules (the `transformers` shell's,
    its helpers' refusals) in the submission's language, anything else as it is."""
    for pattern, message in _WORKER_TEXTS if isinstance(text, str) else ():
        match = pattern.fullmatch(text)
        if match:
            return message.format(**match.groupdict())
    return text


def student_error(what: str, err: dict) -> StudentRaised:
    """The failure for an error that the worker reported from the student's code."""
    kind, message, where = err.get("type", "Error"), worker_text(err.get("message", "")), err.get("where", "")
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
                         kind, in_standin=str(message).startswith(STANDIN_ERROR))
