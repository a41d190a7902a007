"""nbgrader's feedback pages run no script of a student's (commands/feedbackpage.py; issue 32, item 6).

A student's markdown, raw cells, outputs and cell metadata can carry `<script>`, `<img onerror>`,
`javascript:` links, `<iframe>` and `<svg onload>`; stock nbgrader put them live in the feedback page that the
class report links to. Claims: through `nbgrader generate_feedback` on the course's own configuration, none of
them is live in the page (read with an HTML parser, as a browser would: no script element, no event handler,
no frame, no svg, no link or image that runs code), the page carries a Content-Security-Policy that forbids
scripts, and the grader's scores and messages are still there.
"""
from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from urllib.parse import urlsplit

import nbformat
import pytest
from traitlets.config import Config

from autograder.commands.feedbackpage import CSP, FeedbackExporter

MARKDOWN = ('<script>alert("md-script")</script>\n\n<img src=x onerror="alert(\'md-img\')">\n\n'
            '<a href="javascript:alert(\'md-link\')">click</a> [md](javascript:alert(2)) '
            '<a href="jav&#x61;script:alert(5)">entity</a>\n\n'
            '<iframe src="https://example.org" srcdoc="<script>alert(6)</script>"></iframe>\n\n'
            '<svg onload="alert(\'md-svg\')"><circle r="4"/></svg>\n\n<div style="position:fixed">x</div>\n\n'
            '<details><summary>a hint</summary>use <code>softmax</code></details>\n\nsee [the docs](https://pytorch.org)\n')
# Links that bleach sees as relative and the template's strip_files_prefix (after it) turns into scripts: nested,
# entity-encoded, whitespace- and control-character-obfuscated, mixed case; one honest relative link, which stays.
FILES_LINKS = ('<a href="files/javascript:alert(21)">a</a> <a href="files/files/javascript:alert(22)">b</a> '
               '<a href="files/jav&#x61;script:alert(23)">c</a> <a href="files/java&#x09;script:alert(24)">d</a> '
               '<a href="files/&#x20;javascript:alert(25)">e</a> <a href="files/&#1;javascript:alert(26)">f</a> '
               '<img src="files/javascript:alert(27)" alt="g"> [h](files/javascript:alert(28)) '
               '<a href="files/JaVaScRiPt&colon;alert(29)">i</a> <a href="files/vbscript:msgbox(30)">j</a> '
               '<a href="files/java&#10;script:alert(31)">k</a> <a href="files/notes.txt">an honest link</a>\n')
HTML_OUTPUT = ('<script>alert("out")</script><img src=x onerror=alert(3)><iframe src="javascript:alert(7)"></iframe>'
               '<svg><script>alert(8)</script></svg><a href="javascript:alert(9)">x</a><b>bold output</b>')


def hostile_outputs() -> list[dict]:
    return [{"output_type": "display_data", "metadata": {"image/png": {"width": '1" onmouseover="alert(10)'}},
             "data": {"text/html": HTML_OUTPUT, "image/svg+xml": "<svg onload=alert(11)></svg>",
                      "application/javascript": "alert(12)", "text/latex": "<script>alert(13)</script>",
                      "text/plain": "plain output"}},
            {"output_type": "display_data", "metadata": {},
             "data": {"text/markdown": "<img src=x onerror=alert(14)> **md output**",
                      "image/png": 'x" onerror="alert(15)'}}]


# A student's own page, submitted in place of 02_masks.ipynb: a policy that passes the class report's check, and a
# refresh that takes whoever opens it to another site (it was copied into feedback/ and linked as feedback).
STUDENT_PAGE = ('<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
                'content="default-src \'none\'; script-src \'none\'"><meta http-equiv="refresh" '
                'content="0; url=https://attacker.example/login"></head><body>feedback</body></html>')


