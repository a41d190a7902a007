"""One class, one hostile student of each kind beside honest ones, graded by one `grade-class` run (issue 32).

The attacks of tests/hostile/ and tests/test_submitted_links.py each have their own test; here they meet in one
class, as an instructor meets them: the run finishes, the honest students score exactly what they score alone,
every hostile student is recorded with a reason (0, refused, or flagged for review where the attack is a known
limit), nothing outside the course changes, and no process outlives the run.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.foundation.spec import ASSIGNMENT, PARTS
from examples.make_class import collect
from tests.runcache import released_course

REPO = Path(__file__).resolve().parent.parent
HOSTILE = REPO / "tests" / "hostile"
POINTS = {p.id: p.points for p in PARTS}
NOTEBOOK = {p.id: p.notebook for p in PARTS}
JAVASCRIPT = "javascript:alert(document.domain)"
HONEST = {"ada": "correct", "bob": "no_scale", JAVASCRIPT: "correct"}
# student -> (the notebook whose last solution cell gets the attack, tests/hostile/<file> (its honest section too))
ATTACKS = {"flood": ("01_scores", "json_flood"), "keyring": ("01_scores", "keyring"),
           "kernel": ("01_scores", "kernel_surface"), "inodes": ("01_scores", "tmp_inodes"),
           "gc": ("03_module", "watch_off_gc")}
FILES = {"linker": "every notebook a link to source/", "copycat": "02_masks copied from source/",
         "huge": "01_scores of two million empty lists",
         "spacer": "03_module: ada's, one more space after a `return` and one comment line (issue 52)"}

# Runs grade-class as a child subreaper: whatever the run leaves behind is re-parented here and counted.
REAPER = textwrap.dedent(r"""
    import ctypes, os, subprocess, sys, time
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    code = subprocess.run(sys.argv[1:]).returncode
    for _ in range(50):  # (a process that is ending has up to 5 s; the ended ones re-parented here are reaped)
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        left = [c for t in os.listdir("/proc/self/task")
                for c in open(f"/proc/self/task/{t}/children").read().split()]
        if not left:
            break
        time.sleep(0.1)
    names = []
    for pid in left:
        try:
            names.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:200])
        except OSError:
            names.append(pid)
    print(f"LEFT {names}", file=sys.stderr)
    sys.exit(code)
