"""The class report (classreport.py: what the class says, as data; classpage.py: the HTML page): the hard parts,
the common mistakes with their counts and messages, the students below the threshold, a link to each report;
one self-contained page in the edition's language. (tests/browser/test_class_report.py looks at it in Chromium.)"""
from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from autograder.commands import classpage, classreport
from autograder.foundation import spec
from autograder.grading.scoring import zeros
from autograder.foundation.results import CheckResult, GradeResult, PartResult

PARTS = spec.assignment("self_attention").parts
NO_SCALE = "scores are not scaled: divide the dot products by sqrt(d_k)"
# the start of a feedback page as feedbackpage.py writes it (the policy before anything else)
FEEDBACK_PAGE = ('<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8"/><meta content="default-src \'none\'; '
                 'script-src \'none\'; style-src \'unsafe-inline\'" http-equiv="Content-Security-Policy"/>'
                 '<title>01_scores</title></head><body></body></html>')


def feedback_page(course: Path, student: str, notebook: str = "01_scores") -> None:
    """What generate_feedback leaves for a student's autograded notebook: the notebook, and its page."""
    for step, name, text in (("autograded", f"{notebook}.ipynb", "{}"), ("feedback", f"{notebook}.html", FEEDBACK_PAGE)):
        folder = course / step / student / "self_attention"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def result(student: str, lost: dict[str, str] | None = None) -> GradeResult:
    """A student who passes every part but those in `lost` (part -> the message of its one failing check)."""
    lost = lost or {}
    parts = []
    for part in PARTS:
        if part.id in lost:
            checks = (CheckResult("the main check", False, 0.0, part.points * 0.75, lost[part.id]),
                      CheckResult("a small check", True, part.points * 0.25, part.points * 0.25))
        else:
            checks = (CheckResult("the main check", True, part.points, part.points),)
        parts.append(PartResult(part.id, part.points, checks))
    return GradeResult(student, tuple(parts))


CLASS = [result("ada"), result("bob", {"scaled_scores": NO_SCALE}), result("cy", {"scaled_scores": NO_SCALE}),
         result("dee", {"scaled_scores": "rows of your weights sum to 2.03: softmax over dim=-1", "masks": "inverted",
                        "module": "no W_o", "official_parity": "x", "multihead": "y", "long_sequence": "z",
                        "qkv_projection": "w"})]


def test_the_most_common_mistake_comes_first_with_its_students_and_the_checks_that_named_it():
    report = classreport.summarize("self_attention", CLASS)
    first = report.common_failures[0]
    assert (first.part, first.message, first.count) == ("scaled_scores", NO_SCALE, 2)
    assert first.students == ("bob", "cy") and first.checks == ("the main check",)
    assert all(f.count == 1 for f in report.common_failures[1:])
    assert len(report.common_failures) == 8  # NO_SCALE, then dee's seven mistakes, one each


def test_one_unfinished_function_failing_many_checks_with_one_message_is_one_mistake():
    unfinished = PartResult("masks", 15, tuple(CheckResult(f"check {i}", False, 0, 5, "causal_mask is not implemented yet")
                                                  for i in range(3)))
    lazy = dataclasses.replace(result("eve"), parts=tuple(unfinished if p.id == "masks" else p for p in result("eve").parts))
    report = classreport.summarize("self_attention", [lazy, result("ada")])
    assert [(f.part, f.count, len(f.checks)) for f in report.common_failures] == [("masks", 1, 3)]


def test_part_distributions_and_the_students_below_the_threshold():
    report = classreport.summarize("self_attention", CLASS, threshold=0.6)
    scaled = next(p for p in report.parts if p.id == "scaled_scores")
    assert scaled.scores == (15, 3.75, 3.75, 3.75) and scaled.full_marks == 1 and scaled.zero == 0
    assert [s.id for s in report.below_threshold] == ["dee"]  # 25 of 100
    assert report.below_threshold[0].weakest[0] == "module"  # 15 points lost there, the most
    assert [s.id for s in classreport.summarize("self_attention", CLASS, threshold=0.95).below_threshold] == \
        ["dee", "bob", "cy"]


