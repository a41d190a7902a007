"""What grade-class prints, read by an instructor in a terminal, a file or a CI log: no gradebook password, no
folder name read as markup, no column cut, one line naming the file on a full disk, and one line (exit 2)
when the sandbox is incomplete. No grading runs here: each case feeds the printing code directly."""
from __future__ import annotations

import errno
import io
import sys
from pathlib import Path

import pytest

from autograder.commands import classgrade, gradebook
from autograder.foundation import spec
from autograder.commands.classgrade import Outcome, Stopped, _console, _summary
from autograder.sandbox.pool import SandboxUnavailable
from autograder.foundation.results import CheckResult, GradeResult, PartResult

URL = "postgresql://grader:hunter2-s3cret@db.example.edu:5432/attention"


def result(student: str) -> GradeResult:
    parts = tuple(PartResult(p.id, p.points, (CheckResult("c", True, p.points, p.points, ""),)) for p in spec.PARTS)
    return GradeResult(student, parts)


def test_redact_hides_a_servers_password_and_keeps_the_rest():
    assert gradebook.redact(URL) == "postgresql://grader:***@db.example.edu:5432/attention"
    assert gradebook.redact(f"the gradebook {URL} could not be written") .count("hunter2") == 0
    assert gradebook.redact("sqlite:////srv/course/gradebook.db") == "sqlite:////srv/course/gradebook.db"
    assert gradebook.Location(URL, "course").shown.endswith("grader:***@db.example.edu:5432/attention")


def test_the_summary_and_every_error_line_hide_the_gradebook_password(monkeypatch, tmp_path):
    monkeypatch.setattr(gradebook, "locate", lambda course: gradebook.Location(URL, "course"))
    out = io.StringIO()
    failed = Outcome("ann", "error", result("ann"), f"GradebookError: the gradebook {URL} could not be written")
    _summary(_console(out), tmp_path, spec.ASSIGNMENT, [failed], 1.0)
    text = out.getvalue()
    assert "hunter2" not in text and "grader:***@db.example.edu" in text, text


