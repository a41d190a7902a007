"""Each mistake costs once, in the part that owns the function where it lives.

A part's code may call functions that another part grades (DecoderAttention calls apply_rope,
decode_causal_mask and repeat_kv). The student's own versions are first run on a few inputs
(`probe`), under a deadline of their own (Session.aside): a piece that hangs or crashes costs the
borrowing part neither time nor points. While the part is graded, the worker holds stand-ins for the
wrong ones (and the missing): functions whose every call is answered by this trusted side with the
reference's result (worker/borrowed.py, sandbox/lender.py); no code of the grader reaches the worker.
A check that fails with the stand-ins runs again with the student's own pieces and keeps the better
result (Student.own_pieces): a layer written for its own helper (Llama 3's repeat_kv) loses nothing here.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autograder.checks import expect
from autograder.foundation import i18n
from autograder.foundation.failures import CheckFailure, MissingName, PartStopped, WorkerEnded
from autograder.sandbox.lender import Lender
from autograder.sandbox.student import Lending

_ = i18n.message

PROBE_SECONDS = 5.0  # the probes of one namespace's pieces, at most (and never more than a part's limit)


@dataclass(frozen=True)
class Verdict:
    """What the probes found of the student's own pieces."""

    wrong: tuple[str, ...] = ()  # gave another result than the reference's, or raised
    broken: tuple[str, ...] = ()  # did not return within the probe's time, or ended the worker


def lending(student, owner: str, part, reference, probes: dict, judged=None) -> None:
    """From now on in `part`, every job starts by putting stand-ins for the student's wrong and missing pieces in
    the namespace of `owner` (Student.job); the first time, the student's own pieces are probed and the note is
    said. Nothing is lent when `owner` is not defined (its checks say so). A part that grades the pieces itself
    (a borrow of its own helper) passes `judged`, a function returning their Verdict from what its checks already
    received: no probe is sent then."""
    student.once(f"lent {part.id}", lambda: _start(student, owner, part, reference, probes, judged), every_mode=True)


def judged_from(outcomes: dict, reference) -> Verdict:
    """The Verdict on pieces from calls a part's checks already made: {name: [(call, outcome), ...]}."""
    wrong, broken = [], []
    for name, calls in outcomes.items():
        kinds = {_compared(lambda o=outcome: [o.value], _answer(reference, name, call)) for call, outcome in calls}
        if kinds & {"stopped", "ended"}:
            broken.append(name)
        elif "wrong" in kinds:
            wrong.append(name)
    return Verdict(tuple(wrong), tuple(broken))


def _answer(reference, name: str, call):
    """The reference's result for one call of the piece `name`, when asked (a list, as the probe compares them)."""
    return lambda: [getattr(reference, name)(*call.args, **call.kwargs)]


def _start(student, owner: str, part, reference, probes: dict, judged=None) -> None:
    session = student.session
    if not session.defines(owner):
        return
    namespace = session.namespace_for(owner)
    defined = session.load_report.get(namespace, {}).get("defined", ())
    mine = {n: probes[n] for n in part.borrows if n in probes and n in defined}
    verdict = judged() if judged is not None else student.once(
        f"lent probes {namespace} {sorted(mine)}", lambda: probe(student, owner, part, mine, reference), every_mode=True)
    missing = tuple(n for n in part.borrows if n not in defined)
    student.lending[part.id] = Lending(owner, tuple(part.borrows), verdict.wrong, verdict.broken, missing)
    lender = Lender(reference, frozenset(part.borrows))
    session.lenders[part.id] = lender.answer
    student.lenders[part.id] = lender
    bad = verdict.wrong + verdict.broken
    say(student, owner, verdict, copies_in(session, namespace, bad), same_part=bool(bad) and set(bad) <= set(part.names))


def copies_in(session, namespace: str, names: tuple[str, ...]) -> str | None:
    """The file that holds the student's pieces `names` when it is a notebook of the assignment other than the
    ones that grade them (copies pasted there, e.g. 04_decoder.ipynb's apply_rope), else None: their own parts
    then grade these very pieces."""
    assignment = session.assignment
    owners = {p.notebook for p in assignment.parts if set(p.names) & set(names)}
    if namespace not in assignment.notebooks or not owners or owners == {namespace}:
        return None
    return next((Path(s.path).name for s in session.sources if s.name == namespace), f"{namespace}.ipynb")


