"""Stage 3 of grading: run an assignment's hidden pytest checks, in this trusted process, against one submission.

The checks of a part live in autograder/checks/<assignment>/test_<part>.py. Each test is one
check; its weight is `@pytest.mark.points(n)` (default 1) and a part's points are shared out
by weight (scoring.py). Its name is the first line of its docstring (a claim, e.g. "rows of
the weights sum to 1"), and a failure's message is the CheckFailure text written for the student.

The checks get what they grade as fixtures from the runner: `student` (student.py) always,
plus the `fixtures` and `params` a caller passes (the GPU stage passes its run and its cases).
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import time
import types
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from .results import PartResult
from .scoring import CheckRecord, failure_message, score_part
from .session import Session
from .spec import CHECKS_ROOT, Part
from .student import Student

REPO_ROOT = str(CHECKS_ROOT.parent.parent)
if REPO_ROOT not in sys.path:  # the checks import the reference solutions
    sys.path.insert(0, REPO_ROOT)

PYTEST_ARGS = (
    "-q", "-p", "no:cacheprovider", "-p", "no:stepwise", "-p", "no:warnings",
    # no:unraisableexception: its gc.collect() at every pytest.main (pytest >= 8.4) costs ~0.1-0.8 s
    # per call in a process holding torch; grading a class calls pytest.main once per notebook.
    "-p", "no:unraisableexception",
    # The checks log nothing and print nothing: per-test log and output capture is pure overhead.
    "-p", "no:logging", "-s",
    # A failure's message is the CheckFailure text; pytest's own long report (source, AST, argument
    # reprs) is never shown and cost up to 0.4 s per failing submission. native is the cheapest style.
    "--tb=native",
    "--rootdir", str(CHECKS_ROOT), "-c", str(CHECKS_ROOT / "pytest.ini"), "--import-mode=importlib",
    "-o", "console_output_style=classic",
)


def part_of(item) -> str:
    return Path(str(item.fspath)).stem.removeprefix("test_")


def check_name(item) -> str:
    doc = getattr(item.function, "__doc__", None)
    name = doc.strip().splitlines()[0].strip() if doc else item.originalname.removeprefix("test_").replace("_", " ")
    params = getattr(item, "callspec", None)
    return f"{name} [{params.id}]" if params else name


def _fixture(name: str, value):
    def provide():
        return value

    return pytest.fixture(name=name)(provide)


def fixtures_plugin(values: Mapping[str, object]) -> types.ModuleType:
    """A pytest plugin that provides each of `values` as a fixture of that name."""
    plugin = types.ModuleType("autograder_check_fixtures")
    for name, value in values.items():
        setattr(plugin, name, _fixture(name, value))
    return plugin


class Collector:
    """A pytest plugin that records each check's outcome for the part it belongs to, and
    parametrizes the checks' `params` arguments (ids: each value's `id`, else its str())."""

    def __init__(self, session: Session, params: Mapping[str, Sequence] | None = None):
        self.session = session
        self.params = params or {}
        self.records: dict[str, list[CheckRecord]] = defaultdict(list)
        self.collect_errors: list[str] = []
        self.started: dict[str, float] = {}
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_generate_tests(self, metafunc):
        for name, values in self.params.items():
            if name in metafunc.fixturenames:
                metafunc.parametrize(name, list(values), ids=[str(getattr(v, "id", v)) for v in values])

    def pytest_runtest_setup(self, item):
        self.session.enter_part(part_of(item))
        self.started[item.nodeid] = time.perf_counter()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if call.when == "call" or (call.when == "setup" and report.failed):
            marker = item.get_closest_marker("points")
            weight = float(marker.args[0]) if marker else 1.0
            message = "" if report.passed else failure_message(call.excinfo.value) if call.excinfo else "failed"
            self.records[part_of(item)].append(CheckRecord(check_name(item), weight, report.passed, message))
        if call.when == "teardown":
            self.seconds[part_of(item)] += time.perf_counter() - self.started.pop(item.nodeid, time.perf_counter())

    def pytest_collectreport(self, report):
        if report.failed:
            self.collect_errors.append(str(report.longrepr)[-2000:])


@contextlib.contextmanager
def _no_plugin_autoload():
    """Entry-point plugins (hypothesis alone costs ~4 s to import) are not needed by the checks."""
    autoload = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        yield
    finally:
        if autoload is None:
            os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = autoload


def run_checks(session: Session, parts: Sequence[Part], fixtures: Mapping[str, object] | None = None,
               params: Mapping[str, Sequence] | None = None) -> list[PartResult]:
    """Run the hidden checks of `parts` (of the session's assignment) against the session; one PartResult
    per part. The checks get `student` and each of `fixtures` as fixtures; each of `params` parametrizes
    the checks that take an argument of that name."""
    collector = Collector(session, params)
    files = [str(session.assignment.check_file(p)) for p in parts]
    plugins = [collector, fixtures_plugin({"student": Student(session), **(fixtures or {})})]
    sink = io.StringIO()
    with _no_plugin_autoload(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = pytest.main([*files, *PYTEST_ARGS], plugins=plugins)
    if collector.collect_errors or code not in (0, 1):
        raise RuntimeError(f"the hidden checks could not run (pytest exit {code}):\n"
                           + ("\n".join(collector.collect_errors) or sink.getvalue()[-3000:]))
    return [score_part(p, collector.records.get(p.id, []), session, collector.seconds.get(p.id, 0.0)) for p in parts]
