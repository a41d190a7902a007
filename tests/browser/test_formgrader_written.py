"""A written answer graded by hand in formgrader, in Chromium, and the student's feedback (issue 36).

The course of the real self_attention notebooks; ada's 01_scores is correct and answers the first written
question; `nbgrader autograde` with the course's plugin. Then the instructor's lab (`python -m course.lab
instructor`'s command, at this course's root) serves formgrader: Chromium opens ada's submission, types points
and a comment into the written answer's fields, as an instructor does. Claims: the gradebook holds them; autograde
run again keeps them; `nbgrader generate_feedback` shows ada both, and no rubric. Screenshots (the grading page,
the feedback page): build/browser-test/.
"""
from __future__ import annotations

import html
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser.conftest import _free_port, _stop_group, ensure_tools, log_in, start_chromium

ANSWER = "Raw weights climb towards 1 as d_k grows (the variance of q.k is d_k); scaled ones stay flat."
COMMENT = "Good prediction and the right reason: the variance. Say what the scaled column shows, too."
POINTS = 3


@pytest.fixture(scope="module")
def course(private_tmp):
    from examples.make_class import nbgrader, solved
    from tests.runcache import released_course

    root = released_course(private_tmp / "formgrader" / "course", ("self_attention",))
    nb = solved(root, "01_scores")
    for cell in nb["cells"]:
        if (cell["metadata"].get("nbgrader") or {}).get("grade_id") == "written_scale_prediction":
            cell["source"] = ANSWER
    folder = root / "submitted" / "ada" / "self_attention"
    folder.mkdir(parents=True)
    (folder / "01_scores.ipynb").write_text(json.dumps(nb))
    (folder / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
    nbgrader(root, "autograde", "self_attention")
    return root


@pytest.fixture(scope="module")
def formgrader(course, private_tmp, artifacts):
    """The instructor's lab at the course's root (course.lab's command): (url, token)."""
    from course.lab import lab_command

    ensure_tools()
    home = private_tmp / "instructor-home"
    token, port = "t" + str(_free_port()) * 3, _free_port()
    argv, env = lab_command(course, ["--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
                                     "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"], student=False)
    env.update(JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTER_DATA_DIR=str(home / "data"), IPYTHONDIR=str(home / "ipython"))
    env.pop("NBGRADER_EXECUTION", None)
    log = artifacts / "formgrader.log"
    with open(log, "w") as out:
        process = subprocess.Popen(argv, cwd=course, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(f"the instructor's lab exited with {process.returncode}: {log.read_text()[-1500:]}")
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the instructor's lab did not answer within 120 s: {log.read_text()[-1500:]}")
                time.sleep(0.5)
        yield url, token
    finally:
        _stop_group(process)


def written_row(course: Path) -> tuple:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade = gb.find_grade("written_scale_prediction", "01_scores", "self_attention", "ada")
        comment = gb.find_comment("written_scale_prediction", "01_scores", "self_attention", "ada")
        return grade.manual_score, grade.needs_manual_grade, comment.manual_comment


def test_an_instructor_grades_a_written_answer_in_formgrader_and_the_student_sees_points_and_comment(
        course, formgrader, private_tmp, artifacts):
    from nbgrader.api import Gradebook
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    from examples.make_class import nbgrader
    from tests.test_written import secrets

    assert written_row(course) == (None, True, None)  # autograde left it to the instructor
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        submission_id = gb.find_submission_notebook("01_scores", "self_attention", "ada").id
    url, token = formgrader
    browser = start_chromium(private_tmp / "formgrader-profile")
    try:
        log_in(browser, url, token)  # formgrader's page then calls its API with the cookie
        browser.get(f"{url}/formgrader/submissions/{submission_id}/")
        wait = WebDriverWait(browser, 60)
        score = wait.until(ready.element_to_be_clickable((By.ID, "written_scale_prediction")))
        # formgrader fetches the grades and the comments apart, and each comment box, once its fetch is back, is
        # set to the saved comment: a comment typed before that is wiped, never saved (seen on a loaded machine)
        wait.until(lambda b: b.execute_script("const f = window.formgrader; return !!(f && f.grades && f.grades.loaded"
                                              " && f.comments && f.comments.loaded);"))
        assert ANSWER in browser.page_source  # the student's answer, as the instructor reads it
        score.clear()
        score.send_keys(str(POINTS))
        comment = browser.find_element(By.ID, "written_scale_prediction-comment")
        comment.click()  # the score's change event saves it
        comment.send_keys(COMMENT)
        score.click()  # the comment's change event saves it
        deadline = time.monotonic() + 30
        while written_row(course) != (POINTS, False, COMMENT) and time.monotonic() < deadline:
            time.sleep(0.5)
        browser.execute_script("document.getElementById('written_scale_prediction').scrollIntoView({block: 'center'})")
        browser.save_screenshot(str(artifacts / "formgrader-written-answer.png"))
        assert written_row(course) == (POINTS, False, COMMENT)

        nbgrader(course, "autograde", "self_attention", "--force")  # again, after the manual grading
        assert written_row(course) == (POINTS, False, COMMENT)
        nbgrader(course, "generate_feedback", "self_attention")
        page = course / "feedback" / "ada" / "self_attention" / "01_scores.html"
        browser.get(page.as_uri())
        text = html.unescape(browser.find_element(By.TAG_NAME, "body").text)
        assert COMMENT in text and ANSWER in text
        assert f"{POINTS:.1f} / 4.0" in text or f"{POINTS} / 4" in text
        assert [s for s in secrets("en") if s in html.unescape(page.read_text(encoding="utf-8"))] == []
        browser.execute_script("[...document.querySelectorAll('*')].find(e => e.textContent.trim() === "
                               f"{json.dumps(COMMENT)})?.scrollIntoView({{block: 'center'}})")
        browser.save_screenshot(str(artifacts / "feedback-written-answer.png"))
    finally:
        browser.quit()
