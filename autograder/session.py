"""The trusted side's handle on one submission: what the hidden checks use to drive student code.

`Student.call("scaled_scores", Q, K)` sends the tensors to the sandboxed worker, runs the
student's function there, and returns what it returned, as plain data. Modules are driven
remotely: `Student.new("SelfAttention", 16)` returns a `Remote` whose weights the checks
read and set and whose forward they call. Every failure of the student's code arrives
here as a `CheckFailure` whose message is written for the student.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .extract import Source
from .results import Limits
from .run import WorkerGone, WorkerTimeout, Zygote, start_worker
from .spec import FROM_SCRATCH, PART_BY_ID
from .worker import protocol
from .worker.sandbox import SandboxConfig

MAX_ELEMENTS = 64 * 2**20  # a returned tensor larger than this is refused


class CheckFailure(AssertionError):
    """A check failed; str() is the message shown to the student."""


class MissingName(CheckFailure):
    pass


class StudentRaised(CheckFailure):
    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


class PartStopped(CheckFailure):
    """The part ran out of time, or the worker died: the rest of the part is not run."""


def _decode(value, device: str):
    """Validate and unwrap a reply from the worker: only plain data gets through."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [_decode(v, device) for v in value]
    if type(value) is dict:
        if "__tensor__" in value:
            t = value["__tensor__"]
            if type(t) is not torch.Tensor:
                raise CheckFailure("your code returned something that only looks like a tensor")
            if value.get("cls", "Tensor") not in ("Tensor", "Parameter"):
                raise CheckFailure(f"your code returned a {value['cls']} (a tensor subclass): return a plain "
                                   "torch.Tensor")
            if t.numel() > MAX_ELEMENTS:
                raise CheckFailure(f"your code returned a tensor of {t.numel():,} elements, far more than asked for")
            got = value.get("device", "cpu")
            if device == "cpu" and got != "cpu":
                raise CheckFailure(f"your code returned a tensor on {got}; keep results on the inputs' device (cpu)")
            return t
        if "__tuple__" in value:
            return tuple(_decode(v, device) for v in value["__tuple__"])
        if "__dict__" in value:
            return {_decode(k, device): _decode(v, device) for k, v in value["__dict__"]}
        if "__dtype__" in value:
            return getattr(torch, value["__dtype__"])
        if "__handle__" in value:
            return Handle(int(value["__handle__"]), str(value.get("type", "object")))
    raise CheckFailure(f"your code returned a value of an unexpected kind ({type(value).__name__})")


@dataclass(frozen=True)
class Handle:
    id: int
    type: str


def _encode(value):
    if isinstance(value, Remote):
        return {"__handle__": value.handle.id}
    if isinstance(value, Handle):
        return {"__handle__": value.id}
    if isinstance(value, torch.Tensor):
        return {"__tensor__": value.detach().clone()}
    if isinstance(value, torch.dtype):
        return {"__dtype__": str(value).removeprefix("torch.")}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


@dataclass
class PartState:
    id: str
    deadline: float
    stopped: str | None = None
    forbidden: set = field(default_factory=set)
    outputs: list = field(default_factory=list)


