"""The drift check: the committed build outputs against a fresh build, file by file (executed notebooks by
their structure only, since their outputs vary from run to run)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from course.targets import OUTPUT_DIRS, TARGETS, Target


_VOLATILE_CELL_KEYS = ("execution", "collapsed", "scrolled", "ExecuteTime")


def _normalise(nb: dict, structure_only: bool) -> dict:
    nb = copy.deepcopy(nb)
    nb.get("metadata", {}).pop("language_info", None)
    for cell in nb.get("cells", []):
        for key in _VOLATILE_CELL_KEYS:
            cell.get("metadata", {}).pop(key, None)
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
        if structure_only and cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def diff_trees(committed: Path, fresh: Path, targets: tuple[Target, ...] = TARGETS) -> list[str]:
    """Differences between the committed build outputs (under `committed`) and a fresh build."""
    problems = []
    for sub in (d for t in targets for d in t.outputs):
        a_dir, b_dir = committed / sub, fresh / sub
        a_files = _generated_files(a_dir, sub)
        b_files = _generated_files(b_dir, sub)
        for name in sorted(a_files ^ b_files):
            where = "only in the committed tree" if name in a_files else "missing from the committed tree"
            problems.append(f"{sub}/{name}: {where}")
        for name in sorted(a_files & b_files):
            a, b = a_dir / name, b_dir / name
            if name.endswith(".ipynb"):
                structure_only = any(sub == t.solved for t in TARGETS)  # executed outputs vary from run to run
                na = _normalise(json.loads(a.read_text(encoding="utf-8")), structure_only)
                nb_ = _normalise(json.loads(b.read_text(encoding="utf-8")), structure_only)
                if na != nb_:
                    problems.append(f"{sub}/{name}: differs from a fresh build")
            elif a.read_bytes() != b.read_bytes():
                problems.append(f"{sub}/{name}: differs from a fresh build")
    return problems


def _generated_files(folder: Path, sub: Path) -> set[str]:
    """The files under `folder` (the output folder `sub`), without caches and other assignments' nested folders."""
    if not folder.exists():
        return set()
    nested = [other.relative_to(sub) for other in OUTPUT_DIRS if sub in other.parents]
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts
            and not any(n in p.relative_to(folder).parents for n in nested)}
