"""The worker's seccomp filter (autograder/worker/seccomp.py), read instruction by instruction for both
architectures it supports: a small interpreter of the classic BPF it uses answers, for a system call, what
the kernel would. The worker's own observations (tests/test_hostile.py, tests/test_sandbox.py) cover the
machine the suite runs on; this covers the other architecture's table and the ABI checks too.
"""
from __future__ import annotations

import errno
import struct

import pytest

from autograder.worker import seccomp

ALLOW, EPERM, ENOSYS = "allow", "EPERM", "ENOSYS"
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
I386, X32 = 0x40000003, 0x40000000
# name -> (x86_64, aarch64), from the kernels' tables, written out here rather than read from the module under test
CALLS = {"read": (0, 63), "write": (1, 64), "openat": (257, 56), "mmap": (9, 222), "ioctl": (16, 29),
         "futex": (202, 98), "getpid": (39, 172), "prctl": (157, 167), "socket": (41, 198),
         "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "bpf": (321, 280),
         "perf_event_open": (298, 241), "userfaultfd": (323, 282), "unshare": (272, 97), "setns": (308, 268),
         "mount": (165, 40), "umount2": (166, 39), "fsopen": (430, 430), "io_uring_setup": (425, 425),
         "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "clone3": (435, 435), "clone": (56, 220)}
CLONE_THREAD_FLAGS = 0x003D0F00  # what glibc's pthread_create passes (VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|...)
SIGCHLD = 17


def run(program: bytes, nr: int, arch: int, arg0: int = 0) -> str:
    """What `program` answers for struct seccomp_data {nr, arch, ip 0, args {arg0, 0, ...}}."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:  # ret k
            if k == 0x7FFF0000:
                return ALLOW
            assert k & 0xFFFF0000 == 0x00050000, hex(k)
            return errno.errorcode[k & 0xFFFF]
        else:
            raise AssertionError(f"instruction {code:#x} at {pc}")


@pytest.mark.parametrize("machine,column", [("x86_64", 0), ("aarch64", 1)])
def test_the_filter_refuses_the_listed_calls_and_lets_everything_else_through(machine, column):
    program = seccomp.program(machine)
    want = {name: ALLOW for name in ("read", "write", "openat", "mmap", "ioctl", "futex", "getpid", "prctl", "socket")}
    want.update({name: EPERM for name in ("keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
                                         "unshare", "setns", "mount", "umount2", "fsopen")})
    want.update({name: ENOSYS for name in ("io_uring_setup", "io_uring_enter", "io_uring_register", "clone3")})
    got = {name: run(program, CALLS[name][column], ARCH[machine]) for name in want}
    assert got == want


@pytest.mark.parametrize("machine,column", [("x86_64", 0), ("aarch64", 1)])
def test_clone_makes_threads_and_processes_but_no_namespace(machine, column):
    program, clone = seccomp.program(machine), CALLS["clone"][column]
    assert run(program, clone, ARCH[machine], CLONE_THREAD_FLAGS) == ALLOW
    assert run(program, clone, ARCH[machine], SIGCHLD) == ALLOW  # fork()
    for flag in (0x10000000, 0x00020000, 0x40000000, 0x20000000):  # NEWUSER, NEWNS, NEWNET, NEWPID
        assert run(program, clone, ARCH[machine], SIGCHLD | flag) == EPERM, hex(flag)


def test_another_abi_is_refused_whole_on_x86_64():
    program = seccomp.program("x86_64")
    assert run(program, 4, I386) == ENOSYS  # (a 32-bit call through int 0x80: any number)
    assert run(program, X32 | CALLS["keyctl"][0], ARCH["x86_64"]) == ENOSYS
    assert run(program, X32 | CALLS["read"][0], ARCH["x86_64"]) == ENOSYS
    assert run(seccomp.program("aarch64"), CALLS["read"][1], 0x40000028) == ENOSYS  # AUDIT_ARCH_ARM: aarch32


def test_an_architecture_without_a_table_gets_no_filter():
    assert seccomp.program("ppc64le") is None
