"""nbgrader integration: grade with this autograder instead of executing the notebook.

nbgrader's `autograde` runs a list of preprocessors on each submitted notebook; the first
one, `Execute`, runs every cell in a kernel and nbgrader then reads each graded cell's
output (an error or stderr: 0; a number: that partial credit; anything else: full marks).
`AutograderPreprocessor` takes Execute's place: it grades the notebook's solution cells with
the hidden checks in a sandboxed worker, then gives each graded cell (grade_id == part id) two outputs.
The grading itself runs in a child process, grade-class's grading process (commands/classworker.py: one
warm `Grader`, its memory capped), started once per nbgrader process and given one notebook at a time with a
deadline: a notebook that brings it down or stops it past the deadline scores 0 with the reason, a fresh
child takes the next one, and the rest of the class is graded. The outputs:

* a stdout stream: the part's report (check names, points and messages for the student);
* an execute_result whose text/plain is the part's score, between 0 and the cell's points.

nbgrader's own `SaveAutoGrades` then records those scores in the gradebook, and
`generate_feedback` shows the report. No student code runs in nbgrader's process, and the
hidden checks' source never reaches a notebook.

Enable it in nbgrader_config.py:

    import sys, os; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from autograder.nbgrader_plugin import configure
    configure(c)
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import pickle
import select
import sys
import tempfile
import threading
from pathlib import Path

from nbgrader.preprocessors import ClearSolutions, NbGraderPreprocessor
from traitlets import Bool, Float

from .foundation import edition, i18n, spec
from .commands import classpool, classworker, duplicates, exposure, formgraderpage, written
from .commands.classgrade import OVERDUE
from .foundation.copies import flag_twins
from .foundation.extract import notebook_language
from .commands.nbgraderread import SAME_AS_KEY, UNREADABLE_KEY, TolerantNotebookExporter, gradable  # noqa: F401 - (the exporter: its old name)
from .commands.gradebook import cell_score
from .foundation.limits import Limits, SandboxUnavailable, unsafe_from_env
from .grading.scoring import zeros

_ = i18n.message

# The stock list (nbgrader/converters/autograde.py) with Execute replaced by ours.
AUTOGRADE_PREPROCESSORS = [
    "autograder.nbgrader_plugin.AutograderPreprocessor",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "autograder.commands.written.SaveAutoGradesKeepingManual",  # (SaveAutoGrades, keeping an instructor's grade)
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# The stub that replaces a solution in an edition in another language than English (the notebook's
# metadata {"course": {"lang": ...}}); English notebooks get ClearSolutions.code_stub (nbgrader_config.py).
# nbgrader needs no marker in it: any code is a valid stub.
EDITION_CODE_STUBS = {
    "zh": "# 在这里写你的代码：用你的实现替换下一行\n"
          'raise NotImplementedError("还没有实现：在这里写代码，然后运行下面的检查单元格")',
}


class EditionClearSolutions(ClearSolutions):
    """nbgrader's ClearSolutions, with the stubs (code, and a written answer's text) in the language of the
    notebook's edition."""

    def preprocess(self, nb, resources):
        lang = nb.metadata.get("course", {}).get("lang")
        if lang not in EDITION_CODE_STUBS:
            return super().preprocess(nb, resources)
        english, english_text = self.code_stub, self.text_stub
        self.code_stub = {**english, "python": EDITION_CODE_STUBS[lang]}
        self.text_stub = written.TEXT_STUBS.get(lang, english_text)
        try:
            return super().preprocess(nb, resources)
        finally:
            self.code_stub, self.text_stub = english, english_text


def generate_preprocessors() -> list:
    """nbgrader's generate_assignment preprocessors (classes, as its default list holds them), with
    ClearSolutions replaced by EditionClearSolutions, and written answers released without a checksum last."""
    from nbgrader.converters.generate_assignment import GenerateAssignment  # noqa: PLC0415 - the stock list

    stock = GenerateAssignment.class_traits()["preprocessors"].make_dynamic_default()
    return [*(EditionClearSolutions if pp is ClearSolutions else pp for pp in stock), written.ForgetWrittenChecksums]