class Page(HTMLParser):
    """What a browser would build from the page: elements and attributes, the text apart."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))


def browser_scheme(url: str) -> str:
    """The scheme a browser reads (it drops tabs and newlines anywhere, spaces and C0 controls in front)."""
    return urlsplit(re.sub(r"[\t\n\r]", "", url).lstrip("".join(map(chr, range(33))))).scheme.lower()


def assert_inert(text: str) -> None:
    """No element or attribute of `text` (a page or a piece of one) can run code."""
    page = Page(text)
    tags = [tag for tag, _ in page.elements]
    for tag in ("script", "iframe", "svg", "object", "embed", "frame", "base", "form", "link"):
        assert tag not in tags, tag
    for tag, attrs in page.elements:
        assert not [a for a in attrs if a.lower().startswith("on")], (tag, attrs)
        assert "style" not in attrs and "srcdoc" not in attrs, (tag, attrs)
        for name in ("href", "src", "action", "formaction", "xlink:href", "srcset", "poster", "background"):
            if attrs.get(name) is not None:
                scheme = browser_scheme(attrs[name])
                assert scheme in ("", "http", "https", "mailto") or (
                    tag == "img" and attrs[name].startswith(("data:image/png;base64,", "data:image/jpeg;base64,"))), \
                    (tag, attrs)


def assert_nothing_live(text: str) -> None:
    """`text`, a whole page, is inert and carries one policy that forbids scripts, first in its head."""
    assert_inert(text)
    page = Page(text)
    metas = [(i, attrs) for i, (tag, attrs) in enumerate(page.elements) if tag == "meta"]
    policy = [(i, attrs) for i, attrs in metas if attrs.get("http-equiv", "").lower() == "content-security-policy"]
    assert len(policy) == 1, metas
    index, attrs = policy[0]
    assert "script-src 'none'" in attrs["content"] and "default-src 'none'" in attrs["content"]
    assert [tag for tag, _ in page.elements[:index]] in (["html", "head", "meta"], ["html", "head"]), page.elements[:index]


def test_the_exporter_leaves_no_live_script_in_markdown_raw_cells_outputs_or_metadata():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": "</script><script>alert(16)"}}
    nb.cells.append(nbformat.v4.new_markdown_cell(MARKDOWN, metadata={"tags": ['x" onmouseover="alert(17)']}))
    code = nbformat.v4.new_code_cell("1", metadata={"nbgrader": {"grade_id": 'a"><script>alert(18)</script>',
                                                                 "solution": True, "grade": False}})
    code.outputs = [nbformat.from_dict(o) for o in hostile_outputs()]
    nb.cells += [code, nbformat.v4.new_raw_cell("<script>alert('raw')</script><img src=x onerror=alert(19)>")]
    config = Config()
    config.HTMLExporter.template_name = "classic"
    page, _ = FeedbackExporter(config=config).from_notebook_node(nb)
    assert_nothing_live(page)
    assert "<details><summary>a hint</summary>" in page and '<a href="https://pytorch.org">the docs</a>' in page
    assert "<b>bold output</b>" in page and "<strong>md output</strong>" in page
    assert '&lt;script&gt;alert("md-script")&lt;/script&gt;' in page  # shown as the student wrote it, not run
    assert [a["content"] for t, a in Page(page).elements if t == "meta" and "http-equiv" in a] == [CSP]


@pytest.fixture(scope="module")
def feedback(private_tmp):
    """A course of the real self_attention notebooks; eve's 01_scores is correct, with the attacks in a markdown
    cell of hers and, after autograde (which clears outputs), in an output of the autograded notebook."""
    from examples.make_class import nbgrader, solved
    from tests.runcache import released_course

    root = released_course(private_tmp / "feedback" / "course", ("self_attention",))
    nb = solved(root, "01_scores")
    nb["cells"].append({"cell_type": "markdown", "id": "eve-markdown", "metadata": {}, "source": MARKDOWN})
    nb["cells"].append({"cell_type": "markdown", "id": "eve-files", "metadata": {}, "source": FILES_LINKS})
    folder = root / "submitted" / "eve" / "self_attention"
    folder.mkdir(parents=True)
    (folder / "01_scores.ipynb").write_text(json.dumps(nb))
    (folder / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
    (folder / "notes.html").write_text("<script>alert('a page of eve's own')</script>")  # stock nbgrader copied it
    (folder / "02_masks.html").write_text(STUDENT_PAGE)  # in place of a notebook not submitted (issue 45, item 3)
    nbgrader(root, "autograde", "self_attention")
    graded = root / "autograded" / "eve" / "self_attention" / "01_scores.ipynb"
    autograded = json.loads(graded.read_text())
    autograded["cells"].append({"cell_type": "code", "id": "eve-output", "metadata": {}, "execution_count": 1,
                                "source": "show()", "outputs": hostile_outputs()})
    graded.chmod(0o644)  # (nbgrader leaves it read-only: only root writes it as it is)
    graded.write_text(json.dumps(autograded))
    nbgrader(root, "generate_feedback", "self_attention")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def page_of(course) -> str:
    return (course / "feedback" / "eve" / "self_attention" / "01_scores.html").read_text(encoding="utf-8")


def test_nbgrader_feedback_has_no_live_student_script_and_a_policy_that_forbids_scripts(feedback):
    assert_nothing_live(page_of(feedback))
    assert "md-script" in page_of(feedback) and "bold output" in page_of(feedback)  # the student's work, as text


def test_a_files_prefixed_javascript_link_is_not_live_after_the_template_strips_the_prefix(feedback):
    page = page_of(feedback)
    assert "alert(21)" not in page and "alert(28)" not in page  # (dropped, not merely renamed)
    assert_nothing_live(page)
    assert '<a href="notes.txt">an honest link</a>' in page  # the template's rewrite still happens


def test_the_exporter_drops_a_link_that_becomes_a_script_only_after_the_files_prefix_is_stripped():
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(FILES_LINKS))
    config = Config()
    config.HTMLExporter.template_name = "classic"
    page, _ = FeedbackExporter(config=config).from_notebook_node(nb)
    assert_nothing_live(page)
    hrefs = [a.get("href") for t, a in Page(page).elements if t == "a" and a.get("href")]
    assert "notes.txt" in hrefs and all(browser_scheme(h) in ("", "http", "https") for h in hrefs), hrefs


# More of what the issues' attackers tried: toggles, entity-encoded and nested schemes, SVG and MathML, forms.
MORE = ('<details open ontoggle="alert(40)"><summary>s</summary></details>'
        '<a href="&#106;avascript:alert(41)">l</a><a href="files/files/files/javascript:alert(42)">n</a>'
        '<a href="/files/files/javascript:alert(43)">m</a><img src="files/files/javascript:alert(44)" alt=i>'
        '[md](files/files/javascript:alert(45)) <svg><a xlink:href="javascript:alert(46)">s</a></svg>'
        '<math><mi xlink:href="javascript:alert(47)">x</mi></math><form action="javascript:alert(48)"><button '
        'formaction="javascript:alert(49)">b</button></form><a href="files/files/notes.txt">nested honest</a>'
        '&lt;script&gt; &amp;lt;b&amp;gt; <b>bold</b>\n')
CORPUS = (MARKDOWN, FILES_LINKS, HTML_OUTPUT, STUDENT_PAGE, MORE, *(v for o in hostile_outputs()
                                                                  for v in o["data"].values()))


@pytest.mark.parametrize("index", range(len(CORPUS)))
def test_cleaning_is_a_fixed_point_over_the_payload_corpus_and_leaves_it_inert(index):
    """Each cleaning run twice changes nothing the second time; and however many times a template strips the
    `files/` prefix afterwards (stock strip_files_prefix), nothing becomes live (`files/files/javascript:...` left
    `files/javascript:...` after one pass, live after a second strip)."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune
    from nbconvert.filters.strings import strip_files_prefix as stock_strip

    from autograder.commands import pageclean

    for text in (CORPUS[index], markdown2html_mistune(CORPUS[index])):
        for clean in (pageclean.clean_html, pageclean.strip_files_prefix, pageclean.defuse):
            once = clean(text)
            assert clean(once) == once, (clean.__name__, text[:80])
        page = pageclean.strip_files_prefix(pageclean.clean_html(text))
        for _ in range(4):
            page = stock_strip(page)
            assert_inert(page)


