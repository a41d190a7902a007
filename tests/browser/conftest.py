"""Fixtures of the browser test: the tools (installed when missing), one student lab on a fresh
workspace, one headless Chromium session for the whole module; everything stopped at the end,
failures included. Artifacts (screenshots, the server's log): build/browser-test/.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests import runcache

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "browser-test"
DEBIAN_PACKAGES = {"chromium": "chromium", "chromium-driver": "chromedriver"}  # package -> program
DEBIAN_FONTS = {"fonts-wqy-microhei": Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")}  # Chinese pages
CHROMIUM_FLAGS = (  # headless, on a network that refuses Chromium's background connections
    "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1400,1000",
)


def chromium_flags() -> tuple[str, ...]:
    """CHROMIUM_FLAGS, and `--no-sandbox` as root only (Chromium will not start its sandbox as root): as an ordinary
    user, Chromium runs in its own sandbox (tests/test_unprivileged.py runs the browser tests so)."""
    return CHROMIUM_FLAGS + (("--no-sandbox",) if os.geteuid() == 0 else ())


def _run_quietly(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if done.returncode:
        pytest.fail(f"{what} failed ({' '.join(argv)}): {(done.stderr or done.stdout).strip()[-800:]}")


def ensure_tools() -> None:
    """Debian's chromium and chromium-driver, and the selenium pinned in requirements.txt."""
    missing = [package for package, program in DEBIAN_PACKAGES.items() if shutil.which(program) is None]
    missing += [package for package, font in DEBIAN_FONTS.items() if not font.exists()]
    if missing:
        if os.geteuid() != 0:
            pytest.fail(f"the browser test needs Debian's {' and '.join(missing)}: sudo apt-get install -y {' '.join(missing)}")
        wait_for_lock = ["-o", "DPkg::Lock::Timeout=300"]  # another job may be installing at the same time
        _run_quietly(["apt-get", "update", "-qq", *wait_for_lock], "apt-get update")
        _run_quietly(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *wait_for_lock, *missing],
                     "installing " + " ".join(missing))
    try:
        import selenium  # noqa: F401
    except ImportError:
        pin = next(line.split("#")[0].strip() for line in (REPO / "requirements.txt").read_text().splitlines()
                   if line.startswith("selenium"))
        _run_quietly([sys.executable, "-m", "pip", "install", "-q", pin], f"pip install {pin}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_group(process: subprocess.Popen, grace: float = 15) -> None:
    """SIGTERM to the server's process group (it shuts its kernels down), then SIGKILL what is left."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # kernels that outlived the server
    except ProcessLookupError:
        pass
    process.wait()


def _empty_artifacts() -> None:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)


@pytest.fixture(scope="session")
def artifacts():
    """build/browser-test/, emptied once per run (each module's screenshots stay; under pytest-xdist, not by a
    second worker while the first writes its server's log there)."""
    runcache.once("browser-artifacts", _empty_artifacts)
    return ARTIFACTS


@pytest.fixture(scope="module")
def lab_server(private_tmp, artifacts):
    """`python -m course.lab student` (what `make lab` runs) on a fresh workspace: (url, token, workspace, log)."""
    ensure_tools()
    home = private_tmp / "home"  # the developer's own Jupyter settings and workspaces stay out of the test
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
        "MPLCONFIGDIR": os.environ.get("MPLCONFIGDIR", str(home / "matplotlib")),
    }
    env.pop("NBGRADER_EXECUTION", None)
    workspace = private_tmp / "workspace"
    token, port = secrets.token_hex(16), _free_port()
    log = artifacts / "jupyterlab.log"
    argv = [sys.executable, "-m", "course.lab", "student", "--workspace", str(workspace),
            "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--LabApp.user_settings_dir={home / 'settings'}", f"--LabApp.workspaces_dir={home / 'workspaces'}",
            "--LabApp.expose_app_in_browser=True"]  # (window.jupyterapp: labpage opens notebooks in the loaded page)
    with open(log, "w") as out:
        process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                pytest.fail(f"the lab exited with {process.returncode}: {log.read_text()[-1500:]}")
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the lab did not answer within 90 s: {log.read_text()[-1500:]}")
                time.sleep(0.5)
        yield url, token, workspace, log
    finally:
        _stop_group(process)


def start_chromium(profile: Path):
    """A headless Chromium (chromedriver from Debian: no driver download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in chromium_flags():
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    service = Service(executable_path=shutil.which("chromedriver"), log_output=str(ARTIFACTS / "chromedriver.log"))
    browser = webdriver.Chrome(options=options, service=service)
    browser.set_page_load_timeout(120)
    return browser


def log_in(browser, url: str, token: str) -> None:
    """Sets the server's login cookie: the token in the URL of its smallest page (the status API's answer), not
    JupyterLab's whole application loaded only to be left."""
    browser.get(f"{url}/api/status?token={token}")


@pytest.fixture(scope="module")
def chromium(private_tmp, artifacts):
    """A headless Chromium for a module that needs no lab server (a page on disk)."""
    ensure_tools()
    browser = start_chromium(private_tmp / "chromium-profile")
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture(scope="module")
def driver(lab_server, private_tmp):
    """One headless Chromium for the whole module, logged in to the lab."""
    browser = start_chromium(private_tmp / "chromium-profile")
    try:
        url, token, _, _ = lab_server
        log_in(browser, url, token)
        yield browser
    finally:
        browser.quit()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    browser = next((item.funcargs[n] for n in ("driver", "chromium") if n in getattr(item, "funcargs", {})), None)
    if report.when == "call" and report.failed and browser is not None:
        name = re.sub(r"[^\w.-]+", "_", item.name)
        try:
            browser.save_screenshot(str(ARTIFACTS / f"failed-{name}.png"))
        except Exception:  # noqa: BLE001 - a screenshot is a courtesy; the failure itself is reported
            pass
