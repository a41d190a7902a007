"""The worker's last two layers: a keyring of its own, and a seccomp filter over the kernel it never needs.

- **keyring**: a forked process keeps the session keyring of whoever started the grader (the instructor's
  login session, with what it holds) and possesses it: it may read, overwrite and add keys. The worker
  joins a new, empty, anonymous session keyring before any student code runs.
- **seccomp**: a filter (classic BPF, built here with ctypes: no libseccomp) that answers an error instead
  of running the call, for what grading never needs and what the kernel exposes to a process without
  privileges: the keyrings (`add_key`, `request_key`, `keyctl`: also the user keyring that every process
  of the same uid shares, across runs); `bpf`, `perf_event_open`, `userfaultfd`; new namespaces
  (`unshare`, `setns`, `clone` with a CLONE_NEW* flag: a user namespace would give back capabilities over
  new ones) and every mount call. `io_uring_*` and `clone3` answer ENOSYS, so that a library falls back
  (glibc's threads and `posix_spawn` use `clone` instead of `clone3`); the rest EPERM. Nothing is killed.
  The filter checks the architecture: a call made through another ABI (x86's 32-bit `int 0x80`, x32)
  is refused whole.

The filter is installed last, after everything the sandbox itself needs these calls for, and needs
no_new_privs (set before, privileges.py). Each layer is reported on only once it is read back: the new
keyring is another one, and empty; the kernel reports the filter mode (PR_GET_SECCOMP) and a denied call
of each kind answers its error.
"""
from __future__ import annotations

import ctypes
import errno
import platform
import struct

PR_GET_SECCOMP, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 21, 22, 2
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_READ = 0, 1, 11
KEY_SPEC_SESSION_KEYRING = -3
CLONE_NEW_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
X32_SYSCALL_BIT = 0x40000000
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_ABS_W, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
NR_OFFSET, ARCH_OFFSET, ARG0_OFFSET = 0, 4, 16  # struct seccomp_data (args[0]'s low word: little-endian)

# The syscalls refused, by name -> (x86_64, aarch64) numbers (arch/x86/entry/syscalls/syscall_64.tbl,
# include/uapi/asm-generic/unistd.h).
_EPERM = {
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "unshare": (272, 97), "setns": (308, 268),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "open_tree": (428, 428),
    "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432),
    "fspick": (433, 433), "mount_setattr": (442, 442),
}
_ENOSYS = {"io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
           "clone3": (435, 435)}
_CLONE = (56, 220)
# machine -> (AUDIT_ARCH_*, index in the tables above, whether the x32 ABI shares the architecture)
ARCHES = {"x86_64": (0xC000003E, 0, True), "aarch64": (0xC00000B7, 1, False)}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def program(machine: str) -> bytes | None:
    """The filter for `machine` (platform.machine()), as struct sock_filter[]; None for an architecture
    without a table here."""
    if machine not in ARCHES:
        return None
    arch, column, x32 = ARCHES[machine]
    enosys, eperm = RET_ERRNO | errno.ENOSYS, RET_ERRNO | errno.EPERM
    out = [_insn(LD_ABS_W, ARCH_OFFSET), _insn(JEQ_K, arch, 1, 0), _insn(RET_K, enosys), _insn(LD_ABS_W, NR_OFFSET)]
    if x32:
        out += [_insn(JGE_K, X32_SYSCALL_BIT, 0, 1), _insn(RET_K, enosys)]
    for table, answer in ((_EPERM, eperm), (_ENOSYS, enosys)):
        for numbers in table.values():
            out += [_insn(JEQ_K, numbers[column], 0, 1), _insn(RET_K, answer)]
    out += [_insn(JEQ_K, _CLONE[column], 0, 3), _insn(LD_ABS_W, ARG0_OFFSET), _insn(JSET_K, CLONE_NEW_FLAGS, 0, 1),
            _insn(RET_K, eperm), _insn(RET_K, RET_ALLOW)]
    return b"".join(out)


MACHINE = platform.machine()  # (read once, in the zygote: each forked worker only installs what is built here)
COLUMN = ARCHES[MACHINE][1] if MACHINE in ARCHES else None
PROGRAM = program(MACHINE)
# struct sock_fprog over PROGRAM's own bytes (immutable, kept alive by this module; the kernel only reads them)
_FPROG = _SockFprog(len(PROGRAM) // 8, ctypes.cast(ctypes.c_char_p(PROGRAM), ctypes.c_void_p).value) if PROGRAM else None


def _syscall(number: int, *args: int) -> tuple[int, int]:
    """(result, errno) of a raw system call with integer arguments."""
    ctypes.set_errno(0)
    result = _libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args))
    return result, ctypes.get_errno() if result < 0 else 0


def _keyctl(*args: int) -> tuple[int, int]:
    return _syscall(_EPERM["keyctl"][COLUMN], *args)


def _errname(err: int) -> str:
    return errno.errorcode.get(err, str(err))


def join_new_keyring() -> tuple[bool, str]:
    """Leave the inherited session keyring for a new anonymous one; (done, what or why not)."""
    if COLUMN is None:
        return False, f"no system call table for {MACHINE}"
    before, _ = _keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)
    joined, err = _keyctl(KEYCTL_JOIN_SESSION_KEYRING, 0)
    if joined < 0 and before < 0 and err in (errno.ENOSYS, errno.EPERM):  # (a kernel without keys, a container's filter)
        return True, f"this machine refuses keyrings ({_errname(err)}): the worker reaches none"
    if joined < 0:
        return False, f"could not join a new session keyring: {_errname(err)}"
    now, _ = _keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)
    size, _ = _keyctl(KEYCTL_READ, KEY_SPEC_SESSION_KEYRING, 0, 0)
    if now != joined or now == before or size != 0:
        return False, f"the session keyring is still the grader's or not empty ({before} -> {now}, {size} bytes)"
    return True, "a new, empty session keyring: the grader's keyrings are not the worker's"


def deny_kernel_surface() -> tuple[bool, str]:
    """Install the filter on this (single-threaded) process; (done, what or why not). Needs no_new_privs."""
    if _FPROG is None:
        return False, f"no seccomp filter for {MACHINE}"
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(_FPROG), 0, 0) != 0:
        return False, f"the seccomp filter was refused: {_errname(ctypes.get_errno())}"
    mode = _libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0)
    keys = _keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)
    uring = _syscall(_ENOSYS["io_uring_setup"][COLUMN], 0, 0)
    if mode != SECCOMP_MODE_FILTER or keys != (-1, errno.EPERM) or uring != (-1, errno.ENOSYS):
        return False, f"the seccomp filter does not hold (mode {mode}, keyctl {keys}, io_uring_setup {uring})"
    return True, ("keyrings, bpf, perf_event_open, userfaultfd, new namespaces and mounts refused (EPERM), "
                  "io_uring and clone3 answer ENOSYS")
