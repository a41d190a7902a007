"""Confine a freshly forked worker before it sees any student code.

Layers, each applied when the machine allows it and reported either way:
- its own session and process tree; inside a new PID namespace the worker is PID 1, so
  killing it (or its parent) kills every process the student started, daemons included;
- a new network namespace: no network at all, not even loopback to the host;
- a new mount namespace in which the repository (solutions/, autograder/), the course
  directory, the submissions, home directories and the host's /tmp are covered by empty
  read-only tmpfs; only the Python installation and the virtual environment are bound
  back, read-only; /tmp is a small private tmpfs. For a grader that is not root (the worker
  then runs as the instructor's own uid, in a user namespace it created), every other mount
  is made read-only as well;
- no privilege left (privileges.py): nobody, no capability in any set (bounding set
  included), no_new_privs; for a grader that is not root, a nested user namespace locks the
  covers, so that they cannot be unmounted;
- resource limits: address space, CPU time, processes, file size, open files, no core;
- no inherited file descriptors but the one socket to the grader; an empty environment;
- a new, empty session keyring, and last a seccomp filter over the kernel interfaces grading never
  needs (seccomp.py);
- a fresh, read-only /sys of the worker's own network namespace (no host interface, no cgroup tree), and
  /proc's key lists hidden.

Namespaces need root or unprivileged user namespaces. Each layer is reported on or off with
its reason; the trusted side (pool.py) refuses to grade when one is off, unless the
instructor asked for grading without a complete sandbox (--unsafe-no-sandbox).
"""
from __future__ import annotations

import ctypes
import errno
import os
import re
import resource
import signal
import sys
from dataclasses import dataclass, field

from . import hfshell, privileges, seccomp

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
PR_SET_PDEATHSIG = 1
# Per-mount options that a user namespace may not clear on a mount it inherited: kept on a remount.
MOUNT_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                 "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class SandboxConfig:
    """What the trusted side asks for; plain data so it crosses the process boundary."""

    memory_bytes: int = 6 * 2**30
    cpu_seconds: int = 300
    max_processes: int = 64
    max_file_bytes: int = 64 * 2**20
    tmp_bytes: int = 64 * 2**20
    hide: tuple[str, ...] = ()  # extra paths to cover (course directory, submissions)
    expose: tuple[str, ...] = ()  # extra read-only paths to keep (e.g. /dev/nvidia* for the GPU stage)
    namespaces: bool = True
    unsafe_no_sandbox: bool = False  # the trusted side grades even when a layer is off (read by pool.py only)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Protections:
    on: dict[str, str] = field(default_factory=dict)
    off: dict[str, str] = field(default_factory=dict)
    # Why the namespaces are missing, for the trusted side to name the host's fix (foundation/hosts.py):
    # "unshare-user:EPERM" (user namespaces refused), "mount-user:EPERM" (one created, without capabilities),
    # "unshare-root:EPERM", "mount-root:EPERM"; "" when nothing failed for a reason of the host.
    cause: str = ""

    def set(self, name: str, ok: bool, detail: str) -> None:
        (self.on if ok else self.off)[name] = detail


def die_with_parent(parent: int) -> bool:
    """Have the kernel SIGKILL this process when the thread that started it ends (its parent dies, by
    any signal, SIGKILL included). False when the parent `parent` is already gone: the caller must exit.
    (The kernel clears this on a change of credentials: `confine` sets it again after setuid.)"""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return os.getppid() == parent


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), flags,
                       data and data.encode()), f"mount {target}")


# Top-level folders the worker keeps: the operating system. Every other one (home folders,
# /root, /work, /srv, /opt, /var, /mnt, /tmp, ...) is covered, wherever the course, the
# gradebook, the reference solutions or other submissions happen to live.
SYSTEM_TOP = frozenset({"usr", "etc", "proc", "sys", "dev", "bin", "sbin", "lib", "lib32", "lib64", "libx32"})


def _default_hidden() -> list[str]:
    """Everything but the system: each top-level folder outside SYSTEM_TOP, plus the repository
    and the usual places of secrets inside the kept ones (shared memory)."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    paths = [repo, os.path.dirname(repo), "/dev/shm", "/dev/mqueue", "/dev/pts"]
    try:
        paths += [os.path.join("/", name) for name in sorted(os.listdir("/")) if name not in SYSTEM_TOP]
    except OSError:
        paths += ["/root", "/home", "/tmp", "/var", "/mnt", "/media", "/srv", "/opt", "/run", "/work"]
    return [p for p in dict.fromkeys(paths)
            if p not in ("/", "") and os.path.isdir(p) and not os.path.islink(p)]


# Never covered as "the submission's surroundings": the system the worker runs on.
SYSTEM_DIRS = frozenset({"/", "/usr", "/usr/local", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/proc",
                         "/sys", "/dev", "/var", "/run", "/boot", "/opt"})


def private_paths(sources, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What the worker must not see besides the defaults, for the trusted side to put in
    `SandboxConfig.hide`: the caller's extra paths, the folder of each source (anything with a
    `.path`) and the three above it (nbgrader keeps course/submitted/<student>/<assignment>/, so
    these hold the other students' work and the course with its gradebook), and the current
    directory (where a grader is usually started: the course). System folders are never
    covered; the worker gets the student's code over its socket and needs none of these."""
    paths = list(extra)
    for source in sources:
        folder = os.path.dirname(os.path.abspath(source.path))
        for _ in range(4):
            paths.append(folder)
            folder = os.path.dirname(folder)
    try:
        paths.append(os.getcwd())
    except OSError:
        pass
    out = []
    for path in dict.fromkeys(os.path.realpath(p) for p in paths):
        top = path.split("/")[1] if path.startswith("/") else ""
        if path not in SYSTEM_DIRS and top not in SYSTEM_TOP and os.path.isdir(path):
            out.append(path)  # (a folder inside /usr or /etc would hide part of the system the worker needs)
    return tuple(out)


