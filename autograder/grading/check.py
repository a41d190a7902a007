"""Stage 3 of grading: run an assignment's hidden pytest checks, in this trusted process, against one submission.

The checks of a part live in autograder/checks/<assignment>/test_<part>.py. Each test is one
check; its weight is `@pytest.mark.points(n)` (default 1) and a part's points are shared out
by weight (scoring.py). Its name is the first line of its docstring (a claim, e.g. "rows of
the weights sum to 1"), and a failure's message is the CheckFailure text written for the student.

The checks get what they grade as fixtures from the runner: `student` (student.py) always,
plus the `fixtures` and `params` a caller passes (the GPU stage passes its run and its cases).

Collect once, run many: pytest collects the checks once per grading process (`Checks`:
their order, parameters, markers and fixtures); each submission then runs them directly, in
pytest's order, with the fixtures set up and torn down as pytest would (a function-scoped
fixture per check, a wider one once per submission). Starting pytest, collecting and its
per-test protocol cost more than a whole submission's checks once the round trips were batched.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import os
import sys
import time
import types
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..foundation import i18n
from ..foundation.failures import raised_in_standin
from ..foundation.results import PartResult
from .scoring import CheckRecord, failure_message, score_part
from ..sandbox.session import Session
from ..foundation.spec import CHECKS_ROOT, DEFAULT_LANGUAGE, Assignment, Part
from ..sandbox.student import Student

_ = i18n.message

REPO_ROOT = str(CHECKS_ROOT.parent.parent)
if REPO_ROOT not in sys.path:  # the checks import the reference solutions
    sys.path.insert(0, REPO_ROOT)

PYTEST_ARGS = (
    "-q", "-p", "no:cacheprovider", "-p", "no:stepwise", "-p", "no:warnings",
    # no:unraisableexception: its gc.collect() at every pytest.main (pytest >= 8.4) costs ~0.1-0.8 s
    # per call in a process holding torch.
    "-p", "no:unraisableexception", "-p", "no:logging", "-s",
    "--rootdir", str(CHECKS_ROOT), "-c", str(CHECKS_ROOT / "pytest.ini"), "--import-mode=importlib",
    "-o", "console_output_style=classic", "--collect-only",
)
RUNNER_FIXTURES = ("student",)  # what the runner itself gives every check


def part_of(item) -> str:
    return Path(item.path).stem.removeprefix("test_")


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
    """A pytest plugin that keeps the collected checks, records collection errors, and parametrizes the
    checks' `params` arguments (ids: each value's `id`, else its str())."""

    def __init__(self, params: Mapping[str, Sequence] | None = None):
        self.params = params or {}
        self.items: list = []
        self.collect_errors: list[str] = []

    def pytest_generate_tests(self, metafunc):
        for name, values in self.params.items():
            if name in metafunc.fixturenames:
                metafunc.parametrize(name, list(values), ids=[str(getattr(v, "id", v)) for v in values])

    def pytest_collectreport(self, report):
        if report.failed:
            self.collect_errors.append(str(report.longrepr)[-2000:])

    def pytest_collection_finish(self, session):
        self.items = list(session.items)


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


@dataclass(frozen=True)
class Fixture:
    """A fixture of the checks' conftest or files, as pytest resolved it for a check."""

    name: str
    func: object
    argnames: tuple[str, ...]
    per_check: bool  # function scope: set up for each check; else once per submission


@dataclass(frozen=True)
class Check:
    """One collected check: its function, what it is called in reports, and what it needs."""

    function: object
    name: str
    part: str
    weight: float
    argnames: tuple[str, ...]  # the function's own arguments
    fixtures: tuple[str, ...]  # every fixture it needs (autouse ones included), in pytest's order
    params: tuple[tuple[str, object], ...]


def _collected(item, given: set[str]) -> tuple[Check, dict[str, Fixture]]:
    info = item._fixtureinfo  # (pytest's record of the fixtures a test needs; stable since pytest 3)
    params = dict(item.callspec.params) if hasattr(item, "callspec") else {}
    found = {}
    for name in info.names_closure:
        if name in given or name in params:
            continue
        definition = info.name2fixturedefs[name][-1]
        if "request" in definition.argnames or definition.params is not None:
            raise RuntimeError(f"the hidden checks use fixture {name!r} with `request` or params, which the "
                               "check runner does not support")
        found[name] = Fixture(name, definition.func, tuple(definition.argnames), definition.scope == "function")
    marker = item.get_closest_marker("points")
    check = Check(item.obj, check_name(item), part_of(item), float(marker.args[0]) if marker else 1.0,
                  tuple(info.argnames), tuple(info.names_closure), tuple(params.items()))
    return check, found


