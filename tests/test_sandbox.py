"""Each layer of the sandbox, observed from inside a real worker.

A probe submission's functions report what they can see and do; the trusted side asserts it.
All cases share the warm grader of tests/hostile/_kit.py.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
import _kit as kit

from autograder.foundation.extract import Source
from autograder.foundation.failures import PartStopped
from autograder.foundation.limits import Limits
from autograder.sandbox.session import Session
from autograder.sandbox.student import Student
from autograder.worker.sandbox import private_paths

PROBE = r'''
import ctypes, os, resource, socket, struct, sys, time

def probe():
    out = {"uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid(), "env": sorted(os.environ)}
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    out["cap_eff"] = status["CapEff"].strip()
    out["no_new_privs"] = status["NoNewPrivs"].strip()
    out["fds"] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out["fds"][int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            pass
    out["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    for path in PATHS:
        try:
            out["ls " + path] = sorted(os.listdir(path))
        except OSError as exc:
            out["ls " + path] = type(exc).__name__
    for path in ("/etc/autograder-probe", "/tmp/ok", PATHS[0] + "/probe-was-here"):
        try:
            with open(path, "w") as f:
                f.write("x")
            out["write " + path] = "written"
        except OSError as exc:
            out["write " + path] = type(exc).__name__
    libc = ctypes.CDLL(None, use_errno=True)
    out["umount"] = [libc.umount2(p.encode(), 2) for p in PATHS if os.path.isdir(p)]
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=1)
        out["internet"] = "connected"
    except OSError as exc:
        out["internet"] = type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", 22), timeout=1)
        out["loopback"] = "connected"
    except OSError as exc:
        out["loopback"] = type(exc).__name__
    out["interfaces"] = [name for _, name in socket.if_nameindex()]
    for path in ("/sys/class/net", "/sys/fs/cgroup"):
        out["ls " + path] = sorted(os.listdir(path)) if os.path.isdir(path) else "missing"
    out["proc keys"] = open("/proc/keys").read() if os.path.exists("/proc/keys") else ""
    out["tmp inodes"] = os.statvfs("/tmp").f_files
    out["limits"] = {name: resource.getrlimit(getattr(resource, name))[0]
                     for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE")}
    out["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("solutions", "autograder")
                            and not m.startswith("autograder.worker") and m != "autograder")
    return repr(out)

def hang_unkillably():
    libc = ctypes.CDLL(None)
    libc.prctl(1, 0, 0, 0, 0)  # clear the parent-death signal
    try:
        os.setsid()
    except OSError:
        pass
    if os.fork() == 0:
        while True:
            time.sleep(0.05)
    while True:
        pass

def trickle():
    """Start a reply on the grader's socket and send it one byte at a time."""
    sock = socket.socket(fileno=os.dup(3))
    sock.sendall(struct.pack("!Q", 1000))
    while True:
        sock.send(b"x")
        time.sleep(0.2)

def quick():
    return 1
