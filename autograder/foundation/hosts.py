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

Nothing here needs Linux: every fact read from /proc is None where it cannot be read. The cause and the fix are
messages: English in every command's refusal, the graded folder's language in `make grade`'s line.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from . import i18n
from .i18n import Message

CAP_SYS_ADMIN = 21
PROFILE = "docs/apparmor/self-attention-autograder"
LOAD_PROFILE = (f"sudo install -m 644 {PROFILE} /etc/apparmor.d/ && "
                "sudo apparmor_parser -r /etc/apparmor.d/self-attention-autograder")
DOCKER_USER = "docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined"
DOCKER_ROOT = "docker run --cap-add SYS_ADMIN --security-opt apparmor=unconfined"

_ = i18n.message


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


def _userns_refused(host: Host, err: str) -> tuple[Message, Message]:
    if host.userns_clone == "0":
        return _("this host refuses to create user namespaces (unshare: {err}) by kernel.unprivileged_userns_clone=0").format(
            err=err), _("sudo sysctl -w kernel.unprivileged_userns_clone=1 (and the same line in /etc/sysctl.d/ to keep it)")
    if host.max_userns == "0":
        return _("this host refuses to create user namespaces (unshare: {err}) by user.max_user_namespaces=0").format(
            err=err), _("sudo sysctl -w user.max_user_namespaces=15000 (and the same line in /etc/sysctl.d/ to keep it)")
    if host.container:
        return (_("this host refuses to create user namespaces (unshare: {err}) in this container (Docker's default "
                  "seccomp profile)").format(err=err),
                _("start the container with `{docker_user}`, or grade as root in one started with `{docker_root}`").format(
                    docker_user=DOCKER_USER, docker_root=DOCKER_ROOT))
    return (_("this host refuses to create user namespaces (unshare: {err}) (a seccomp filter or a security "
              "policy)").format(err=err),
            _("allow unprivileged user namespaces to the grader's Python (in a container: `{docker_user}`), or grade "
              "as root (sudo)").format(docker_user=DOCKER_USER))


def _userns_without_capabilities(host: Host) -> tuple[Message, Message]:
    if host.container:
        return (_("user namespaces are created here but a mount inside one is refused (this container's AppArmor or "
                  "seccomp profile)"), _("start the container with `{docker_user}`").format(docker_user=DOCKER_USER))
    cause = (_("user namespaces are created here but hold no capability, so the sandbox cannot mount anything "
               "(Ubuntu 23.10 and later: kernel.apparmor_restrict_unprivileged_userns=1)")
             if host.apparmor_restrict != "0" else
             _("user namespaces are created here but hold no capability, so the sandbox cannot mount anything"))
    return cause, _("load the AppArmor profile {profile} for the grader's Python ({load}; docs/jupyterhub.md, section "
                    "8), or sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or grade as root").format(
        profile=PROFILE, load=LOAD_PROFILE)


def explain(cause: str, host: Host) -> tuple[Message, Message] | None:
    """(the cause, the fix) for the worker's `cause` on `host`, as messages (str(): English; render(lang): the graded
    folder's language); None when there is nothing of the host to name (a layer turned off by configuration)."""
    if not sandbox_platform(host):
        return (_("the sandbox needs Linux and this is {platform}").format(platform=host.platform),
                _("grade on Linux, in WSL2 (Windows) or in a Linux container (macOS: Docker Desktop)"))
    what, _sep, err = cause.partition(":")
    if what == "unshare-user":
        return _userns_refused(host, err)
    if what == "mount-user":
        return _userns_without_capabilities(host)
    if what == "unshare-root" and host.sys_admin is False:
        return (_("the grader runs as root without CAP_SYS_ADMIN (a container's default), which namespaces need"),
                _("start the container with `{docker_root}`, or grade as an ordinary user in one started with "
                  "`{docker_user}`").format(docker_root=DOCKER_ROOT, docker_user=DOCKER_USER))
    if what in ("unshare-root", "mount-root"):
        return (_("this host refuses namespaces or mounts to root ({call}: {err}; a seccomp filter or a security policy "
                  "such as a container's AppArmor profile)").format(call=what.split("-")[0], err=err),
                _("in a container, start it with `{docker_root}` (or `--security-opt seccomp=unconfined`)").format(
                    docker_root=DOCKER_ROOT))
    return None
