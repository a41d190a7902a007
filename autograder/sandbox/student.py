"""What a hidden check sees of the submission: the `student` fixture.

`student.call("scaled_scores", Q, K)` sends the tensors to the sandboxed worker, runs the
student's function there, and returns what it returned, as plain data. Round trips cost more
than the small calls they carry: `call_each` and `run` send many calls, or many checks' steps
(`Job`s), at once, each failing alone as if sent by itself, and `once` lets the parametrized
checks of a part share one such batch. A module the student's code built stays in the worker
as a `Remote` that later steps target.

Every request is a step of a `Job` and every reply is checked by `batch.value_of` (batch.py
builds and checks them all); a single call here is a one-step job sent alone (`send`). The
session (session.py) delivers it within the part's deadline and turns every failure of the
student's code into a `CheckFailure` written for the student.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import batch
from ..foundation import i18n
from .batch import Call, Job, JobResult, Outcome, Step
from ..foundation.failures import CheckFailure, MissingName, PartStopped
from ..worker import wire

_ = i18n.message


@dataclass(frozen=True)
class Lending:
    """How a part that borrows other parts' functions is graded (checks/lent.py): which of the student's pieces
    next to `owner` get the trusted side's stand-ins. Each check runs with stand-ins for every piece that was
    wrong, missing or broken; a check that fails then runs again with the student's own pieces (stand-ins only
    for the missing and the broken, which hang or end the worker), and the better result is kept."""

    owner: str  # the name whose namespace the pieces are put in
    names: tuple[str, ...]  # every borrowed name
    wrong: tuple[str, ...] = ()  # the student's pieces that gave wrong results
    broken: tuple[str, ...] = ()  # ... that did not return or ended the worker
    missing: tuple[str, ...] = ()  # ... that the student's code does not define

    def standins(self, own: bool, witness: bool = False) -> tuple[str, ...]:
        """The names the grader stands in for: with `witness`, every one (the student's own, defined and not broken,
        as witnesses: `witnessed`)."""
        if witness:
            return self.names
        return tuple(n for n in self.names if n in self.broken + self.missing or (not own and n in self.wrong))

    @property
    def witnessed(self) -> tuple[str, ...]:
        """The student's pieces that a witness stand-in runs next to the reference's (neither missing nor broken)."""
        return tuple(n for n in self.names if n not in self.broken + self.missing)

    @property
    def retried(self) -> bool:
        """Whether grading with the student's own pieces differs from grading with every stand-in."""
        return bool(set(self.wrong) - set(self.broken))


@dataclass(frozen=True)
class MeasuredCall:
    """What a measured call returned, and the memory it needed."""

    value: object
    peak_bytes: int | None  # tensor storage alive at once, by the live-tensor meter inside the worker
    resident_growth: int | None  # growth of the worker's resident memory, sampled from outside (CPU only)


