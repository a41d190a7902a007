"""`make grade`: the student's workspace (make lab's copy of the release) graded on one screen.

    python -m autograder grade-workspace [WORKSPACE] [--assignment NAME] [--full]

The workspace holds one folder per released assignment (self_attention, generation and their Chinese
editions). Graded: the folder named by --assignment, else every folder in which the student changed a
solution cell (compared with the release, assignments/<name>/), so that the folders never opened cost
no screen. Each is printed as one summary table (report.brief: a row per part with its score and what
its failing checks say, the total); --full prints the whole report, one row per check. The files the
lab put next to the notebooks (visible_checks.py, graded_cells.py, ...) are the release's: no note
about them.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from ..foundation import edition, i18n, spec
from . import report
from ..foundation.extract import SubmissionError, extract
from ..foundation.limits import Limits, SandboxUnavailable

_ = i18n.message
REPO = Path(__file__).resolve().parent.parent.parent
RELEASE = REPO / "assignments"


@dataclass(frozen=True)
class Folder:
    """One assignment's folder of the workspace: its edition id and the notebooks the student changed."""
    path: Path
    edition: str
    changed: tuple[str, ...]


def solution_cells(path: Path) -> dict[str, str] | None:
    """grade_id -> source of a notebook's nbgrader solution cells; None when it cannot be read as a notebook."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        cells = {}
        for cell in nb["cells"]:
            meta = (cell.get("metadata") or {}).get("nbgrader") or {}
            if meta.get("solution"):
                source = cell.get("source", "")
                cells[meta.get("grade_id", "")] = "".join(source) if isinstance(source, list) else source
        return cells
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def written_points(release: Path) -> float:
    """The points of a released folder's written answers (nbgrader's manually graded markdown cells), which a teacher
    grades by hand on top of the autograded parts; 0 when it has none or they cannot be read."""
    points = 0.0
    for path in sorted(release.glob("*.ipynb")):
        try:
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for cell in cells:
            meta = (cell.get("metadata") or {}).get("nbgrader") or {}
            if cell.get("cell_type") == "markdown" and meta.get("grade") and meta.get("solution"):
                points += float(meta.get("points") or 0)
    return points


def changed_notebooks(folder: Path, release: Path) -> tuple[str, ...]:
    """The notebooks of `folder` whose solution cells differ from the release's (one that cannot be read: changed)."""
    changed = []
    for released in sorted(release.glob("*.ipynb")):
        mine = folder / released.name
        if mine.exists() and solution_cells(mine) != solution_cells(released):
            changed.append(mine.stem)
    return tuple(changed)


def editions(workspace: Path, release: Path = RELEASE) -> list[str]:
    """The released assignments (edition ids) that have a folder in the workspace, in the release's order."""
    return [r.name for r in sorted(release.iterdir()) if r.is_dir() and (workspace / r.name).is_dir()]


def folders(workspace: Path, release: Path = RELEASE) -> list[Folder]:
    """The workspace's folders of released assignments, in the release's order, with the notebooks changed."""
    return [Folder(workspace / name, name, changed_notebooks(workspace / name, release / name))
            for name in editions(workspace, release)]


def choose(workspace: Path, assignment: str | None = None, release: Path = RELEASE) -> list[Folder]:
    """The folders to grade: the named one, else the ones the student worked in (SubmissionError: one line)."""
    if not workspace.is_dir():
        raise SubmissionError(f"{workspace}/ does not exist yet: run `make lab` first (it copies the release there)")
    if assignment is None:
        return [f for f in folders(workspace, release) if f.changed]
    edition.resolve(assignment)  # an unknown name: one line naming the known ones
    present = editions(workspace, release)
    if assignment not in present:
        raise SubmissionError(f"{workspace / assignment}/ does not exist: run `make lab` first, or name one of "
                              f"{', '.join(present) or 'the released assignments'}")
    return [Folder(workspace / assignment, assignment, changed_notebooks(workspace / assignment, release / assignment))]


def release_files(release: Path, edition: str) -> tuple[str, ...]:
    """The files and folders the release puts next to an edition's notebooks (the student's own are not among
    them: no note about these)."""
    return tuple(p.name + "/" * p.is_dir() for p in (release / edition).iterdir() if p.suffix != ".ipynb")


