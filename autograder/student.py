"""What a hidden check sees of the submission: the `student` fixture, and the objects it builds.

`student.call("scaled_scores", Q, K)` sends the tensors to the sandboxed worker, runs the
student's function there, and returns what it returned, as plain data. Modules are driven
remotely: `student.new("SelfAttention", 16)` returns a `Remote` whose weights the checks read
and set and whose forward they call. Each method here is one kind of request to the worker;
the session (session.py) delivers it within the part's deadline and turns every failure of
the student's code into a `CheckFailure` written for the student.

Round trips cost more than the small calls they carry: `call_each` and `run` send many calls,
or many checks' steps, at once (batch.py), each failing alone as if sent by itself, and
`once` lets the parametrized checks of a part share one such batch.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import batch, i18n
from .batch import Call, Job, JobResult, Outcome
from .failures import CheckFailure, MissingName, PartStopped
from .worker import wire

_ = i18n.message


@dataclass(frozen=True)
class MeasuredCall:
    """What a measured call returned, and the memory it needed."""

    value: object
    peak_bytes: int | None  # tensor storage alive at once, by the live-tensor meter inside the worker
    resident_growth: int | None  # growth of the worker's resident memory, sampled from outside (CPU only)


def _handles(value):
    """A check's argument with every Remote replaced by the handle that names it in the worker."""
    if isinstance(value, Remote):
        return value.handle
    if isinstance(value, (list, tuple)):
        return type(value)(_handles(v) for v in value)
    if isinstance(value, dict):
        return {k: _handles(v) for k, v in value.items()}
    return value


def _arguments(args, kwargs) -> dict:
    return {"args": wire.encode(_handles(list(args))), "kwargs": wire.encode(_handles(kwargs))}