def configure(c) -> None:
    """Point nbgrader's autograde at this grader (call it from nbgrader_config.py), and let it read every
    notebook it can: an unreadable one scores 0 with its reason instead of failing the whole submission.
    generate_assignment writes the stubs of a Chinese edition in Chinese (EditionClearSolutions).
    generate_feedback and formgrader write pages in which no script of a student's runs (commands/feedbackpage.py,
    commands/formgraderpage.py). Written answers are left to formgrader, and an instructor's grade of one is kept
    (commands/written.py); `nbgrader export` adds the autograded and the written points to the CSV in their own
    columns. A cell pasted twice costs that cell, not the class (commands/duplicates.py)."""
    c.Autograde.autograde_preprocessors = list(AUTOGRADE_PREPROCESSORS)
    c.Autograde.sanitize_preprocessors = duplicates.sanitize_preprocessors()
    c.GenerateAssignment.preprocessors = generate_preprocessors()
    c.Autograde.exporter_class = "autograder.commands.nbgraderread.TolerantNotebookExporter"
    # nbconvert validates the whole notebook after each preprocessor (twelve times in autograde's two passes): a
    # notebook just under the cap on JSON values (extract.MAX_NOTEBOOK_VALUES) spent most of its time there. Once
    # after a pass's last preprocessor is enough: nbformat validates it again when it reads and writes it.
    c.Exporter.optimistic_validation = True
    c.GenerateFeedback.exporter_class = "autograder.commands.feedbackpage.FeedbackExporter"
    formgraderpage.configure(c)  # (formgrader's plain HTMLExporter, from this configuration)
    c.ExchangeFactory.collect = "autograder.commands.collect.LinkKeepingCollect"
    c.ExportApp.plugin_class = "autograder.commands.written.WrittenCsvExport"
    # A student's own HTML never travels with a submission (collect, autograde, feedback): a 02_masks.html in place
    # of a notebook would lie beside the real feedback pages, under their names (nbgrader's defaults kept).
    c.CourseDirectory.ignore.extend(STUDENT_PAGES)



STUDENT_PAGES = ["*.html", "*.htm", "*.xhtml", "*.svg"]  # files a browser opens as a page, never copied from a student
_CHILD: classpool.Pool | None = None
_LOCK = threading.Lock()
NOTEBOOK_DIED = _("not graded: grading your notebook ended the grader's own process ({why}): code that makes the "
                  "grader run out of memory?")
NOT_GRADED = _("not graded: {reason}")


def grading_process(limits: Limits) -> classpool.GradingProcess:
    """The process-wide grading process (started once, warm: torch imported once, by a seed (commands/seed.py), for it and
    its zygote), or a fresh one after a notebook brought the last one down. It refuses to grade where a layer of
    the sandbox is missing, unless `limits.unsafe_no_sandbox` (AUTOGRADER_UNSAFE_NO_SANDBOX=1 included) said
    otherwise when it was started."""
    global _CHILD
    if _CHILD is None:
        _CHILD = classpool.Pool(1, limits)
    proc = _CHILD.procs[0]
    if not proc.ready:
        try:
            message = classpool.recv(proc.results)  # ("ready",) once the grader is warm
        except (EOFError, OSError, pickle.UnpicklingError):
            why = proc.why_ended()
            _close()
            raise OSError(f"the autograder's grading process did not start ({why}); run with "
                          "AUTOGRADER_DEBUG=1 to see its error") from None
        proc.ready = message == ("ready",)
    return proc


def _close() -> None:
    global _CHILD
    if _CHILD is not None:
        _CHILD.close()
        _CHILD = None


atexit.register(_close)


def _lost(path: Path, ids: list[str], assignment: spec.Assignment, reason: i18n.Message, lang: str | None):
    """The notebook's parts, 0 with `reason` (the grading process that took it down is gone: a fresh one comes)."""
    _close()
    why = reason.render(lang or spec.DEFAULT_LANGUAGE)
    return {p.id: p for p in zeros([assignment.part(pid) for pid in ids], why)}, []


def grade_in_child(path: Path, ids: list[str], assignment: spec.Assignment, lang: str | None, limits: Limits):
    """`classworker.grade_notebook` in the grading process, within `limits.submission_deadline` of the notebook's
    parts; a notebook past it, or whose grading ended the process, scores 0 with the reason."""
    with _LOCK:
        proc = grading_process(limits)
        proc.give(path.stem, (classworker.NOTEBOOK, str(path), list(ids), assignment.id, lang))
        deadline = limits.submission_deadline(len(ids))
        if not select.select([proc.results], [], [], deadline)[0]:
            return _lost(path, ids, assignment, OVERDUE.format(seconds=deadline), lang)
        try:
            kind, payload = classpool.recv(proc.results)
        except (EOFError, OSError, pickle.UnpicklingError):
            return _lost(path, ids, assignment, NOTEBOOK_DIED.format(why=proc.why_ended()), lang)
        proc.student = None
    if kind == "refused":
        raise SandboxUnavailable(payload)
    if kind == "error":  # the grader's own failure on this notebook: it scores 0 with the reason, the rest go on
        why = NOT_GRADED.format(reason=payload).render(lang or spec.DEFAULT_LANGUAGE)
        return {p.id: p for p in zeros([assignment.part(pid) for pid in ids], why)}, []
    return payload