def _needed_paths() -> list[str]:
    """The Python that runs the worker: the venv and the base installation, read-only."""
    paths = {sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    exe = os.path.realpath(sys.executable)
    paths.add(os.path.dirname(os.path.dirname(exe)))
    return sorted(p for p in paths if os.path.isdir(p))


# Every tmpfs gets an inode cap: tmpfs counts its size in pages, not the kernel's memory for each file, and
# millions of empty files in /tmp cost gigabytes of kernel memory outside the worker's limits. A cover holds
# only the folders that lead to what is bound back (read-only afterwards); /tmp one file per 4 KiB of its size.
COVER_INODES = 1024


def tmp_inodes(tmp_bytes: int) -> int:
    return max(tmp_bytes // 4096, 64)


def _cover(paths: list[str], keep: list[str], tmp_bytes: int) -> list[str]:
    """Cover each path with an empty tmpfs, then bind `keep` back read-only where it was covered.
    Returns the paths that could not be covered.

    The private, writable /tmp is mounted first, so that a kept path under the host's /tmp (a
    repository cloned there, with its venv) is bound back on top of it, not hidden by it."""
    keep_fds = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in keep}
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_bytes},nr_inodes={tmp_inodes(tmp_bytes)},mode=1777")
    covered, failed = ["/tmp"], []
    for path in sorted({os.path.realpath(p) for p in paths}, key=len):
        if any(path == c or path.startswith(c + "/") for c in covered):
            continue
        try:
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size=1m,nr_inodes={COVER_INODES},mode=755")
            covered.append(path)
        except OSError as exc:
            failed.append(f"{path} ({exc.strerror})")
    for path, fd in keep_fds.items():
        if any(path == c or path.startswith(c + "/") for c in covered):
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)
    for path in covered[1:]:  # every cover read-only; /tmp stays the student's scratch space
        _mount(None, path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return failed


def _cover_inside(paths) -> list[str]:
    """Cover folders inside what `_cover` bound back, read-only: the transformers library and its Hugging Face
    packages in the venv (hfshell.py). One no longer there is under a cover already."""
    failed = []
    for path in (p for p in paths if os.path.isdir(p)):
        try:
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,nr_inodes=8,mode=555")
        except OSError as exc:
            failed.append(f"{path} ({exc.strerror})")
    return failed


def _close_fds(keep: int) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    maxfd = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    os.closerange(3, keep)
    os.closerange(keep + 1, min(maxfd, 65536))


def _limits(cfg: SandboxConfig, prot: Protections) -> None:
    for name, which, value in (
        ("memory", resource.RLIMIT_AS, cfg.memory_bytes),
        ("cpu_time", resource.RLIMIT_CPU, cfg.cpu_seconds),
        ("processes", resource.RLIMIT_NPROC, cfg.max_processes),
        ("file_size", resource.RLIMIT_FSIZE, cfg.max_file_bytes),
        ("open_files", resource.RLIMIT_NOFILE, 256),
        ("core_dumps", resource.RLIMIT_CORE, 0),
    ):
        try:
            resource.setrlimit(which, (value, value))
            prot.set(f"limit_{name}", True, str(value))
        except (ValueError, OSError) as exc:
            prot.set(f"limit_{name}", False, str(exc))


def _enter_namespaces(cfg: SandboxConfig, prot: Protections) -> str | None:
    """unshare everything. Returns None without namespaces, else what was created: "user" when this
    process made its own user namespace (a grader that is not root: it sees uid 0 afterwards), "root"
    when it did not need one. The caller must then fork to enter the PID namespace."""
    if not cfg.namespaces:
        prot.set("namespaces", False, "disabled by configuration")
        return None
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID
    uid, gid = os.getuid(), os.getgid()
    if uid != 0:
        flags |= CLONE_NEWUSER
    if _libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        prot.set("namespaces", False, f"unshare failed: {os.strerror(err)} (needs root or user namespaces)")
        prot.cause = f"unshare-{'user' if uid != 0 else 'root'}:{errno.errorcode.get(err, err)}"
        return None
    if uid != 0:
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"0 {gid} 1")
    prot.set("network", True, "new network namespace: no interfaces up")
    prot.set("processes_tree", True, "new PID namespace: the worker is PID 1, its death ends every child")
    return "user" if uid != 0 else "root"