class Session:
    """One submission's code, loaded in a sandboxed worker that is replaced after a crash or timeout."""

    def __init__(self, zygote: Zygote, sources: tuple[Source, ...], limits: Limits, device: str = "cpu"):
        self.zygote = zygote
        self.sources = tuple(s for s in sources if s.error is None)
        self.limits = limits
        self.device = device
        self.config = SandboxConfig(memory_bytes=limits.memory_bytes, cpu_seconds=limits.cpu_seconds,
                                    hide=limits.extra_hidden, namespaces=limits.namespaces,
                                    expose=("/dev",) if device != "cpu" else ())
        self.worker = None
        self.restarts = 0
        self.load_report: dict = {}
        self.load_failure: str | None = None
        self.protections: dict = {}
        self.part: PartState | None = None
        self.parts: dict[str, PartState] = {}

    # ------------------------------------------------------------ worker life
    def _ensure_worker(self):
        if self.worker is not None and self.worker.alive:
            return self.worker
        if self.load_failure:
            raise PartStopped(self.load_failure)
        if self.restarts > self.limits.max_restarts:
            raise PartStopped("not run: your code crashed or timed out too many times in earlier parts")
        first = self.worker is None
        self.restarts += 0 if first else 1
        try:
            self.worker, reply = start_worker(self.zygote, list(self.sources), self.config, self.limits.load_seconds)
        except WorkerTimeout:
            self.load_failure = (f"your code did not finish loading within {self.limits.load_seconds:.0f} s: "
                                 "is there a long computation or an endless loop at the top level of a cell?")
            raise PartStopped(self.load_failure) from None
        except (WorkerGone, protocol.ProtocolError) as exc:
            self.load_failure = ("your code ended the grading process while it was being loaded (os._exit, "
                                 f"exit() at the top level, a crash, or the memory limit): {exc}")
            raise PartStopped(self.load_failure) from None
        self.protections = self.worker.protections
        if not reply.get("ok"):
            err = reply.get("error", {})
            self.load_failure = f"your code could not be loaded: {err.get('type')}: {err.get('message')}"
            raise PartStopped(self.load_failure)
        if first:
            self.load_report = reply["value"]
        return self.worker

    def start(self) -> None:
        """Load the code once up front, so that load errors become notes even if no check runs."""
        try:
            self._ensure_worker()
        except PartStopped:
            pass

    def close(self) -> None:
        if self.worker is not None:
            self.worker.kill()

    # ------------------------------------------------------------ parts
    def enter_part(self, part_id: str) -> PartState:
        if part_id not in self.parts:
            seconds = self.limits.part_seconds * (4 if PART_BY_ID[part_id].gpu else 1)
            self.parts[part_id] = PartState(part_id, time.monotonic() + seconds)
        self.part = self.parts[part_id]
        return self.part

    def namespace_for(self, name: str) -> str | None:
        """The source that defines `name`; for a part, the one defining most of its names."""
        defined = {src: set(info.get("defined", ())) for src, info in self.load_report.items()}
        part = PART_BY_ID.get(self.part.id) if self.part else None
        candidates = [src for src, names in defined.items() if name in names]
        if not candidates:
            return None
        if part:
            candidates.sort(key=lambda src: (-len(defined[src] & set(part.names)), src != part.notebook))
        return candidates[0]

    def defines(self, name: str) -> bool:
        return self.namespace_for(name) is not None

    def request(self, message: dict, what: str):
        part = self.part
        if part is None:
            raise RuntimeError("a check ran outside a part")
        if part.stopped:
            raise PartStopped(part.stopped)
        worker = self._ensure_worker()
        left = part.deadline - time.monotonic()
        if left <= 0:
            part.stopped = f"not run: the {self.limits.part_seconds:.0f} s limit of this part was spent"
            raise PartStopped(part.stopped)
        try:
            reply = worker.request(message, left)
        except WorkerTimeout:
            part.stopped = (f"{what} did not return within the part's {self.limits.part_seconds:.0f} s limit "
                            "(an endless loop?); the rest of this part was not run")
            raise PartStopped(part.stopped) from None
        except WorkerGone:
            raise CheckFailure(f"{what} ended the grading process (os._exit, a crash, or the "
                               f"{self.limits.memory_bytes / 2**30:.0f} GiB memory limit)") from None
        except protocol.ProtocolError as exc:
            raise CheckFailure(f"{what} returned something the grader refuses: {exc}") from None
        if reply.get("forbidden") and part.id in FROM_SCRATCH:
            part.forbidden.update(reply["forbidden"])
        if reply.get("stdout"):
            part.outputs.append(reply["stdout"])
        if not reply.get("ok"):
            raise _student_error(what, reply.get("error", {}))
        return reply

    # ------------------------------------------------------------ calls
    def call(self, name: str, *args, _measure: bool = False, _seed: int | None = None, **kwargs):
        ns = self.namespace_for(name)
        if ns is None:
            raise MissingName(f"{name} is not defined in your submission{self._load_hint()}")
        reply = self.request({"kind": "call", "ns": ns, "target": name, "args": _encode(list(args)),
                              "kwargs": _encode(kwargs), "measure": _measure, "seed": _seed}, name)
        value = _decode(reply["value"], self.device)
        return (value, reply.get("peak_bytes")) if _measure else value

    def call_object(self, handle: Handle, method: str, args, kwargs, label: str, measure: bool = False):
        reply = self.request({"kind": "call", "object": handle.id, "target": method, "args": _encode(list(args)),
                              "kwargs": _encode(kwargs), "measure": measure}, label)
        value = _decode(reply["value"], self.device)
        return (value, reply.get("peak_bytes")) if measure else value

    def builtin(self, name: str, *args, **kwargs) -> "Remote":
        reply = self.request({"kind": "call", "builtin": True, "target": name, "args": _encode(list(args)),
                              "kwargs": _encode(kwargs)}, name)
        handle = _decode(reply["value"], self.device)
        return Remote(self, handle, name)

    def _load_hint(self) -> str:
        errors = [f"{src}, cell {e['cell'] + 1}: {e['type']}: {e['message']}" for src, info in self.load_report.items()
                  for e in info.get("errors", ())]
        return f" (a cell failed to run: {errors[0]})" if errors else ""


