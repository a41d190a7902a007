"""JupyterLab for the course: the student's workspace (`make lab`) and the instructor's lab (`make formgrader`).

    python -m course.lab student [--workspace DIR] [JUPYTER LAB OPTIONS...]
    python -m course.lab instructor [JUPYTER LAB OPTIONS...]

student: JupyterLab in a working copy of the release, workspace/ (ignored by git), one folder per
assignment as in assignments/. On every start each file of assignments/ that the workspace lacks
is copied there; a file already there is never overwritten, so saved work survives new releases
and the tracked release never changes. The lab offers the student's tools only: nbgrader's Validate
button, without the formgrader, Create Assignment, Assignment List and Course List (they need an
instructor's course directory or an exchange); see course/student_lab_config/.

instructor: JupyterLab at the repository root (the nbgrader course root) with all of nbgrader's
extensions: Nbgrader > Formgrader, Create Assignment.

Both add --allow-root when run as root; any further options go to `jupyter lab` as they are.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder.commands import exposure
from autograder.commands import workspace as make_grade  # make lab's lines and their language

REPO = Path(__file__).resolve().parent.parent
RELEASE = REPO / "assignments"  # nbgrader's release directory: one folder per assignment
WORKSPACE = REPO / "workspace"
STUDENT_CONFIG = REPO / "course" / "student_lab_config"
SKIPPED = {".ipynb_checkpoints", "__pycache__"}


@dataclass(frozen=True)
class Workspace:
    """What preparing a workspace did: file names relative to it."""

    path: Path
    copied: tuple[str, ...]
    kept: tuple[str, ...]
    differ: tuple[str, ...]  # kept files, other than notebooks, that differ from the release


def _release_files(release: Path) -> list[Path]:
    return sorted(
        p.relative_to(release)
        for p in release.rglob("*")
        if p.is_file() and not SKIPPED.intersection(p.relative_to(release).parts)
    )


def prepare_workspace(release: Path = RELEASE, workspace: Path = WORKSPACE) -> Workspace:
    """Copy every file of `release` that `workspace` lacks; never overwrite one that is there."""
    if not release.is_dir():
        raise SystemExit(f"{release}: the release folder is missing (run `make release`)")
    if workspace.exists() and not workspace.is_dir():
        raise SystemExit(f"{workspace}: exists and is not a folder; move it away and try again")
    copied, kept, differ = [], [], []
    for rel in _release_files(release):
        target = workspace / rel
        if target.exists():
            kept.append(str(rel))
            if rel.suffix != ".ipynb" and not filecmp.cmp(release / rel, target, shallow=False):
                differ.append(str(rel))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(release / rel, target)
        copied.append(str(rel))
    return Workspace(workspace, tuple(copied), tuple(kept), tuple(differ))


def describe(ws: Workspace, lang: str = "en") -> str:
    """A few lines for the terminal, in `lang`: where the work is and what happened to it."""
    lines = [make_grade.LAB_WORKSPACE.format(path=ws.path)]
    if ws.copied:
        folders = sorted({Path(name).parts[0] for name in ws.copied})
        lines.append(make_grade.LAB_COPIED.format(count=len(ws.copied), folders=", ".join(folders)))
    if ws.kept:
        lines.append(make_grade.LAB_KEPT.format(count=len(ws.kept)))
    lines += [make_grade.LAB_DIFFERS.format(name=name) for name in ws.differ]
    lines.append(make_grade.LAB_NEXT)
    return "\n".join(line.render(lang) for line in lines)


def lab_command(root: Path, extra: list[str], student: bool) -> tuple[list[str], dict[str, str]]:
    """argv and environment of `jupyter lab` serving `root` (run it with `root` as the working directory)."""
    argv = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}"]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    env = dict(os.environ)
    # The environment's programs first: formgrader's gradebook runs `alembic` found on PATH.
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(sys.executable).parent), env.get("PATH")]))
    if student:
        # Ahead of the environment's own config (which enables all of nbgrader), behind the user's.
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(STUDENT_CONFIG), env.get("JUPYTER_CONFIG_PATH")]))
    return argv + list(extra), env


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m course.lab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="who", required=True)
    student = sub.add_parser("student", help="JupyterLab in the student's workspace (make lab)")
    student.add_argument("--workspace", type=Path, default=WORKSPACE, help=f"working folder (default: {WORKSPACE})")
    sub.add_parser("instructor", help="JupyterLab at the course root with formgrader (make formgrader)")
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> None:
    args, extra = _parse(sys.argv[1:] if argv is None else argv)
    if args.who == "student":
        ws = prepare_workspace(RELEASE, args.workspace.resolve())
        print(describe(ws, make_grade.workspace_language(ws.path, RELEASE)), flush=True)
        root = ws.path
    else:
        root = REPO
        print("Instructor lab at the course root: Nbgrader > Formgrader, Create Assignment", flush=True)
        if exposed := exposure.warning(root):
            print(exposed, file=sys.stderr, flush=True)
    argv, env = lab_command(root, extra, student=args.who == "student")
    os.chdir(root)  # nbgrader reads nbgrader_config.py from the server's working directory
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main()
