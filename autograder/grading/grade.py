"""The grading pipeline for one submission: extract -> run (sandboxed worker) -> check (trusted) -> results.

`Grader` keeps a zygote warm, so that grading many submissions in one process pays the
price of importing torch only once. Which parts, checks and reference solutions apply is
the assignment's business (spec.py); nothing here depends on one assignment.
"""
from __future__ import annotations

import time
from pathlib import Path

from . import check
from ..foundation import edition, i18n, spec
from ..foundation.copies import flag_twins
from ..foundation.extract import Extracted, extract
from .gpu import stage as gpu_stage
from ..foundation.limits import Limits
from ..sandbox.pool import Zygote
from ..foundation.results import GradeResult
from .scan import grader_reach_in_source, mentions_in_source, note_grader_reach, note_mentions
from .scoring import unreadable, zeros
from ..sandbox.session import Session


_ = i18n.message
UNSAFE_NOTE = _("graded WITHOUT a complete sandbox (the instructor passed --unsafe-no-sandbox); "
                           "missing: {layers}")


class Grader:
    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self._zygote: Zygote | None = None
        self._checks: dict[tuple[str, tuple[str, ...]], check.Checks] = {}

    def checks(self, assignment: spec.Assignment, parts: list[spec.Part]) -> check.Checks:
        """The hidden checks of these parts, collected the first time they are asked for."""
        key = (assignment.id, tuple(p.id for p in parts))
        if key not in self._checks:
            self._checks[key] = check.Checks(assignment, parts)
            self._checks[key].prepare()
        return self._checks[key]

    @property
    def zygote(self) -> Zygote:
        if self._zygote is None:
            self._zygote = Zygote()
        return self._zygote

    def warm(self) -> Grader:
        """Start the worker pool now (it imports torch in parallel with whatever comes next)."""
        _ = self.zygote
        return self

    def close(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def __enter__(self) -> Grader:
        return self.warm()

    def __exit__(self, *exc) -> None:
        self.close()

    def grade(self, submission: Extracted | str | Path, gpu: bool = False, part_ids: list[str] | None = None,
              assignment: spec.Assignment | None = None, lang: str | None = None) -> GradeResult:
        """Grade one submission, as extracted at the command's entry point (a path is extracted here, once),
        against `assignment` (default: spec.DEFAULT): its parts `part_ids` (default: all its CPU parts), and
        with `gpu` its GPU stage too. Its messages in `lang`, by default the language the submission says
        (edition.resolve); the scores never depend on it."""
        started = time.perf_counter()
        extracted = submission if isinstance(submission, Extracted) else extract(submission)
        ed = edition.resolve(lang=lang, notebooks=extracted.lang, folder=extracted.path, default=assignment)
        assignment, lang = ed.assignment, ed.lang
        parts = [assignment.part(pid) for pid in part_ids] if part_ids else list(assignment.parts)
        notes = [i18n.render(n, lang) for n in extracted.notes]
        for source in extracted.sources:
            notes.extend(f"{source.name}: {i18n.render(n, lang)}" for n in source.notes_against(assignment))
            if source.error:
                notes.append(i18n.render(source.error, lang))
        readable = [s for s in extracted.sources if s.error is None]
        protections_off: tuple[str, ...] = ()
        if not readable:
            results = unreadable(extracted, parts, lang)
        else:
            checks = self.checks(assignment, parts)  # (the first time: while the worker pool may import torch)
            session = Session(self.zygote, extracted.sources, self.limits, assignment)
            try:
                session.start()
                notes.extend(i18n.render(n, lang) for n in session.load_notes())
                results = check.run_checks(session, parts, checks=checks, lang=lang)
                protections_off = tuple(f"{k}: {v}" for k, v in sorted(session.protections.get("off", {}).items()))
                if protections_off:  # (only with --unsafe-no-sandbox: else the session refused to start)
                    notes.append(UNSAFE_NOTE.format(layers=", ".join(sorted(session.protections["off"]))).render(lang))
            finally:
                session.close()
            mentioned = mentions_in_source(extracted, parts)  # a note where the code that mentions them never ran
            results = [note_mentions(p, mentioned.get(p.id, set()), p.id in session.parts and
                                     bool(session.parts[p.id].calls), lang) for p in results]
            reached = grader_reach_in_source(extracted, parts)
            results = [note_grader_reach(p, reached.get(p.id, set()), lang) for p in results]
        # a part whose own notebook could not be read scores 0 with the reason (never another notebook's code)
        broken = {s.name: i18n.render(s.error, lang) for s in extracted.sources if s.error}
        results = [zeros([part], broken[part.notebook])[0] if part.notebook in broken else r
                   for part, r in zip(parts, results)]
        twins = {s.name: s for s in extracted.sources if s.same_as}  # (graded as usual, flagged for review)
        results = [flag_twins(r, Path(twins[part.notebook].path).name, twins[part.notebook].same_as, lang)
                   if part.notebook in twins else r for part, r in zip(parts, results)]
        gpu_result = None
        if gpu and assignment.gpu_part is not None:
            gpu_result = gpu_stage.run(self.zygote, self.limits, extracted, ed).part
        return GradeResult(extracted.path, tuple(results), gpu_result, tuple(dict.fromkeys(notes)), protections_off,
                           round(time.perf_counter() - started, 3), lang)


def grade(submission: Extracted, gpu: bool = False, limits: Limits | None = None,
          assignment: spec.Assignment | None = None, lang: str | None = None,
          part_ids: list[str] | None = None) -> GradeResult:
    """Grade one extracted submission (a notebook, a folder of notebooks or a .py file: extract.extract, which
    fails on a path that is no submission before the worker pool starts), its messages in `lang` (default:
    the submission's own language); only the parts `part_ids` when given (default: all the CPU parts)."""
    with Grader(limits) as grader:
        return grader.grade(submission, gpu=gpu, part_ids=part_ids, assignment=assignment, lang=lang)