def _mounts() -> list[tuple[str, int]]:
    """(mount point, the per-mount flags a remount must keep) of every mount this process sees."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # (\040: a space)
            options = fields[5].split(",")
            if "ro" not in options:
                out.append((point, sum(MOUNT_OPTIONS.get(o, 0) for o in options)))
    return out


def _read_only_rest(keep_writable: tuple[str, ...]) -> list[str]:
    """Remount read-only every mount but `keep_writable` (and what lies below them); the failures.
    (For a grader that is not root: the worker runs as the instructor's uid, whose files would
    otherwise be writable wherever they are visible.)"""
    failed = []
    for point, flags in sorted(_mounts(), key=lambda m: len(m[0])):
        if any(point == k or point.startswith(k.rstrip("/") + "/") for k in keep_writable):
            continue
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError as exc:
            hidden = exc.errno == errno.ENOENT or (exc.errno == errno.EINVAL and not os.path.ismount(point))
            if not hidden:  # (a mount point under a cover is out of reach: no longer a mount point here)
                failed.append(f"{point} ({exc.strerror})")
    return failed


def _own_sys() -> list[str]:
    """A sysfs of the worker's network namespace over /sys, read-only: /sys/class/net lists only its `lo`, and
    the host's cgroup tree (mounted below the host's /sys) stays underneath. Where sysfs cannot be mounted,
    those two folders are covered instead. The failures."""
    try:
        _mount("sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        return []
    except OSError:
        pass
    failed = []
    for path in ("/sys/class/net", "/sys/fs/cgroup"):
        try:
            _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,nr_inodes=16")
        except OSError as exc:
            if os.path.isdir(path):
                failed.append(f"{path} ({exc.strerror})")
    return failed


def _mask_proc_keys() -> list[str]:
    """/dev/null over the fresh /proc's lists of keys (every key the worker's uid may view, other processes' of
    the same uid included). The failures."""
    failed = []
    for path in ("/proc/keys", "/proc/key-users"):
        try:
            _mount("/dev/null", path, None, MS_BIND)
        except OSError as exc:
            if os.path.exists(path):
                failed.append(f"{path} ({exc.strerror})")
    return failed


def _setup_filesystem(cfg: SandboxConfig, prot: Protections, created: str) -> None:
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        hidden = _default_hidden() + [p for p in cfg.hide if os.path.exists(p)]
        failed = _cover(hidden, _needed_paths() + [p for p in cfg.expose if os.path.isdir(p)], cfg.tmp_bytes)
        failed += _cover_inside(hfshell.LIBRARY_PATHS)
        if created == "user":
            failed += _read_only_rest(("/tmp", "/proc"))
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        failed += _own_sys() + _mask_proc_keys()
        if failed:
            prot.set("filesystem", False, "could not cover or make read-only " + ", ".join(failed))
        else:
            prot.set("filesystem", True, "only the system (/usr, /etc) and Python are visible, read-only; the "
                                         "repository, course, submissions, homes and host /tmp are covered; /sys "
                                         "is the worker's own, without the host's interfaces and cgroups")
    except OSError as exc:
        prot.set("filesystem", False, str(exc))
        if exc.errno in (errno.EPERM, errno.EACCES):  # a mount refused in a namespace of our own: a policy's
            prot.cause = f"mount-{created}:{errno.errorcode[exc.errno]}"


def confine(sock_fd: int, cfg: SandboxConfig) -> Protections:
    """Called in the child right after fork. Returns in the process that will run student code."""
    prot = Protections()
    os.setsid()
    _close_fds(sock_fd)
    prot.set("file_descriptors", True, "only the grader's socket is open")
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"})
    prot.set("environment", True, "emptied")
    created = _enter_namespaces(cfg, prot)
    if created:
        pid = os.fork()
        if pid:  # the outer child only waits: its death (killed by the grader) takes the namespace down
            os.close(sock_fd)
            while True:
                try:
                    _, status = os.waitpid(pid, 0)
                    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
                except ChildProcessError:
                    os._exit(0)
                except InterruptedError:
                    continue
        # (getppid() is 0 here: the parent lives outside the new PID namespace)
        _setup_filesystem(cfg, prot, created)
    else:
        prot.set("network", False, "no network namespace: student code could open connections")
        prot.set("filesystem", False, "no mount namespace: student code sees the grader's files")
        prot.set("processes_tree", False, "no PID namespace: the worker's descendants and the daemons it "
                                          "orphans are hunted down one by one instead")
    prot.set("keyring", *seccomp.join_new_keyring())
    # By what this process created, never by the uid it sees now (0 in a user namespace it made itself).
    prot.set("unprivileged", *privileges.drop(created or ("root" if os.getuid() == 0 else "none")))
    # After the change of user: the kernel clears the parent-death signal whenever the
    # credentials change, so setting it before setuid would be silently undone. (Student
    # code can clear it again; the zygote therefore also kills the whole tree itself.)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _limits(cfg, prot)
    prot.set("seccomp", *seccomp.deny_kernel_surface())  # last: the set-up above needs mount, unshare, keyctl
    return prot
