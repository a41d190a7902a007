"""Many requests in one round trip: the calls several checks make, or the steps of one check.

A round trip to the sandboxed worker costs far more than the small tensor functions it runs,
so checks queue their requests and send them together:

    outcomes = student.call_each([Call("attend", w, V), Call("attend", w4, V4)])
    got = outcomes[0].value            # that call's result, or its failure raised here

    job = student.job()                # the steps one check takes, one after another
    m = job.new("SelfAttention", 12, 8, 6)
    job.load_state_dict(m, weights, strict=False)
    job.eval(m)
    out = job.forward(m, x, mask=mask)
    [result] = student.run([job])      # any number of jobs in one round trip
    got = result[out]                  # raises the job's failure if it failed at `out` or before

Each call, and each job, fails alone, exactly as if it had been sent by itself: the worker
stops a job at its first failing step, answers every step as soon as it is done, and the
session (Session.run_jobs) turns a hang, a crash or a broken connection into the failure of
the step where it happened, sending the jobs after a crash to a fresh worker.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..foundation import i18n
from ..foundation.failures import CheckFailure
from ..worker import wire

_ = i18n.message

JOB_SEED = 0  # the seed of torch's generator in the worker before each job's first step


@dataclass(frozen=True)
class Call:
    """One call of a student function, for `Student.call_each`: Call("attend", weights, V)."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def __init__(self, name: str, *args, **kwargs):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "kwargs", kwargs)


@dataclass(frozen=True, eq=False)
class Step:
    """A queued step of a `Job`: give it to later steps (as a target or an argument), or read its result.
    `step[i]` stands for item i of what the step returned (e.g. one of three layers)."""

    job: Job
    index: int
    label: str  # how the student's messages name it, e.g. "SelfAttention.forward"
    item: int | None = None

    def __getitem__(self, i: int) -> Step:
        return Step(self.job, self.index, self.label, i)

    def named(self, label: str) -> Step:
        """The same step, named `label` in the messages of the steps that use it."""
        return Step(self.job, self.index, label, self.item)

    @property
    def ref(self) -> dict:
        return {wire.RESULT: self.index if self.item is None else [self.index, self.item]}


@dataclass
class Queued:
    message: dict
    what: str
    kind: str  # what the reply's value is: "value", "object", "describe", "state", "device" or "none"
    wrapped: str | None = None  # must be an object (a handle), named so in the failure


