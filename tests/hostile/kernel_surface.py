"""Reach the parts of the kernel that grading never needs and that a process without privileges is still
offered: io_uring (its setup succeeded in the worker), a user-only perf event and a user-mode userfaultfd
(both succeeded), bpf, and a new user namespace, which gives every capability back over namespaces of one's
own (succeeded). Each must be refused."""
import ctypes
import os
import platform

# --- attack ---
X86 = platform.machine() == "x86_64"
NUMBERS = {"io_uring_setup": 425, "perf_event_open": 298 if X86 else 241, "userfaultfd": 323 if X86 else 282,
           "bpf": 321 if X86 else 280}
CLONE_NEWUSER = 0x10000000
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(name, *args):
    return _libc.syscall(ctypes.c_long(NUMBERS[name]), *[ctypes.c_long(a) for a in args])


GOT = []
params = ctypes.create_string_buffer(120)
if _call("io_uring_setup", 4, ctypes.addressof(params)) >= 0:
    GOT.append("io_uring")
attr = bytearray(128)  # struct perf_event_attr: PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, user space only
attr[0:4], attr[4:8], attr[40] = (1).to_bytes(4, "little"), (128).to_bytes(4, "little"), 0b1100000
attr_buf = ctypes.create_string_buffer(bytes(attr), 128)
if _call("perf_event_open", ctypes.addressof(attr_buf), 0, -1, -1, 0) >= 0:
    GOT.append("perf_event")
if _call("userfaultfd", 1) >= 0:  # UFFD_USER_MODE_ONLY
    GOT.append("userfaultfd")
bpf_attr = ctypes.create_string_buffer(128)  # BPF_MAP_CREATE of an array map: 4-byte keys and values, one entry
ctypes.memmove(bpf_attr, (2).to_bytes(4, "little") + (4).to_bytes(4, "little") * 2 + (1).to_bytes(4, "little"), 16)
if _call("bpf", 0, ctypes.addressof(bpf_attr), 128) >= 0:
    GOT.append("bpf")
pid = os.fork()
if pid == 0:
    os._exit(0 if _libc.unshare(CLONE_NEWUSER) == 0 else 1)
if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0:
    GOT.append("user namespace")


def scaled_scores(Q, K):
    raise RuntimeError(f"the kernel gave: {GOT}")
