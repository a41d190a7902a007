"""Simulate a host that restricts user namespaces, then run a command there (`sysctl` is not writable on the test
machines, so a seccomp filter stands in for the host's policy, failing the calls as the real one does):

    python tests/restricted_host.py MODE COMMAND...

MODE:
- `no-userns`: creating a user namespace fails: unshare or clone with CLONE_NEWUSER -> EPERM (Docker's default seccomp
  profile for a container without CAP_SYS_ADMIN, Debian's kernel.unprivileged_userns_clone=0), clone3 -> ENOSYS (as
  Docker's profile answers it, so that the C library falls back to clone);
- `userns-without-caps`: a user namespace is created but holds no capability: mount, umount2 and pivot_root -> EPERM
  (Ubuntu 24.04's kernel.apparmor_restrict_unprivileged_userns=1, which confines an unprivileged process that creates
  one to a profile that denies every capability: the first thing it fails at is a mount);
- `docker-root`: `no-userns`, for a root without CAP_SYS_ADMIN (the caller drops it from the bounding set with
  `setpriv --bounding-set -sys_admin`, as Docker's default container does).

The filter is installed with prctl(PR_SET_SECCOMP) after PR_SET_NO_NEW_PRIVS, and every descendant inherits it.
x86_64 and aarch64.
"""
from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
CLONE_NEWUSER = 0x10000000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JSET_K, BPF_RET_K = 0x20, 0x15, 0x45, 0x06
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# (unshare, clone, clone3, mount, umount2, pivot_root)
SYSCALLS = {"x86_64": (272, 56, 435, 165, 166, 155), "aarch64": (97, 220, 435, 40, 39, 41)}
MODES = ("no-userns", "userns-without-caps", "docker-root")


def _filter(mode: str) -> bytes:
    arch = platform.machine()
    if arch not in SYSCALLS:
        raise SystemExit(f"restricted_host.py: no syscall table for {arch}")
    unshare, clone, clone3, mount, umount2, pivot_root = SYSCALLS[arch]
    deny, allow = SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ALLOW
    prog: list[tuple[int, int, int, int]] = [
        (BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (BPF_JEQ_K, 1, 0, AUDIT_ARCH[arch]),
        (BPF_RET_K, 0, 0, allow),
        (BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if mode == "userns-without-caps":
        for nr in (mount, umount2, pivot_root):
            prog += [(BPF_JEQ_K, 0, 1, nr), (BPF_RET_K, 0, 0, deny)]
    else:
        prog += [(BPF_JEQ_K, 0, 1, clone3), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS)]
        for nr in (unshare, clone):
            prog += [(BPF_JEQ_K, 0, 4, nr),
                     (BPF_LD_W_ABS, 0, 0, 16),  # seccomp_data.args[0], its low 32 bits (little-endian)
                     (BPF_JSET_K, 0, 1, CLONE_NEWUSER),
                     (BPF_RET_K, 0, 0, deny),
                     (BPF_RET_K, 0, 0, allow)]
    prog.append((BPF_RET_K, 0, 0, allow))
    return b"".join(struct.pack("HBBI", *insn) for insn in prog)


def install(mode: str) -> None:
    """Install the filter of `mode` on this process (and so on everything it runs)."""
    if mode not in MODES:
        raise SystemExit(f"restricted_host.py: unknown mode {mode!r}, one of {', '.join(MODES)}")
    code = _filter(mode)
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(code) // 8, ctypes.addressof(buf))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise SystemExit(f"restricted_host.py: seccomp filter refused: {os.strerror(ctypes.get_errno())}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    install(sys.argv[1])
    os.execvp(sys.argv[2], sys.argv[2:])
