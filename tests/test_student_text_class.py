"""One class in which a student's *text and files* aim at the instructor's own tools (issue 45), beside honest students,
graded through `nbgrader autograde` + `generate_feedback` and through `grade-class`, as an instructor grades it.
Each attacker carries independent attacks in different notebooks; the honest students come last in nbgrader's
order, after every attack:

    bulky          02_masks: a 10 MB written answer (generate_feedback took 217 s and 2.4 GB); 01_scores: correct, of
                   about 241k JSON values, under the cap as submitted (nbformat's rewrite took it over the cap through
                   nbgrader only)
    editor         02_masks: its written answer cell copied and pasted in JupyterLab (its nbgrader metadata twice, a
                   new id); 01_scores: two written answer cells given one grade_id (either stopped autograde for the
                   rest of the class)
    leaker         03_module too: a SelfAttention that searches its own process for the grader's code of the pieces
                   lent to it and raises what it finds into its report (issue 46: it found the reference's source)
    mallory        01_scores: a written answer with scripts for formgrader and the feedback page (an onerror image
                   that would save grades through formgrader's API, a `files/javascript:` link that the template's
                   rewrite made live); 02_masks.html (a policy that passes the script check, a refresh to another
                   site) in place of 02_masks.ipynb
    twin1, twin2   the same written answers typed into their own copies: byte for byte the same notebooks
    yara, zed      honest (zed: no scaling)

Claims: every command exits 0 and grades every student; each honest student scores exactly what they score alone;
the two paths give every student the same points; the twins keep theirs and are flagged for review on both sides;
a student's own page is neither copied nor linked; no feedback page holds a live script or a script link; the huge
answer is cut in its page, which is written in seconds; no line of a reference piece reaches the leaker's report or
feedback page. (The formgrader page, opened in Chromium: tests/browser/.)
"""
from __future__ import annotations

import html
import json
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from autograder.foundation import spec
from examples.make_class import nbgrader, own_file, student_notebooks
from tests.runcache import released_course

REPO = Path(__file__).resolve().parent.parent
A = spec.DEFAULT  # self_attention
NOTEBOOKS = ("01_scores", "02_masks")  # what each student hands in (the other notebooks: not submitted)
TIMESTAMP = "2026-12-01 10:00:00.000000 UTC"
HONEST = ("yara", "zed")
STUDENTS = ("bulky", "editor", "leaker", "mallory", "twin1", "twin2", "yara", "zed")
HOSTILE = REPO / "tests" / "hostile"
WRITTEN = {"01_scores": "written_scale_sqrt", "02_masks": "written_padding_keys"}  # a written answer of each
ONERROR = ("<img src=x onerror=\"fetch('/formgrader/api/grade/1',{method:'PUT',body:'{}'});"
           "document.title='owned'\">")
SCRIPT_LINK = '<a href="files/javascript:alert(document.domain)">my notes</a>'
STUDENT_PAGE = ('<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
                "content=\"default-src 'none'; script-src 'none'\"><meta http-equiv=\"refresh\" "
                'content="0; url=https://attacker.example/login"></head><body>feedback</body></html>')
ESSAY_BYTES = 10 * 2**20


def parts_of(notebook: str) -> list[str]:
    return [p.id for p in A.parts_of(notebook)]


def graded_ids() -> list[str]:
    return [pid for nb in NOTEBOOKS for pid in parts_of(nb)]


def written_cell(nb: dict, notebook: str) -> dict:
    return next(c for c in nb["cells"]
                if (c.get("metadata") or {}).get("nbgrader", {}).get("grade_id") == WRITTEN[notebook])


def answered(course: Path, notebook: str, answer: str, mistake: str = "correct") -> dict:
    """The notebook of a student making `mistake` (examples/make_class.py), with `answer` as its written answer."""
    nb = json.loads(student_notebooks(course, mistake)[notebook])
    written_cell(nb, notebook)["source"] = answer
    return nb


def pasted(nb: dict, notebook: str) -> dict:
    """The written answer cell copied and pasted right after itself, as JupyterLab does: a new id, the same metadata."""
    cell = written_cell(nb, notebook)
    copy = json.loads(json.dumps(cell)) | {"id": "pasted-copy", "source": "a second go at the answer"}
    nb["cells"].insert(nb["cells"].index(cell) + 1, copy)
    return nb


def doubled(nb: dict, notebook: str) -> dict:
    """A second written cell (another id, its own text) given the written answer's grade_id."""
    other = json.loads(json.dumps(written_cell(nb, notebook))) | {"id": "doubled-answer", "source": "again"}
    nb["cells"].append(other)
    return nb


def dense(nb: dict) -> dict:
    """About 241k JSON values as submitted: empty strings in the notebook's metadata."""
    nb["metadata"]["scratch"] = [""] * 240_000
    return nb