def test_the_page_is_self_contained_with_an_inline_picture_and_links_to_each_students_report(tmp_path):
    reports = tmp_path / "autograder_reports" / "self_attention"
    reports.mkdir(parents=True)
    for r in CLASS:
        (reports / f"{r.submission}.json").write_text("{}")
    feedback_page(tmp_path, "bob")
    path = classpage.write_class_report(tmp_path, "self_attention", CLASS, reports)
    assert path == reports / "class_report.html"
    page = path.read_text(encoding="utf-8")
    assert page.count('src="data:image/svg+xml;base64,') == 1
    assert not re.search(r"(src|href)=[\"'](https?:)?//", page), "the page must need no network"
    assert "<script" not in page
    for student in ("ada", "bob", "cy", "dee"):
        assert f'href="{student}.json"' in page
    assert 'href="../../feedback/bob/self_attention/01_scores.html"' in page
    assert (tmp_path / "feedback/bob/self_attention/01_scores.html").exists()
    assert NO_SCALE in page and "students below 60% of the points" in page


def test_the_chinese_editions_page_has_its_headings_in_chinese(tmp_path):
    page = classpage.page(classreport.summarize("self_attention_zh", CLASS), {})
    assert '<html lang="zh-CN">' in page
    for heading in ("score distribution per part", "most common failing checks", "every student"):
        chinese = classpage.i18n.message(heading).render("zh")
        assert chinese != heading and chinese in page
    assert "most common failing checks" not in page


def test_an_unreadable_submissions_check_is_named_in_chinese_on_the_chinese_page():
    unreadable = GradeResult("eve", tuple(zeros(PARTS, "02_scores.ipynb 无法作为 notebook 读取")), lang="zh")
    page = classpage.page(classreport.summarize("self_attention_zh", [unreadable, result("ada")]), {})
    assert "your submission can be read" not in page
    assert classpage.i18n.check_title("your submission can be read", "zh") in page


HOSTILE_NAMES = ("javascript:alert(1)", "javascript:alert(document.domain)", "o'neil \"q\"", "<img src=x onerror=alert(1)>", "a b",
                 "张三", "data:text,x", "c?d#e&f")


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.hrefs += [value for name, value in attrs if name == "href"]


def test_every_link_is_a_quoted_relative_path_whatever_the_student_folder_is_called(tmp_path):
    """Student folders named like a URL scheme, with quotes, '<', spaces or non-ASCII: each link is a relative path,
    percent-quoted, that leads to the student's own report; none has a scheme, a host, a query or a fragment."""
    reports = tmp_path / "autograder_reports" / "self_attention"
    reports.mkdir(parents=True)
    students = [result(name) for name in HOSTILE_NAMES]
    for name in HOSTILE_NAMES:
        (reports / f"{name}.json").write_text("{}")
        feedback_page(tmp_path, name)
    page = classpage.write_class_report(tmp_path, "self_attention", students, reports, threshold=2.0).read_text()
    parser = _Links()
    parser.feed(page)
    assert len(parser.hrefs) == 3 * len(HOSTILE_NAMES)  # two reports each, and the first again: all below 2.0
    for href in parser.hrefs:
        parts = urlsplit(href)
        assert (parts.scheme, parts.netloc, parts.query, parts.fragment) == ("", "", "", ""), href
        assert ":" not in href and not href.startswith("/") and re.fullmatch(r"[A-Za-z0-9%._~/-]+", href), href
        assert (reports / unquote(href)).resolve().is_file(), href
    targets = {(reports / unquote(h)).resolve() for h in parser.hrefs}
    for name in HOSTILE_NAMES:
        assert (reports / f"{name}.json").resolve() in targets
        assert (tmp_path / "feedback" / name / "self_attention" / "01_scores.html").resolve() in targets
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert f'<meta http-equiv="Content-Security-Policy" content="{classpage.POLICY}">' in page
    assert "script-src" not in classpage.POLICY and "default-src 'none'" in classpage.POLICY  # (no script at all)