def parts_of(notebook: str, assignment: spec.Assignment | None = None) -> list[str]:
    """The part ids graded in the released notebook `notebook` (its stem, e.g. "02_masks")."""
    return [p.id for p in (assignment or spec.DEFAULT).parts_of(notebook)]


def _fmt(x: float) -> str:
    return f"{x:g}" if x != int(x) else str(int(x))


def part_report(part, lang: str = spec.DEFAULT_LANGUAGE) -> str:
    """The student's report of one part, in `lang` (its messages were written in it): one line per check,
    then the part's notes."""
    if part is None:
        return ""
    lines = [_("{part}: {score} / {max_score} points").format(part=part.id, score=_fmt(round(part.score, 2)),
                                                              max_score=_fmt(part.max_score)).render(lang)]
    for c in part.checks:
        mark = (_("PASS") if c.passed else _("FAIL")).render(lang)
        line = f"  [{mark}] {i18n.check_title(c.name, lang)} ({_fmt(round(c.points, 2))}/{_fmt(round(c.max_points, 2))})"
        if c.message:
            line += f"\n         {c.message}"
        lines.append(line)
    lines.extend(note_line(n, lang) for n in part.notes)
    return "\n".join(lines) + "\n"


def note_line(note: str, lang: str) -> str:
    return _("  note: {note}").format(note=note).render(lang)


def score_text(score: float, points: float) -> str:
    """The execute_result nbgrader turns into the cell's grade (utils.get_partial_grade).

    nbgrader refuses a value above the cell's points (the whole notebook's autograde then
    fails), so the score is clipped to [0, points] and rounded; "0" records 0 and the
    points record full marks.
    """
    value = min(max(round(float(score), 4), 0.0), float(points))
    return repr(value)


def grade_outputs(report: str, score: float | None, points: float, error: str | None = None) -> list[dict]:
    """The outputs a graded cell gets. With `error`, a stderr stream, which nbgrader scores 0."""
    outputs: list[dict] = []
    if report:
        outputs.append({"output_type": "stream", "name": "stdout", "text": report})
    if error is not None:
        outputs.append({"output_type": "stream", "name": "stderr", "text": error + "\n"})
        return outputs
    outputs.append({"output_type": "execute_result", "execution_count": 1, "metadata": {},
                    "data": {"text/plain": score_text(score, points)}})
    return outputs


def grade_notebook_file(path: str | Path, grader=None, assignment: spec.Assignment | None = None,
                        lang: str | None = None, unsafe_no_sandbox: bool = False, limits: Limits | None = None):
    """Grade one notebook with only its own code and its own parts: ({part_id: PartResult}, notes).
    Without `assignment`, the assignment that has a notebook of this name. Messages in `lang` (default:
    the notebook's own language, from its metadata). With `grader`, here; else in the grading process
    (grade_in_child), under `limits` (default: Limits(), with `unsafe_no_sandbox`)."""
    path = Path(path)
    assignment = assignment or spec.assignment_of_notebook(path.stem)
    ids = parts_of(path.stem, assignment) if assignment else []
    if not ids:
        return {}, [_("{name} is not a notebook of this course: nothing in it is graded").format(
            name=path.name).render(lang or spec.DEFAULT_LANGUAGE)]
    if grader is not None:
        return classworker.grade_notebook(path, ids, assignment, lang, grader)
    limits = limits or Limits(unsafe_no_sandbox=unsafe_no_sandbox or unsafe_from_env())
    return grade_in_child(path, ids, assignment, lang, limits)


