"""Hosts that restrict user namespaces (docs/security.md, "Restricted hosts"): the sandbox holds, or every command
refuses in one line that names the cause and the fix for that host; `make grade` (grade-workspace: a student's own
work on their own machine) grades without it, saying so in one line.

The hosts are simulated with a seccomp filter (tests/restricted_host.py; `sysctl` is not writable here):
(a) creating a user namespace fails (Docker's default seccomp profile, Debian's sysctl), (b) one is created but holds
no capability (Ubuntu 24.04's AppArmor restriction), (c) root without CAP_SYS_ADMIN (Docker's default container).
(a) and (b) run as an ordinary user (a system user made for the test when the suite runs as root, as
tests/test_unprivileged.py does), (c) as root with CAP_SYS_ADMIN out of the bounding set.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.foundation import hosts
from tests import test_unprivileged as unprivileged

REPO = Path(__file__).resolve().parent.parent
COPIED = ("autograder", "solutions", "tests/restricted_host.py")
RELEASED = "assignments/self_attention"
ROOT = os.getuid() == 0
CHINESE = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def home():
    """The grader and a student's workspace (the released self_attention folder), readable by the test's user."""
    home = Path(tempfile.mkdtemp(prefix="autograder-restricted-"))
    try:
        for rel in COPIED:
            src, out = REPO / rel, home / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(src, out)
        shutil.copytree(REPO / RELEASED, home / RELEASED)
        shutil.copytree(REPO / RELEASED, home / "workspace" / "self_attention")
        for path in [home, *home.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _run(home: Path, mode: str, args: list[str], as_user: bool = True, sys_admin: bool = True):
    """`python -m autograder ARGS` on the simulated host `mode`, as an ordinary user or as root."""
    argv = [sys.executable, "tests/restricted_host.py", mode, sys.executable, "-m", "autograder", *args]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "COLUMNS": "100"}
    if as_user and ROOT:
        unprivileged._ensure_user()
        cmd = ["unshare", "--mount", "--propagation", "private", "bash", "-c", unprivileged._as_user_script(argv)]
    elif not sys_admin:
        cmd = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", *argv]
    else:
        cmd = argv
    return subprocess.run(cmd, cwd=home, env=env, capture_output=True, text=True, timeout=300)


def _refused_in_one_line(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: refusing to grade: "), proc.stderr
    assert "fix: " in lines[0] and "--unsafe-no-sandbox" in lines[0]
    assert "scaled_scores" not in proc.stdout  # nothing graded
    return lines[0]


# ----------------------------------------------------------------------------------------- the hosts, end to end
def test_a_no_user_namespaces_grade_refuses_naming_user_namespaces_refused_and_the_fix(home):
    line = _refused_in_one_line(_run(home, "no-userns", ["grade", "solutions/attention.py"]))
    assert "refuses to create user namespaces (unshare: EPERM)" in line
    assert str(hosts.explain("unshare-user:EPERM", hosts.this_host())[1]) in line


def test_a_no_user_namespaces_make_grade_grades_without_the_sandbox_saying_so_in_one_line(home):
    proc = _run(home, "no-userns", ["grade-workspace", "workspace", "--assignment", "self_attention"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = proc.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("make grade: grading without the sandbox"), proc.stderr
    assert "refuses to create user namespaces" in said[0] and "your own machine" in said[0]
    assert "total" in proc.stdout and "0/100" in proc.stdout and "scaled_scores" in proc.stdout
    assert "SANDBOX PROTECTIONS OFF" not in proc.stdout  # (said once, on stderr)


def test_b_user_namespaces_without_capabilities_grade_refuses_naming_the_apparmor_restriction_or_container(home):
    line = _refused_in_one_line(_run(home, "userns-without-caps", ["grade", "solutions/attention.py"]))
    cause, fix = map(str, hosts.explain("mount-user:EPERM", hosts.this_host()))
    assert cause in line and fix in line
    assert "user namespaces are created here but" in line


def test_b_user_namespaces_without_capabilities_make_grade_still_grades(home):
    proc = _run(home, "userns-without-caps", ["grade-workspace", "workspace", "--assignment", "self_attention"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.startswith("make grade: grading without the sandbox") and "0/100" in proc.stdout


@pytest.mark.skipif(not ROOT, reason="root without CAP_SYS_ADMIN needs the suite to run as root (CI does)")
def test_c_root_without_cap_sys_admin_grade_refuses_naming_the_capability_and_dockers_options(home):
    line = _refused_in_one_line(_run(home, "docker-root", ["grade", "solutions/attention.py"], as_user=False,
                                     sys_admin=False))
    assert "root without CAP_SYS_ADMIN" in line and "--cap-add SYS_ADMIN" in line


@pytest.mark.skipif(not ROOT, reason="root with CAP_SYS_ADMIN needs the suite to run as root (CI does)")
def test_root_with_cap_sys_admin_needs_no_user_namespace_the_sandbox_holds_under_filter_a(home):
    proc = _run(home, "no-userns", ["grade", "solutions/attention.py", "--json"], as_user=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"protections_off"' not in proc.stdout and '"score": 100' in proc.stdout


# ----------------------------------------------------------------------------------------- the host's fix
UBUNTU_2404 = hosts.Host(apparmor_restrict="1")


def test_ubuntu_2404_the_fix_is_the_shipped_apparmor_profile_with_the_command_to_load_it_or_the_sysctl():
    cause, fix = map(str, hosts.explain("mount-user:EPERM", UBUNTU_2404))
    assert "hold no capability" in cause and "apparmor_restrict_unprivileged_userns=1" in cause
    assert hosts.PROFILE in fix and "apparmor_parser -r" in fix and "apparmor_restrict_unprivileged_userns=0" in fix
    profile = (REPO / hosts.PROFILE).read_text()
    assert "userns," in profile and "profile self-attention-autograder" in profile


def test_debian_and_rhel_sysctls_are_named_with_the_sysctl_that_lifts_them():
    _, fix = map(str, hosts.explain("unshare-user:EPERM", hosts.Host(userns_clone="0")))
    assert "kernel.unprivileged_userns_clone=1" in fix
    _, fix = map(str, hosts.explain("unshare-user:ENOSPC", hosts.Host(max_userns="0")))
    assert "user.max_user_namespaces=" in fix


def test_a_container_gets_dockers_security_options_and_root_without_sys_admin_the_capability():
    _, fix = map(str, hosts.explain("unshare-user:EPERM", hosts.Host(container=True)))
    assert "--security-opt seccomp=unconfined" in fix
    cause, fix = map(str, hosts.explain("unshare-root:EPERM", hosts.Host(container=True, root=True, sys_admin=False)))
    assert "CAP_SYS_ADMIN" in cause and "--cap-add SYS_ADMIN" in fix


def test_macos_and_windows_are_pointed_to_linux_wsl2_or_a_container():
    for platform in ("darwin", "win32"):
        cause, fix = map(str, hosts.explain("platform", hosts.Host(platform=platform)))
        assert "needs Linux" in cause and "WSL2" in fix and "container" in fix


def test_a_layer_turned_off_by_configuration_names_no_host_cause():
    assert hosts.explain("", UBUNTU_2404) is None


@pytest.mark.parametrize("cause,host", [("unshare-user:EPERM", hosts.Host(userns_clone="0")), ("mount-user:EPERM", UBUNTU_2404),
                                        ("unshare-root:EPERM", hosts.Host(container=True, root=True, sys_admin=False)),
                                        ("platform", hosts.Host(platform="darwin"))])
def test_make_grade_in_the_chinese_folder_says_the_host_cause_and_fix_in_chinese(cause, host):
    from autograder.commands import workspace
    from autograder.foundation import limits

    why, fix = hosts.explain(cause, host)
    line = workspace.WITHOUT_SANDBOX.format(reason=why).render("zh")
    assert CHINESE.search(fix.render("zh")) and not re.search(r"\b(this|the|here|refuses|needs)\b", line), line
    assert str(why) in workspace.WITHOUT_SANDBOX.format(reason=why).render("en")
    missing = limits.reason({"seccomp": "off"})
    assert missing.render("zh") == "缺少 seccomp" and str(missing) == "missing seccomp"
