"""The last layer of the sandbox: the worker gives up every privilege before student code runs.

What to do depends on what the worker created, never on the uid it sees afterwards (inside a user
namespace that it created itself, an ordinary instructor's process sees uid 0 and holds every
capability over its own namespaces):

- real root, no user namespace created (`root`): the bounding set emptied, then groups, gid and uid
  set to nobody (which clears every capability), then no_new_privs;
- an unprivileged grader in a user namespace it created (`user`): a second, nested user namespace
  with a new mount namespace, which locks every mount it inherits (the covers can no longer be
  unmounted or moved, whatever the capabilities), mapped to nobody; then the bounding, inheritable,
  permitted, effective and ambient sets emptied, and no_new_privs;
- no namespace at all (`none`): no_new_privs and whatever capabilities there are dropped.

Each ends with a check read back from /proc/self/status: no capability in any set, no_new_privs
on, uid not 0. The layer is reported on only when that check passes.
"""
from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
NOBODY = 65534
CAP_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def _empty_bounding_set() -> None:
    for cap in range(_last_cap() + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # (EINVAL for a number this kernel lacks: nothing to drop)


def _clear_capabilities() -> None:
    """Bounding set first (it needs CAP_SETPCAP), then ambient, then inheritable, permitted, effective."""
    _empty_bounding_set()
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _libc.capset(ctypes.byref(header), data)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _nested_user_namespace() -> str | None:
    """Enter a user and mount namespace owned by this one, as nobody: every inherited mount is locked.
    None when done, else why not."""
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        return f"nested user namespace refused: {os.strerror(ctypes.get_errno())}"
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{NOBODY} 0 1")
        _write("/proc/self/gid_map", f"{NOBODY} 0 1")
    except OSError as exc:
        return f"nested user namespace unmapped: {exc.strerror}"
    return None


def _become_nobody() -> str | None:
    """As real root: empty the bounding set, then become nobody (which clears the other sets)."""
    _empty_bounding_set()
    try:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    except OSError as exc:
        return f"could not become nobody: {exc.strerror}"
    return None


def status() -> dict[str, str]:
    """The capability sets, NoNewPrivs and Uid lines of /proc/self/status."""
    try:
        with open("/proc/self/status") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines) if k in CAP_SETS + ("NoNewPrivs", "Uid")}


def unprivileged(seen: dict[str, str]) -> str | None:
    """None when `seen` (status()) shows no capability, no_new_privs and a uid other than 0; else what is left."""
    left = [name for name in CAP_SETS if int(seen.get(name, "1") or "1", 16) != 0]
    if seen.get("NoNewPrivs") != "1":
        left.append("no_new_privs is off")
    if (seen.get("Uid") or "0").split()[0] == "0":
        left.append("uid 0")
    return ", ".join(left) or None


def drop(created: str) -> tuple[bool, str]:
    """Give up every privilege as `created` says ("root", "user" or "none"); (done, what or why not)."""
    if created == "root":
        why = _become_nobody()
        how = "nobody, no capabilities (bounding set empty), no_new_privs"
    elif created == "user":
        why = _nested_user_namespace()
        how = ("nobody in a nested user namespace that locks the covers; no capabilities (bounding set empty), "
               "no_new_privs")
    else:
        why = None
        how = "no capabilities, no_new_privs (no namespace: the grader's own user)"
    _clear_capabilities()
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if why is not None:
        return False, why
    left = unprivileged(status())
    if left:
        return False, f"privileges left: {left}"
    return True, how