def annotate(nb: dict, parts: dict, notes: list[str], lang: str = spec.DEFAULT_LANGUAGE) -> dict:
    """Give every graded cell of `nb` (a notebook as a dict) its report and score, in place (the report's
    own words in `lang`)."""
    for cell in nb.get("cells", []):
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        grade_id = meta.get("grade_id")
        points = float(meta.get("points", 0) or 0)
        part = parts.get(grade_id)
        if part is None:
            why = _("part {part} was not graded: {reason}").format(
                part=repr(grade_id), reason="; ".join(notes) if notes else
                _("it is not a part of this notebook in the course")).render(lang)
            cell["outputs"] = grade_outputs("", None, points, error=why)
        else:
            report = part_report(part, lang)
            if notes:
                report += "".join(note_line(n, lang) + "\n" for n in notes)
            # A part whose cell carries other points than the course gives it is scaled.
            cell["outputs"] = grade_outputs(report, cell_score(part.score, part.max_score, points), points)
        cell["execution_count"] = 1
    return nb


@functools.cache
def warn_if_exposed(course: str, log) -> None:
    """The instructor's one-line warning when other users can read the course (once per course and process)."""
    if exposed := exposure.warning(Path(course)):
        log.warning("%s", exposed)


class AutograderPreprocessor(NbGraderPreprocessor):
    """nbgrader autograde preprocessor: the hidden checks in a sandbox, in place of Execute. Where a layer of
    the sandbox is missing it stops nbgrader with one line (exit status 2), unless
    `c.AutograderPreprocessor.unsafe_no_sandbox = True` or AUTOGRADER_UNSAFE_NO_SANDBOX=1."""

    unsafe_no_sandbox = Bool(False, help="grade even where a layer of the sandbox is missing (the feedback "
                                         "says so)").tag(config=True)
    notebook_seconds = Float(0.0, help="the longest the grading of one notebook may take before it scores 0 with "
                                       "the reason (default 0: every part and restart at its limit, plus a "
                                       "minute)").tag(config=True)

    def limits(self) -> Limits:
        return Limits(unsafe_no_sandbox=self.unsafe_no_sandbox or unsafe_from_env(),
                      submission_seconds=self.notebook_seconds or None)

    def preprocess(self, nb, resources):
        warn_if_exposed(self.config.get("CourseDirectory", {}).get("root") or os.getcwd(), self.log)
        info = resources.get("nbgrader") or {}
        name = info.get("notebook") or (resources.get("metadata") or {}).get("name") or "notebook"
        # nbgrader names the assignment it autogrades; a course may call it otherwise: then the notebook's name decides
        assignment = spec.assignment_of_notebook(name, info.get("assignment"))
        # the zh edition (its id, or its notebooks' metadata): the same checks, the feedback in Chinese
        lang = edition.resolve(notebooks=notebook_language(nb), folder=info.get("assignment"), default=assignment).lang
        reason = nb.metadata.pop(UNREADABLE_KEY, None)
        if reason and assignment:
            parts, notes = {p.id: p for p in zeros(assignment.parts_of(name), reason)}, []
        else:
            with tempfile.TemporaryDirectory(prefix="autograde-") as tmp:
                path = Path(tmp) / f"{name}.ipynb"
                path.write_text(json.dumps(gradable(nb)), encoding="utf-8")  # (only what extract reads)
                try:
                    parts, notes = grade_notebook_file(path, assignment=assignment, lang=lang, limits=self.limits())
                except SandboxUnavailable as exc:  # this machine: nothing is graded, nothing written
                    print(f"error: {exc}", file=sys.stderr, flush=True)
                    raise SystemExit(2) from None
        if twins := tuple(resources.get(SAME_AS_KEY) or ()):
            self.log.warning("autograder: %s is much the same code as the notebooks %s submitted: graded as usual, "
                             "flagged for your review", f"{name}.ipynb",
                             ", ".join(f"{t.student} ({100 * t.similarity:.0f}%)" for t in twins))
            parts = {pid: flag_twins(p, f"{name}.ipynb", twins, lang) for pid, p in parts.items()}
        self.log.info("autograder: %s scored %s", name,
                      ", ".join(f"{pid} {p.score:g}/{p.max_score:g}" for pid, p in parts.items()) or "nothing")
        copies = [m.render(lang) for m in duplicates.duplicate_notes(nb, f"{name}.ipynb")]  # (the student's pasted cells)
        annotate(nb, parts, [*notes, *copies], lang)
        from nbformat import from_dict  # noqa: PLC0415 - nbgrader has imported nbformat already

        nb.cells = [from_dict(c) for c in nb.cells]
        return nb, resources