def submissions(course: Path) -> dict[str, dict[str, str]]:
    """student -> file name -> the file's text (mallory's 02_masks.html: a page; the twins: the same bytes)."""
    typed = {f"{nb}.ipynb": json.dumps(answered(course, nb, "Typed in class: the same short answer."), indent=1)
             for nb in NOTEBOOKS}
    out: dict[str, dict[str, str]] = {}
    for student in STUDENTS:
        mistake = "no_scale" if student == "zed" else "correct"
        nbs = {nb: answered(course, nb, f"{student}'s own answer.", mistake) for nb in NOTEBOOKS}
        if student == "bulky":
            nbs["01_scores"] = dense(nbs["01_scores"])
            nbs["02_masks"] = answered(course, "02_masks", "All work and no play. " * (ESSAY_BYTES // 22))
        if student == "editor":
            nbs = {"01_scores": doubled(nbs["01_scores"], "01_scores"), "02_masks": pasted(nbs["02_masks"], "02_masks")}
        if student == "leaker":
            nbs["03_module"] = json.loads(student_notebooks(course, "correct")["03_module"])
            append_to_last_solution(nbs["03_module"], (HOSTILE / "lent_code_search.py").read_text())
        if student == "mallory":
            nbs["01_scores"] = answered(course, "01_scores", f"Scaling keeps softmax soft. {SCRIPT_LINK}\n\n{ONERROR}")
        texts = {f"{name}.ipynb": own_file(json.dumps(nb, indent=1), student) for name, nb in nbs.items()}
        if student.startswith("twin"):
            texts = dict(typed)
        if student == "mallory":
            del texts["02_masks.ipynb"]
            texts["02_masks.html"] = STUDENT_PAGE
        out[student] = texts
    return out


def append_to_last_solution(nb: dict, code: str) -> None:
    cell = [c for c in nb["cells"] if c["cell_type"] == "code"
            and (c.get("metadata") or {}).get("nbgrader", {}).get("solution")][-1]
    cell["source"] = (cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])) + "\n\n" + code


def timed(course: Path, *args: str):
    started = time.perf_counter()
    proc = nbgrader(course, *args, check=False, timeout=900)
    return proc, time.perf_counter() - started


@pytest.fixture(scope="module")
def graded(private_tmp):
    """The class through nbgrader (autograde, its gradebook's scores, generate_feedback), then grade-class."""
    course = released_course(private_tmp / "student-text" / "course", (A.id,))
    for student, files in submissions(course).items():
        folder = course / "submitted" / student / A.id
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
        (folder / "timestamp.txt").write_text(TIMESTAMP)
    autograde, _ = timed(course, "autograde", A.id)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nbgrader_points = {(s, p.id): gb.find_grade(p.id, p.notebook, A.id, s).auto_score
                           for s in STUDENTS for p in A.parts if p.notebook in NOTEBOOKS
                           if (course / "autograded" / s / A.id / f"{p.notebook}.ipynb").exists()}
    feedback, feedback_seconds = timed(course, "generate_feedback", A.id)
    grade_class = subprocess.run([sys.executable, "-m", "autograder", "grade-class", str(course), "--assignment", A.id,
                                  "--workers", "2", "--force"], cwd=REPO, capture_output=True, text=True, timeout=900)
    return {"course": course, "autograde": autograde, "feedback": feedback, "feedback_seconds": feedback_seconds,
            "grade_class": grade_class, "nbgrader": nbgrader_points}


def report(course: Path, student: str) -> dict:
    doc = json.loads((course / "autograder_reports" / A.id / f"{student}.json").read_text(encoding="utf-8"))
    return {p["id"]: p for p in doc["parts"]}


def page(course: Path, student: str, notebook: str) -> str:
    return (course / "feedback" / student / A.id / f"{notebook}.html").read_text(encoding="utf-8")


