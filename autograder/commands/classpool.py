"""grade-class's grading processes: started, fed one submission at a time, watched, stopped.

The pool starts one zygote by exec, the seed (commands/seed.py, autograder/sandbox/prestart.py), which imports
torch once for the class and forks, for each grading process, its zygote and then the grading process itself
(autograder/commands/classworker.py, through a monitor that tells this process its pid and exit code: `Forked`).
No zygote is ever a copy of a grading process, whose memory holds the instructor's environment; that environment
reaches the grading process over its own pipe, never through the seed. A grading process dies with its monitor,
the monitor with the seed, the seed with this process (parent-death signals); the stop signals are this
process's. Each grading process talks to this process over two pipes, one length-prefixed pickle per message
(both sides are the grader's own code; student code runs two levels below, in the sandboxed workers of its
zygote). nbgrader's plugin holds a pool of one (`Pool(1, limits)`), for its whole process:

    -> (environment, folder)  once, first
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
import time

from ..sandbox.lifetime import kill_processes
from ..worker import proctree
from ..foundation.limits import Limits, SandboxUnavailable
from ..sandbox import prestart
from ..sandbox.prestart import PACKAGE_PARENT

FRAME = struct.Struct("!Q")
STATUS = struct.Struct("!i")  # a forked grading process's monitor's two reports: its pid, then its exit code (seed.py)
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


class Forked:
    """A grading process forked by the seed (commands/seed.py), with as much of subprocess.Popen as the pool uses.
    This process is not its parent: its monitor writes to `status` its pid once forked, then its exit code once it
    ended; an end of the pipe without them means the seed or the monitor was killed (so was the grading process)."""

    def __init__(self, status: int):
        self.status = status
        self.known: int | None = None  # its pid, once read
        self.returncode: int | None = None

    @property
    def pid(self) -> int | None:
        """Its pid (read from the monitor at first use: the seed forks it once it has imported torch), or None
        if the seed or the monitor ended first."""
        if self.known is None and self.returncode is None:
            self.known = self._report()
        return self.known

    def _report(self) -> int | None:
        try:
            data = _read_exact(self.status, STATUS.size)
        except (EOFError, OSError):
            return None
        return STATUS.unpack(data)[0]

    def kill(self) -> None:
        if self.pid is not None and self.returncode is None:
            kill_processes([self.pid])

    def wait(self) -> int:
        if self.returncode is None:
            code = self._report() if self.pid is not None else None
            os.close(self.status)
            self.returncode = -signal.SIGKILL if code is None else code
            if code is None and self.pid is not None:  # (killed with its monitor: it ends by its death signal)
                proctree.wait_gone({self.pid}, time.monotonic() + 5.0)
        return self.returncode


class GradingProcess:
    """One grading process and its two pipes; `student` is the submission it is grading (None: idle). The seed
    (`seed`: the control socket of a zygote started by prestart.launch(SEED)) forks it and its zygote."""

    def __init__(self, limits: Limits, seed):
        task_r, self.tasks = os.pipe()
        self.results, result_w = os.pipe()
        status_r, status_w = os.pipe()
        zygote = None
        try:
            zygote = prestart.zygote_from(seed)
            prestart.ask(seed, "grader", [task_r, result_w, zygote.fileno(), status_w])
        except OSError:  # (the seed has ended: this process is never forked, its pipes read as closed at once)
            pass
        finally:
            for fd in (task_r, result_w, status_w):
                os.close(fd)
            if zygote is not None:
                zygote.close()  # (its grading process's alone: the zygote ends when that process does)
        self.proc = Forked(status_r)
        self.ready = False
        self.student: str | None = None
        self.since = 0.0
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        try:
            send(self.tasks, (env, os.getcwd()))  # (straight to it: the seed never holds the instructor's environment)
            send(self.tasks, limits)
        except OSError:  # (never forked: its results pipe says so, and why_ended why)
            pass

    def give(self, student: str, args: tuple) -> None:
        send(self.tasks, (student, args))
        self.student, self.since = student, time.monotonic()

    def kill(self) -> None:
        """SIGKILL (its zygote ends with its socket, and the zygote's workers with it); safe to call twice."""
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
        if self.proc.pid is None:
            return "never started: the seed that forks it had ended"
        if code == OUT_OF_MEMORY:
            return "out of its memory limit"
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"


class Pool:
    """`workers` grading processes, forked with their zygotes by the seed, which imports torch once for the class
    while the caller reads the gradebook."""

    def __init__(self, workers: int, limits: Limits):
        self.limits = limits
        self.seed = prestart.launch(prestart.SEED)  # (dies with this process, as the grading processes do)
        self.procs = [GradingProcess(limits, self.seed[0]) for _ in range(workers)]

    def close(self) -> None:
        if self.seed is not None:  # first: a grading process it has not forked yet never will be
            control, seed = self.seed
            self.seed = None
            control.close()
            seed.kill()
            seed.wait()
        for proc in self.procs:
            proc.kill()
        self.procs = []

    def run(self, queue: dict[str, tuple], deadline: float, record, failed, overdue, done, check) -> None:
        """Grade every queued submission (student -> args); a result goes to `record(student, data)`, a grading
        failure to `failed(student, exc)`, a submission past `deadline` seconds to `overdue(student, seconds)`;
        `done(student)` after each. `check()` is called several times a second (a stop signal raises there).
        Raises SandboxUnavailable when a grading process refuses; always leaves no process behind."""
        pending, attempts = list(queue), {}
        try:
            while pending or any(p.student for p in self.procs):
                check()
                self._feed(pending, queue)
                ready, _, _ = select.select([p.results for p in self.procs], [], [], 0.2)
                for proc in [p for p in self.procs if p.results in ready]:
                    self._answer(proc, pending, queue, attempts, (record, failed, done))
                for proc in [p for p in self.procs if p.student and time.monotonic() - p.since > deadline]:
                    student = proc.student
                    self._replace(proc, pending)
                    overdue(student, deadline)
                    done(student)
        finally:
            self.close()

    def _feed(self, pending: list, queue: dict[str, tuple]) -> None:
        """The next submissions to the grading processes that are ready and idle."""
        for proc in self.procs:
            if proc.ready and proc.student is None and pending:
                student = pending.pop(0)
                proc.give(student, queue[student])

    def _answer(self, proc: GradingProcess, pending: list, queue: dict[str, tuple], attempts: dict, calls) -> None:
        record, failed, done = calls
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
        # Its next submission first: the result's gradebook write (tens of milliseconds, more as nbgrader's gradebook
        # grows) then overlaps that grading, instead of leaving the process idle (a fifth of a 200-student class).
        self._feed(pending, queue)
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