class Job:
    """The requests one check would send one after another, queued to travel with other jobs.

    Each method queues one step and returns it; nothing is sent until `Student.run`. `student` is
    the Student whose submission the job runs (its `namespace_of` and `wrap` are used here).
    """

    def __init__(self, student):
        self.student = student
        self.steps: list[Queued] = []
        self.unsendable: tuple[int, CheckFailure] | None = None  # (step, why): e.g. a name the code lacks

    def _add(self, message: dict, what: str, kind: str = "value") -> Step:
        if not self.steps and message.get("seed") is None:  # every job starts from the same random numbers,
            message = {**message, "seed": JOB_SEED}  # whatever the worker ran before it (issue 53)
        self.steps.append(Queued(message, what, kind))
        return Step(self, len(self.steps) - 1, what)

    def _refs(self, value):
        """A step's argument with every earlier step replaced by a reference the worker resolves."""
        if isinstance(value, Step):
            if value.job is not self:
                raise ValueError("a step can only use the steps of its own job")
            return value.ref
        if isinstance(value, (list, tuple)):
            return type(value)(self._refs(v) for v in value)
        if isinstance(value, dict):
            return {k: self._refs(v) for k, v in value.items()}
        return {wire.HANDLE: value.handle.id} if hasattr(value, "handle") else value

    def _arguments(self, args, kwargs) -> dict:
        return {"args": wire.encode(self._refs(list(args))), "kwargs": wire.encode(self._refs(kwargs))}

    @staticmethod
    def _target(target) -> dict | int:
        return target.ref if isinstance(target, Step) else target.handle.id

    def wrap(self, step: Step, label: str) -> Step:
        """`step` must return an object that stays in the worker (as `Student.wrap` demands), named
        `label`; the returned step targets it under that name."""
        self.steps[step.index].wrapped = label
        return step.named(label)

    def call(self, name: str, *args, **kwargs) -> Step:
        """The student's function (or class) `name` called with these arguments."""
        return self._call(name, args, kwargs, seed=None, kind="value")

    def new(self, name: str, *args, seed: int | None = 0, **kwargs) -> Step:
        """An object built by the student's class `name` (torch seeded with `seed` first)."""
        return self._call(name, args, kwargs, seed=seed, kind="object")

    def fetch(self, name: str) -> Step:
        """The student's object `name` itself, not called (a class that a grader function of the worker drives)."""
        return self._add({"kind": "call", "ns": self._namespace(name), "target": name, "fetch": True}, name)

    def measured(self, name: str, *args, **kwargs) -> Step:
        """The call, its tensors metered by the worker (reply["peak_bytes"]): `Student.call_measured` sends it
        alone, sampling the worker's resident memory around it."""
        return self._call(name, args, kwargs, seed=None, kind="value", measure=True)

    def on_device(self, name: str, args, kwargs, device: str, rows) -> Step:
        """(the GPU stage) The student's function run on `device`: the worker moves the CPU tensors there and
        replies with what is graded (runtime.Worker.handle_device_call), `rows` of the output among it. A name
        the code lacks fails as missing, even after a failed load."""
        ns = self._namespace(name, say_why=False)
        return self._add({"kind": "device_call", "ns": ns, "target": name, **self._arguments(args, kwargs),
                          "device": device, "rows": wire.encode(rows)}, name, "device")

    def _namespace(self, name: str, say_why: bool = True) -> str:
        """The source defining `name`; if there is none, the job cannot be sent and fails here, saying why."""
        try:
            return self.student.namespace_of(name, say_why)
        except CheckFailure as exc:
            if self.unsendable is None:
                self.unsendable = (len(self.steps), exc)
            return ""

    def _call(self, name: str, args, kwargs, seed, kind: str, measure: bool = False) -> Step:
        ns = self._namespace(name)
        return self._add({"kind": "call", "ns": ns, "target": name, **self._arguments(args, kwargs),
                          "measure": measure, "seed": seed}, name, kind)

    def lend(self, owner: str, names, standins=(), witness=()) -> Step:
        """In the namespace that defines `owner`, stand-ins for `standins` (each call answered by the trusted side
        with the reference's result: runtime.Worker.handle_lend) and the student's own versions of the other `names`:
        the rest of the job runs the part's code on those pieces. The stand-ins for `witness` also run the student's
        own piece and send its result along (the trusted side notes which differ). Its value: the stand-ins that
        replaced a function of the student."""
        ns = self._namespace(owner)
        return self._add({"kind": "lend", "ns": ns, "names": list(names), "standins": list(standins),
                          "witness": list(witness)}, owner)

    def builtin(self, name: str, *args, seed: int = 0) -> Step:
        """A grader-built object in the worker (autograder/worker/standins.py), torch seeded with `seed` first: its
        random weights never depend on what the worker ran before."""
        return self._add({"kind": "call", "builtin": True, "target": name, **self._arguments(args, {}), "seed": seed},
                         name, "object")

    def builtin_value(self, name: str, *args, label: str | None = None, **kwargs) -> Step:
        """A grader function of the worker (autograder/worker/standins.py) applied to values and to what
        earlier steps returned (e.g. a student's mask_mod): its result comes back as a value. `label`: how
        the student's messages name the step (default: `name`)."""
        return self._add({"kind": "call", "builtin": True, "target": name, **self._arguments(args, kwargs)},
                         label or name)

    def linear(self, in_features: int, out_features: int) -> Step:
        return self.builtin("linear", in_features, out_features)

    def standin(self, d_model: int, variant: str = "correct", dropout: float = 0.0) -> Step:
        return self.builtin("attention_standin", d_model, variant, dropout)

    def method(self, target, method: str, *args, **kwargs) -> Step:
        """`target.method(*args, **kwargs)`; `target` is a step of this job or a Remote."""
        label = f"{target.label}.forward" if method == "__call__" else f"{target.label}.{method}"
        return self._add({"kind": "call", "object": self._target(target), "target": method,
                          **self._arguments(args, kwargs)}, label)

    def forward(self, target, *args, **kwargs) -> Step:
        return self.method(target, "__call__", *args, **kwargs)

    def describe(self, target) -> Step:
        return self._add({"kind": "describe", "object": self._target(target)}, target.label, "describe")

    def state_dict(self, target) -> Step:
        return self._add({"kind": "state", "object": self._target(target)}, f"{target.label}.state_dict", "state")

    def load_state_dict(self, target, state: dict, strict: bool = True) -> Step:
        return self._add({"kind": "state", "object": self._target(target), "load": wire.encode(state),
                          "strict": strict}, f"{target.label}.load_state_dict", "none")

    def train(self, target, mode: bool = True) -> Step:
        return self._add({"kind": "train", "object": self._target(target), "mode": mode}, f"{target.label}.train",
                         "none")

    def eval(self, target) -> Step:
        return self.train(target, False)


