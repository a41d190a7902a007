"""grade-class's grading processes: started, fed one submission at a time, watched, stopped.

Each grading process (autograder/commands/classworker.py) is a fresh program (`exec`) that dies with this
process (parent-death signal) and leaves the stop signals to it. It talks to this process over two pipes,
one length-prefixed pickle per message (both sides are the grader's own code; student code runs
two levels below, in the sandboxed workers of the process's zygote). The pool starts one zygote by exec, the
seed (autograder/sandbox/prestart.py), before the grading processes; each grading process's zygote is forked
by the seed and handed to it as a socket (the seed has imported torch once for the class; no zygote is ever
a copy of a grading process, whose memory holds the instructor's environment):

    -> limits                 once, at start
    <- ("ready",)             torch imported, the Grader warm
    -> (student, args)        one submission
    <- ("ok", data) | ("error", text) | ("refused", text)   its result (refused: the sandbox is incomplete)

No multiprocessing: no semaphore in /dev/shm (a worker forked from here could reach it; a killed run
would leave it behind), no resource tracker, no management thread. And a deadline per submission: a
grading process that has not answered within `Limits.submission_deadline` is killed (its zygote and
workers follow it), the submission is handed to `overdue` (recorded as 0 with the reason), and a fresh
process takes the rest of the queue.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time

from ..sandbox.lifetime import STOP_SIGNALS
from ..foundation.limits import Limits, SandboxUnavailable
from ..sandbox import prestart
from ..sandbox.prestart import PACKAGE_PARENT

FRAME = struct.Struct("!Q")
OUT_OF_MEMORY = 3  # the exit status of a grading process that ran out of its memory limit (classworker.py)


class ProcessDied(Exception):
    """A grading process ended twice while it graded a submission (killed, out of memory, a crash); `why`: how."""

    def __init__(self, why: str):
        super().__init__(f"the grading process ended ({why}) twice on this submission")
        self.why = why


def send(fd: int, message) -> None:
    body = pickle.dumps(message)
    view = memoryview(FRAME.pack(len(body)) + body)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(fd: int):
    (size,) = FRAME.unpack(_read_exact(fd, FRAME.size))
    return pickle.loads(_read_exact(fd, size))  # (from our own grading process, never from student code)


class GradingProcess:
    """One grading process and its two pipes; `student` is the submission it is grading (None: idle). With `seed`
    (the control socket of a zygote started by prestart.launch) its zygote is forked by the seed; else it starts
    its own."""

    def __init__(self, limits: Limits, seed=None):
        zygote = prestart.zygote_from(seed) if seed is not None else None
        task_r, self.tasks = os.pipe()
        self.results, result_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        debug = os.environ.get("AUTOGRADER_DEBUG")
        # In this process group (a kill of the group reaches it at once), with the stop signals blocked from its
        # first instruction until it ignores them (classworker.main): a Ctrl-C is the parent's alone, and never
        # a traceback of a process half started.
        before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autograder.commands.classworker", str(task_r), str(result_w), str(os.getpid()),
                 *([str(zygote.fileno())] if zygote else [])],
                pass_fds=(task_r, result_w, *([zygote.fileno()] if zygote else [])), env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None if debug else subprocess.DEVNULL)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
            if zygote is not None:
                zygote.close()  # (its grading process's alone: the zygote ends when that process does)
        os.close(task_r)
        os.close(result_w)
        self.ready = False
        self.student: str | None = None
        self.since = 0.0
        send(self.tasks, limits)

    def give(self, student: str, args: tuple) -> None:
        send(self.tasks, (student, args))
        self.student, self.since = student, time.monotonic()

    def kill(self) -> None:
        """SIGKILL (its zygote and workers follow by their parent-death signal); safe to call twice."""
        try:
            self.proc.kill()
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for fd in (self.tasks, self.results):
            try:
                os.close(fd)
            except OSError:
                pass

    def why_ended(self) -> str:
        code = self.proc.wait()
        if code == OUT_OF_MEMORY:
            return "out of its memory limit"
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"


class Pool:
    """`workers` grading processes, started at once with the seed of their zygotes (each imports torch while the
    caller reads the gradebook)."""

    def __init__(self, workers: int, limits: Limits):
        self.limits = limits
        self.seed = prestart.launch()  # (dies with this process, as the grading processes do)
        self.procs = [GradingProcess(limits, self.seed[0]) for _ in range(workers)]

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
        self.procs = []
        if self.seed is not None:
            control, seed = self.seed
            self.seed = None
            control.close()
            seed.kill()
            seed.wait()

    def run(self, queue: dict[str, tuple], deadline: float, record, failed, overdue, done, check) -> None:
        """Grade every queued submission (student -> args); a result goes to `record(student, data)`, a grading
        failure to `failed(student, exc)`, a submission past `deadline` seconds to `overdue(student, seconds)`;
        `done(student)` after each. `check()` is called several times a second (a stop signal raises there).
        Raises SandboxUnavailable when a grading process refuses; always leaves no process behind."""
        pending, attempts = list(queue), {}
        try:
            while pending or any(p.student for p in self.procs):
                check()
                for proc in self.procs:
                    if proc.ready and proc.student is None and pending:
                        student = pending.pop(0)
                        proc.give(student, queue[student])
                ready, _, _ = select.select([p.results for p in self.procs], [], [], 0.2)
                for proc in [p for p in self.procs if p.results in ready]:
                    self._answer(proc, pending, attempts, record, failed, done)
                for proc in [p for p in self.procs if p.student and time.monotonic() - p.since > deadline]:
                    student = proc.student
                    self._replace(proc, pending)
                    overdue(student, deadline)
                    done(student)
        finally:
            self.close()

    def _answer(self, proc: GradingProcess, pending: list, attempts: dict, record, failed, done) -> None:
        student = proc.student
        try:
            message = recv(proc.results)
        except (EOFError, OSError, pickle.UnpicklingError):
            why = proc.why_ended()
            if student is None:  # before its first submission: this machine cannot run the grader
                raise OSError(f"a grading process did not start ({why}); run with AUTOGRADER_DEBUG=1 to see "
                              "its error") from None
            attempts[student] = attempts.get(student, 0) + 1
            if attempts[student] < 2:
                pending.insert(0, student)  # retried once, in the fresh process that replaces this one
            self._replace(proc, pending)
            if attempts[student] >= 2:
                failed(student, ProcessDied(why))
                done(student)
            return
        kind = message[0]
        if kind == "ready":
            proc.ready = True
            return
        proc.student = None
        if kind == "refused":
            raise SandboxUnavailable(message[1])
        if kind == "ok":
            record(student, message[1])
        else:
            failed(student, RuntimeError(message[1]))
        done(student)

    def _replace(self, proc: GradingProcess, pending: list) -> None:
        """Kill `proc`; a fresh process takes its place while submissions wait."""
        proc.kill()
        self.procs.remove(proc)
        if pending:
            self.procs.append(GradingProcess(self.limits, self.seed[0]))
