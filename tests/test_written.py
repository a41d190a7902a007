"""Written answers, graded by hand in formgrader beside the autograded parts (issue 36).

Claims: every edition of every assignment has its three written questions, 10 points on top of the autograded
100, in its own language; `nbgrader generate_assignment` (the course build's release) replaces each answer with
the stub in the edition's language, so that no model answer or rubric reaches assignments/, and Validate says
nothing about an answer not written yet; through the course's own nbgrader configuration, autograde leaves a
written answer to the instructor ("No response." and 0 when left as released), keeps the grade and the comment
an instructor gave when it runs again, the feedback page shows that grade and comment (and no rubric), the CSV
export has the autograded and the written points in their own columns, and the class report has a column of
its own for them; grade-class writes the same rows.
"""
from __future__ import annotations

import csv
import html
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder.commands import written
from course.build import source_notebooks
from course.cells import CREDIT_LABELS, WRITTEN_HEADINGS, flow
from course.content.written import ASSIGNMENT_QUESTIONS, QUESTIONS, written_points
from course.targets import TARGETS

REPO = Path(__file__).resolve().parent.parent
EDITIONS = {t.id: t for t in TARGETS}


def answer_cells(nb) -> list:
    return [c for c in nb.cells if written.is_written(c)]


def secrets(lang: str) -> list[str]:
    """Text of the source's answer cells that no student may see: the headings, the model answers, the rubrics
    (each paragraph cut at 40 characters, so that a line break or an escape elsewhere cannot hide it)."""
    pick = 0 if lang == "en" else 1
    out = list(WRITTEN_HEADINGS[lang])
    for q in QUESTIONS.values():
        out += [flow(text[pick], lang)[:40] for text in (q.answer, q.full, q.half, q.none)]
    return out


def notebook_text(path: Path) -> str:
    """What a reader of the file sees: a notebook's cell sources and outputs (JSON escapes undone), else the file."""
    if path.suffix != ".ipynb":
        return path.read_text(encoding="utf-8", errors="replace")
    nb = json.loads(path.read_text(encoding="utf-8"))
    return "\n".join(json.dumps(c, ensure_ascii=False).encode().decode("unicode_escape", errors="replace") + "\n"
                     + "".join(c.get("source", "")) for c in nb["cells"])


@pytest.mark.parametrize("edition", list(EDITIONS))
def test_every_edition_has_its_written_questions_worth_ten_points_in_its_own_language(edition):
    target = EDITIONS[edition]
    notebooks = source_notebooks(target)
    cells = [(nb, c) for nb in notebooks.values() for c in answer_cells(nb)]
    assert [c.metadata.nbgrader.grade_id for _, c in cells] == list(ASSIGNMENT_QUESTIONS[edition.removesuffix("_zh")])
    assert sum(c.metadata.nbgrader.points for _, c in cells) == written_points(edition) == 10
    question_heading = "**简答题" if target.lang == "zh" else "**Written question"
    for nb, cell in cells:
        assert not cell.metadata.nbgrader.locked
        assert cell.source.startswith("### BEGIN SOLUTION\n" + WRITTEN_HEADINGS[target.lang][0])
        assert all(label.split("{")[0].strip() in cell.source for label in CREDIT_LABELS[target.lang])
        question = nb.cells[nb.cells.index(cell) - 1]
        assert question.cell_type == "markdown" and question.source.startswith(question_heading)


@pytest.mark.parametrize("edition", [e for e in EDITIONS if EDITIONS[e].lang == "zh"])
def test_a_chinese_written_question_cites_no_english_label_that_only_the_english_notebooks_print(edition):
    """A label in backticks (`max weight raw`, `padding (length 6)`) that the English edition's code prints and the
    Chinese edition's code does not: the Chinese student looks for it in vain (issue 47)."""
    def committed(target) -> dict:  # the built source notebooks (the drift check keeps them equal to the content)
        return {p.stem: nbformat.read(p, as_version=4) for p in sorted((REPO / target.source).glob("*.ipynb"))}

    english, chinese = committed(EDITIONS[edition.removesuffix("_zh")]), committed(EDITIONS[edition])

    def code(nb) -> str:
        return "\n".join(c.source for c in nb.cells if c.cell_type == "code")

    foreign = []
    for name, nb in chinese.items():
        for cell in answer_cells(nb):
            question = nb.cells[nb.cells.index(cell) - 1].source
            cited = re.findall(r"`([^`]+)`", question)
            foreign += [(name, label) for label in cited if label in code(english[name]) and label not in code(nb)]
    assert foreign == []