class JobResult:
    """What a job's steps returned. Reading a step raises the job's failure if the job failed at that
    step or before it (the check would have stopped there), or never ran it; `failed_at` is the index of that step."""

    def __init__(self, job: Job, values: list, forbidden: list, failure: CheckFailure | None = None,
                 failed_at: int | None = None):
        self.job, self.values, self._forbidden = job, values, forbidden
        self.failure, self.failed_at = failure, failed_at

    def __getitem__(self, step: Step):
        # (a job that could not be sent, e.g. for a name the code lacks, ran none of its steps: each says why)
        if self.failure is not None and (self.failed_at <= step.index or step.index >= len(self.values)):
            raise self.failure
        return self.values[step.index]

    def failed(self, step: Step) -> bool:
        """Whether the job failed exactly at `step`."""
        return self.failure is not None and self.failed_at == step.index

    def check(self) -> JobResult:
        """Raise the job's failure, if it has one."""
        if self.failure is not None:
            raise self.failure
        return self

    def forbidden(self, step: Step) -> frozenset[str]:
        """The forbidden calls seen while `step` ran ("F.scaled_dot_product_attention", ...)."""
        self[step]
        return self._forbidden[step.index]

    def remote(self, step: Step):
        """The object a step built, as a Remote for further requests."""
        return self.job.student.wrap(self[step], step.label)


@dataclass(frozen=True)
class Outcome:
    """One call of `Student.call_each`: `.value` is what it returned, or raises its failure."""

    result: JobResult
    step: Step

    @property
    def value(self):
        return self.result[self.step]

    @property
    def forbidden(self) -> frozenset[str]:
        return self.result.forbidden(self.step)


def forbidden_in(reply: dict) -> frozenset[str]:
    """The forbidden calls a reply reports, as clean text."""
    used = reply.get("forbidden")
    return frozenset(wire.clean_text(f, 100) for f in used) if isinstance(used, list) else frozenset()


def as_object(value, label: str) -> wire.Handle:
    """`value`, an object that stays in the worker (a handle), or the failure naming `label` as what returned it."""
    if not isinstance(value, wire.Handle):
        raise CheckFailure(_("{label} returned {kind}, not an object such as a module").format(
            label=label, kind=type(value).__name__))
    return value


def value_of(session, reply: dict, step: Queued):
    """A step's reply checked, the same whether the step was sent alone (`Student.send`) or in a batch."""
    if step.kind == "device":
        info = dict(reply["value"])
        if "rows" in info:
            info["rows"] = session.decode(info["rows"])
        return info
    value = reply.get("value")
    if step.kind == "describe":
        if not isinstance(value, dict):
            raise CheckFailure(_("{label} could not be inspected").format(label=step.what))
        return wire.clean_data(value)
    if step.kind == "state":
        if not isinstance(value, dict):
            raise CheckFailure(_("{what}() did not return a dict of tensors").format(what=step.what))
        return {k: session.decode(v) for k, v in value.items()}
    if step.kind == "none":
        return None
    value = session.decode(value)
    if step.kind == "object" and not isinstance(value, wire.Handle):
        raise CheckFailure(_("{name}(...) did not build an object").format(name=step.what))
    if step.wrapped is not None:
        as_object(value, step.wrapped)
    return value


def run(session, jobs) -> list[JobResult]:
    """Every job in one round trip (more only after a lost worker); each result as that job alone gives."""
    sendable = [j for j in jobs if j.unsendable is None and j.steps]
    replies = dict(zip(map(id, sendable), session.run_jobs([[(q.message, q.what) for q in j.steps] for j in sendable])))
    results = []
    for job in jobs:
        values, forbidden = [], []
        if job.unsendable is not None:
            results.append(JobResult(job, values, forbidden, job.unsendable[1], job.unsendable[0]))
            continue
        failure = failed_at = None
        for index, reply in enumerate(replies.get(id(job), [])):
            try:
                if isinstance(reply, CheckFailure):
                    raise reply
                values.append(value_of(session, reply, job.steps[index]))
                forbidden.append(forbidden_in(reply))
            except CheckFailure as exc:
                failure, failed_at = exc, index
                break
        results.append(JobResult(job, values, forbidden, failure, failed_at))
    return results
