"""Build the course notebooks from course/content (the single source of truth).

    python -m course.build            # write source/, assignments/ and solutions/notebooks/ (executed)
    python -m course.build --check    # rebuild into a temp dir and fail on any drift from the committed files
    python -m course.build --out DIR  # write everything under DIR instead of the repository

    python -m course.build --assignment self_attention_zh   # only these editions (repeat the option)

Outputs, for each edition of each assignment (self_attention, generation, efficient; English, and Chinese
as self_attention_zh, generation_zh, efficient_zh):
  source/<edition>/*.ipynb           nbgrader instructor notebooks (+ the support files, course/targets.py)
  assignments/<edition>/             the student release, made by the real `nbgrader generate_assignment`
  solutions/notebooks/[generation/][zh/]  solved notebooks for self-learners, executed headless with nbclient
                                     (the first assignment's English ones directly in solutions/notebooks/)
The Chinese edition's notebooks carry the metadata {"course": {"lang": "zh"}}, its setup cells call
use_language("zh"), and its folders hold the visible checks' compiled message catalog. A markdown
cell, hint or docstring without its Chinese text stops the build with the list of what is missing.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder.foundation import spec
from course.catalogs import compile_catalog
from course.cells import BEGIN, END, Cell
from course.drift import diff_trees
from course.editions import LANG_METADATA_KEY, edition_cells, missing_texts
from course.run_notebooks import coalesce_streams, execute_notebooks, problems_in_outputs
from course.targets import OUTPUT_DIRS, RELEASE_DIR, REPO, SOLVED_DIR, SOURCE_DIR, TARGET_BY_ID, TARGETS, Target

# Names the tests and scripts read from here (the build's public face).
__all__ = ["OUTPUT_DIRS", "RELEASE_DIR", "REPO", "SOLVED_DIR", "SOURCE_DIR", "TARGETS", "TARGET_BY_ID", "Target",
           "build", "check", "diff_trees", "execute_notebooks", "main", "problems_in_outputs"]

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# What JupyterLab writes into a notebook from the kernel's kernel_info (ipykernel, this Python): a released
# notebook that already holds it is not "changed" by opening it, so closing it untouched asks nothing.
LANGUAGE_INFO = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                 "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                 "pygments_lexer": "ipython3", "version": platform.python_version()}


# --------------------------------------------------------------------------- #
# Notebook construction
# --------------------------------------------------------------------------- #


def _cell_id(index: int, cell: Cell) -> str:
    if cell.nbgrader:
        return f"{index:02d}-{cell.nbgrader['grade_id']}".replace("_", "-")
    return f"{index:02d}-{cell.role}"


def to_notebook(cells: list[Cell], lang: str = spec.DEFAULT_LANGUAGE) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": copy.deepcopy(LANGUAGE_INFO)}
    if lang != spec.DEFAULT_LANGUAGE:
        nb.metadata[LANG_METADATA_KEY] = {"lang": lang}
    nb.cells = [_node(i, c) for i, c in enumerate(cells)]
    nbformat.validate(nb)
    return nb


def _node(index: int, cell: Cell) -> nbformat.NotebookNode:
    node = nbformat.v4.new_markdown_cell(cell.source) if cell.kind == "markdown" else nbformat.v4.new_code_cell(cell.source)
    node.id = _cell_id(index, cell)
    node.metadata = nbformat.NotebookNode()
    if cell.nbgrader:
        node.metadata["nbgrader"] = nbformat.NotebookNode(cell.nbgrader)
    if cell.tags:
        node.metadata["tags"] = list(cell.tags)
    return node


def source_notebooks(target: Target = TARGETS[0]) -> dict[str, nbformat.NotebookNode]:
    """name -> instructor notebook of one assignment's edition, checked against autograder/foundation/spec.py."""
    untranslated = [line for module in target.modules for line in missing_texts(module, target.lang)]
    if untranslated:
        raise SystemExit(f"{target.id}: {len(untranslated)} text(s) have no {target.lang} version, so this edition "
                         "cannot be built:\n  " + "\n  ".join(untranslated))
    notebooks = {}
    for module in target.modules:
        cells = edition_cells(module, target.lang)
        _check_against_spec(module.NAME, cells, spec.assignment(target.id).parts)
        notebooks[module.NAME] = to_notebook(cells, target.lang)
    missing = set(spec.assignment(target.id).notebooks) - set(notebooks)
    if missing:
        raise SystemExit(f"spec.py names notebooks that the content does not define: {sorted(missing)}")
    return notebooks


def _check_against_spec(name: str, cells: list[Cell], parts: tuple) -> None:
    parts = [p for p in parts if p.notebook == name]
    solution_ids = [c.nbgrader["grade_id"] for c in cells if c.role == "solution"]
    expected = [f"solution_{n}" for p in parts for n in p.names]
    if sorted(solution_ids) != sorted(expected):
        raise SystemExit(f"{name}: solution cells {solution_ids} do not match spec.py {expected}")
    graded = [(c.nbgrader["grade_id"], c.nbgrader["points"]) for c in cells if c.role == "graded"]
    if sorted(graded) != sorted((p.id, p.points) for p in parts):
        raise SystemExit(f"{name}: graded cells {graded} do not match spec.py")
    ids = [c.nbgrader["grade_id"] for c in cells if c.nbgrader]
    if len(ids) != len(set(ids)):
        raise SystemExit(f"{name}: duplicate grade_id in {ids}")
    if cells[0].role != "markdown" or cells[1].role != "setup":
        raise SystemExit(f"{name}: the first code cell must be the setup cell")


