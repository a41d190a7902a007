"""A grading process of grade-class or of nbgrader's plugin, forked by their seed (`forked`, commands/seed.py).

Started by classpool.py (the protocol is there). It dies with the process above it (parent-death signal) and
leaves stop signals to grade-class; its zygote is the one the seed forked for it (prestart.zygote_from). It warms
one Grader, says it is ready, then grades one submission folder per message until its pipe closes. nbgrader's
preprocessor (autograder/nbgrader_plugin.py) starts one too and gives it one notebook per message
(`(NOTEBOOK, path, part ids, assignment id, lang)`), so that a notebook that brings it down costs that notebook.
Its own memory is capped (Limits.grader_memory_bytes); past it, it ends with classpool.OUT_OF_MEMORY.
"""
from __future__ import annotations

import os
import sys

from pathlib import Path

from . import classpool
from ..foundation import i18n, spec
from ..foundation.extract import SubmissionError, extract
from ..sandbox import prestart
from ..sandbox.lifetime import init_pool_process
from ..foundation.limits import SandboxUnavailable, limit_grader_memory

NOTEBOOK = "notebook"  # a task's first item: one notebook for nbgrader (else: a submission folder of grade-class)


def grade_notebook(path: str | Path, ids: list[str], assignment: spec.Assignment, lang: str | None, grader) -> tuple:
    """One notebook with only its own code and its own parts `ids`, as nbgrader grades it: ({part_id: PartResult},
    notes), messages in `lang` (default: the notebook's own)."""
    try:
        result = grader.grade(extract(path), part_ids=ids, assignment=assignment, lang=lang)
    except SubmissionError as exc:
        return {}, [i18n.render(exc.args[0] if exc.args else str(exc), lang or spec.DEFAULT_LANGUAGE)]
    return {p.id: p for p in result.parts}, list(result.notes)


def _task(args: tuple, grader):
    """What one task message asks for, done."""
    if args[0] == NOTEBOOK:
        _, path, ids, assignment, lang = args
        return grade_notebook(path, ids, spec.assignment(assignment), lang, grader)
    from .classgrade import grade_folder  # noqa: PLC0415 - imported once the zygote started (main)

    folder, assignment, compared = args
    return grade_folder(folder, assignment, grader, compared)


def forked(tasks: int, results: int, parent: int, zygote: int) -> None:
    """A grading process forked by the seed (commands/seed.py; `parent`: its monitor): torch is imported already.
    The instructor's environment and working folder come first over the task pipe (the seed, whose memory every
    worker copies, never holds them), then the limits; then one task per message until the pipe closes."""
    init_pool_process(parent)  # dies with its monitor; Ctrl-C and SIGHUP are grade-class's to handle
    env, cwd = classpool.recv(tasks)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    sys.path.extend(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path)
    _serve(tasks, results, zygote)


def _serve(tasks: int, results: int, zygote: int) -> None:
    limits = classpool.recv(tasks)
    prestart.adopt(zygote)  # (the seed's fork: torch imported once for the class)
    limit_grader_memory(limits.grader_memory_bytes)  # (after the zygote's start: its workers keep their own limits)
    from . import classgrade  # noqa: PLC0415, F401 - after the zygote's start: torch, seconds
    from ..grading.grade import Grader  # noqa: PLC0415

    with Grader(limits) as grader:
        grader.zygote.ping()  # (so that a submission's deadline never counts the zygote's import of torch)
        # A zygote forked by the seed ends only after the kill it is giving (its socket closes after it): a worker's
        # tear-down may then overlap the next submission's trusted work.
        grader.zygote.wait_for_kills = False
        classpool.send(results, ("ready",))
        while True:
            try:
                _student, args = classpool.recv(tasks)
            except EOFError:
                return
            try:
                reply = ("ok", _task(args, grader))
            except SandboxUnavailable as exc:
                reply = ("refused", str(exc))
            except MemoryError:  # (past Limits.grader_memory_bytes, outside any check): this process is done
                os._exit(classpool.OUT_OF_MEMORY)
            except Exception as exc:  # noqa: BLE001 - the grader's own failure: reported by grade-class
                reply = ("error", f"{type(exc).__name__}: {str(exc)[:300]}")
            classpool.send(results, reply)

