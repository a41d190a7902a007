"""The trusted side's handle on one submission: what the hidden checks use to drive student code.

`Student.call("scaled_scores", Q, K)` sends the tensors to the sandboxed worker, runs the
student's function there, and returns what it returned, as plain data. Modules are driven
remotely: `Student.new("SelfAttention", 16)` returns a `Remote` whose weights the checks
read and set and whose forward they call. Every failure of the student's code arrives
here as a `CheckFailure` whose message is written for the student.
"""
from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass, field

import torch

from .extract import Source
from .resident import ResidentPeak
from .results import Limits
from .run import SandboxFailed, WorkerGone, WorkerTimeout, Zygote, start_worker
from .spec import FROM_SCRATCH, PART_BY_ID
from .worker import protocol
from .worker.sandbox import SYSTEM_TOP, SandboxConfig

MAX_ELEMENTS = 64 * 2**20  # a returned tensor larger than this is refused
MAX_DEPTH = 32  # nesting of a returned value
MAX_TEXT = 2000  # characters of any text the worker sends (messages, captured output)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # terminal escapes and other control characters
# Never covered as "the submission's surroundings": the system the worker runs on.
SYSTEM_DIRS = frozenset({"/", "/usr", "/usr/local", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/proc",
                         "/sys", "/dev", "/var", "/run", "/boot", "/opt"})