class Checks:
    """The hidden checks of some parts of an assignment, collected once; `run` grades one session.

    `fixtures` names what the caller will give each run besides `student`; `params` parametrizes the
    checks that take an argument of that name (its values are fixed at collection)."""

    def __init__(self, assignment: Assignment, parts: Sequence[Part], fixtures: Sequence[str] = (),
                 params: Mapping[str, Sequence] | None = None):
        self.parts = list(parts)
        self.given = set(RUNNER_FIXTURES) | set(fixtures)
        collector = Collector(params)
        files = [str(assignment.check_file(p)) for p in self.parts]
        sink = io.StringIO()
        with _no_plugin_autoload(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            code = pytest.main([*files, *PYTEST_ARGS],
                               plugins=[collector, fixtures_plugin(dict.fromkeys(self.given))])
        if collector.collect_errors or code != 0:
            raise RuntimeError(f"the hidden checks could not be collected (pytest exit {code}):\n"
                               + ("\n".join(collector.collect_errors) or sink.getvalue()[-3000:]))
        self.checks: list[Check] = []
        self.fixtures: dict[str, Fixture] = {}
        for item in collector.items:
            check, found = _collected(item, self.given)
            self.checks.append(check)
            self.fixtures.update(found)
        self.modules = list({id(item.module): item.module for item in collector.items}.values())

    def prepare(self) -> None:
        """Compute now what the checks compute once per process (each check file's `prepare()`, if it has
        one: e.g. a reference figure), so that the first submission does not wait for it. The grader calls
        it while the worker pool may still be importing torch."""
        import torch  # noqa: PLC0415 - (imported by the checks already)

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as the checks run (conftest's one_thread): the same figures to the last bit
        try:
            for module in self.modules:
                prepare = getattr(module, "prepare", None)
                if callable(prepare):
                    prepare()
        finally:
            torch.set_num_threads(threads)

    def run(self, session: Session, fixtures: Mapping[str, object] | None = None,
            lang: str = DEFAULT_LANGUAGE) -> list[PartResult]:
        """Every check against `session`: one PartResult per part, its messages in `lang` (the edition's)."""
        student = Student(session)
        given = {"student": student, **(fixtures or {})}
        records: dict[str, list[CheckRecord]] = defaultdict(list)
        seconds: dict[str, float] = defaultdict(float)
        with contextlib.ExitStack() as per_submission, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            wide: dict[str, object] = {}
            for check in self.checks:
                session.enter_part(check.part)
                started = time.perf_counter()
                record = self._run_one(check, given, wide, per_submission, lang)
                if not record.passed and student.retried(check.part):  # lending never lowers a score
                    with student.own_pieces():
                        again = self._run_one(check, given, wide, per_submission, lang)
                    # a check failing both ways reports its own failure, not an error raised in a stand-in
                    record = again if again.passed or record.in_standin else record
                if not record.passed and student.witnessed(check.part):
                    record = self._witnessed(check, record, student, given, wide, per_submission, lang)
                records[check.part].append(record)
                seconds[check.part] += time.perf_counter() - started
        return [score_part(p, records.get(p.id, []), session, seconds.get(p.id, 0.0), lang)
                for p in self.parts]

    def _witnessed(self, check: Check, record: CheckRecord, student: Student, given: dict, wide: dict,
                   per_submission: contextlib.ExitStack, lang: str) -> CheckRecord:
        """A failed check of a part that borrows pieces, run again with the grader's pieces, the student's own
        beside them as witnesses (Student.witnessing): when it passes so, and some of the student's pieces gave other
        results on the part's inputs, the failure lies in those pieces, which their own parts grade: the check
        passes here and the part's note names them. Otherwise the first failure stands. Run aside (Session.aside):
        it costs the part neither time nor a restart."""
        session = student.session
        if session.part is None or session.part.stopped:  # (a part out of time is not run again)
            return record
        with student.witnessing(), session.aside(session.limits.part_seconds):  # (not the part's time)
            again = self._run_one(check, given, wide, per_submission, lang)
        differed = sorted(student.lenders[check.part].differed)
        if not again.passed or not differed:
            return record
        student.note(_("on the inputs of this part's checks, your {names} gave other results than the reference's: "
                       "the checks that failed with yours were graded with the grader's {names} in their place (each "
                       "piece is graded in its own part, so that its mistake costs points there only)").format(
            names=", ".join(differed)))
        return again

    def _run_one(self, check: Check, given: dict, wide: dict, per_submission: contextlib.ExitStack,
                 lang: str) -> CheckRecord:
        """Set up the check's fixtures, call it, tear its own fixtures down; a failure's message as pytest's
        report of it (setup or call) would give it, in `lang`."""
        values = {**given, **dict(check.params)}
        with contextlib.ExitStack() as per_check:
            try:
                for name in check.fixtures:
                    if name not in values:
                        values[name] = self._set_up(name, values, wide, per_check, per_submission)
                check.function(**{name: values[name] for name in check.argnames})
            except Exception as exc:  # noqa: BLE001 - as pytest: any exception fails the check
                return CheckRecord(check.name, check.weight, False, failure_message(exc, lang), raised_in_standin(exc))
            finally:
                with contextlib.suppress(Exception):  # (pytest reports a teardown error apart; the check stands)
                    per_check.close()
        return CheckRecord(check.name, check.weight, True, "")

    def _set_up(self, name: str, values: dict, wide: dict, per_check: contextlib.ExitStack,
                per_submission: contextlib.ExitStack):
        fixture = self.fixtures[name]
        if not fixture.per_check and name in wide:
            return wide[name]
        args = {arg: values[arg] if arg in values else self._set_up(arg, values, wide, per_check, per_submission)
                for arg in fixture.argnames}
        value = fixture.func(**args)
        if inspect.isgenerator(value):
            gen, value = value, next(value)
            (per_check if fixture.per_check else per_submission).callback(_finish, gen)
        if not fixture.per_check:
            wide[name] = value
        return value


def _finish(gen) -> None:
    """Run a yield fixture's teardown (the code after its yield)."""
    with contextlib.suppress(StopIteration):
        next(gen)


def run_checks(session: Session, parts: Sequence[Part], fixtures: Mapping[str, object] | None = None,
               params: Mapping[str, Sequence] | None = None, checks: Checks | None = None,
               lang: str = DEFAULT_LANGUAGE) -> list[PartResult]:
    """Run the hidden checks of `parts` (of the session's assignment) against the session; one PartResult
    per part, its messages in `lang`. The checks get `student` and each of `fixtures` as fixtures; each of
    `params` parametrizes the checks that take an argument of that name. `checks`: the same checks, collected
    before."""
    checks = checks or Checks(session.assignment, parts, tuple(fixtures or ()), params)
    return checks.run(session, fixtures, lang)
