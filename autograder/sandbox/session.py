"""One submission's code, loaded in a sandboxed worker: the trusted side's channel to it.

A `Session` starts the worker (and a fresh one after a crash or a timeout), keeps the part
that is being graded with its deadline, and sends requests within that deadline. Every
failure of the student's code arrives as a `CheckFailure` (failures.py) whose message is
written for the student. What the requests say (call a function, build a module, ...) and
how their replies are checked is batch.py's concern; what the values on the wire look like is worker/wire.py's.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..foundation import i18n, spec
from ..foundation.extract import Source
from ..foundation.failures import (STANDIN_ELSEWHERE, CheckFailure, PartStopped, WorkerEnded, student_error,
                                   worker_text)
from ..foundation.limits import Limits
from .lender import refusal
from .pool import SandboxFailed, WorkerGone, WorkerTimeout, Zygote, start_worker
from .resident import ResidentPeak
from ..worker.names import WATCH_OFF, is_forbidden_name
from ..worker import protocol, rules, wire
from ..worker.sandbox import SandboxConfig, private_paths

_ = i18n.message


@dataclass
class PartState:
    id: str
    deadline: float
    stopped: i18n.Message | None = None
    calls: set = field(default_factory=set)  # (the student's function, the forbidden torch function it called)
    outputs: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # what the checks say about the part as a whole (i18n.Message)


class Session:
    """One submission's code, loaded in a sandboxed worker that is replaced after a crash or timeout."""

    def __init__(self, zygote: Zygote, sources: tuple[Source, ...], limits: Limits,
                 assignment: spec.Assignment | None = None, device: str = "cpu"):
        self.zygote = zygote
        self.sources = tuple(s for s in sources if s.error is None)
        self.limits = limits
        self.assignment = assignment or spec.DEFAULT
        self.device = device
        self.config = SandboxConfig(memory_bytes=limits.memory_bytes, cpu_seconds=limits.cpu_seconds,
                                    hide=private_paths(self.sources, tuple(limits.extra_hidden)),
                                    namespaces=limits.namespaces, unsafe_no_sandbox=limits.unsafe_no_sandbox,
                                    expose=("/dev",) if device != "cpu" else ())
        self.worker = None
        self.restarts = 0
        self.load_report: dict = {}
        self.load_failure: i18n.Message | None = None
        self.protections: dict = {}
        self.part: PartState | None = None
        self.parts: dict[str, PartState] = {}
        self.lent: frozenset[str] = frozenset()  # the names the worker holds stand-ins for ("lend" requests)
        # part id -> what answers the calls of that part's stand-ins (lender.Lender.answer; checks/lent.py sets it)
        self.lenders: dict[str, Callable[[dict], dict]] = {}
        # part id -> what answers the calls of the grader's objects made for that part (the stand-in SelfAttention's
        # forward, rules.STANDIN_FORWARD: checks/self_attention/standin.py sets it); any other part is refused
        self.grader_objects: dict[str, Callable[[dict], dict]] = {}

    # ------------------------------------------------------------ worker life
    def _ensure_worker(self):
        if self.worker is not None and self.worker.alive:
            return self.worker
        if self.load_failure:
            raise PartStopped(self.load_failure)
        if self.restarts > self.limits.max_restarts:
            raise PartStopped(_("not run: your code crashed or timed out too many times in earlier parts"))
        first = self.worker is None
        self.restarts += 0 if first else 1
        try:
            self.worker, reply = start_worker(self.zygote, list(self.sources), self.config, self.limits.load_seconds,
                                              warm=self.assignment.warm)
        except WorkerTimeout:
            self.load_failure = _("your code did not finish loading within {seconds:.0f} s: is there a long "
                                  "computation or an endless loop at the top level of a cell?").format(
                seconds=self.limits.load_seconds)
            raise PartStopped(self.load_failure) from None
        except protocol.ProtocolError as exc:
            self.load_failure = _("your code broke its connection to the grader while it was being loaded (did it "
                                  "write to a file descriptor it did not open?): {error}").format(error=str(exc))
            raise PartStopped(self.load_failure) from None
        except SandboxFailed as exc:  # before any student code ran: say so, do not blame the student
            self.load_failure = _("not graded: the grader could not start its sandbox on this machine ({error})"
                                  ).format(error=str(exc))
            raise PartStopped(self.load_failure) from None
        except WorkerGone as exc:
            self.load_failure = _("your code ended the grading process while it was being loaded (os._exit, "
                                  "exit() at the top level, a crash, or the memory limit): {error}").format(
                error=str(exc))
            raise PartStopped(self.load_failure) from None
        self.protections = self.worker.protections
        reply = wire.clean_data(reply) if isinstance(reply, dict) else {}
        if not reply.get("ok"):
            err = reply.get("error") or {}
            self.load_failure = _("your code could not be loaded: {kind}: {error}").format(
                kind=err.get("type"), error=err.get("message"))
            raise PartStopped(self.load_failure)
        if first:
            value = reply.get("value")
            self.load_report = value if isinstance(value, dict) else {}
        self.worker.lender = self.answer_piece
        return self.worker

    def answer_piece(self, message: dict) -> dict:
        """The trusted side's answer to a stand-in's call (worker/borrowed.py): the reference's result, from the
        lender of the part being graded; refused where that part lends nothing. The grader's stand-in SelfAttention
        (rules.STANDIN_FORWARD) is answered only in the part that registered it."""
        part = self.part.id if self.part is not None else None
        if message.get("name") == rules.STANDIN_FORWARD:
            answer = self.grader_objects.get(part)
            return answer(message) if answer is not None else refusal("TypeError", STANDIN_ELSEWHERE.msgid)
        answer = self.lenders.get(part)
        return answer(message) if answer is not None else refusal("TypeError", "nothing is lent to this part")

    def start(self) -> None:
        """Load the code once up front, so that load errors become notes even if no check runs."""
        try:
            self._ensure_worker()
        except PartStopped:
            pass

    def close(self) -> None:
        if self.worker is not None:
            self.worker.kill()

    def retire_worker(self) -> None:
        """End the worker; the next request starts a fresh one, as at the start (not a restart)."""
        self.close()
        self.worker, self.lent = None, frozenset()

    def load_notes(self) -> list[i18n.Message]:
        """Why the code could not be loaded, and each cell that raised while it was."""
        notes = [self.load_failure] if self.load_failure else []
        for src, info in self.load_report.items():
            for err in info.get("errors", ()):
                where = f" ({err['where']})" if err.get("where") else ""
                notes.append(_("{source}: cell {cell} raised {kind}: {error}{where}").format(
                    source=src, cell=err["cell"], kind=err["type"], error=worker_text(err["message"]), where=where))
        return notes

    def load_hint(self):
        """" (a cell failed to run: ...)" after a missing name, when a cell failed; else ""."""
        errors = [_("{source}, cell {cell}: {kind}: {error}").format(source=src, cell=e["cell"], kind=e["type"],
                                                                     error=worker_text(e["message"]))
                  for src, info in self.load_report.items() for e in info.get("errors", ())]
        return _(" (a cell failed to run: {error})").format(error=errors[0]) if errors else ""

    # ------------------------------------------------------------ parts
    def enter_part(self, part_id: str) -> PartState:
        """The part whose checks run now. A worker that was lent the grader's versions of some functions (worker:
        Worker.handle_lend) serves only parts that borrow every one of them: any other part gets a fresh worker, not
        counted as a restart, so that no function graded there can reach the reference code of the pieces."""
        if not self.lent <= set(self.assignment.part(part_id).borrows):
            self.retire_worker()
        if part_id not in self.parts:
            seconds = self.limits.part_seconds * (4 if self.assignment.part(part_id).gpu else 1)
            self.parts[part_id] = PartState(part_id, time.monotonic() + seconds)
        self.part = self.parts[part_id]
        return self.part

    @contextlib.contextmanager
    def aside(self, seconds: float):
        """Requests sent inside run under a deadline of their own, `seconds` from now, and cost the current part
        nothing: not its time, not its forbidden calls; a worker they hang or crash is replaced without counting as
        a restart (checks/lent.py probes the student's pieces this way). Yields the stand-in part."""
        part, started = self.part, time.monotonic()
        self.part = PartState(part.id, started + seconds)
        try:
            yield self.part
        finally:
            self.part = part
            part.deadline += time.monotonic() - started  # (the time spent aside is not the part's)
            if self.worker is not None and not self.worker.alive:
                self.retire_worker()

    def namespace_for(self, name: str, part_id: str | None = None) -> str | None:
        """The source whose code a part runs.

        When the submission holds the part's own notebook (an nbgrader submission), only that
        notebook counts, exactly as when nbgrader grades it alone; otherwise (a .py file, a
        self-learner's notebook) the source that defines most of the part's names.
        """
        defined = {src: set(info.get("defined", ())) for src, info in self.load_report.items()}
        part_id = part_id or (self.part.id if self.part else "")
        part = next((p for p in self.assignment.all_parts if p.id == part_id), None)
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

    # ------------------------------------------------------------ requests
    def request(self, message: dict, what: str, watch_memory: bool = False) -> dict:
        """Send one request to the worker within the part's deadline. With `watch_memory`, this side
        samples the worker's resident memory while it runs (reply["resident_growth"])."""
        part, worker = self._ready()
        self.lent |= lent_names([message])
        try:
            with ResidentPeak(worker.pid) if watch_memory else contextlib.nullcontext() as watch:
                reply = worker.request(message, part.deadline - time.monotonic())
            if isinstance(reply, dict):
                reply.pop("resident_growth", None)  # only the trusted side writes this figure
                if watch is not None:
                    reply["resident_growth"] = watch.growth
        except (WorkerTimeout, WorkerGone, protocol.ProtocolError) as exc:
            raise self._failure(exc, what) from None
        return self._accept(reply, what)

    def run_jobs(self, jobs: list[list[tuple[dict, str]]]) -> list[list]:
        """Several checks' requests in one round trip. A job is the (message, what) steps that one
        check would have sent one after another; the result of each job is the list of its steps'
        replies, ending at its first failure (a CheckFailure, exactly as `request` raises it).

        The worker answers each step as soon as it is done, so a step that hangs, crashes the
        worker or breaks the connection costs what it costs one request: a timeout stops the part
        (the jobs after it are not run), and after a crash the jobs after it are sent again to a
        fresh worker, as the checks that follow would have been."""
        done: list[list] = [[] for _ in jobs]
        todo = [j for j, steps in enumerate(jobs) if steps]
        while todo:
            try:
                part, worker = self._ready()
                self.lent |= lent_names(m for j in todo for m, _ in jobs[j])
                worker.send({"kind": "batch", "jobs": [[m for m, _ in jobs[j]] for j in todo]}, part.deadline)
            except CheckFailure as exc:  # the part was stopped, or the code could not be loaded
                for j in todo:
                    done[j] = [exc]
                return done
            except (WorkerTimeout, WorkerGone, protocol.ProtocolError) as exc:
                done[todo[0]] = [self._failure(exc, jobs[todo[0]][0][1])]
                todo = todo[1:]
                continue
            todo = self._receive_jobs(worker, part, jobs, todo, done)
        return done

    def _receive_jobs(self, worker, part: PartState, jobs, todo: list[int], done: list[list]) -> list[int]:
        """Read the replies of a sent batch; the jobs still to run (after a lost worker)."""
        for position, j in enumerate(todo):
            for _message, what in jobs[j]:
                try:
                    reply = worker.receive(part.deadline)
                    if not isinstance(reply, dict):  # the stream cannot be trusted any more
                        worker.kill()
                        raise protocol.ProtocolError("the reply is not a message")
                except (WorkerTimeout, WorkerGone, protocol.ProtocolError) as exc:
                    done[j].append(self._failure(exc, what))
                    return todo[position + 1:]
                try:
                    done[j].append(self._accept(reply, what))
                except CheckFailure as exc:
                    done[j].append(exc)
                    break
        return []

    def _ready(self):
        """(the current part, a live worker), or PartStopped when the part may send nothing more."""
        part = self.part
        if part is None:
            raise RuntimeError("a check ran outside a part")
        if part.stopped:
            raise PartStopped(part.stopped)
        worker = self._ensure_worker()
        if part.deadline - time.monotonic() <= 0:
            part.stopped = _("not run: the {seconds:.0f} s limit of this part was spent").format(
                seconds=self.limits.part_seconds)
            raise PartStopped(part.stopped)
        return part, worker

    def _failure(self, exc: Exception, what: str) -> CheckFailure:
        """The check's failure when the worker timed out, died or broke the connection during `what`."""
        if isinstance(exc, WorkerTimeout):
            self.part.stopped = _("{what} did not return within the part's {seconds:.0f} s limit (an endless "
                                  "loop?); the rest of this part was not run").format(
                what=what, seconds=self.limits.part_seconds)
            return PartStopped(self.part.stopped)
        if isinstance(exc, WorkerGone):
            return WorkerEnded(_("{what} ended the grading process (os._exit, a crash, or the {gib:.0f} GiB memory "
                                  "limit)").format(what=what, gib=self.limits.memory_bytes / 2**30))
        return CheckFailure(_("{what} returned something the grader refuses, or wrote to the grader's connection: "
                              "{error}").format(what=what, error=str(exc)))

    def _accept(self, reply, what: str) -> dict:
        """A reply's forbidden calls and output recorded for the part; the student's error raised."""
        part = self.part
        if not isinstance(reply, dict):
            raise self._failure(protocol.ProtocolError("the reply is not a message"), what)
        patterns = self.assignment.part(part.id).forbidden
        if patterns:  # (the reply's "forbidden" is its callers' torch functions again: the checks read it, not this)
            part.calls.update(forbidden_calls(reply.get("callers"), patterns))
        if reply.get("stdout") and len(part.outputs) < 20:
            part.outputs.append(wire.clean_text(reply["stdout"]))
        if not reply.get("ok"):
            error = reply.get("error")
            raise student_error(what, wire.clean_data(error) if isinstance(error, dict) else {})
        return reply

    def decode(self, value):
        """A value from the worker, checked by the wire codec; refused: the check fails with the reason."""
        try:
            return wire.decode_reply(value, self.device)
        except wire.Refused as exc:
            raise CheckFailure(i18n.Message(exc.template, tuple(exc.params.items()))) from None


def forbidden_calls(callers, patterns: tuple[str, ...]) -> set[tuple[str, str]]:
    """(student function, torch function) pairs of a reply that `patterns` forbid, as clean text; the
    grader's watch switched off counts for every part that forbids anything."""
    if not isinstance(callers, list):
        return set()
    pairs = [c for c in callers[:50] if isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c)]
    return {(wire.clean_text(caller, 100), wire.clean_text(label, 100)) for caller, label in pairs
            if is_forbidden_name(label, patterns) or label == WATCH_OFF}


def lent_names(messages) -> frozenset[str]:
    """The names that the "lend" requests among `messages` put stand-ins for in the worker."""
    return frozenset(name for m in messages if m.get("kind") == "lend" for name in m.get("standins", ()))