def _student_error(what: str, err: dict) -> CheckFailure:
    kind, message, where = err.get("type", "Error"), err.get("message", ""), err.get("where", "")
    if kind == "NotImplementedError":
        return StudentRaised(f"{what} is not implemented yet (it raises NotImplementedError)", kind)
    at = f" at {where}" if where else ""
    if kind == "SystemExit":
        return StudentRaised(f"{what} called exit() ({message}){at}; a function must return its result", kind)
    return StudentRaised(f"{what} raised {kind}: {message}{at}", kind)


class Remote:
    """A student object living in the worker (a module, or what to_official returned)."""

    def __init__(self, session: Session, handle: Handle, label: str):
        self.session, self.handle, self.label = session, handle, label

    def __call__(self, *args, **kwargs):
        return self.session.call_object(self.handle, "__call__", args, kwargs, f"{self.label}.forward")

    def measure(self, *args, **kwargs):
        return self.session.call_object(self.handle, "__call__", args, kwargs, f"{self.label}.forward", measure=True)

    def method(self, name: str, *args, **kwargs):
        return self.session.call_object(self.handle, name, args, kwargs, f"{self.label}.{name}")

    def describe(self) -> dict:
        return self.session.request({"kind": "describe", "object": self.handle.id}, self.label)["value"]

    def state_dict(self) -> dict:
        raw = self.session.request({"kind": "state", "object": self.handle.id}, f"{self.label}.state_dict")["value"]
        return {k: _decode(v, self.session.device) for k, v in raw.items()}

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        self.session.request({"kind": "state", "object": self.handle.id, "load": _encode(state), "strict": strict},
                             f"{self.label}.load_state_dict")

    def train(self, mode: bool = True) -> "Remote":
        self.session.request({"kind": "train", "object": self.handle.id, "mode": mode}, f"{self.label}.train")
        return self

    def eval(self) -> "Remote":
        return self.train(False)


class Student:
    """What a hidden check sees of the submission."""

    def __init__(self, session: Session):
        self.session = session

    def has(self, name: str) -> bool:
        return self.session.defines(name)

    def call(self, name: str, *args, **kwargs):
        return self.session.call(name, *args, **kwargs)

    def measure(self, name: str, *args, **kwargs):
        """(result, peak bytes of tensor storage alive at once while it ran), measured in the worker."""
        return self.session.call(name, *args, _measure=True, **kwargs)

    def new(self, name: str, *args, seed: int | None = 0, **kwargs) -> Remote:
        handle = self.session.call(name, *args, _seed=seed, **kwargs)
        if not isinstance(handle, Handle):
            raise CheckFailure(f"{name}(...) did not build an object")
        return Remote(self.session, handle, name)

    def wrap(self, value, label: str) -> Remote:
        """A handle returned by a student function (e.g. the module from to_official)."""
        if not isinstance(value, Handle):
            raise CheckFailure(f"{label} returned {type(value).__name__}, not an object such as a module")
        return Remote(self.session, value, label)

    def standin(self, d_model: int, variant: str = "correct", dropout: float = 0.0) -> Remote:
        """A grader-built SelfAttention (correct or deliberately broken) living in the worker."""
        return self.session.builtin("attention_standin", d_model, variant, dropout)