class Student:
    """The student's code as the checks drive it (one per graded submission)."""

    def __init__(self, session):
        self.session = session
        self._kept: dict[str, tuple[bool, object]] = {}
        # part id -> its Lending: every job of that part starts by lending stand-ins (checks/lent.py, `lending`)
        self.lending: dict[str, Lending] = {}
        self.own = False  # the checks now run with the student's own pieces (`own_pieces`)
        self.witness = False  # ... with witnesses of the student's pieces (`witnessing`)
        self.lenders: dict = {}  # part id -> its Lender (sandbox/lender.py): which pieces differed as witnesses

    def once(self, key: str, compute: Callable[[], object], every_mode: bool = False):
        """compute() the first time, then what it returned (or the failure it raised) again: for the
        checks of one part that share a batch. Kept for this submission only, and apart for the checks run again
        with the student's own pieces (`own_pieces`) unless `every_mode`."""
        if not every_mode and (self.own or self.witness):
            key = f"{'witnesses' if self.witness else 'own pieces'}: {key}"
        if key not in self._kept:
            try:
                self._kept[key] = (True, compute())
            except CheckFailure as exc:
                self._kept[key] = (False, exc)
        ok, value = self._kept[key]
        if not ok:
            raise value
        return value

    def note(self, message) -> None:
        """Say something about the part being graded as a whole (its report's notes), once."""
        notes = self.session.part.notes
        if message not in notes:
            notes.append(message)

    def job(self, lend: bool = True) -> Job:
        """An empty job: queue one check's steps on it, then `run` it with others. In a part that borrows other
        parts' functions (`lending`), the job first puts its stand-ins in place (unless `lend` is False)."""
        job = Job(self)
        part = self.session.part
        lending = self.lending.get(part.id) if lend and part is not None else None
        if lending and self.session.defines(lending.owner):
            job.lend(lending.owner, lending.names, lending.standins(self.own, self.witness),
                     lending.witnessed if self.witness else ())
        return job

    def retried(self, part_id: str) -> bool:
        """Whether a failed check of `part_id` is run again with the student's own pieces (Lending.retried)."""
        lending = self.lending.get(part_id)
        return lending is not None and lending.retried and self.session.defines(lending.owner)

    def witnessed(self, part_id: str) -> tuple[str, ...]:
        """The student's pieces that a failed check of `part_id` can be run again with as witnesses (checks/lent.py)."""
        lending = self.lending.get(part_id)
        if lending is None or part_id not in self.lenders or not self.session.defines(lending.owner):
            return ()
        return lending.witnessed

    @contextlib.contextmanager
    def witnessing(self):
        """The checks run inside with every piece the grader's, each call also run on the student's own piece and
        compared there (the part's Lender keeps the names that differed)."""
        self.witness = True
        try:
            yield
        finally:
            self.witness = False

    @contextlib.contextmanager
    def own_pieces(self):
        """The checks run inside with the student's own pieces (stand-ins only for the missing and the broken)."""
        self.own = True
        try:
            yield
        finally:
            self.own = False

    def run(self, jobs: Sequence[Job]) -> list[JobResult]:
        """Every job in one round trip; each result as that job sent alone would give."""
        return batch.run(self.session, jobs)

    def call_each(self, calls: Sequence[Call]) -> list[Outcome]:
        """Several calls in one round trip; each outcome as that call alone gives (`.value` raises)."""
        jobs = [self.job() for _ in calls]
        steps = [job.call(c.name, *c.args, **c.kwargs) for job, c in zip(jobs, calls)]
        return [Outcome(result, step) for result, step in zip(self.run(jobs), steps)]

    def call(self, name: str, *args, **kwargs):
        job = self.job()
        return self.send(job, job.call(name, *args, **kwargs))[0]

    def call_measured(self, name: str, *args, **kwargs) -> MeasuredCall:
        """The result and two memory figures: the live-tensor meter's peak (in the worker) and the
        growth of the worker's resident memory (sampled by the kernel's count, from outside)."""
        job = self.job()
        value, reply = self.send(job, job.measured(name, *args, **kwargs), watch_memory=True)
        peak = reply.get("peak_bytes")
        return MeasuredCall(value, peak if type(peak) is int and peak >= 0 else None, reply.get("resident_growth"))

    def wrap(self, value, label: str) -> Remote:
        """A handle returned by a student function (e.g. the module from to_official)."""
        return Remote(self, batch.as_object(value, label), label)

    def call_on_device(self, name: str, args, kwargs, device: str, rows) -> dict:
        """Run a student function on `device` (the GPU stage): what the worker measured, `rows` of the output among it."""
        job = self.job()
        return self.send(job, job.on_device(name, args, kwargs, device, rows))[0]

    def namespace_of(self, name: str, say_why: bool = True) -> str:
        """The source that defines `name` for the current part. With `say_why`, a missing name after a
        failed load fails with the load's failure (the GPU stage reports the missing name instead)."""
        ns = self.session.namespace_for(name)
        if ns is None and say_why and self.session.load_failure:  # nothing could be loaded: say why
            raise PartStopped(self.session.load_failure)
        if ns is None:
            raise MissingName(_("{name} is not defined in your submission{hint}").format(
                name=name, hint=self.session.load_hint()))
        return ns

    def send(self, job: Job, step: Step, watch_memory: bool = False) -> tuple[object, dict]:
        """One step of `job` sent alone, in a round trip of its own: (its value, checked as in a batch; the reply).
        With `watch_memory`, the session samples the worker's resident memory while it runs."""
        if job.unsendable is not None:
            raise job.unsendable[1]
        queued = job.steps[step.index]
        first = job.steps[0]
        if step.index and first.message.get("kind") == "lend":  # (a lent worker keeps it: sent again, it costs little)
            batch.value_of(self.session, self.session.request(first.message, first.what), first)
        reply = self.session.request(queued.message, queued.what, watch_memory=watch_memory)
        return batch.value_of(self.session, reply, queued), reply


@dataclass(frozen=True)
class Remote:
    """An object living in the worker (what to_official returned, ...): a job's step can target it or take
    it as an argument; `eval()` and `train()` switch its mode at once."""

    student: Student
    handle: wire.Handle
    label: str

    def train(self, mode: bool = True) -> Remote:
        job = self.student.job()
        self.student.send(job, job.train(self, mode))
        return self

    def eval(self) -> Remote:
        return self.train(False)