def clean_text(text, limit: int = MAX_TEXT) -> str:
    """Text from the worker, safe to show: no terminal escapes, bounded length."""
    text = _CONTROL.sub("?", str(text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clean_data(value, depth: int = 0):
    """A load report or error from the worker: plain dicts, lists and cleaned strings only."""
    if depth > 8:
        return None
    if isinstance(value, dict):
        return {clean_text(k, 100): _clean_data(v, depth + 1) for k, v in list(value.items())[:1000]}
    if isinstance(value, (list, tuple)):
        return [_clean_data(v, depth + 1) for v in list(value)[:1000]]
    if value is None or type(value) in (bool, int, float):
        return value
    return clean_text(value)


def private_paths(sources, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What the worker must not see besides the defaults: the caller's extra paths, the
    submission's folder and the three above it (nbgrader keeps course/submitted/<student>/<assignment>/,
    so these hold the other students' work and the course with its gradebook), and the current
    directory (where a grader is usually started: the course). System folders are never
    covered; the worker gets the student's code over its socket and needs none of these."""
    paths = list(extra)
    for source in sources:
        folder = os.path.dirname(os.path.abspath(source.path))
        for _ in range(4):
            paths.append(folder)
            folder = os.path.dirname(folder)
    try:
        paths.append(os.getcwd())
    except OSError:
        pass
    out = []
    for path in dict.fromkeys(os.path.realpath(p) for p in paths):
        top = path.split("/")[1] if path.startswith("/") else ""
        if path not in SYSTEM_DIRS and top not in SYSTEM_TOP and os.path.isdir(path):
            out.append(path)  # (a folder inside /usr or /etc would hide part of the system the worker needs)
    return tuple(out)


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


def _decode(value, device: str, depth: int = 0):
    """Validate and unwrap a reply from the worker: only plain data gets through.

    The worker is not trusted (student code runs there and can write to its socket), so
    everything is checked again here: types, nesting, tensor kind and size."""
    if depth > MAX_DEPTH:
        raise CheckFailure(f"your code returned a value nested more than {MAX_DEPTH} levels deep")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [_decode(v, device, depth + 1) for v in value]
    if type(value) is dict:
        if "__tensor__" in value:
            t = value["__tensor__"]
            if type(t) is not torch.Tensor:
                raise CheckFailure("your code returned something that only looks like a tensor")
            if t.layout != torch.strided or t.is_quantized or t.device.type != "cpu":
                raise CheckFailure(f"your code returned a {t.layout} tensor: return an ordinary dense tensor")
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
            return tuple(_decode(v, device, depth + 1) for v in value["__tuple__"])
        if "__dict__" in value:
            return {_decode(k, device, depth + 1): _decode(v, device, depth + 1) for k, v in value["__dict__"]}
        if "__dtype__" in value:
            dtype = getattr(torch, str(value["__dtype__"]), None)
            if not isinstance(dtype, torch.dtype):
                raise CheckFailure("your code returned an unknown dtype")
            return dtype
        if "__handle__" in value:
            return Handle(int(value["__handle__"]), clean_text(value.get("type", "object"), 100))
    raise CheckFailure(f"your code returned a value of an unexpected kind ({type(value).__name__})")


@dataclass(frozen=True)
class Measured:
    """What a measured call returned, and the memory it needed."""
    value: object
    peak_bytes: int | None  # tensor storage alive at once, by the live-tensor meter inside the worker
    resident_growth: int | None  # growth of the worker's resident memory, sampled from outside (CPU only)


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
                                    hide=private_paths(self.sources, tuple(limits.extra_hidden)),
                                    namespaces=limits.namespaces,
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
        except protocol.ProtocolError as exc:
            self.load_failure = ("your code broke its connection to the grader while it was being loaded (did it "
                                 f"write to a file descriptor it did not open?): {exc}")
            raise PartStopped(self.load_failure) from None
        except SandboxFailed as exc:  # before any student code ran: say so, do not blame the student
            self.load_failure = f"not graded: the grader could not start its sandbox on this machine ({exc})"
            raise PartStopped(self.load_failure) from None
        except WorkerGone as exc:
            self.load_failure = ("your code ended the grading process while it was being loaded (os._exit, "
                                 f"exit() at the top level, a crash, or the memory limit): {exc}")
            raise PartStopped(self.load_failure) from None
        self.protections = self.worker.protections
        reply = _clean_data(reply) if isinstance(reply, dict) else {}
        if not reply.get("ok"):
            err = reply.get("error") or {}
            self.load_failure = f"your code could not be loaded: {err.get('type')}: {err.get('message')}"
            raise PartStopped(self.load_failure)
        if first:
            value = reply.get("value")
            self.load_report = value if isinstance(value, dict) else {}
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

    def namespace_for(self, name: str, part_id: str | None = None) -> str | None:
        """The source whose code a part runs.

        When the submission holds the part's own notebook (an nbgrader submission), only that
        notebook counts, exactly as when nbgrader grades it alone; otherwise (a .py file, a
        self-learner's notebook) the source that defines most of the part's names.
        """
        defined = {src: set(info.get("defined", ())) for src, info in self.load_report.items()}
        part = PART_BY_ID.get(part_id or (self.part.id if self.part else ""))
        if part and part.notebook in defined:
            return part.notebook if name in defined[part.notebook] else None
        candidates = [src for src, names in defined.items() if name in names]
        if not candidates:
            return None
        if part:
            candidates.sort(key=lambda src: (-len(defined[src] & set(part.names)), src != part.notebook))
        return candidates[0]

    def defines(self, name: str, part_id: str | None = None) -> bool:
        return self.namespace_for(name, part_id) is not None

    def request(self, message: dict, what: str, watch_memory: bool = False):
        """Send one request to the worker within the part's deadline. With `watch_memory`, this side
        samples the worker's resident memory while it runs (reply["resident_growth"])."""
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
            with ResidentPeak(worker.pid) if watch_memory else contextlib.nullcontext() as watch:
                reply = worker.request(message, left)
            if not isinstance(reply, dict):
                raise protocol.ProtocolError("the reply is not a message")
            reply.pop("resident_growth", None)  # only the trusted side writes this figure
            if watch is not None:
                reply["resident_growth"] = watch.growth
        except WorkerTimeout:
            part.stopped = (f"{what} did not return within the part's {self.limits.part_seconds:.0f} s limit "
                            "(an endless loop?); the rest of this part was not run")
            raise PartStopped(part.stopped) from None
        except WorkerGone:
            raise CheckFailure(f"{what} ended the grading process (os._exit, a crash, or the "
                               f"{self.limits.memory_bytes / 2**30:.0f} GiB memory limit)") from None
        except protocol.ProtocolError as exc:
            raise CheckFailure(f"{what} returned something the grader refuses, or wrote to the grader's "
                               f"connection: {exc}") from None
        forbidden = reply.get("forbidden")
        if forbidden and part.id in FROM_SCRATCH and isinstance(forbidden, list):
            part.forbidden.update(clean_text(f, 100) for f in forbidden)
        if reply.get("stdout") and len(part.outputs) < 20:
            part.outputs.append(clean_text(reply["stdout"]))
        if not reply.get("ok"):
            error = reply.get("error")
            raise _student_error(what, _clean_data(error) if isinstance(error, dict) else {})
        return reply

    # ------------------------------------------------------------ calls
    def call(self, name: str, *args, _seed: int | None = None, **kwargs):
        return self._call(name, args, kwargs, False, _seed)[0]

    def measure(self, name: str, *args, **kwargs) -> Measured:
        value, reply = self._call(name, args, kwargs, True, None)
        peak = reply.get("peak_bytes")
        return Measured(value, peak if type(peak) is int and peak >= 0 else None, reply.get("resident_growth"))

    def call_watched(self, name: str, *args, **kwargs) -> tuple[object, frozenset[str]]:
        """The result, and which of the fused kernel and the official module the call used."""
        value, reply = self._call(name, args, kwargs, False, None)
        used = reply.get("forbidden")
        return value, frozenset(clean_text(f, 100) for f in used) if isinstance(used, list) else frozenset()

    def _call(self, name: str, args, kwargs, measure: bool, seed: int | None) -> tuple[object, dict]:
        ns = self.namespace_for(name)
        if ns is None and self.load_failure:  # nothing is defined because nothing could be loaded: say why
            raise PartStopped(self.load_failure)
        if ns is None:
            raise MissingName(f"{name} is not defined in your submission{self._load_hint()}")
        reply = self.request({"kind": "call", "ns": ns, "target": name, "args": _encode(list(args)),
                              "kwargs": _encode(kwargs), "measure": measure, "seed": seed}, name,
                             watch_memory=measure)
        return _decode(reply.get("value"), self.device), reply

    def call_object(self, handle: Handle, method: str, args, kwargs, label: str):
        reply = self.request({"kind": "call", "object": handle.id, "target": method, "args": _encode(list(args)),
                              "kwargs": _encode(kwargs)}, label)
        return _decode(reply.get("value"), self.device)

    def builtin(self, name: str, *args, **kwargs) -> "Remote":
        reply = self.request({"kind": "call", "builtin": True, "target": name, "args": _encode(list(args)),
                              "kwargs": _encode(kwargs)}, name)
        handle = _decode(reply.get("value"), self.device)
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

    def method(self, name: str, *args, **kwargs):
        return self.session.call_object(self.handle, name, args, kwargs, f"{self.label}.{name}")

    def describe(self) -> dict:
        info = self.session.request({"kind": "describe", "object": self.handle.id}, self.label).get("value")
        if not isinstance(info, dict):
            raise CheckFailure(f"{self.label} could not be inspected")
        return _clean_data(info)

    def state_dict(self) -> dict:
        raw = self.session.request({"kind": "state", "object": self.handle.id}, f"{self.label}.state_dict").get("value")
        if not isinstance(raw, dict):
            raise CheckFailure(f"{self.label}.state_dict() did not return a dict of tensors")
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

    def measure(self, name: str, *args, **kwargs) -> "Measured":
        """The result and two memory figures: the live-tensor meter's peak (in the worker) and the
        growth of the worker's resident memory (sampled by the kernel's count, from outside)."""
        return self.session.measure(name, *args, **kwargs)

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

    def call_watched(self, name: str, *args, **kwargs) -> tuple[object, frozenset[str]]:
        """(result, the forbidden calls seen while it ran: "F.scaled_dot_product_attention", ...)"""
        return self.session.call_watched(name, *args, **kwargs)

    def linear(self, in_features: int, out_features: int) -> Remote:
        """A grader-built nn.Linear living in the worker (set its weights with load_state_dict)."""
        return self.session.builtin("linear", in_features, out_features)

    def standin(self, d_model: int, variant: str = "correct", dropout: float = 0.0) -> Remote:
        """A grader-built SelfAttention (correct or deliberately broken) living in the worker."""
        return self.session.builtin("attention_standin", d_model, variant, dropout)
