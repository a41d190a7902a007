"""What a graded cell does, in every assignment of the course (copied next to its notebooks).

A graded cell holds no test: the hidden autograder scores the part. Its `graded_part("<part>")`

* in a notebook, says so and how a self-learner grades the notebook;
* under nbgrader's Validate (NBGRADER_EXECUTION=validate), runs the check cells above it again on
  the student's definitions: a ✓ line when they all pass, else what fails, on stderr, which
  Validate reports with the cell (and scores 0). Only visible checks run;
* under stock `nbgrader autograde` (NBGRADER_EXECUTION=autograde), also writes to stderr, so that
  nbgrader's Execute scores the cell 0, never full marks.

An assignment's visible_checks.py makes its `graded_part` with `graded_part_function`, from its
table of check cells per part (`PART_CHECKS`, kept equal to the notebooks by tests/test_validate.py),
and its gettext function `_`, so that these messages speak the language the notebook chose with
`use_language` (they are in the visible checks' catalog, course/locale/*/LC_MESSAGES/visible_checks.po).
"""
from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import sys
import textwrap
from collections.abc import Callable


def english(message: str) -> str:
    """The gettext function of an assignment that speaks only English: the message itself."""
    return message


def _missing(name: str, _: Callable[[str], str], ran: list | tuple | None = None) -> str:
    """Why `name` is not defined, from the sources of the cells run so far (IPython's `In`; None: not known): no cell
    run defines it (its cell was skipped), or one did and raised (a SyntaxError, usually)."""
    defines = re.compile(rf"^\s*(?:(?:async\s+)?def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*=", re.M)
    if ran is not None and not any(isinstance(src, str) and defines.search(src) for src in ran):
        return _("{name} is not defined: the cell that defines it has not been run; run it (and the cells above it), "
                 "then this one").format(name=name)
    return _("{name} is not defined: its cell raised an error (a SyntaxError?); fix it and run it again").format(name=name)


def explain_missing_names(part_checks: dict[str, tuple[str, ...]], _: Callable[[str], str] = english) -> None:
    """In a notebook (IPython), a NameError for a name that a solution cell defines is shown as the one
    sentence Validate prints, instead of a raw traceback: its cell raised (a SyntaxError, usually), so the
    name was never defined. Other NameErrors look as usual. Outside IPython: nothing."""
    names = {arg.id for calls in part_checks.values() for call in calls for arg in ast.parse(call, mode="eval").body.args}
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def handler(shell, etype, value, tb, tb_offset=None):
        """IPython's custom exception handler: it shows the error itself (IPython ignores what it returns)."""
        name = getattr(value, "name", None)
        if name in names:
            shown = [f"{etype.__name__}: " + _missing(name, _, shell.user_ns.get("In"))]
        else:
            shown = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
        shell._showtraceback(etype, value, shown)
        return shown

    shell.set_custom_exc((NameError,), handler)


def rerun(call: str, checks: dict, namespace: dict, _: Callable[[str], str] = english) -> str | None:
    """Run one check cell's `call` (e.g. "check_attend(attend)") on the student's `namespace`.

    None when the check prints its ✓ line; else why not, in one line (in the language of `_`)."""
    node = ast.parse(call, mode="eval").body
    names = [arg.id for arg in node.args]
    missing = [name for name in names if name not in namespace]
    if missing:
        return _missing(missing[0], _, namespace.get("In"))
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            checks[node.func.id](*(namespace[name] for name in names))
    except AssertionError as exc:
        return _("{name}: {reason}").format(name=names[0], reason=exc)
    except Exception as exc:  # noqa: BLE001 - the student's code raised: one line, never a crashed Validate
        return _("{name}: {kind}: {reason}").format(name=names[0], kind=type(exc).__name__, reason=exc)
    lines = [line for line in printed.getvalue().splitlines() if line.strip()]
    if any(line.startswith("✓") for line in lines):
        return None
    return lines[-1] if lines else _("{name}: the visible check did not pass").format(name=names[0])


def validate(part_id: str, calls: tuple[str, ...], checks: dict, namespace: dict, _: Callable[[str], str] = english) -> None:
    """✓ on stdout when every call passes, else the part and each failure on stderr."""
    problems = [why for why in (rerun(call, checks, namespace, _) for call in calls) if why]
    if not problems:
        print(_("✓ {part}: the visible checks above pass (the hidden autograder runs many more)").format(part=part_id))
        return
    lines = [_("{part}: the visible checks above do not pass yet:").format(part=part_id)]
    lines += [textwrap.fill(why, width=80, initial_indent="  - ", subsequent_indent="    ") for why in problems]
    print("\n".join(lines), file=sys.stderr)


def grade_commands(grade_command: str, notebook: str, suffix: str = "") -> str:
    """`grade_command` (with `{suffix}` and `{notebook}` in it) for one notebook of the edition whose folder
    name ends in `suffix` ("" for English, "_zh" for the Chinese edition)."""
    return grade_command.format(suffix=suffix, notebook=notebook)


def graded_part_function(part_checks: dict[str, tuple[str, ...]], checks: dict, grade_command: str,
                         _: Callable[[str], str] = english, part_notebooks: dict[str, str] | None = None,
                         edition_suffix: Callable[[], str] = str) -> Callable[[str], None]:
    """The `graded_part` of an assignment: its check cells per part, the namespace of its check
    functions, the command that grades one notebook (`{suffix}` and `{notebook}` in it are the
    edition's folder suffix and the part's notebook), its gettext function (called when a message is
    printed, so that it follows use_language), the notebook of each part, and the folder suffix of
    the edition the notebook speaks. In a notebook, it also explains a NameError for one of the
    part's names (explain_missing_names)."""
    explain_missing_names(part_checks, _)

    def graded_part(part_id: str) -> None:
        """What a graded cell does (see graded_cells.py): point to the hidden autograder, or under
        nbgrader's Validate rerun the part's visible checks."""
        mode = os.environ.get("NBGRADER_EXECUTION")
        if mode == "validate":
            validate(part_id, part_checks[part_id], checks, sys._getframe(1).f_globals, _)
            return
        notebook = (part_notebooks or {}).get(part_id, "<this notebook>")
        command = grade_commands(grade_command, notebook, edition_suffix())
        print(_(
            "Part `{part}` is scored by the course's hidden autograder, not by this cell.\n"
            "Self-learners: from the repository root run\n    make grade\n"
            "(every notebook of your workspace), or for this notebook alone\n    {command}"
        ).format(part=part_id, command=command))
        if mode == "autograde":
            print(_(
                "{part}: this course must be autograded with the course's own preprocessor "
                "(see the README); stock `nbgrader autograde` scores this cell 0."
            ).format(part=part_id), file=sys.stderr)

    return graded_part