def test_cleaning_a_cleaned_notebook_changes_nothing():
    from autograder.commands import pageclean

    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(MARKDOWN + FILES_LINKS + MORE))
    code = nbformat.v4.new_code_cell("1", metadata={"nbgrader": {"grade_id": 'a"><script>alert(18)</script>',
                                                                 "solution": True, "grade": False}})
    code.outputs = [nbformat.from_dict(o) for o in hostile_outputs()]
    nb.cells += [code, nbformat.v4.new_raw_cell("<script>alert('raw')</script>" + MORE)]
    once = pageclean.clean_notebook(nb)
    assert pageclean.clean_notebook(once) == once


def test_a_students_own_html_is_never_copied_into_autograded_or_feedback_nor_linked_by_the_class_report(feedback):
    from autograder.commands import classpage

    for step in ("autograded", "feedback"):
        folder = feedback / step / "eve" / "self_attention"
        assert folder.is_dir() and not list(folder.glob("*.html")) or step == "feedback", list(folder.iterdir())
    pages = sorted(p.name for p in (feedback / "feedback" / "eve" / "self_attention").glob("*.html"))
    assert pages == ["01_scores.html"], pages  # (the one generate_feedback made; no notes.html, no 02_masks.html)
    assert (feedback / "submitted" / "eve" / "self_attention" / "02_masks.html").is_file()  # (left where it was)
    links = classpage.report_links(feedback / "autograder_reports" / "self_attention", feedback, "self_attention",
                                   ["eve"])
    assert links == {"eve": [("01_scores", "../../feedback/eve/self_attention/01_scores.html")]}


def test_nbgrader_feedback_still_shows_the_scores_and_the_graders_report(feedback):
    from autograder.foundation import spec

    feedback = page_of(feedback)

    for part in spec.assignment("self_attention").parts_of("01_scores"):
        assert f"Score: {float(part.points)} / {float(part.points)}" in feedback, part.id
    assert "[PASS]" in feedback or "PASS" in feedback


def test_the_course_configuration_uses_the_safe_exporter_for_feedback():
    from autograder import nbgrader_plugin

    config = Config()
    nbgrader_plugin.configure(config)
    assert config.GenerateFeedback.exporter_class == f"{FeedbackExporter.__module__}.{FeedbackExporter.__name__}"