def test_parts_whose_code_mentions_a_forbidden_function_not_seen_called_are_listed_for_review():
    flagged = dataclasses.replace(result("mallory"), parts=tuple(
        dataclasses.replace(p, review=("SelfAttention (scaled_dot_product_attention)",)) if p.id == "module" else p
        for p in result("mallory").parts))
    report = classreport.summarize("self_attention", [flagged, result("ada")])
    assert [(f.student, f.part, f.why, f.score) for f in report.review] == \
        [("mallory", "module", ("SelfAttention (scaled_dot_product_attention)",), 20)]
    table = classpage.page(report, {"mallory": [("JSON", "mallory.json")]}).split("<table id=review>")[1]
    assert '<a href="mallory.json">mallory</a>' in table and "SelfAttention (scaled_dot_product_attention)" in table
    assert "ada" not in table.split("</table>")[0]
    clean = classpage.page(classreport.summarize("self_attention", CLASS), {})
    assert "<table id=review>" not in clean and "no part mentions a function it may not call" in clean


def test_only_the_notebooks_feedback_pages_that_forbid_scripts_are_linked_never_a_students_own_html(tmp_path):
    """nbgrader copied every file of a submission into its feedback folder (the course now keeps a student's HTML
    out): a student's notes.html, a 02_masks.html standing in for a notebook not submitted, a page that runs a script
    before its policy, or one whose notebook was never autograded, is not linked; the notebooks' pages that forbid
    scripts from their start and were made from an autograded notebook are."""
    feedback = tmp_path / "feedback" / "eve" / "self_attention"
    feedback.mkdir(parents=True)
    autograded = tmp_path / "autograded" / "eve" / "self_attention"
    autograded.mkdir(parents=True)
    for name in ("01_scores", "02_masks", "03_module", "04_multihead"):
        (autograded / f"{name}.ipynb").write_text("{}")
    (feedback / "01_scores.html").write_text(FEEDBACK_PAGE)
    (feedback / "notes.html").write_text(FEEDBACK_PAGE)  # not a notebook of the assignment
    (feedback / "02_masks.html").write_text("<html><script>alert(1)</script></html>")
    (feedback / "03_module.html").write_text(FEEDBACK_PAGE.replace("<head>", "<head><script>alert(1)</script>"))
    (feedback / "04_multihead.html").write_text(FEEDBACK_PAGE.replace("script-src \'none\'", "script-src *"))
    (feedback / "05_long_sequence.html").write_text(FEEDBACK_PAGE)  # no autograded 05_long_sequence.ipynb
    links = classpage.report_links(tmp_path / "reports", tmp_path, "self_attention", ["eve"])
    assert links == {"eve": [("01_scores", "../../feedback/eve/self_attention/01_scores.html")]}


def test_a_students_page_with_a_policy_and_a_refresh_to_another_site_is_never_linked_as_feedback(tmp_path):
    """The attack of issue 45, item 3: 02_masks.html submitted in place of the notebook, with a CSP meta that passes
    the script check and a meta refresh to another site; linked as feedback, one click took the instructor there."""
    feedback = tmp_path / "feedback" / "eve" / "self_attention"
    feedback.mkdir(parents=True)
    (tmp_path / "autograded" / "eve" / "self_attention").mkdir(parents=True)
    (tmp_path / "autograded" / "eve" / "self_attention" / "02_masks.ipynb").write_text("{}")
    refresh = FEEDBACK_PAGE.replace("<title>", '<meta http-equiv="Refresh" content="0; url=https://attacker.example">'
                                              "<title>")
    (feedback / "02_masks.html").write_text(refresh)
    assert classpage.forbids_scripts(FEEDBACK_PAGE) and not classpage.forbids_scripts(refresh)
    assert classpage.report_links(tmp_path / "reports", tmp_path, "self_attention", ["eve"]) == {"eve": []}


def test_the_picture_puts_each_score_in_its_bin_full_marks_in_the_last_and_draws_one_bar_per_filled_bin():
    assert classpage.histogram([0, 0.9, 1.0, 9.99, 10], top=10) == [2, 1, 0, 0, 0, 0, 0, 0, 0, 2]
    report = classreport.summarize("self_attention", CLASS)
    svg = classpage.distribution_svg(report.parts, [s.score for s in report.students], report.max_score)
    filled = sum(1 for p in report.parts for n in classpage.histogram(p.scores, p.max_score) if n) + \
        sum(1 for n in classpage.histogram([s.score for s in report.students], report.max_score) if n)
    assert svg.count("<rect ") == filled + 1, "one bar per filled bin, and the white background"
    for part in report.parts:
        assert f"{part.id} (/{classpage.fmt(part.max_score)})" in svg
