"""The student's report tables show every word of a message, whatever the terminal's width and the language."""
from __future__ import annotations

import io
import re

import pytest
from rich.cells import cell_len
from rich.console import Console

from autograder.commands import report
from autograder.foundation import i18n
from autograder.foundation.results import CheckResult, GradeResult, PartResult

# A Chinese message has no spaces to wrap at: rich cut such a cell with "…" in an 80-column terminal.
ZH = ("scaled_scores：分数没有缩放：请把点积除以 sqrt(d_k)（d_k = 每个头的维度），否则 softmax 会饱和；"
      "误差最大达到 3.2e+01，出现在第 2 个样本")
EN = ("scaled_scores: scores are not scaled: divide the dot products by sqrt(d_k) (d_k = the size of one head), "
      "else softmax saturates; off by up to 3.2e+01, in sample 2")


def _result(message: str, lang: str) -> GradeResult:
    check = CheckResult("scores are scaled by sqrt(d_k) before the softmax [no mask]", False, 0, 2, message)
    return GradeResult("workspace/self_attention/01_scores.ipynb", (PartResult("scaled_scores", 15, (check,)),),
                       lang=lang)


def _printed(show, result: GradeResult, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    show(result, console)
    return console.export_text()


def _from_column(line: str, start: int) -> str:
    """What a line shows from screen column `start` on (a CJK character takes two columns)."""
    index = 0
    while index < len(line) and cell_len(line[:index]) < start:
        index += 1
    return line[index:]


def _last_column(printed: str, heading: str) -> str:
    """The text of the table's last column ("what is wrong"), its wrapped lines joined without spaces."""
    lines = printed.splitlines()
    row = next(i for i, line in enumerate(lines) if heading in line)
    start = cell_len(lines[row][:lines[row].index(heading)])
    return re.sub(r"\s", "", "".join(_from_column(line, start) for line in lines[row + 2:]))


@pytest.mark.parametrize("message,lang", [(ZH, "zh"), (EN, "en")], ids=["zh", "en"])
@pytest.mark.parametrize("show", [report.render, report.brief], ids=["full report", "make grade's table"])
@pytest.mark.parametrize("width", [60, 80])
def test_a_failing_checks_message_is_shown_whole_and_never_cut_with_an_ellipsis(show, message, lang, width):
    printed = _printed(show, _result(message, lang), width)
    assert "…" not in printed, f"a cell was cut:\n{printed}"
    heading = i18n.message("what is wrong").render(lang)
    assert re.sub(r"\s", "", message) in _last_column(printed, heading), f"the message is not whole in:\n{printed}"


@pytest.mark.parametrize("width", [80, 100])
def test_a_parts_note_is_never_cut_inside_a_word_of_the_full_report(width):
    note = ("this part must compute with plain torch operations, but while it was graded your "
            "register_course_attention called transformers_library_function: the whole part earns nothing")
    part = PartResult("attention_interface", 20, (CheckResult("course_attention", False, 0, 4, "wrong"),), (note,))
    printed = _printed(report.render, GradeResult("workspace/real_models/04_interface.ipynb", (part,)), width)
    shown = printed.split()
    assert "register_course_attention" in shown and "transformers_library_function:" in shown, printed
