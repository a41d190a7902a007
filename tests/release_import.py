"""Importing a module from a released folder (assignments/<assignment>/) without writing into it.

Python compiles what it imports into a __pycache__/ next to the source unless told not to; CI says so
(PYTHONDONTWRITEBYTECODE=1) but an ordinary `make test` does not, and the release must stay exactly the
files the course build wrote (tests/test_release.py reads every one of them).
"""
from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path


@contextlib.contextmanager
def importable(folder: Path):
    """`folder` first on sys.path for the block, with bytecode writing off, and its modules imported afresh:
    a module of the same name imported earlier (another folder's visible_checks_scores_masks.py, whose harness
    reads that folder's catalog) is set aside for the block and put back after it."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    names = {path.stem for path in Path(folder).glob("*.py")}
    earlier = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        sys.dont_write_bytecode = before
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(earlier)


def load(folder: Path, module_name: str, file_name: str = "visible_checks.py"):
    """The module `folder/file_name`, loaded under `module_name` (its imports found in `folder`)."""
    with importable(folder):
        spec = importlib.util.spec_from_file_location(module_name, Path(folder) / file_name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module