class Elements(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def test_every_command_exits_0_and_grades_every_student(graded):
    assert graded["autograde"].returncode == 0, graded["autograde"].stderr[-3000:]
    assert graded["feedback"].returncode == 0, graded["feedback"].stderr[-3000:]
    assert graded["grade_class"].returncode == 0, graded["grade_class"].stderr[-3000:]
    for student in STUDENTS:
        assert set(report(graded["course"], student)) >= set(graded_ids()), student
        assert (graded["course"] / "feedback" / student / A.id / "01_scores.html").is_file(), student
        assert all((student, pid) in graded["nbgrader"] for pid in parts_of("01_scores")), student


def test_nbgrader_and_grade_class_give_every_student_the_same_points(graded):
    compared = 0
    for student in STUDENTS:
        parts = report(graded["course"], student)
        for pid in graded_ids():
            if (student, pid) in graded["nbgrader"]:  # (mallory's 02_masks is no notebook: nothing autograded)
                assert graded["nbgrader"][(student, pid)] == pytest.approx(parts[pid]["score"]), (student, pid)
                compared += 1
    assert compared == len(STUDENTS) * len(graded_ids()) - len(parts_of("02_masks")), compared


def test_the_honest_students_graded_after_every_attack_score_as_they_score_alone(graded, grader, private_tmp):
    from autograder.commands.classgrade import grade_folder

    alone = private_tmp / "student-text" / "alone"
    for student in HONEST:
        folder = alone / "submitted" / student / A.id
        folder.mkdir(parents=True)
        for nb in NOTEBOOKS:
            source = graded["course"] / "submitted" / student / A.id / f"{nb}.ipynb"
            (folder / f"{nb}.ipynb").write_bytes(source.read_bytes())
        expected = {p.id: p.score for p in grade_folder(str(folder), A.id, grader)["parts"] if p.id in graded_ids()}
        in_class = {pid: p["score"] for pid, p in report(graded["course"], student).items() if pid in graded_ids()}
        assert in_class == pytest.approx(expected), student
    yara = report(graded["course"], "yara")
    assert all(yara[pid]["score"] == yara[pid]["max_score"] for pid in graded_ids()), yara


def test_the_twins_keep_their_points_and_are_both_flagged_for_review(graded):
    course = graded["course"]
    for student, other in (("twin1", "twin2"), ("twin2", "twin1")):
        parts = report(course, student)
        for pid in graded_ids():
            assert parts[pid]["score"] == parts[pid]["max_score"], (student, pid)
            assert any(other in why for why in parts[pid]["review"]), parts[pid]
            assert graded["nbgrader"][(student, pid)] == parts[pid]["max_score"], (student, pid)
        assert "flagged for your instructor to compare" in page(course, student, "02_masks").replace("&#x27;", "'")
    table = (course / "autograder_reports" / A.id / "class_report.html").read_text().split("<table id=review>")[1]
    assert "twin1" in table.split("</table>")[0] and "twin2" in table.split("</table>")[0]


def test_a_students_own_page_is_neither_copied_nor_linked_as_feedback(graded):
    course = graded["course"]
    assert not (course / "feedback" / "mallory" / A.id / "02_masks.html").exists()
    assert not (course / "autograded" / "mallory" / A.id / "02_masks.html").exists()
    report_page = (course / "autograder_reports" / A.id / "class_report.html").read_text()
    assert "feedback/mallory/self_attention/02_masks.html" not in report_page
    assert "feedback/mallory/self_attention/01_scores.html" in report_page
    assert all(p["score"] == 0 for pid, p in report(course, "mallory").items() if pid in parts_of("02_masks"))


def test_no_feedback_page_holds_a_live_script_or_a_script_link(graded):
    for student in STUDENTS:
        for nb in NOTEBOOKS:
            path = graded["course"] / "feedback" / student / A.id / f"{nb}.html"
            if not path.exists():
                continue
            for tag, attrs in Elements(path.read_text(encoding="utf-8")).found:
                assert tag != "script" and not [a for a in attrs if a.lower().startswith("on")], (student, nb, tag)
                for name in ("href", "src", "action", "formaction"):
                    if attrs.get(name):
                        assert urlsplit(attrs[name].strip()).scheme.lower() in ("", "http", "https", "mailto", "data"), \
                            (student, nb, tag, attrs)
    assert "my notes" in page(graded["course"], "mallory", "01_scores")  # (the text is still there to grade)


def test_a_ten_megabyte_answer_is_cut_in_its_page_which_is_written_in_seconds(graded):
    text = page(graded["course"], "bulky", "02_masks")
    assert len(text.encode()) < ESSAY_BYTES // 10, len(text.encode())
    assert "All work and no play." in text and "more characters are not shown" in text
    assert graded["feedback_seconds"] < 120, graded["feedback_seconds"]


def test_pasted_or_doubled_written_cells_and_a_notebook_near_the_value_cap_cost_no_code_points_in_either_path(graded):
    for student, notebooks in (("editor", NOTEBOOKS), ("bulky", ("01_scores",))):
        parts = report(graded["course"], student)
        for pid in (pid for nb in notebooks for pid in parts_of(nb)):
            assert parts[pid]["score"] == parts[pid]["max_score"], (student, pid, parts[pid])
            assert graded["nbgrader"][(student, pid)] == parts[pid]["max_score"], (student, pid)


def test_a_search_of_its_own_process_puts_no_line_of_a_reference_piece_in_the_report_or_the_feedback(graded):
    import inspect

    import solutions as ref
    from autograder.foundation.spec import PIECES

    course = graded["course"]
    json_text = json.dumps(report(course, "leaker")["module"], ensure_ascii=False)
    feedback = html.unescape(page(course, "leaker", "03_module"))
    assert "LEAK" in json_text and "LEAK" in feedback, json_text[:500]  # (the search ran, in both paths)
    lines = {line.strip().strip('"') for name in PIECES for line in inspect.getsource(getattr(ref, name)).splitlines()}
    lines |= {line.strip() for name in PIECES for line in inspect.getdoc(getattr(ref, name)).splitlines()}
    for text in (json_text, feedback):
        assert not sorted(line for line in lines if len(line) > 12 and line in text)
