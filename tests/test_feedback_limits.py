"""A feedback page costs a bounded time and memory, whatever a student submits (issue 45, item 3).

A 10 MB written answer took 217 s and 2.4 GB in `nbgrader generate_feedback`, and nothing stopped a page that
took longer. Claims: each cell and output is cut to what a page shows, with a note in the notebook's language
(pagecap.py); through `nbgrader generate_feedback` on the course's configuration a 10 MB answer and a 10 MB
output make a page in seconds and a few hundred MB; a notebook whose page takes longer than the deadline
(lowered here by configuration) gets a short page that says why, and the next student's page is made.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time

import nbformat
import pytest

from autograder.commands import pagecap

BIG = 10_000_000
WORDS = ("attention", "softmax", "*scaled*", "`q.k`", "weights", "grow", "with", "d_k", "\n\n")


def prose(size: int, seed: int) -> str:
    """`size` characters of markdown, the same for a seed."""
    rng = random.Random(seed)
    chunk = " ".join(rng.choice(WORDS) for _ in range(2000))
    return (chunk * (size // len(chunk) + 1))[:size]


@pytest.mark.parametrize(("lang", "said"), [("en", "This is cut here:"), ("zh", "内容在此处截断")])
def test_a_cell_and_an_output_past_the_limit_are_cut_with_a_note_in_the_notebooks_language(lang, said):
    nb = nbformat.v4.new_notebook(metadata={"course": {"lang": lang}})
    code = nbformat.v4.new_code_cell(prose(pagecap.PIECE_LIMIT + 5, seed=1))
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * (pagecap.PIECE_LIMIT + 7))]
    nb.cells += [nbformat.v4.new_markdown_cell(prose(pagecap.PIECE_LIMIT + 3, seed=2)), code,
                 nbformat.v4.new_markdown_cell("short")]
    capped = pagecap.cap_notebook(nb)
    markdown, code, short = capped.cells
    assert said in markdown.source and "3" in markdown.source.split(said)[1]
    assert said in code.source and said in code.outputs[0]["text"] and "7" in code.outputs[0]["text"].split(said)[1]
    assert len(markdown.source) < pagecap.PIECE_LIMIT + 400 and short.source == "short"


def peak_rss_command(argv: list[str], seconds: float) -> list[str]:
    """`argv` run by a Python that prints, last, the largest resident size of any process of it (KiB), and
    kills it past `seconds`."""
    return [sys.executable, "-c", "import resource, subprocess, sys; "
            f"rc = subprocess.run(sys.argv[1:], timeout={seconds}).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)", *argv]


def autograded(root, student: str):
    return root / "autograded" / student / "self_attention" / "01_scores.ipynb"


def rewrite(path, nb: dict) -> None:
    """Write over nbgrader's autograded copy, which it leaves read-only (only root writes it as it is)."""
    path.chmod(0o644)
    path.write_text(json.dumps(nb))


@pytest.fixture(scope="module")
def course(private_tmp):
    """a_huge: a 10 MB written answer, and a 10 MB output after autograde; b_slow: 150 cells each under the cut,
    a page that takes far longer than 6 s to render; c_next: a correct notebook."""
    from examples.make_class import nbgrader, solved
    from tests.runcache import released_course

    root = released_course(private_tmp / "limits" / "course", ("self_attention",))
    for student in ("a_huge", "b_slow", "c_next"):
        nb = solved(root, "01_scores")
        folder = root / "submitted" / student / "self_attention"
        folder.mkdir(parents=True)
        (folder / "01_scores.ipynb").write_text(json.dumps(nb))
        (folder / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
    nbgrader(root, "autograde", "self_attention")
    huge = json.loads(autograded(root, "a_huge").read_text())
    for cell in huge["cells"]:
        if (cell["metadata"].get("nbgrader") or {}).get("grade_id") == "written_scale_prediction":
            cell["source"] = prose(BIG, seed=3)  # (as the student's answer reaches generate_feedback)
    huge["cells"].append({"cell_type": "code", "id": "huge-output", "metadata": {}, "execution_count": 1,
                          "source": "print(big)", "outputs": [{"output_type": "stream", "name": "stdout",
                                                               "text": "0123456789" * (BIG // 10)}]})
    rewrite(autograded(root, "a_huge"), huge)
    slow = json.loads(autograded(root, "b_slow").read_text())
    slow["cells"] += [{"cell_type": "markdown", "id": f"slow-{i}", "metadata": {},
                       "source": prose(pagecap.PIECE_LIMIT - 100, seed=10 + i)} for i in range(150)]
    rewrite(autograded(root, "b_slow"), slow)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def page(course, student: str) -> str:
    return (course / "feedback" / student / "self_attention" / "01_scores.html").read_text(encoding="utf-8")


def test_a_10_mb_answer_and_a_10_mb_output_make_a_page_in_seconds_and_bounded_memory_with_the_cut_noted(course):
    from examples.make_class import nbgrader_command, nbgrader_env

    started = time.monotonic()
    done = subprocess.run(peak_rss_command(nbgrader_command(course, "generate_feedback", "self_attention",
                                                            "--student=a_huge"), seconds=150),
                          cwd=course, env=nbgrader_env(), capture_output=True, text=True, timeout=180)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-2000:]
    peak_mib = int(done.stdout.split()[-1]) / 1024
    text = page(course, "a_huge")
    assert seconds < 60 and peak_mib < 1024, (seconds, peak_mib)  # (at aec58ea: 217 s and 2.4 GB for the answer)
    assert text.count("This is cut here:") >= 2 and "9980000 more characters" in text  # the answer, the output
    assert "Feedback not made" not in text and len(text) < 2_000_000


def test_a_page_past_the_deadline_says_why_and_the_next_students_page_is_made(course):
    from examples.make_class import nbgrader

    done = nbgrader(course, "generate_feedback", "self_attention", "--force", "--FeedbackExporter.page_seconds=6",
                    "--student=[bc]_*", timeout=300)  # b_slow, then c_next (a_huge's page: the test above)
    assert done.returncode == 0
    slow = page(course, "b_slow")
    assert "This page was not made: rendering the notebook took longer than 6 seconds." in slow
    assert "default-src 'none'; script-src 'none'" in slow and "attention" not in slow.split("</head>")[1]
    assert "Score:" in page(course, "c_next") and "Feedback not made" not in page(course, "c_next")
