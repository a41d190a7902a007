"""A feedback page (autograder/commands/feedbackpage.py) opened in headless Chromium: the scripts a student put
in a markdown cell, a raw cell and an output do not run. The same notebook through nbconvert's stock
exporter runs them (the payloads are live, so the check can fail). Screenshot:
build/browser-test/feedback_page.png. About 10 s.

Alone: .venv/bin/python -m pytest -q tests/browser/test_feedback_page.py
"""
from __future__ import annotations

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from traitlets.config import Config

from autograder.commands.feedbackpage import FeedbackExporter


def mark(name: str) -> str:
    """JavaScript that records that the payload `name` ran (in the page, or from a frame inside it)."""
    return f"(window.top||window).document.documentElement.setAttribute('data-ran-{name}','1')"


def notebook():
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(
        f"<script>{mark('script')}</script>\n\n<img src=x onerror=\"{mark('img')}\">\n\n"
        f"<svg onload=\"{mark('svg')}\"><circle r=\"4\"/></svg>\n\n"
        f"<iframe srcdoc=\"<script>{mark('iframe')}</script>\"></iframe>\n\nthe student's text"))
    code = nbformat.v4.new_code_cell("show()")
    code.outputs = [nbformat.from_dict({"output_type": "display_data", "metadata": {}, "data": {
        "text/html": f"<img src=x onerror=\"{mark('output')}\"><b>an output</b>", "text/plain": "x"}})]
    nb.cells += [code, nbformat.v4.new_raw_cell(f"<script>{mark('raw')}</script>")]
    return nb


def ran(chromium, path) -> list[str]:
    chromium.get(path.as_uri())
    chromium.execute_script("return 0")  # (the page has loaded; its onload and onerror handlers have had their turn)
    return sorted(a for a in chromium.execute_script(
        "return Array.from(document.documentElement.attributes).map(a => a.name)") if a.startswith("data-ran-"))


@pytest.mark.parametrize("exporter", ["stock", "feedback"])
def test_a_students_scripts_run_in_the_stock_page_and_not_in_the_feedback_page(chromium, private_tmp, artifacts,
                                                                               exporter):
    config = Config()
    config.HTMLExporter.template_name = "classic"
    cls = FeedbackExporter if exporter == "feedback" else HTMLExporter
    page, _ = cls(config=config).from_notebook_node(notebook())
    path = private_tmp / f"{exporter}.html"
    path.write_text(page, encoding="utf-8")
    found = ran(chromium, path)
    if exporter == "stock":
        assert {"data-ran-script", "data-ran-img", "data-ran-output"} <= set(found), found
    else:
        assert found == [], f"a student's script ran in the feedback page: {found}"
        assert "the student's text" in chromium.find_element("tag name", "body").text
        assert "an output" in chromium.find_element("tag name", "body").text
        chromium.save_screenshot(str(artifacts / "feedback_page.png"))