'''


def session(code: str, folder: Path, **limits) -> Session:
    path = folder / "probe.py"
    path.write_text(code)
    s = Session(kit.grader().zygote, (Source("probe", str(path), (code,)),), kit.replace(kit.LIMITS, **limits))
    s.start()
    s.enter_part("qkv_projection")
    return s


@pytest.fixture(scope="module")
def course():
    return kit.make_course()


@pytest.fixture(scope="module")
def seen(course):
    """What the probe sees from inside a worker, with the sentinel course as its neighbourhood."""
    folder = course / "submitted" / "alice" / "self_attention"
    paths = [str(course), str(kit.REPO), str(kit.REPO / "solutions"), str(kit.REPO / "autograder"), "/tmp", "/home",
             "/root", str(Path(sys.prefix))]
    s = session(f"PATHS = {paths!r}\n" + PROBE, folder)
    try:
        return eval(Student(s).call("probe")), s.protections  # noqa: S307 - our own probe's repr of plain data
    finally:
        s.close()


def test_worker_runs_as_nobody_without_capabilities_or_new_privileges(seen):
    info, _ = seen
    assert (info["uid"], info["gid"]) == (65534, 65534)
    assert int(info["cap_eff"], 16) == 0
    assert info["no_new_privs"] == "1"


def test_environment_holds_nothing_but_path_home_lang_and_threads(seen):
    assert seen[0]["env"] == ["HOME", "LANG", "OMP_NUM_THREADS", "PATH"]


def test_only_devnull_and_the_graders_socket_are_open(seen):
    fds = seen[0]["fds"]
    assert {fds[0], fds[1], fds[2]} == {"/dev/null"}
    others = {fd: target for fd, target in fds.items() if fd > 2 and not target.startswith("/proc")}
    assert len(others) == 1 and next(iter(others.values())).startswith("socket:"), fds


def test_worker_is_alone_in_its_own_pid_namespace(seen):
    info, _ = seen
    assert info["pid"] == 1
    assert info["processes"] == [1]


def test_no_network_not_even_loopback_to_the_host(seen):
    info, _ = seen
    assert info["internet"] != "connected" and info["loopback"] != "connected"
    assert info["interfaces"] == ["lo"]


def test_course_repository_solutions_and_homes_are_empty_from_inside(seen, course):
    info, _ = seen
    assert info[f"ls {course}"] in ([], "FileNotFoundError")
    assert info[f"ls {kit.REPO}"] in ([".venv"], [], "FileNotFoundError")
    assert info[f"ls {kit.REPO / 'solutions'}"] == "FileNotFoundError"
    assert info[f"ls {kit.REPO / 'autograder'}"] == "FileNotFoundError"
    # /tmp is the worker's own scratch space: empty, but for the folders that lead to the venv
    # when the repository itself lives under the host's /tmp (as in a fresh clone there)
    venv_under_tmp = [Path(sys.prefix).relative_to("/tmp").parts[0]] if sys.prefix.startswith("/tmp/") else []
    assert info["ls /tmp"] == venv_under_tmp and info["ls /home"] in ([], "FileNotFoundError")
    assert info["modules"] == [], "the worker's memory holds grader or solution modules"


def test_python_stays_readable_but_nothing_outside_tmp_is_writable(seen, course):
    info, _ = seen
    assert info[f"ls {Path(sys.prefix)}"] not in ([], "FileNotFoundError", "PermissionError")
    assert info["write /tmp/ok"] == "written"
    assert info["write /etc/autograder-probe"] != "written"
    assert info[f"write {course}/probe-was-here"] != "written"
    assert not (course / "probe-was-here").exists()
    assert all(code != 0 for code in info["umount"]), "a cover could be unmounted"


def test_sys_shows_no_host_interface_and_no_cgroup_tree(seen):
    info, _ = seen
    assert info["ls /sys/class/net"] in (["lo"], [], "missing"), info["ls /sys/class/net"]
    assert info["ls /sys/fs/cgroup"] in ([], "missing"), info["ls /sys/fs/cgroup"]


def test_proc_lists_no_key_and_tmp_has_an_inode_cap(seen):
    info, _ = seen
    assert info["proc keys"] == ""
    assert 0 < info["tmp inodes"] <= 64 * 2**20 // 4096


def test_resource_limits_are_the_configured_ones(seen):
    limits = seen[0]["limits"]
    assert limits["RLIMIT_AS"] == kit.LIMITS.memory_bytes
    assert limits["RLIMIT_CPU"] == kit.LIMITS.cpu_seconds
    assert limits["RLIMIT_CORE"] == 0
    assert 0 < limits["RLIMIT_NPROC"] <= 1024 and 0 < limits["RLIMIT_FSIZE"] <= 2**30


def test_every_protection_is_on_where_namespaces_work(seen):
    _, protections = seen
    assert protections.get("off") == {}, protections.get("off")
    assert {"keyring", "seccomp", "unprivileged", "filesystem"} <= set(protections.get("on", {})), protections


def test_a_hung_call_costs_its_part_limit_and_its_whole_tree_dies(tmp_path):
    """the part stops after part_seconds; the worker (which cleared its parent-death signal and left
    its process group) and its child are killed; a fresh worker serves the next part"""
    s = session("PATHS = ['/']\n" + PROBE, tmp_path, part_seconds=2.0)
    try:
        started = time.perf_counter()
        with pytest.raises(PartStopped, match="did not return within the part's 2 s limit"):
            Student(s).call("hang_unkillably")
        assert time.perf_counter() - started < 4.0
        assert kit.leftovers() == []
        s.enter_part("scaled_scores")
        assert Student(s).call("quick") == 1
    finally:
        s.close()
    assert kit.leftovers() == []


def test_a_reply_trickled_byte_by_byte_cannot_stretch_the_deadline(tmp_path):
    s = session(PROBE, tmp_path, part_seconds=2.0)
    try:
        started = time.perf_counter()
        with pytest.raises(PartStopped):
            Student(s).call("trickle")
        assert time.perf_counter() - started < 4.0
    finally:
        s.close()
    assert kit.leftovers() == []


def test_without_namespaces_grading_is_refused_naming_the_missing_layers(tmp_path):
    from autograder.sandbox.pool import SandboxUnavailable

    path = tmp_path / "ref.py"
    path.write_text(kit.REFERENCE)
    with pytest.raises(SandboxUnavailable) as refused:
        kit.grade(path, kit.replace(kit.LIMITS, namespaces=False), ["qkv_projection"])
    line = str(refused.value)
    assert "\n" not in line and "--unsafe-no-sandbox" in line
    for layer in ("namespaces", "network", "filesystem", "processes_tree"):
        assert layer in line, line


def test_with_unsafe_no_sandbox_grading_runs_and_says_loudly_what_is_off(tmp_path):
    code = kit.REFERENCE + "\n\n" + (kit.HOSTILE / "daemon.py").read_text()
    path = tmp_path / "daemon.py"
    path.write_text(code)
    result, _ = kit.grade(path, kit.replace(kit.LIMITS, namespaces=False, unsafe_no_sandbox=True), ["qkv_projection"])
    assert kit.leftovers() == [], "a daemon outlived grading without a PID namespace"
    off = "\n".join(result.protections_off)
    for layer in ("namespaces", "network", "filesystem", "processes_tree"):
        assert layer in off, off
    assert result.part("qkv_projection").score > 0
    from autograder.commands import document

    doc = document.to_json(result)
    assert doc["protections_off"] and any("WITHOUT a complete sandbox" in n for n in doc["notes"]), doc["notes"]
    from rich.console import Console

    from autograder.commands.report import render

    console = Console(record=True, width=120)
    render(result, console)
    assert "SANDBOX PROTECTIONS OFF" in console.export_text()


def test_private_paths_cover_the_submission_its_three_parents_and_never_the_system(tmp_path):
    deep = tmp_path / "course" / "submitted" / "alice" / "self_attention"
    deep.mkdir(parents=True)
    paths = private_paths([Source("nb", str(deep / "01_scores.ipynb"), ())], ("/nonexistent",))
    for folder in (deep, deep.parent, deep.parent.parent, tmp_path / "course"):
        assert str(folder.resolve()) in paths
    shallow = private_paths([Source("x", "/usr/x.py", ()), Source("y", "/usr/lib/python3/dist/y.py", ())])
    assert not [p for p in shallow if p == "/" or p.startswith("/usr")], shallow


def test_cli_flags_set_the_limits_the_sandbox_gets():
    from autograder.commands import cli
    from autograder.foundation import limits as flags

    args = cli.build_parser().parse_args(["grade", "x.py", "--part-seconds", "7", "--memory-gib", "2", "--cpu-seconds",
                                          "60", "--load-seconds", "9", "--hide", "/srv/course", "--hide", "/data",
                                          "--no-namespaces"])
    limits = flags.from_args(args)
    assert limits == Limits(part_seconds=7.0, load_seconds=9.0, memory_bytes=2 * 2**30, cpu_seconds=60,
                            namespaces=False, extra_hidden=("/srv/course", "/data"))
    assert "/data" in private_paths([], limits.extra_hidden) or not Path("/data").is_dir()


def test_a_sandbox_that_cannot_start_is_blamed_on_the_machine_not_the_student(tmp_path, monkeypatch):
    from autograder.sandbox import pool

    def broken_hello(self, timeout):
        self.kill()
        raise pool.SandboxFailed("the sandboxed worker did not start: unshare refused")

    monkeypatch.setattr(pool.WorkerProcess, "hello", broken_hello)
    s = session(PROBE, tmp_path)
    try:
        with pytest.raises(PartStopped, match="could not start its sandbox on this machine"):
            Student(s).call("quick")
        assert "your code" not in str(s.load_failure)
    finally:
        s.close()
    assert kit.leftovers() == []
