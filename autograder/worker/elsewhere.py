"""The worker on a platform without the Linux sandbox (macOS): what `make grade` runs there, for a student's own
work on their own machine, where the sandbox would protect nothing (the answer key is in their clone).

Only what any POSIX system offers: its own session, no inherited file descriptor but the grader's socket, an
empty environment, resource limits where the system takes them. Every layer of the Linux sandbox is reported off,
so that the trusted side refuses unless grading without the sandbox was allowed (grade-workspace on a machine
without it, or --unsafe-no-sandbox).
"""
from __future__ import annotations

import os
import sys

from .sandbox import Protections, SandboxConfig

LINUX_LAYERS = ("namespaces", "network", "filesystem", "processes_tree", "unprivileged", "keyring", "seccomp")


def _close_fds(keep: int) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    os.closerange(3, keep)
    os.closerange(keep + 1, 4096)


def _limits(cfg: SandboxConfig, prot: Protections) -> None:
    import resource  # noqa: PLC0415 - POSIX only: this module runs where the Linux sandbox does not

    for name, which, value in (("memory", "RLIMIT_AS", cfg.memory_bytes), ("cpu_time", "RLIMIT_CPU", cfg.cpu_seconds),
                               ("file_size", "RLIMIT_FSIZE", cfg.max_file_bytes), ("core_dumps", "RLIMIT_CORE", 0)):
        try:
            resource.setrlimit(getattr(resource, which), (value, value))
            prot.set(f"limit_{name}", True, str(value))
        except (AttributeError, ValueError, OSError) as exc:
            prot.set(f"limit_{name}", False, str(exc))


def confine(sock_fd: int, cfg: SandboxConfig) -> Protections:
    """Called in the child right after fork, where sys.platform is not Linux."""
    prot = Protections(cause="platform")
    os.setsid()
    _close_fds(sock_fd)
    prot.set("file_descriptors", True, "only the grader's socket is open")
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": os.path.expanduser("~"), "LANG": "C.UTF-8",
                       "OMP_NUM_THREADS": "1"})
    prot.set("environment", True, "emptied")
    for layer in LINUX_LAYERS:
        prot.set(layer, False, f"no Linux sandbox on {sys.platform}")
    _limits(cfg, prot)
    return prot
