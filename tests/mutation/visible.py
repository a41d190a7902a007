"""The visible checks on a mutant: the check cells of the notebook that owns the edited definition, run as the released
notebook runs them (its `visible_checks.py`, the check cells of every part of that notebook, the student's definitions
being the mutant's), each mutant in a child process of its own (forked, one thread, a time limit).

A mutant is caught visibly when one of those check cells does not print its ✓ line (an AssertionError's sentence, an
error of the code, "not implemented yet", a hang past the limit): what nbgrader's Validate and the student see.
"""
from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .mutants import Mutant

ROOT = Path(__file__).resolve().parent.parent.parent
COURSE = ROOT / "course"
# Each reference's assignment and the module its released notebooks import as `visible_checks` (course/targets.py).
VISIBLE_MODULES = {"attention": ("self_attention", "visible_checks"),
                   "generation": ("generation", "visible_checks_generation"),
                   "efficient": ("efficient", "visible_checks_efficient"),
                   "real_models": ("real_models", "visible_checks_real_models"),
                   "serving": ("serving", "visible_checks_serving")}
# What the checks import when they run, imported before the children fork (so that each does not again).
WARM = {"real_models": ("transformers", "transformers.models.gpt2.modeling_gpt2", "transformers.models.bert.modeling_bert",
                        "transformers.models.llama.modeling_llama")}
TIME_LIMIT_S = 120.0  # one mutant's check cells, all together (a notebook's Run All stays well under 60 s)


@dataclass(frozen=True)
class Seen:
    """What the visible checks of a mutant's notebook say about it."""
    notebook: str  # assignment/notebook, e.g. generation/03_cross_attention
    caught: bool
    message: str  # the first check cell's line that is no ✓ ('' when every check cell passes)


def checks_module(module: str):
    """The visible checks the notebooks of the reference `module` import (course/ on sys.path, as next to a notebook)."""
    if str(COURSE) not in sys.path:
        sys.path.insert(0, str(COURSE))
        sys.modules.setdefault("memory_meter", importlib.import_module("autograder.worker.meter"))  # as shipped
    for name in WARM.get(module, ()):
        importlib.import_module(name)
    return importlib.import_module(VISIBLE_MODULES[module][1])


def notebook_of(mutant: Mutant, parts: tuple[str, ...]) -> str:
    """assignment/notebook of the notebook whose graded cell holds the edited definition, graded in `parts` (the
    first, if several)."""
    notebooks = checks_module(mutant.module).PART_NOTEBOOKS
    return f"{VISIBLE_MODULES[mutant.module][0]}/{notebooks[parts[0]]}"


def check_cells(mutant: Mutant, parts: tuple[str, ...]) -> tuple[str, ...]:
    """Every check cell of the notebook(s) of `parts`, in the notebooks' order."""
    checks = checks_module(mutant.module)
    notebooks = {checks.PART_NOTEBOOKS[p] for p in parts}
    return tuple(call for part, calls in checks.PART_CHECKS.items() if checks.PART_NOTEBOOKS[part] in notebooks
                 for call in calls)


def _first_failure(mutant: Mutant, parts: tuple[str, ...], folder: Path) -> str:
    """In the child: the mutant defined as the notebook defines it, then its notebook's check cells run in order."""
    import torch

    torch.set_num_threads(1)
    from graded_cells import rerun

    checks = checks_module(mutant.module)
    path = folder / f"mutant_{os.getpid()}.py"
    path.write_text(mutant.source, encoding="utf-8")
    namespace: dict = {"__name__": "__main__", "__file__": str(path)}
    try:
        exec(compile(mutant.source, str(path), "exec"), namespace)  # our own reference, one edit away
    except Exception as exc:  # noqa: BLE001 - a solution cell that raises: the notebook stops there
        return f"the mutant's definitions raised {type(exc).__name__}: {exc}"
    for call in check_cells(mutant, parts):
        why = rerun(call, vars(checks), namespace)
        if why:
            return why
    return ""


def seen(mutant: Mutant, parts: tuple[str, ...], time_limit: float = TIME_LIMIT_S) -> Seen:
    """Run the visible checks of the notebook of `parts` (those that grade what `mutant` edits) on it in a forked
    child (a crash or a hang counts as caught)."""
    notebook = notebook_of(mutant, parts)  # the checks imported here, once, so that each child starts warm
    read, write = os.pipe()
    with tempfile.TemporaryDirectory(prefix="visible-") as folder:
        pid = os.fork()
        if pid == 0:  # the child: report one line through the pipe, whatever happens
            os.close(read)
            try:
                message = _first_failure(mutant, parts, Path(folder))
            except BaseException as exc:  # noqa: BLE001
                message = f"the visible run broke: {type(exc).__name__}: {exc}"
            with os.fdopen(write, "wb") as out:
                out.write(pickle.dumps(message))
            os._exit(0)
        os.close(write)
        data = _read_all(read, time_limit)
        if data is None:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if data is None:
        return Seen(notebook, True, f"the check cells ran past {time_limit:.0f} s")
    message = pickle.loads(data) if data else "the visible run died without a word"
    return Seen(notebook, bool(message), message)


def _read_all(fd: int, time_limit: float) -> bytes | None:
    """Everything written to `fd` until it closes, or None past `time_limit` seconds."""
    import time

    chunks, deadline = [], time.monotonic() + time_limit
    with os.fdopen(fd, "rb") as stream:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([stream], [], [], left)[0]:
                return None
            chunk = os.read(stream.fileno(), 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