def probe(student, owner: str, part, probes: dict, reference) -> Verdict:
    """Each of the student's pieces in `probes` ({name: [(args, kwargs), ...]}) called next to `owner`, with the
    student's own pieces in place, under a deadline of its own: a hang stops that piece only (the pieces after it
    are probed again in a fresh worker)."""
    session = student.session
    seconds = min(PROBE_SECONDS, session.limits.part_seconds)
    wrong, broken, pending = [], [], list(probes)
    while pending:
        jobs, steps = {}, {}
        with session.aside(seconds):
            for name in pending:
                job = jobs[name] = student.job(lend=False)
                job.lend(owner, part.borrows)
                steps[name] = [job.call(name, *args, **kwargs) for args, kwargs in probes[name]]
            results = dict(zip(jobs, student.run(list(jobs.values()))))
        again, culprit = [], None
        for name in pending:
            outcome = _outcome(results[name], steps[name], probes[name], reference, name)
            if outcome == "stopped" and culprit is not None:
                again.append(name)  # not run: the piece before it hung
            elif outcome in ("stopped", "ended"):
                culprit = name if outcome == "stopped" else culprit
                broken.append(name)
            elif outcome == "wrong":
                wrong.append(name)
        pending = again
    return Verdict(tuple(wrong), tuple(broken))


def _outcome(result, steps, calls, reference, name: str) -> str:
    """"right", "wrong", "stopped" (no answer in time, or not run), "ended" (ended the worker) or "missing"."""
    return _compared(lambda: [result[step] for step in steps],
                     lambda: [getattr(reference, name)(*args, **kwargs) for args, kwargs in calls])


def _compared(got, expected) -> str:
    """What the student's results (`got()`) say against the reference's (`expected()`, asked only if they came)."""
    try:
        values = got()
    except MissingName:
        return "missing"
    except PartStopped:
        return "stopped"
    except WorkerEnded:
        return "ended"
    except CheckFailure:
        return "wrong"
    return "right" if all(expect.same(g, e) for g, e in zip(values, expected())) else "wrong"


def say(student, owner: str, verdict: Verdict, copies: str | None = None, same_part: bool = False) -> None:
    """The part's note: which of the student's pieces the grader stood in for while `owner` was graded; when they
    are copies in another notebook than their own parts' (`copies`, its file name), the note says where they are;
    when they belong to the part being graded (`same_part`: sliding_window_mask next to sliding_window_attention),
    it says that their own checks in this part grade them."""
    bad = verdict.wrong + verdict.broken
    if not bad:
        return
    if same_part:
        student.note(_("while {owner} was graded, the grader's {names} stood in for yours, which gives wrong results: "
                       "its own checks in this part charge that mistake, so that it costs points once; each check of "
                       "{owner} kept the better of that and your own {names}. Fix {names}: wherever {owner} calls it, "
                       "it is wrong with yours").format(owner=owner, names=", ".join(bad)))
        return
    student.note(_("while {owner} was graded, the grader's {names} stood in for yours (each is graded in its own "
                   "part, so that a mistake there costs points once, there); each check kept the better of that "
                   "and your own pieces").format(owner=owner, names=", ".join(bad)))
    if copies:
        say_copies(student, owner, verdict, copies)
        return
    if verdict.wrong:
        student.note(_("of your own pieces next to {owner}, these gave wrong results: {names} (their own parts say "
                       "why): fix them there too, or {owner} will not work outside the grader").format(
            names=", ".join(verdict.wrong), owner=owner))
    if verdict.broken:
        student.note(_("of your own pieces next to {owner}, these did not return in time or ended the grading "
                       "process: {names} (their own parts say why)").format(names=", ".join(verdict.broken),
                                                                           owner=owner))


def say_copies(student, owner: str, verdict: Verdict, copies: str) -> None:
    """The notes about the student's copies of other parts' pieces in the notebook `copies`: where they are."""
    if verdict.wrong:
        student.note(_("your copies in {file} of these pieces next to {owner} gave wrong results: {names}; fix them "
                       "there too, or {owner} will not work outside the grader").format(
            file=copies, names=", ".join(verdict.wrong), owner=owner))
    if verdict.broken:
        student.note(_("your copies in {file} of these pieces next to {owner} did not return in time or ended the "
                       "grading process: {names}").format(file=copies, names=", ".join(verdict.broken), owner=owner))
