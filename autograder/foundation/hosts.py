"""Why the sandbox cannot be had on this host, and what fixes it there: the cause that a refusal names first.

The worker reports what failed (worker/sandbox.py, `Protections.cause`): creating its namespaces
(`unshare-user:EPERM` for an ordinary user, `unshare-root:EPERM` for root) or its first mount inside them
(`mount-user:EPERM`: a user namespace that holds no capability). This module reads what the host says about
itself (its sysctls, whether it is a container, whether root holds CAP_SYS_ADMIN) and names the cause and the
fix for that host:

- Ubuntu 23.10 and later (24.04: the usual JupyterHub host): kernel.apparmor_restrict_unprivileged_userns=1 lets
  an unprivileged process create a user namespace but gives it no capability: the AppArmor profile shipped in
  docs/apparmor/ (docs/jupyterhub.md, section 8), or the sysctl;
- Debian before 11 and older Ubuntu: kernel.unprivileged_userns_clone=0; RHEL: user.max_user_namespaces=0;
- a container (Docker's default seccomp profile refuses CLONE_NEWUSER, and every namespace to a root without
  CAP_SYS_ADMIN; its AppArmor profile refuses mount): the options of `docker run` that allow them;
- macOS and Windows: no Linux sandbox at all (Linux, WSL2 or a container).

Nothing here needs Linux: every fact read from /proc is None where it cannot be read.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

CAP_SYS_ADMIN = 21
PROFILE = "docs/apparmor/self-attention-autograder"
LOAD_PROFILE = (f"sudo install -m 644 {PROFILE} /etc/apparmor.d/ && "
                "sudo apparmor_parser -r /etc/apparmor.d/self-attention-autograder")
DOCKER_USER = "docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined"
DOCKER_ROOT = "docker run --cap-add SYS_ADMIN --security-opt apparmor=unconfined"
ELSEWHERE = "grade on Linux, in WSL2 (Windows) or in a Linux container (macOS: Docker Desktop)"


@dataclass(frozen=True)
class Host:
    """What the host says about user namespaces (None: not said, such as a sysctl this kernel lacks)."""

    platform: str = "linux"
    container: bool = False
    root: bool = False
    sys_admin: bool | None = None  # CAP_SYS_ADMIN in this process's effective set
    userns_clone: str | None = None  # kernel.unprivileged_userns_clone (Debian's patch)
    max_userns: str | None = None  # user.max_user_namespaces
    apparmor_restrict: str | None = None  # kernel.apparmor_restrict_unprivileged_userns (Ubuntu 23.10+)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _sys_admin() -> bool | None:
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    return None


def this_host() -> Host:
    if not sys.platform.startswith("linux"):
        return Host(platform=sys.platform)
    return Host(container=bool(os.environ.get("container")) or any(os.path.exists(p) for p in
                                                                    ("/.dockerenv", "/run/.containerenv")),
                root=os.geteuid() == 0, sys_admin=_sys_admin(),
                userns_clone=_read("/proc/sys/kernel/unprivileged_userns_clone"),
                max_userns=_read("/proc/sys/user/max_user_namespaces"),
                apparmor_restrict=_read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"))


def sandbox_platform(host: Host) -> bool:
    """Whether the sandbox can exist here at all (Linux namespaces)."""
    return host.platform.startswith("linux")


def _userns_refused(host: Host, err: str) -> tuple[str, str]:
    cause = f"this host refuses to create user namespaces (unshare: {err})"
    if host.userns_clone == "0":
        return cause + " by kernel.unprivileged_userns_clone=0", (
            "sudo sysctl -w kernel.unprivileged_userns_clone=1 (and the same line in /etc/sysctl.d/ to keep it)")
    if host.max_userns == "0":
        return cause + " by user.max_user_namespaces=0", (
            "sudo sysctl -w user.max_user_namespaces=15000 (and the same line in /etc/sysctl.d/ to keep it)")
    if host.container:
        return cause + " in this container (Docker's default seccomp profile)", (
            f"start the container with `{DOCKER_USER}`, or grade as root in one started with `{DOCKER_ROOT}`")
    return cause + " (a seccomp filter or a security policy)", (
        f"allow unprivileged user namespaces to the grader's Python (in a container: `{DOCKER_USER}`), or grade "
        "as root (sudo)")


def _userns_without_capabilities(host: Host) -> tuple[str, str]:
    if host.container:
        return ("user namespaces are created here but a mount inside one is refused (this container's AppArmor or "
                "seccomp profile)", f"start the container with `{DOCKER_USER}`")
    ubuntu = " (Ubuntu 23.10 and later: kernel.apparmor_restrict_unprivileged_userns=1)"
    return ("user namespaces are created here but hold no capability, so the sandbox cannot mount anything"
            + (ubuntu if host.apparmor_restrict != "0" else ""),
            f"load the AppArmor profile {PROFILE} for the grader's Python ({LOAD_PROFILE}; docs/jupyterhub.md, "
            "section 8), or sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or grade as root")


def explain(cause: str, host: Host) -> tuple[str, str] | None:
    """(the cause, the fix) for the worker's `cause` on `host`; None when there is nothing of the host to name (a
    layer turned off by configuration)."""
    if not sandbox_platform(host):
        return f"the sandbox needs Linux and this is {host.platform}", ELSEWHERE
    what, _, err = cause.partition(":")
    if what == "unshare-user":
        return _userns_refused(host, err)
    if what == "mount-user":
        return _userns_without_capabilities(host)
    if what == "unshare-root" and host.sys_admin is False:
        return ("the grader runs as root without CAP_SYS_ADMIN (a container's default), which namespaces need",
                f"start the container with `{DOCKER_ROOT}`, or grade as an ordinary user in one started with "
                f"`{DOCKER_USER}`")
    if what in ("unshare-root", "mount-root"):
        return (f"this host refuses namespaces or mounts to root ({what.split('-')[0]}: {err}; a seccomp filter or "
                "a security policy such as a container's AppArmor profile)",
                f"in a container, start it with `{DOCKER_ROOT}` (or `--security-opt seccomp=unconfined`)")
    return None
