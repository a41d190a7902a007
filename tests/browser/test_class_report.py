"""The class report (autograder/commands/classpage.py) of the bundled example class, opened in headless Chromium from
disk, as an instructor opens it: its picture renders, its tables are there, its links reach each student's
report, and nothing is fetched from the network. Screenshots: build/browser-test/class_report.png and
class_report_zh.png (the Chinese edition's page). About 30 s (the class graded by the session's warm grader).

Alone: .venv/bin/python -m pytest -q tests/browser/test_class_report.py
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from autograder.commands import classpage, document
from examples.make_class import collect, example_class

ARTIFACTS_NAME = {"self_attention": "class_report.png", "self_attention_zh": "class_report_zh.png"}


@pytest.fixture(scope="module")
def pages(repo_course, grader) -> dict:
    """edition -> the class report of the example class graded in that edition (reports beside it)."""
    out = {}
    for edition in ARTIFACTS_NAME:
        students = example_class(edition)
        collect(repo_course, students, edition)
        reports = repo_course / "autograder_reports" / edition
        reports.mkdir(parents=True)
        results = []
        for student in students:
            graded = grader.grade(repo_course / "submitted" / student / edition)
            result = dataclasses.replace(graded, submission=student)
            (reports / f"{student}.json").write_text(json.dumps(document.to_json(result)), encoding="utf-8")
            results.append(result)
        out[edition] = (classpage.write_class_report(repo_course, edition, results, reports), students)
    return out


def full_page_screenshot(browser, path) -> None:
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, min(max(height + 40, 600), 6000))
    browser.save_screenshot(str(path))


@pytest.mark.parametrize("edition", list(ARTIFACTS_NAME))
def test_the_class_report_renders_its_picture_and_links_every_students_report(chromium, pages, artifacts, edition):
    page, students = pages[edition]
    chromium.get(page.as_uri())
    picture = chromium.find_element("id", "distribution")
    size = chromium.execute_script("const i = arguments[0]; return i.complete ? [i.naturalWidth, i.naturalHeight] : null",
                                   picture)
    assert size and size[0] > 400 and size[1] > 200, f"the distribution picture did not render: {size}"
    assert picture.size["width"] > 400
    rows = chromium.find_elements("css selector", "#students tr")
    assert len(rows) == len(students) + 1
    failures = chromium.find_elements("css selector", "#failures tr")
    assert len(failures) > 3, "the example class's mistakes must show as common failing checks"
    heading = chromium.find_element("tag name", "h2").text
    assert heading == classpage.HEADINGS["score distribution per part"].render("zh" if edition.endswith("_zh") else "en")
    resources = chromium.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources == [], f"the page fetched {resources}"
    full_page_screenshot(chromium, artifacts / ARTIFACTS_NAME[edition])
    student = sorted(students)[0]
    chromium.find_element("css selector", f'#students a[href="{student}.json"]').click()
    assert json.loads(chromium.find_element("tag name", "body").text)["score"] >= 0