class Student:
    """The student's code as the checks drive it (one per graded submission)."""

    def __init__(self, session):
        self.session = session
        self._kept: dict[str, tuple[bool, object]] = {}

    def once(self, key: str, compute: Callable[[], object]):
        """compute() the first time, then what it returned (or the failure it raised) again: for the
        checks of one part that share a batch. Kept for this submission only."""
        if key not in self._kept:
            try:
                self._kept[key] = (True, compute())
            except CheckFailure as exc:
                self._kept[key] = (False, exc)
        ok, value = self._kept[key]
        if not ok:
            raise value
        return value

    def job(self) -> Job:
        """An empty job: queue one check's steps on it, then `run` it with others."""
        return Job(self)

    def run(self, jobs: Sequence[Job]) -> list[JobResult]:
        """Every job in one round trip; each result as that job sent alone would give."""
        return batch.run(self.session, jobs)

    def call_each(self, calls: Sequence[Call]) -> list[Outcome]:
        """Several calls in one round trip; each outcome as that call alone gives (`.value` raises)."""
        jobs = [self.job() for _ in calls]
        steps = [job.call(c.name, *c.args, **c.kwargs) for job, c in zip(jobs, calls)]
        return [Outcome(result, step) for result, step in zip(self.run(jobs), steps)]

    def has(self, name: str) -> bool:
        return self.session.defines(name)

    def call(self, name: str, *args, **kwargs):
        return self._call(name, args, kwargs)[0]

    def call_measured(self, name: str, *args, **kwargs) -> MeasuredCall:
        """The result and two memory figures: the live-tensor meter's peak (in the worker) and the
        growth of the worker's resident memory (sampled by the kernel's count, from outside)."""
        value, reply = self._call(name, args, kwargs, measure=True)
        peak = reply.get("peak_bytes")
        return MeasuredCall(value, peak if type(peak) is int and peak >= 0 else None, reply.get("resident_growth"))

    def call_watched(self, name: str, *args, **kwargs) -> tuple[object, frozenset[str]]:
        """(result, the forbidden calls seen while it ran: "F.scaled_dot_product_attention", ...)"""
        value, reply = self._call(name, args, kwargs)
        return value, batch.forbidden_in(reply)

    def new(self, name: str, *args, seed: int | None = 0, **kwargs) -> Remote:
        handle = self._call(name, args, kwargs, seed=seed)[0]
        if not isinstance(handle, wire.Handle):
            raise CheckFailure(_("{name}(...) did not build an object").format(name=name))
        return Remote(self.session, handle, name)

    def wrap(self, value, label: str) -> Remote:
        """A handle returned by a student function (e.g. the module from to_official)."""
        if not isinstance(value, wire.Handle):
            raise CheckFailure(_("{label} returned {kind}, not an object such as a module").format(
                label=label, kind=type(value).__name__))
        return Remote(self.session, value, label)

    def linear(self, in_features: int, out_features: int) -> Remote:
        """A grader-built nn.Linear living in the worker (set its weights with load_state_dict)."""
        return self._builtin("linear", in_features, out_features)

    def standin(self, d_model: int, variant: str = "correct", dropout: float = 0.0) -> Remote:
        """A grader-built SelfAttention (correct or deliberately broken) living in the worker."""
        return self._builtin("attention_standin", d_model, variant, dropout)

    def call_on_device(self, name: str, args, kwargs, device: str, rows) -> dict:
        """Run a student function on `device` (the GPU stage): the worker moves the CPU tensors there
        and replies with what is graded (runtime.Worker.handle_device_call), `rows` of the output among it."""
        message = {"kind": "device_call", "ns": self.namespace_of(name, say_why=False), "target": name,
                   **_arguments(args, kwargs), "device": device, "rows": wire.encode(rows)}
        info = dict(self.session.request(message, name)["value"])
        if "rows" in info:
            info["rows"] = self.session.decode(info["rows"])
        return info

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

    def _call(self, name: str, args, kwargs, measure: bool = False, seed: int | None = None) -> tuple[object, dict]:
        message = {"kind": "call", "ns": self.namespace_of(name), "target": name, **_arguments(args, kwargs),
                   "measure": measure, "seed": seed}
        reply = self.session.request(message, name, watch_memory=measure)
        return self.session.decode(reply.get("value")), reply

    def _builtin(self, name: str, *args) -> Remote:
        reply = self.session.request({"kind": "call", "builtin": True, "target": name, **_arguments(args, {})}, name)
        return Remote(self.session, self.session.decode(reply.get("value")), name)


class Remote:
    """A student object living in the worker (a module, or what to_official returned)."""

    def __init__(self, session, handle: wire.Handle, label: str):
        self.session, self.handle, self.label = session, handle, label

    def __call__(self, *args, **kwargs):
        return self._invoke("__call__", args, kwargs, f"{self.label}.forward")

    def method(self, name: str, *args, **kwargs):
        return self._invoke(name, args, kwargs, f"{self.label}.{name}")

    def _invoke(self, method: str, args, kwargs, label: str):
        message = {"kind": "call", "object": self.handle.id, "target": method, **_arguments(args, kwargs)}
        return self.session.decode(self.session.request(message, label).get("value"))

    def describe(self) -> dict:
        info = self.session.request({"kind": "describe", "object": self.handle.id}, self.label).get("value")
        if not isinstance(info, dict):
            raise CheckFailure(_("{label} could not be inspected").format(label=self.label))
        return wire.clean_data(info)

    def state_dict(self) -> dict:
        raw = self.session.request({"kind": "state", "object": self.handle.id}, f"{self.label}.state_dict").get("value")
        if not isinstance(raw, dict):
            raise CheckFailure(_("{label}.state_dict() did not return a dict of tensors").format(label=self.label))
        return {k: self.session.decode(v) for k, v in raw.items()}

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        self.session.request({"kind": "state", "object": self.handle.id, "load": wire.encode(state), "strict": strict},
                             f"{self.label}.load_state_dict")

    def train(self, mode: bool = True) -> Remote:
        self.session.request({"kind": "train", "object": self.handle.id, "mode": mode}, f"{self.label}.train")
        return self

    def eval(self) -> Remote:
        return self.train(False)