""")


def append_to_last_solution(path: Path, code: str) -> None:
    nb = json.loads(path.read_text())
    cell = [c for c in nb["cells"] if c["cell_type"] == "code"
            and (c.get("metadata") or {}).get("nbgrader", {}).get("solution")][-1]  # a written answer is markdown
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    cell["source"] = source + "\n\n" + code
    path.write_text(json.dumps(nb))


def tree_digest(*roots: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for root in roots for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def hostile_class(private_tmp):
    course = released_course(private_tmp / "hostile-class" / "course")
    students = {**HONEST, **{s: "correct" for s in (*ATTACKS, *FILES)}}
    collect(course, students)
    folder = course / "submitted"
    for student, (notebook, name) in ATTACKS.items():
        append_to_last_solution(folder / student / ASSIGNMENT / f"{notebook}.ipynb", (HOSTILE / f"{name}.py").read_text())
    source = course / "source" / ASSIGNMENT
    for nb in sorted((folder / "linker" / ASSIGNMENT).glob("*.ipynb")):
        nb.unlink()
        nb.symlink_to(source / nb.name)
    copied = folder / "copycat" / ASSIGNMENT / "02_masks.ipynb"
    copied.write_bytes((source / "02_masks.ipynb").read_bytes())
    spaced = json.loads((folder / "ada" / ASSIGNMENT / "03_module.ipynb").read_text())
    cell = next(c for c in spaced["cells"] if c["cell_type"] == "code" and "return " in "".join(c["source"])
                and (c.get("metadata") or {}).get("nbgrader", {}).get("solution"))
    cell["source"] = "# my own work\n" + "".join(cell["source"]).replace("return ", "return  ", 1)
    (folder / "spacer" / ASSIGNMENT / "03_module.ipynb").write_text(json.dumps(spaced))
    huge = folder / "huge" / ASSIGNMENT / "01_scores.ipynb"
    nb = json.loads(huge.read_text())
    nb["metadata"]["extra"] = [[] for _ in range(2_000_000)]
    huge.write_text(json.dumps(nb))

    outside = private_tmp / "hostile-class" / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the instructor's\n")
    os.chmod(outside, 0o777)
    os.chmod(outside / "secret.txt", 0o666)
    watched = (outside, REPO / "solutions", REPO / "autograder", REPO / "source")
    before = tree_digest(*watched)
    reaper = private_tmp / "hostile-class" / "reaper.py"
    reaper.write_text(REAPER)
    proc = subprocess.run([sys.executable, str(reaper), sys.executable, "-m", "autograder", "grade-class",
                           str(course), "--workers", "2"], cwd=REPO, capture_output=True, text=True, timeout=900)
    after = tree_digest(*watched)
    return course, proc, before == after


def report(course: Path, student: str) -> dict:
    doc = json.loads((course / "autograder_reports" / ASSIGNMENT / f"{student}.json").read_text())
    return {p["id"]: p for p in doc["parts"]} | {"notes": doc.get("notes", [])}


def text_of(part: dict) -> str:
    return json.dumps(part, ensure_ascii=False)


def test_the_run_finishes_records_every_student_and_leaves_no_process(hostile_class):
    course, proc, _ = hostile_class
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"graded {len(HONEST) + len(ATTACKS) + len(FILES)}" in proc.stdout and "errors 0" in proc.stdout, \
        proc.stdout[-3000:]
    assert "LEFT []" in proc.stderr, proc.stderr[-2000:]


def test_nothing_outside_the_course_changes(hostile_class):
    assert hostile_class[2], "a file outside the course (a world-writable sentinel, the solutions, the grader) changed"


def test_the_honest_students_score_as_they_score_alone(hostile_class, grader, private_tmp):
    from autograder.commands.classgrade import grade_folder

    course = hostile_class[0]
    alone = released_course(private_tmp / "hostile-class" / "alone")
    collect(alone, HONEST)
    for student in HONEST:
        graded = grade_folder(str(alone / "submitted" / student / ASSIGNMENT), ASSIGNMENT, grader)
        expected = {p.id: p.score for p in graded["parts"]}
        in_class = {pid: part["score"] for pid, part in report(course, student).items() if pid != "notes"}
        assert in_class == pytest.approx(expected), (student, in_class, expected)
    assert sum(report(course, "ada")[p]["score"] for p in POINTS) == pytest.approx(sum(POINTS.values()))


def test_links_and_copies_score_0_with_the_reason(hostile_class):
    course = hostile_class[0]
    linker = report(course, "linker")
    assert all(linker[p]["score"] == 0 for p in POINTS), linker
    assert "symbolic link" in text_of(linker["qkv_projection"]), linker["qkv_projection"]
    copycat = report(course, "copycat")
    masks = [p for p in POINTS if NOTEBOOK[p] == "02_masks"]
    assert all(copycat[p]["score"] == 0 for p in masks) and "source" in text_of(copycat[masks[0]])
    assert all(copycat[p]["score"] == POINTS[p] for p in POINTS if NOTEBOOK[p] != "02_masks"), copycat


def test_a_copy_with_one_more_space_and_a_comment_keeps_its_points_and_is_flagged_naming_the_original(hostile_class):
    course = hostile_class[0]
    spacer, ada = report(course, "spacer"), report(course, "ada")
    for pid in (p for p in POINTS if NOTEBOOK[p] == "03_module"):
        assert spacer[pid]["score"] == ada[pid]["score"] == POINTS[pid], (pid, spacer[pid])
        assert any("100% the same code as ada's" in why and "~" in why for why in spacer[pid].get("review", ())), \
            spacer[pid]
        assert any("much the same code as another student's" in n for n in spacer[pid].get("notes", ())), spacer[pid]
        assert "ada" not in " ".join(spacer[pid].get("notes", ())), "the student's note names nobody"
        assert any("the same code as spacer's" in why for why in ada[pid].get("review", ())), ada[pid]
    table = (course / "autograder_reports" / ASSIGNMENT / "class_report.html").read_text().split("<table id=review>")[1]
    assert "spacer" in table.split("</table>")[0] and "the same code as ada" in table.split("</table>")[0]


def test_a_reply_flood_and_a_huge_notebook_score_0_with_the_reason(hostile_class):
    course = hostile_class[0]
    flood = report(course, "flood")
    assert flood["scaled_scores"]["score"] == 0 and "refuses" in text_of(flood["scaled_scores"])
    huge = report(course, "huge")
    scores_parts = [p for p in POINTS if NOTEBOOK[p] == "01_scores"]
    assert all(huge[p]["score"] == 0 for p in scores_parts) and "262144" in text_of(huge[scores_parts[0]])


def test_keyrings_the_kernels_surface_and_tmp_inodes_are_out_of_reach(hostile_class):
    course = hostile_class[0]
    assert "keys seen [], changed [], added to []" in text_of(report(course, "keyring")["scaled_scores"])
    assert "the kernel gave: []" in text_of(report(course, "kernel")["scaled_scores"])
    inodes = text_of(report(course, "inodes")["scaled_scores"])
    assert "stopped by No space left on device" in inodes, inodes


def test_the_silenced_watch_is_listed_for_review_in_the_class_report(hostile_class):
    course = hostile_class[0]
    module = report(course, "gc")["module"]
    assert module.get("review"), module
    page = (course / "autograder_reports" / ASSIGNMENT / "class_report.html").read_text()
    assert "gc" in page and "scaled_dot_product_attention" in page


def test_a_student_folder_named_like_a_script_url_is_linked_as_a_quoted_relative_path(hostile_class):
    course = hostile_class[0]
    page = (course / "autograder_reports" / ASSIGNMENT / "class_report.html").read_text()
    assert 'href="javascript:' not in page and "javascript%3Aalert" in page
