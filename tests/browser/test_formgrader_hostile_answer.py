"""A written answer that carries scripts, opened for grading in formgrader, in Chromium (issue 45, item 1).

The course of the real self_attention notebooks; mallory's 01_scores is correct and her answer to the first
written question ends in the payloads of the attack: an `<img src=x onerror>` that reads the `_xsrf` cookie,
writes a file into the course root through `/api/contents` and saves the written answer's maximum score
through formgrader's own API, as the instructor's page may; then `<script>`, `<svg onload>`, an iframe's
srcdoc, a `javascript:` link and one behind the `files/` prefix that the template strips (both clicked), each
writing a file of its own and marking the page. `nbgrader autograde` with the course's plugin, then the
instructor's lab (course.lab's command) serves formgrader, and Chromium opens mallory's submission as an
instructor does. Claims: no marker file, no mark on the page, the grade still waits for the instructor,
and the answer's text is on the page to grade. Screenshot: build/browser-test/formgrader-hostile-answer.png.
"""
from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from tests.browser.conftest import log_in, start_chromium
from tests.browser.test_formgrader_written import formgrader  # noqa: F401 - the instructor's lab on `course`

ANSWER = "Raw weights climb towards 1 as d_k grows; scaled ones stay flat."
PAYLOADS = ("img", "script", "svg", "iframe", "link", "files-link")
CLICKED = ("link", "files-link")


def attack(name: str, grade: bool = False) -> str:
    """JavaScript (base64, to sit in any attribute) that marks the page, writes pwned-<name>.txt into the course
    root through /api/contents, and, with `grade`, saves the written answer's maximum score through formgrader."""
    script = f"""(async () => {{
      const top = window.top || window; top.document.documentElement.setAttribute('data-ran-{name}', '1');
      top.pwned = (top.pwned || []).concat(['{name}']);
      const xsrf = decodeURIComponent((document.cookie.match(/_xsrf=([^;]+)/) || ['', ''])[1]);
      const headers = {{'X-XSRFToken': xsrf, 'Content-Type': 'application/json'}};
      await fetch('/api/contents/pwned-{name}.txt', {{method: 'PUT', headers,
        body: JSON.stringify({{type: 'file', format: 'text', content: 'pwned'}})}});
      if ({json.dumps(grade)}) {{
        const grades = await (await fetch('/formgrader/api/grades?submission_id=' + top.submission_id,
                                          {{headers}})).json();
        for (const g of grades.filter(g => g.name === 'written_scale_prediction'))
          await fetch('/formgrader/api/grade/' + g.id, {{method: 'PUT', headers,
            body: JSON.stringify(Object.assign(g, {{manual_score: g.max_score}}))}});
      }}
    }})()"""
    return f"eval(atob('{base64.b64encode(script.encode()).decode()}'))"


def hostile_answer() -> str:
    return (f"{ANSWER}\n\n<img src=x onerror=\"{attack('img', grade=True)}\">\n\n"
            f"<script>{attack('script')}</script>\n\n<svg onload=\"{attack('svg')}\"><circle r=\"4\"/></svg>\n\n"
            f"<iframe srcdoc=\"<script>{attack('iframe')}</script>\"></iframe>\n\n"
            f"<a id=\"payload-link\" href=\"javascript:{attack('link')}\">a link</a> "
            f"<a id=\"payload-files-link\" href=\"files/javascript:{attack('files-link')}\">a files link</a>\n")


@pytest.fixture(scope="module")
def course(private_tmp):
    from examples.make_class import nbgrader, solved
    from tests.runcache import released_course

    root = released_course(private_tmp / "hostile-formgrader" / "course", ("self_attention",))
    nb = solved(root, "01_scores")
    for cell in nb["cells"]:
        if (cell["metadata"].get("nbgrader") or {}).get("grade_id") == "written_scale_prediction":
            cell["source"] = hostile_answer()
    folder = root / "submitted" / "mallory" / "self_attention"
    folder.mkdir(parents=True)
    (folder / "01_scores.ipynb").write_text(json.dumps(nb))
    (folder / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
    nbgrader(root, "autograde", "self_attention")
    return root


def written_grade(course: Path) -> tuple:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade = gb.find_grade("written_scale_prediction", "01_scores", "self_attention", "mallory")
        return grade.manual_score, grade.needs_manual_grade


def marks(browser) -> list[str]:
    names = browser.execute_script("return Array.from(document.documentElement.attributes).map(a => a.name)")
    return sorted(n for n in names if n.startswith("data-ran-"))


def test_a_written_answers_scripts_do_not_run_in_formgrader_nor_change_its_grade_and_its_text_is_shown(
        course, formgrader, private_tmp, artifacts):  # noqa: F811 - the fixture imported above
    from nbgrader.api import Gradebook
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    assert written_grade(course) == (None, True)  # autograde left it to the instructor
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        submission_id = gb.find_submission_notebook("01_scores", "self_attention", "mallory").id
    url, token = formgrader
    browser = start_chromium(private_tmp / "hostile-formgrader-profile")
    try:
        log_in(browser, url, token)  # the page's fetches carry the login cookie, as the attack's would
        browser.get(f"{url}/formgrader/submissions/{submission_id}/")
        WebDriverWait(browser, 60).until(ready.element_to_be_clickable((By.ID, "written_scale_prediction")))
        xsrf = browser.execute_script("return document.cookie.includes('_xsrf=')")
        for name in CLICKED:
            for link in browser.find_elements(By.ID, f"payload-{name}"):
                browser.execute_script("arguments[0].click()", link)
        time.sleep(3)  # (time for any payload's fetches to land)
        ran, globals_set = marks(browser), browser.execute_script("return window.pwned || null")
        body = browser.find_element(By.TAG_NAME, "body").text
        browser.save_screenshot(str(artifacts / "formgrader-hostile-answer.png"))
    finally:
        browser.quit()
    assert xsrf, "the page had no _xsrf cookie: the attack's writes could not have worked anyway"
    assert sorted(p.name for p in course.glob("pwned-*")) == [], "a student's script wrote into the course"
    assert ran == [] and globals_set is None, (ran, globals_set)
    assert written_grade(course) == (None, True), "a student's script changed the grade"
    assert ANSWER in body and "a link" in body  # the answer, as the instructor reads it to grade