def test_a_stop_line_hides_the_gradebook_password(monkeypatch, capsys, tmp_path):
    def stopped(*args, **kwargs):
        raise Stopped(f"the gradebook {URL} stayed locked", [], 1)

    monkeypatch.setattr(classgrade, "grade_class", stopped)
    assert classgrade.main(str(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "hunter2" not in err and err.count("\n") == 1, err


def test_folder_names_are_printed_as_they_are_never_as_markup(monkeypatch, tmp_path):
    monkeypatch.setattr(gradebook, "locate", lambda course: gradebook.Location("sqlite:///x.db", "course"))
    out = io.StringIO()
    names = ["student01x[red]", "[bold]eve", "bob[/]"]
    _summary(_console(out), tmp_path, spec.ASSIGNMENT, [Outcome(n, "graded", result(n)) for n in names], 1.0)
    for name in names:
        assert name in out.getvalue(), out.getvalue()


def test_a_summary_written_to_a_file_cuts_no_name(monkeypatch, tmp_path):
    monkeypatch.setattr(gradebook, "locate", lambda course: gradebook.Location("sqlite:///x.db", "course"))
    out = io.StringIO()  # (not a terminal: a file, a CI log)
    names = [f"student-with-a-rather-long-folder-name-{i:02d}" for i in range(3)]
    _summary(_console(out), tmp_path, spec.ASSIGNMENT, [Outcome(n, "graded", result(n)) for n in names], 1.0)
    for name in names:
        assert name in out.getvalue(), out.getvalue()


def test_a_full_disk_at_start_names_the_file_and_exits_1(monkeypatch, capsys, tmp_path):
    (tmp_path / "submitted").mkdir()
    lock = str(tmp_path / ".grade-class.lock")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", lock)

    monkeypatch.setattr(classgrade.courselock, "hold", full)
    assert classgrade.main(str(tmp_path)) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "disk is full" in err and lock in err and "Errno" not in err, err


def test_an_incomplete_sandbox_stops_grade_class_with_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    def refused(*args, **kwargs):
        raise SandboxUnavailable("refusing to grade: the sandbox is incomplete on this machine, missing network")

    monkeypatch.setattr(classgrade, "grade_class", refused)
    assert classgrade.main(str(tmp_path)) == 2
    out = capsys.readouterr()
    lines = [line for line in (out.out + out.err).splitlines() if line.strip()]
    assert len(lines) == 1 and "missing network" in lines[0], lines


def test_grade_refuses_with_one_line_and_exit_2_without_namespaces(tmp_path):
    """The CLI end to end: --no-namespaces without --unsafe-no-sandbox grades nothing."""
    import subprocess

    repo = Path(__file__).resolve().parent.parent
    sub = tmp_path / "x.py"
    sub.write_text((repo / "solutions" / "attention.py").read_text())
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(sub), "--no-namespaces", "--json"],
                          cwd=repo, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout[-500:]
    err = proc.stderr.strip()
    assert "\n" not in err and "namespaces" in err and "--unsafe-no-sandbox" in err, err


@pytest.mark.parametrize("flag", [["--unsafe-no-sandbox"], []])
def test_the_unsafe_flag_is_what_lets_grade_go_on(flag):
    from autograder.commands import cli
    from autograder.foundation import limits

    args = cli.build_parser().parse_args(["grade", "x.py", "--no-namespaces", *flag])
    assert limits.from_args(args).unsafe_no_sandbox is bool(flag)


def test_nbgrader_autograde_stops_with_one_line_and_exit_2_when_the_sandbox_is_incomplete(monkeypatch, capsys):
    """The preprocessor raises SystemExit(2), which nbgrader's converter does not catch (it catches Exception):
    nothing of the notebook is graded or saved."""
    import nbformat

    from autograder import nbgrader_plugin

    def refused(*args, **kwargs):
        raise SandboxUnavailable("refusing to grade: the sandbox is incomplete on this machine, missing filesystem")

    monkeypatch.setattr(nbgrader_plugin, "grade_notebook_file", refused)
    nb = nbformat.v4.new_notebook()
    with pytest.raises(SystemExit) as stopped:
        nbgrader_plugin.AutograderPreprocessor().preprocess(nb, {"nbgrader": {"notebook": "01_scores",
                                                                               "assignment": spec.ASSIGNMENT}})
    assert stopped.value.code == 2 and not isinstance(stopped.value, Exception)
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "missing filesystem" in err, err


def test_nbgrader_feedback_says_when_grading_ran_without_a_complete_sandbox():
    from autograder import nbgrader_plugin
    from autograder.grading.grade import UNSAFE_NOTE

    note = UNSAFE_NOTE.format(layers="filesystem, network").render(spec.DEFAULT_LANGUAGE)
    part = result("x").parts[0]
    nb = {"cells": [{"cell_type": "code", "source": "", "outputs": [], "metadata": {"nbgrader": {
        "grade": True, "solution": False, "grade_id": part.id, "points": part.max_score}}}]}
    nbgrader_plugin.annotate(nb, {part.id: part}, [note])
    text = str(nb["cells"][0]["outputs"])
    assert "WITHOUT a complete sandbox" in text and "filesystem, network" in text


def test_the_summary_says_when_submissions_were_graded_without_a_complete_sandbox(monkeypatch, tmp_path):
    from dataclasses import replace

    monkeypatch.setattr(gradebook, "locate", lambda course: gradebook.Location("sqlite:///x.db", "course"))
    out = io.StringIO()
    unsafe = replace(result("ann"), protections_off=("network: no network namespace",))
    _summary(_console(out), tmp_path, spec.ASSIGNMENT, [Outcome("ann", "graded", unsafe),
                                                         Outcome("bob", "graded", result("bob"))], 1.0)
    assert "SANDBOX PROTECTIONS OFF: 1 submission graded without network" in out.getvalue(), out.getvalue()


@pytest.mark.parametrize("unsafe", [False, True])
def test_a_gradescope_bundle_grades_without_a_complete_sandbox_only_when_built_to(tmp_path, unsafe):
    import zipfile

    from autograder.commands.gradescope import build_bundle
    from autograder.foundation.limits import UNSAFE_ENV

    bundle = build_bundle(tmp_path / "b.zip", unsafe_no_sandbox=unsafe)
    run = zipfile.ZipFile(bundle).read("run_autograder").decode()
    assert (f"export {UNSAFE_ENV}=1" in run) is unsafe and "UNSAFE\n" not in run