def test_no_model_answer_or_rubric_reaches_any_file_of_the_released_assignments():
    files = [p for p in (REPO / "assignments").rglob("*") if p.is_file() and p.suffix in (".ipynb", ".py", ".md")]
    assert len(files) > 30
    leaks = [(p.relative_to(REPO).as_posix(), s) for p in files for s in (secrets("en") + secrets("zh"))
             if s in notebook_text(p)]
    assert leaks == []


@pytest.mark.parametrize("edition", list(EDITIONS))
def test_a_released_answer_is_the_stub_in_its_language_and_validate_says_nothing_about_it(edition):
    from nbgrader.utils import determine_grade
    from nbgrader.validator import Validator

    target = EDITIONS[edition]
    released = [nbformat.read(p, as_version=4) for p in sorted((REPO / target.release).glob("*.ipynb"))]
    cells = [c for nb in released for c in answer_cells(nb)]
    assert len(cells) == len(ASSIGNMENT_QUESTIONS[edition.removesuffix("_zh")])
    for cell in cells:
        assert cell.source == written.TEXT_STUBS[target.lang]
        assert "checksum" not in cell.metadata.nbgrader
        assert determine_grade(cell) == (None, cell.metadata.nbgrader.points)  # "markdown: nothing to say"
    for nb in released:  # Validate's verdicts, on the notebook as released: no written answer among them
        validator = Validator()
        judged = validator._get_failed_cells(nb) + validator._get_passed_cells(nb)
        assert not [c for c in judged if written.is_written(c)]


def test_the_course_configuration_puts_the_written_answers_steps_into_nbgrader():
    from traitlets.config import Config

    from autograder.nbgrader_plugin import AUTOGRADE_PREPROCESSORS, configure

    c = Config()
    configure(c)
    assert "autograder.commands.written.SaveAutoGradesKeepingManual" in AUTOGRADE_PREPROCESSORS
    assert "nbgrader.preprocessors.SaveAutoGrades" not in AUTOGRADE_PREPROCESSORS
    assert c.GenerateAssignment.preprocessors[-1] is written.ForgetWrittenChecksums
    assert c.ExportApp.plugin_class == "autograder.commands.written.WrittenCsvExport"


# --------------------------------------------------------------------------- through nbgrader, end to end
GOOD = "The raw weights climb towards one as d_k grows: the variance of the dot product is d_k."
COMMENT = "Right, and well argued; the prediction was a little low at d_k = 16."