def solved_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The instructor notebook without solution markers and hidden tests (for self-learners). A written
    answer keeps its model answer and rubric (a self-learner grades their own answer with them)."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        written = cell.cell_type == "markdown" and cell.metadata.get("nbgrader", {}).get("solution")
        if cell.cell_type != "code" and not written:
            continue
        lines, hidden = [], False
        for line in cell.source.split("\n"):
            if "BEGIN HIDDEN TESTS" in line:
                hidden = True
            elif "END HIDDEN TESTS" in line:
                hidden = False
            elif not hidden and line.strip() not in (BEGIN, END):
                lines.append(line)
        cell.source = "\n".join(lines)
    return nb


def write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")


def write_support_files(folder: Path, target: Target = TARGETS[0]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, origin in target.support.items():
        rel = origin.relative_to(REPO).as_posix()
        header = f"# Generated by `python -m course.build` from {rel}; do not edit this copy.\n"
        (folder / name).write_text(header + origin.read_text(encoding="utf-8"), encoding="utf-8")
    for name, po in target.catalogs.items():
        compile_catalog(po, folder / name)


# --------------------------------------------------------------------------- #
# nbgrader release and execution
# --------------------------------------------------------------------------- #


def generate_release(root: Path, targets: tuple[Target, ...] = TARGETS[:1]) -> None:
    """Run the real `nbgrader generate_assignment` with root/source -> root/assignments, for `targets`: one nbgrader
    run for all of them when they are every edition in root/source (its import is most of a run's 5 s)."""
    in_source = {p.name for p in (root / "source").iterdir() if p.is_dir()}
    if len(targets) > 1 and in_source == {t.id for t in targets}:
        _generate(root, "*")
    else:
        for target in targets:
            _generate(root, target.id)
    # nbgrader marks released files read-only for students; keep them writable in the repository
    for target in targets:
        for path in (root / target.release).rglob("*"):
            if path.is_file():
                path.chmod(0o644)


def _generate(root: Path, assignments: str) -> None:
    """`nbgrader generate_assignment ASSIGNMENTS` (an id, or nbgrader's glob of ids) into root/assignments."""
    with tempfile.TemporaryDirectory(prefix="nbgrader-db-") as db_dir:
        cmd = [
            sys.executable, "-m", "nbgrader", "generate_assignment", assignments, "--force",
            f"--CourseDirectory.root={root}",
            f"--CourseDirectory.db_url=sqlite:///{db_dir}/gradebook.db",
        ]
        env = dict(os.environ, JUPYTER_NO_CONFIG="1")  # no personal nbgrader_config.py can change the release
        # nbgrader calls the `alembic` script of its environment
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"nbgrader generate_assignment failed:\n{done.stdout}\n{done.stderr}")


# --------------------------------------------------------------------------- #
# The build
# --------------------------------------------------------------------------- #


def clear_outputs(root: Path, target: Target) -> None:
    """Remove what the build wrote for `target`, keeping the other editions' folders nested in its own."""
    for sub in target.outputs:
        folder = root / sub
        if not folder.exists():
            continue
        nested = {other for other in OUTPUT_DIRS if sub in other.parents}
        for entry in folder.iterdir():
            rel = sub / entry.name
            if rel in nested or any(rel in n.parents for n in nested):
                continue
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def build(root: Path, execute: bool = True, targets: tuple[Target, ...] = TARGETS) -> None:
    notebooks = {t.id: source_notebooks(t) for t in targets}
    for target in targets:
        clear_outputs(root, target)
    solved_paths = []
    for target in targets:
        for name, nb in notebooks[target.id].items():
            write_notebook(nb, root / target.source / f"{name}.ipynb")
        write_support_files(root / target.source, target)
    generate_release(root, targets)
    for target in targets:
        for name, nb in notebooks[target.id].items():
            path = root / target.solved / f"{name}.ipynb"
            write_notebook(solved_notebook(nb), path)
            solved_paths.append(path)
        write_support_files(root / target.solved, target)
    if execute:
        executed = execute_notebooks(solved_paths)
        bad = {str(p.relative_to(root)): problems_in_outputs(nb) for p, nb in executed.items()}
        bad = {k: v for k, v in bad.items() if v}
        if bad:
            raise SystemExit("solved notebooks must run cleanly:\n" + json.dumps(bad, indent=1))
        for path, nb in executed.items():
            coalesce_streams(nb)
            nb.metadata["language_info"] = {"name": "python"}  # the kernel's version details vary
            write_notebook(nb, path)


# --------------------------------------------------------------------------- #
# Drift check
# --------------------------------------------------------------------------- #

def check(committed: Path = REPO, targets: tuple[Target, ...] = TARGETS) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="course-build-") as tmp:
        build(Path(tmp), execute=False, targets=targets)
        return diff_trees(committed, Path(tmp), targets)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.build", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed outputs differ from a fresh build")
    parser.add_argument("--out", type=Path, default=REPO, help="where to write (default: the repository)")
    parser.add_argument("--no-execute", action="store_true", help="do not execute the solved notebooks")
    parser.add_argument("--assignment", action="append", choices=list(TARGET_BY_ID), metavar="EDITION",
                        help=f"build or check only this edition (repeatable; default: all of {', '.join(TARGET_BY_ID)})")
    args = parser.parse_args(argv)
    targets = tuple(TARGET_BY_ID[i] for i in args.assignment) if args.assignment else TARGETS
    if args.check:
        problems = check(args.out, targets)
        if problems:
            print("The generated notebooks drifted from course/ (run `make release`):", file=sys.stderr)
            for line in problems:
                print("  " + line, file=sys.stderr)
            return 1
        print("course build: committed notebooks match course/")
        return 0
    build(args.out.resolve(), execute=not args.no_execute, targets=targets)
    print(f"course build: wrote {', '.join(str(d) for t in targets for d in t.outputs)} under {args.out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    raise SystemExit(main())
