"""How much a submission may take, and the command-line flags that change it (declared here once).

Every command that grades (grade, grade-class) adds the same flags with `add_flags` and reads
them back with `from_args`; each flag's help text states its default from `Limits` itself.
Also the refusal to grade where the sandbox is incomplete (`SandboxUnavailable`), which the commands
catch: nothing here imports torch, so a command's process does not before it starts its worker pool.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from . import hosts, i18n

GIB = 2**30


@dataclass(frozen=True)
class Limits:
    """Defaults are in the README's table of limits."""

    part_seconds: float = 20.0  # wall clock for all the checks of one part
    load_seconds: float = 30.0  # starting a worker and running the student's top-level code
    memory_bytes: int = 6 * GIB
    cpu_seconds: int = 300
    max_restarts: int = 8  # fresh workers after a crash or a timeout, per submission
    namespaces: bool = True
    # grade even when a layer of the sandbox is missing (every report says so); default: the environment's say
    unsafe_no_sandbox: bool = field(default_factory=lambda: unsafe_from_env())
    extra_hidden: tuple[str, ...] = field(default=())
    submission_seconds: float | None = None  # grade-class: the deadline of one submission (default: derived below)
    # the trusted grading processes' own memory (RLIMIT_DATA: grade-class's, nbgrader's per notebook); an honest
    # grading holds under 600 MB
    grader_memory_bytes: int = 4 * GIB

    def submission_deadline(self, parts: int) -> float:
        """How long grade-class waits for one submission of `parts` parts before it kills its grading process
        and records 0 with the reason: the longest an honest submission can take under these limits (every
        part to its limit, every restart of the worker to its load limit) plus a minute, unless set."""
        if self.submission_seconds:
            return self.submission_seconds
        return parts * self.part_seconds + (self.max_restarts + 1) * self.load_seconds + 60.0


def _g(x: float) -> str:
    return f"{x:g}"


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The limits' flags; an omitted flag keeps the default."""
    d = Limits()
    parser.add_argument("--part-seconds", type=float, help=f"wall-clock limit per part (default {_g(d.part_seconds)})")
    parser.add_argument("--memory-gib", type=float,
                        help=f"address-space limit of the worker (default {_g(d.memory_bytes / GIB)})")
    parser.add_argument("--no-namespaces", action="store_true", help="do not use Linux namespaces (weaker sandbox; "
                        "needs --unsafe-no-sandbox)")
    parser.add_argument(UNSAFE_FLAG, action="store_true",
                        help="grade even when a layer of the sandbox cannot be had on this machine (default: refuse, "
                             "naming it); student code may then read the solutions. Every report says so")
    parser.add_argument("--load-seconds", type=float, help="limit for starting a worker and running the top-level "
                        f"code (default {_g(d.load_seconds)})")
    parser.add_argument("--cpu-seconds", type=int, help=f"CPU-time limit of one worker (default {d.cpu_seconds})")
    parser.add_argument("--submission-seconds", type=float, help="grade-class: the longest one submission may take "
                        "before its grading process is killed and it scores 0 with the reason (default: every part "
                        "and every restart at its limit, plus a minute)")
    parser.add_argument("--grader-memory-gib", type=float, help="grade-class: memory limit of each trusted grading "
                        f"process (default {_g(d.grader_memory_bytes / GIB)})")
    parser.add_argument("--hide", action="append", metavar="PATH", help="also hide this path from student code "
                        "(repeatable; the submission's folders and the current directory are always hidden)")


def from_args(args: argparse.Namespace) -> Limits:
    """The Limits that the flags of `add_flags` ask for."""
    d = Limits()
    return Limits(part_seconds=args.part_seconds or d.part_seconds,
                  memory_bytes=int((args.memory_gib or d.memory_bytes / GIB) * GIB),
                  namespaces=not args.no_namespaces, unsafe_no_sandbox=args.unsafe_no_sandbox or unsafe_from_env(),
                  load_seconds=args.load_seconds or d.load_seconds,
                  cpu_seconds=args.cpu_seconds or d.cpu_seconds,
                  extra_hidden=tuple(args.hide or ()), submission_seconds=args.submission_seconds,
                  grader_memory_bytes=int((getattr(args, "grader_memory_gib", None) or d.grader_memory_bytes / GIB)
                                          * GIB))


def limit_grader_memory(limit_bytes: int) -> None:
    """Cap this trusted grading process's data memory (RLIMIT_DATA, soft: what the process allocates; torch's and
    CUDA's reserved address space is not counted). Past it an allocation fails here (MemoryError: the check or the
    reply that asked for it fails) instead of the machine. The zygote, started from here, lifts it back to the hard
    limit (worker/start.py): a worker keeps its own limits."""
    import resource  # noqa: PLC0415 - POSIX only: this module is imported on Windows too, where grading refuses

    _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard),
                                              hard))


_ = i18n.message
UNSAFE_FLAG = "--unsafe-no-sandbox"
UNSAFE_ENV = "AUTOGRADER_UNSAFE_NO_SANDBOX"


def unsafe_from_env() -> bool:
    """Whether the environment allows grading without a complete sandbox (nbgrader's autograde and Gradescope's
    run_autograder, which take no flags of ours): AUTOGRADER_UNSAFE_NO_SANDBOX=1."""
    return os.environ.get(UNSAFE_ENV, "").strip().lower() in ("1", "true", "yes")


class SandboxUnavailable(Exception):
    """A layer of the sandbox could not be had on this machine and the instructor did not allow grading
    without it: no student code runs. str() is the one line every command prints; `reason`, its cause alone
    (what `make grade` says, in the graded folder's language, when it grades a student's own work without the
    sandbox: a message)."""

    def __init__(self, message: str, reason: i18n.Message | str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


def reason(off: dict, cause: str = "") -> i18n.Message:
    """Why the sandbox cannot be had here, in a few words: the host's cause (hosts.py), else the missing layers."""
    why = hosts.explain(cause, hosts.this_host()) if cause else None
    return why[0] if why else _("missing {layers}").format(layers=", ".join(sorted(off)))


def refusal(off: dict, cause: str = "") -> str:
    """The one line that says why the sandbox cannot be had on this host and the fix there, when the worker's
    `cause` names one (hosts.py), then which layers are missing (and why the first is) and how to grade anyway."""
    first = min(off)
    why = hosts.explain(cause, hosts.this_host()) if cause else None
    head = f"{why[0]}; fix: {why[1]}. The sandbox is" if why else "the sandbox is"
    return (f"refusing to grade: {head} incomplete on this machine, missing {', '.join(sorted(off))} "
            f"({first}: {off[first]}); student code could read the solutions and the gradebook. To grade anyway, "
            f"pass {UNSAFE_FLAG} (nbgrader: {UNSAFE_ENV}=1)")


def platform_refusal() -> SandboxUnavailable | None:
    """Where the Linux sandbox cannot exist at all (macOS, Windows): what every command that grades raises before
    it starts a worker (None on Linux)."""
    host = hosts.this_host()
    if hosts.sandbox_platform(host):
        return None
    off = {"namespaces": f"no Linux namespaces on {host.platform}"}
    return SandboxUnavailable(refusal(off, "platform"), reason(off, "platform"))
