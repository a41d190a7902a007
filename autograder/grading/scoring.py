"""From the outcome of each check to a part's score: weights, forbidden calls, missing names.

Pytest-free, so that both check runners share it: check.py (pytest, as graded) and the GPU
stage's runner for a device machine without pytest (gpu/stage.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..foundation import i18n
from ..foundation.failures import CheckFailure
from ..foundation.results import CheckResult, PartResult
from ..foundation.spec import DEFAULT_LANGUAGE, FROM_SCRATCH_FORBIDS, Part
from ..worker.names import FLEX_ATTENTION, FUSED_KERNEL, OFFICIAL_MODULE, SERVING_KERNELS, TRANSFORMERS, WATCH_OFF

_ = i18n.message
# What a part's forbidden torch functions (spec.Part.forbidden) ask of it, in the student's words (the start of
# the note that says the part earns nothing). A part that forbids another group needs its sentence here
# (tests/test_assignments.py checks that every registered part has one).
RULES: dict[tuple[str, ...], i18n.Message] = {
    FROM_SCRATCH_FORBIDS: _("this part must compute attention from scratch"),
    OFFICIAL_MODULE: _("this part must compute its attention itself, not with torch's nn.MultiheadAttention"),
    FUSED_KERNEL + FLEX_ATTENTION: _("this part must build its attention itself, without torch's fused attention "
                                     "(F.scaled_dot_product_attention) or flex_attention"),
    TRANSFORMERS: _("this part must compute with plain torch operations, not with a module or function of the "
                    "transformers library (it supplies the weights and the reference only)"),
    SERVING_KERNELS: _("this part must compute its attention with plain torch, one sequence at a time (SDPA with an "
                       "explicit mask is allowed), not with a serving kernel: torch's varlen attention, SDPA on "
                       "nested tensors, flex_attention, flash_attn, vllm, flashinfer, xformers or sglang"),
}


def rule_of(part: Part) -> i18n.Message:
    """The rule that a part's forbidden names break (spec.Part.forbidden)."""
    return RULES[part.forbidden]


@dataclass(frozen=True)
class CheckRecord:
    """One check's outcome, before points are shared out."""

    name: str  # the first line of the check's docstring, with its parameters, e.g. "... [causal]"
    weight: float  # @pytest.mark.points(n); 1 without the marker
    passed: bool
    message: str  # for the student; "" when it passed
    in_standin: bool = False  # it failed on an error raised inside a grader's stand-in (failures.raised_in_standin)


def failure_message(exc: BaseException, lang: str = DEFAULT_LANGUAGE) -> str:
    """What a failed check tells the student, in `lang`."""
    if isinstance(exc, CheckFailure):
        return i18n.render(exc.message, lang)
    if isinstance(exc, AssertionError):
        text = str(exc).split("\nassert ")[0].strip()
        return text or i18n.render(_("the check's condition was not met"), lang)
    # a student's value broke the check's own code (e.g. a tuple where a tensor belongs)
    return _("your result could not be checked ({kind}: {error})").format(kind=type(exc).__name__,
                                                                         error=str(exc)[:200]).render(lang)


def said_calls(calls, lang: str) -> str:
    """"your SelfAttention.forward called F.scaled_dot_product_attention, ..." in `lang`."""
    said = []
    for caller, label in sorted(calls):
        if label == WATCH_OFF:
            said.append(_("your {caller} switched off the grader's watch of torch calls").format(caller=caller))
        else:
            said.append(_("your {caller} called {call}").format(caller=caller, call=label))
    return "; ".join(m.render(lang) for m in said)


def score_part(part: Part, records: list[CheckRecord], session, seconds: float,
               lang: str = DEFAULT_LANGUAGE) -> PartResult:
    """The part's points shared out by weight; nothing for a part that called, while graded, a torch function it
    may not (the session saw which of the student's functions called it); a note for each API name the
    submission lacks (in `lang`)."""
    total = sum(r.weight for r in records) or 1.0
    state = session.parts.get(part.id)
    calls = state.calls if state else set()
    notes = []
    missing = [n for n in part.names if not session.defines(n, part.id)]
    if missing:
        notes.append(_("missing from your submission: {names}").format(names=", ".join(missing)).render(lang))
    notes.extend(i18n.render(n, lang) for n in (state.notes if state else ()))
    forbidden = bool(calls and part.forbidden)
    if forbidden:
        notes.append(_("{from_scratch}, but while it was graded {calls}: the whole part earns nothing").format(
            from_scratch=rule_of(part), calls=said_calls(calls, lang)).render(lang))
    checks = []
    for r in records:
        max_points = part.points * r.weight / total
        ok = r.passed and not forbidden
        message = r.message
        if r.passed and forbidden:  # (every check says it: a batch of checks runs at the first one's turn)
            message = _("correct result, but the part as a whole earns nothing: while it was graded, {calls} "
                        "({from_scratch})").format(calls=said_calls(calls, lang), from_scratch=rule_of(part)).render(lang)
        checks.append(CheckResult(r.name, ok, max_points if ok else 0.0, max_points, message))
    return PartResult(part.id, part.points, tuple(checks), tuple(notes), seconds=round(seconds, 3))


def unreadable(extracted, parts, lang: str = DEFAULT_LANGUAGE) -> list[PartResult]:
    """Every part scores 0 with the reason, when no file of the submission could be read."""
    reason = i18n.join([s.error for s in extracted.sources if s.error], lang) or i18n.render(_("no code found"), lang)
    return zeros(parts, reason)


# The name of the one check of a part that could not be graded: English in the results, as every check's name is;
# the reports show it in the student's language (i18n.check_title finds it in the catalog).
CAN_BE_READ = _("your submission can be read")


def zeros(parts, reason) -> list[PartResult]:
    """Each part 0 points, with the reason (already in the student's language) as its one failed check and its
    note."""
    return [PartResult(p.id, p.points, (CheckResult(CAN_BE_READ.msgid, False, 0.0, p.points, reason),), (reason,))
            for p in parts]
