"""Each mistake costs once, in the part that owns the function where it lives.

A part's code may call functions that another part grades (DecoderAttention calls apply_rope,
decode_causal_mask and repeat_kv). While that part is graded, the worker puts the reference
versions in their place (`spec.Part.borrows`, `Job.lend`), so that a wrong apply_rope costs
points in `positions` and not again in `decoder`. The student's own versions are first run on
a few inputs (`probe`), and the part's note says which were replaced and which of them were
wrong. The reference code travels to the worker as text, for this part only (the session gives
the next part a fresh worker); docs/security.md says why that reveals nothing new.
"""
from __future__ import annotations

import functools
import inspect

from autograder.checks import expect
from autograder.foundation import i18n
from autograder.foundation.failures import CheckFailure, MissingName

_ = i18n.message


@functools.lru_cache(maxsize=None)
def source_of(module, names: tuple[str, ...]) -> str:
    """The reference code of `names` (top-level functions of `module`), one after another."""
    return "\n\n\n".join(inspect.getsource(getattr(module, name)) for name in names)


def lend(job, owner: str, part, reference):
    """Queue the step that lends `part.borrows` (their code from `reference`) to the namespace defining `owner`;
    its value: the names the student's code defined there (replaced)."""
    return job.lend(owner, source_of(reference, tuple(part.borrows)), part.borrows)


def probe(student, probes: dict):
    """Queue one job per {name: [(args, kwargs), ...]} calling the student's own `name`, before anything is lent;
    (jobs, steps) for `wrong`."""
    jobs, steps = {}, {}
    for name, calls in probes.items():
        job = student.job(lend=False)
        jobs[name] = job
        steps[name] = [job.call(name, *args, **kwargs) for args, kwargs in calls]
    return jobs, steps


def wrong(results: dict, steps: dict, probes: dict, reference) -> list[str]:
    """The names whose calls raised or returned something else than the reference's (a missing name is not wrong)."""
    bad = []
    for name, calls in probes.items():
        try:
            got = [results[name][step] for step in steps[name]]
        except MissingName:
            continue
        except CheckFailure:
            bad.append(name)
            continue
        expected = [getattr(reference, name)(*args, **kwargs) for args, kwargs in calls]
        if not all(expect.same(g, e) for g, e in zip(got, expected)):
            bad.append(name)
    return bad


def say(student, owner: str, part, replaced, bad) -> None:
    """The part's note: which of the student's pieces stood aside while `owner` was graded, and which were wrong."""
    names = ", ".join(part.borrows)
    student.note(_("while {owner} was graded, the grader's {names} stood in for yours (each is graded in its own "
                   "part, so that a mistake there costs points once, there){replaced}").format(
        owner=owner, names=names,
        replaced=_(": yours replaced: {names}").format(names=", ".join(replaced)) if replaced else ""))
    if bad:
        student.note(_("of your own pieces next to {owner}, these gave wrong results: {names} (their own parts say "
                       "why): fix them there too, or {owner} will not work outside the grader").format(
            names=", ".join(bad), owner=owner))


def lending(student, owner: str, part, reference, probes: dict) -> None:
    """From now on in `part`, every job starts by lending `part.borrows` to the namespace of `owner`
    (Student.job); the first time, the student's own copies are run on `probes` first and the note is said.
    Nothing is lent when `owner` is not defined (its checks say so)."""
    student.once(f"lent {part.id}", lambda: _start(student, owner, part, reference, probes))


def _start(student, owner: str, part, reference, probes: dict) -> None:
    session = student.session
    if not session.defines(owner):
        return
    namespace = session.namespace_for(owner)
    defined = session.load_report.get(namespace, {}).get("defined", ())
    # once per namespace, before anything is lent there: a later part that borrows the same names may run in the
    # same worker, where the namespace holds the lent versions already
    bad = student.once(f"lent probes {namespace}", lambda: _probe(student, {n: probes[n] for n in probes
                                                                          if n in defined}, reference))
    say(student, owner, part, [n for n in part.borrows if n in defined], bad)
    student.lending[part.id] = (owner, source_of(reference, tuple(part.borrows)), tuple(part.borrows))


def _probe(student, probes: dict, reference) -> list[str]:
    jobs, steps = probe(student, probes)
    return wrong(dict(zip(jobs, student.run(list(jobs.values())))), steps, probes, reference)