@pytest.fixture(scope="module")
def course(private_tmp):
    """A course of the real self_attention notebooks: ada submits 01_scores, correct, with her answer to the first
    written question and none to the second (02_masks, with the third, not submitted); autograde; an instructor
    grades her answer (3 of 4 points, a comment) as formgrader does; autograde again; feedback; export."""
    from examples.make_class import nbgrader, solved
    from tests.runcache import released_course

    root = released_course(private_tmp / "written" / "course", ("self_attention",))
    nb = solved(root, "01_scores")
    for cell in nb["cells"]:
        if (cell["metadata"].get("nbgrader") or {}).get("grade_id") == "written_scale_prediction":
            cell["source"] = GOOD
    folder = root / "submitted" / "ada" / "self_attention"
    folder.mkdir(parents=True)
    (folder / "01_scores.ipynb").write_text(json.dumps(nb))
    (folder / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
    nbgrader(root, "autograde", "self_attention")
    rows = {"after autograde": grade_rows(root)}
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        written.grade_by_hand(gb, "self_attention", "ada", "01_scores", "written_scale_prediction", 3, COMMENT)
    rows["graded by hand"] = grade_rows(root)
    nbgrader(root, "autograde", "self_attention", "--force")
    rows["autograded again"] = grade_rows(root)
    nbgrader(root, "generate_feedback", "self_attention")
    nbgrader(root, "export", "--to", str(root / "grades.csv"))
    yield root, rows
    shutil.rmtree(root, ignore_errors=True)


def grade_rows(root: Path) -> dict:
    """{grade_id: (auto_score, manual_score, needs_manual_grade, auto_comment, manual_comment)} of ada's written answers."""
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for nb in gb.find_submission("self_attention", "ada").notebooks:
            comments = {c.name: c for c in nb.comments}
            for g in nb.grades:
                if written.is_written(g.cell):
                    c = comments[g.name]
                    out[g.name] = (g.auto_score, g.manual_score, g.needs_manual_grade, c.auto_comment, c.manual_comment)
    return out


def test_autograde_leaves_a_written_answer_to_the_instructor_and_scores_one_left_as_released_zero(course):
    _, rows = course
    got = rows["after autograde"]
    assert got["written_scale_prediction"] == (None, None, True, None, None)
    assert got["written_scale_sqrt"] == (0, None, False, "No response.", None)
    assert got["written_padding_keys"][:3] == (0, None, False)  # 02_masks not submitted


def test_autograde_run_again_after_grading_by_hand_keeps_the_instructors_points_comment_and_graded_state(course):
    _, rows = course
    graded = (None, 3.0, False, None, COMMENT)
    assert rows["graded by hand"]["written_scale_prediction"] == graded
    assert rows["autograded again"]["written_scale_prediction"] == graded
    assert rows["autograded again"] == rows["graded by hand"]


def test_the_feedback_page_shows_the_instructors_points_and_comment_and_no_rubric(course):
    root, _ = course
    pages = sorted((root / "feedback" / "ada" / "self_attention").glob("*.html"))
    assert pages
    text = html.unescape((root / "feedback" / "ada" / "self_attention" / "01_scores.html").read_text(encoding="utf-8"))
    assert COMMENT in text and GOOD in text
    assert "3.0 / 4.0" in text  # the points the instructor gave, of the question's 4
    for page in pages:
        body = html.unescape(page.read_text(encoding="utf-8"))
        assert [s for s in secrets("en") if s in body] == []


def test_the_csv_export_has_the_autograded_and_the_written_points_in_their_own_columns(course):
    root, _ = course
    with open(root / "grades.csv", newline="", encoding="utf-8") as f:
        (row,) = [r for r in csv.DictReader(f) if r["student_id"] == "ada"]
    assert float(row["written_score"]) == 3.0 and float(row["written_max_score"]) == 10.0
    assert float(row["autograded_score"]) > 0
    assert float(row["autograded_score"]) + float(row["written_score"]) == pytest.approx(float(row["raw_score"]))
    assert float(row["max_score"]) == 110.0  # the autograded 100 and the written 10


def test_grade_class_writes_a_written_answer_as_autograde_does_and_keeps_the_instructors_grade(course, private_tmp):
    from autograder.commands import gradebook

    root, rows = course
    copy = private_tmp / "written-copy" / "course"
    shutil.copytree(root, copy)
    location = gradebook.locate(copy)
    gradebook.write_part_grades(location, "self_attention", "ada", copy / "submitted" / "ada" / "self_attention", [])
    assert grade_rows(copy) == rows["autograded again"]


def test_the_class_report_shows_the_written_points_in_a_column_of_their_own(course, private_tmp):
    from autograder.commands.classpage import write_class_report
    from autograder.foundation.results import CheckResult, GradeResult, PartResult
    from autograder.foundation.spec import assignment

    root, _ = course
    parts = tuple(PartResult(p.id, p.points, (CheckResult("all", True, p.points, p.points),))
                  for p in assignment("self_attention").parts)
    page = write_class_report(root, "self_attention", [GradeResult("ada", parts)], private_tmp / "reports")
    text = page.read_text(encoding="utf-8")
    assert "<th>written (by hand)</th>" in text and "<td class=num>3 / 10</td>" in text
