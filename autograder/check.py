"""Stage 3 of grading: run the hidden pytest checks, in this trusted process, against one submission.

The checks live in autograder/checks/test_<part>.py. Each test is one check; its weight
is `@pytest.mark.points(n)` (default 1) and a part's points are shared out by weight.
Its name is the first line of its docstring (a claim, e.g. "rows of the weights sum to 1"),
and a failure's message is the CheckFailure text written for the student.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from .results import CheckResult, PartResult
from .session import CheckFailure, Session, Student
from .spec import FROM_SCRATCH, PART_BY_ID

CHECKS_DIR = Path(__file__).resolve().parent / "checks"
REPO_ROOT = str(CHECKS_DIR.parent.parent)
if REPO_ROOT not in sys.path:  # the checks import the reference solutions
    sys.path.insert(0, REPO_ROOT)
CURRENT: Student | None = None  # read by the checks' `student` fixture


def part_of(item) -> str:
    return Path(str(item.fspath)).stem.removeprefix("test_")


def check_name(item) -> str:
    doc = getattr(item.function, "__doc__", None)
    name = doc.strip().splitlines()[0].strip() if doc else item.originalname.removeprefix("test_").replace("_", " ")
    params = getattr(item, "callspec", None)
    return f"{name} [{params.id}]" if params else name


def failure_message(excinfo) -> str:
    exc = excinfo.value
    if isinstance(exc, CheckFailure):
        return str(exc)
    if isinstance(exc, AssertionError):
        text = str(exc).split("\nassert ")[0].strip()
        return text or "the check's condition was not met"
    # a student's value broke the check's own code (e.g. a tuple where a tensor belongs)
    return f"your result could not be checked ({type(exc).__name__}: {str(exc)[:200]})"


class Collector:
    """A pytest plugin that records each check's outcome for the part it belongs to."""

    def __init__(self, session: Session):
        self.session = session
        self.records: dict[str, list[tuple[str, float, bool, str]]] = defaultdict(list)
        self.collect_errors: list[str] = []
        self.started: dict[str, float] = {}
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_setup(self, item):
        part = part_of(item)
        self.session.enter_part(part)
        self.started[item.nodeid] = time.perf_counter()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if call.when == "call" or (call.when == "setup" and report.failed):
            marker = item.get_closest_marker("points")
            weight = float(marker.args[0]) if marker else 1.0
            message = "" if report.passed else failure_message(call.excinfo) if call.excinfo else "failed"
            self.records[part_of(item)].append((check_name(item), weight, report.passed, message))
        if call.when == "teardown":
            self.seconds[part_of(item)] += time.perf_counter() - self.started.pop(item.nodeid, time.perf_counter())

    def pytest_collectreport(self, report):
        if report.failed:
            self.collect_errors.append(str(report.longrepr)[-2000:])


def _part_result(part_id: str, records, session: Session, seconds: float) -> PartResult:
    part = PART_BY_ID[part_id]
    total = sum(w for _, w, _, _ in records) or 1.0
    state = session.parts.get(part_id)
    forbidden = sorted(state.forbidden) if state else []
    notes = []
    missing = [n for n in part.names if not session.defines(n, part_id)]
    if missing:
        notes.append(f"missing from your submission: {', '.join(missing)}")
    if forbidden and part_id in FROM_SCRATCH:
        notes.append(f"this part must compute attention from scratch, but your code called {', '.join(forbidden)}: "
                     "its checks earn nothing")
    checks = []
    for name, weight, passed, message in records:
        max_points = part.points * weight / total
        ok = passed and not forbidden
        if passed and forbidden:
            message = f"correct result, but computed with {', '.join(forbidden)}"
        checks.append(CheckResult(name, ok, max_points if ok else 0.0, max_points, message))
    return PartResult(part_id, part.points, tuple(checks), tuple(notes), seconds=round(seconds, 3))


def run_checks(session: Session, part_ids: list[str], extra_args: tuple[str, ...] = ()) -> list[PartResult]:
    """Run the hidden checks of the given parts against the session; one PartResult per part."""
    global CURRENT
    collector = Collector(session)
    files = [str(CHECKS_DIR / f"test_{p}.py") for p in part_ids]
    args = [*files, "-q", "-p", "no:cacheprovider", "-p", "no:stepwise", "-p", "no:warnings",
            # no:unraisableexception: its gc.collect() at every pytest.main (pytest >= 8.4) costs ~0.1-0.8 s
            # per call in a process holding torch; grading a class calls pytest.main once per notebook.
            "-p", "no:unraisableexception",
            # The checks log nothing and print nothing: per-test log and output capture is pure overhead.
            "-p", "no:logging", "-s",
            # A failure's message is the CheckFailure text; pytest's own long report (source, AST, argument
            # reprs) is never shown and cost up to 0.4 s per failing submission. native is the cheapest style.
            "--tb=native",
            "--rootdir", str(CHECKS_DIR), "-c", str(CHECKS_DIR / "pytest.ini"), "--import-mode=importlib",
            "-o", "console_output_style=classic", *extra_args]
    CURRENT = Student(session)
    sink = io.StringIO()
    # Entry-point plugins (hypothesis alone costs ~4 s to import) are not needed by the checks.
    autoload = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            code = pytest.main(args, plugins=[collector])
    finally:
        CURRENT = None
        if autoload is None:
            os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = autoload
    if collector.collect_errors or code not in (0, 1):
        raise RuntimeError(f"the hidden checks could not run (pytest exit {code}):\n"
                           + ("\n".join(collector.collect_errors) or sink.getvalue()[-3000:]))
    return [_part_result(p, collector.records.get(p, []), session, collector.seconds.get(p, 0.0)) for p in part_ids]