def main(workspace: str | Path, assignment: str | None = None, full: bool = False, limits: Limits | None = None,
         release: Path = RELEASE) -> int:
    """The command: grade the chosen folders with one warm grader; a summary table each (or the full reports)."""
    workspace = Path(workspace)
    chosen = choose(workspace, assignment, release)
    console = Console()
    if not chosen:
        names = ", ".join(editions(workspace, release))
        console.print(f"Nothing to grade yet: no solution cell in {workspace}/ ({names}) differs from the release.\n"
                      "Write a solution, save the notebook and run `make grade` again, or grade one folder as it "
                      "is: make grade ASSIGNMENT=self_attention", soft_wrap=True)
        return 0
    submissions = [extract(folder.path) for folder in chosen]  # each read once, here: one to refuse, before the pool
    from ..sandbox.prestart import prestart  # noqa: PLC0415 - the worker pool imports torch while this process does

    prestart()
    limits = limits or Limits()
    try:
        _grade(chosen, submissions, limits, full, console, release)
    except SandboxUnavailable as exc:  # (raised before any student code ran, before anything was printed)
        if limits.unsafe_no_sandbox or not hasattr(os, "fork"):
            raise
        print(WITHOUT_SANDBOX.format(reason=exc.reason).render(language(chosen[0])), file=sys.stderr)
        _grade(chosen, submissions, replace(limits, unsafe_no_sandbox=True), full, console, release, own=True)
    written = max(written_points(release / folder.edition) for folder in chosen)
    if written:
        console.print(WRITTEN.format(points=f"{written:g}").render(language(chosen[0])), soft_wrap=True)
    if not full:
        console.print(footer(chosen[0]), soft_wrap=True)
    return 0


def language(folder: Folder) -> str:
    """The language of the edition a workspace folder holds (self_attention_zh: "zh")."""
    return edition.resolve(folder.edition).lang


def workspace_language(workspace: Path, release: Path = RELEASE) -> str:
    """The language `make lab` speaks for a workspace: that of the folders the student worked in (a solution cell
    changed) when they share one; else the system's (LC_ALL, LC_MESSAGES or LANG naming zh: Chinese); else English."""
    worked = {language(f) for f in folders(workspace, release) if f.changed} if workspace.is_dir() else set()
    if len(worked) == 1:
        return worked.pop()
    system = next((os.environ[k] for k in ("LC_ALL", "LC_MESSAGES", "LANG") if os.environ.get(k)), "")
    return "zh" if not worked and system.lower().startswith("zh") else spec.DEFAULT_LANGUAGE


# make lab's lines (course/lab.py prints them) in the workspace's language (workspace_language)
LAB_WORKSPACE = _("Your workspace: {path}")
LAB_COPIED = _("  copied from the release: {count} file(s) ({folders})")
LAB_KEPT = _("  kept as you left them: {count} file(s) (never overwritten)")
LAB_DIFFERS = _("  note: {name} differs from the release's copy; to take the release's, delete yours and restart")
LAB_NEXT = _("Check yourself with `make grade` (the hidden autograder on your work); solved notebooks: solutions/notebooks/")


def footer(folder: Folder) -> str:
    """The line under the summary tables, in the language of the first folder graded."""
    return FULL_REPORT.format(path=folder.path).render(language(folder))


WRITTEN = _("Not in these totals: the written answers, {points} points per assignment, graded by hand by your "
             "teacher on top of the autograded 100")
FULL_REPORT = _("The whole report, one row per check: make grade FULL=1 (or python -m autograder grade {path})")


# make grade where the sandbox cannot be had: the code graded is the student's own, on their own machine, whose
# clone holds the answer key already; every other command still refuses (they grade other people's code).
WITHOUT_SANDBOX = _("make grade: grading without the sandbox, which this machine cannot provide ({reason}); that is "
                    "safe here: the code is your own, on your own machine, whose clone already holds the answer key "
                    "(grade, grade-class and nbgrader still refuse)")


def _grade(chosen: list[Folder], submissions: list, limits: Limits, full: bool, console: Console, release: Path,
           own: bool = False) -> None:
    """Grade the chosen folders with one warm grader and print them. `own`: graded without the sandbox on the
    student's own machine, already said once in one line: the brief tables do not say it again for each folder."""
    from ..grading.grade import UNSAFE_NOTE, Grader  # noqa: PLC0415

    with Grader(limits) as grader:
        for folder, submission in zip(chosen, submissions):
            graded = edition.resolve(folder.edition)
            result = grader.grade(submission, assignment=graded.assignment, lang=graded.lang)
            if full:
                report.render(result, console)
                continue
            if own and result.protections_off:
                said = UNSAFE_NOTE.format(layers=", ".join(sorted(p.split(":")[0] for p in result.protections_off)))
                result = replace(result, protections_off=(),
                                 notes=tuple(n for n in result.notes if n != said.render(result.lang)))
            report.brief(result, console, hide=release_files(release, folder.edition))
