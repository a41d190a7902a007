"""Every malformed input to `python -m autograder grade` gets exit 2 with one line, or a graded report:
never a traceback, never a hang. A fixed corpus of the nastiest cases (tests/malformed_corpus.py),
the cases that need a user other than root, and a property test (hypothesis) that makes malformed
notebooks and folders of its own."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autograder.commands import document, resume
from autograder.foundation import i18n, spec
from autograder.grading import scan
from autograder.commands.cli import one_line
from autograder.foundation.extract import SubmissionError, extract

sys.path.insert(0, str(Path(__file__).resolve().parent))
from malformed_corpus import CORPUS, REPO, SOLVED, notebook, write_nb

TIMEOUT = 120


def contract(path: Path, grader=None) -> tuple[str, str]:
    """("exit 2", the line) or ("graded", the JSON document of the masks part), as the CLI's code path
    decides; anything else (an exception that is not SubmissionError) fails the test that calls it."""
    try:
        extract(path)
    except SubmissionError as exc:
        return "exit 2", one_line(str(exc))
    if grader is None:
        return "graded", ""
    return "graded", document.dumps(grader.grade(path, part_ids=["masks"], assignment=spec.DEFAULT))


# Graded to the end (a sandboxed worker each): the cases the issue found broken. The others are held
# to the contract up to the worker (extraction and the static scan), which is where they differ.
GRADED = {"solution_source_a_list_of_numbers", "nbgrader_metadata_null", "grade_id_a_list", "json_nested_100k_deep",
          "folder_with_a_link_to_dev_zero", "folder_with_a_fifo_named_ipynb", "folder_with_a_dangling_link"}


@pytest.fixture()
def folder():
    path = Path(tempfile.mkdtemp(prefix="autograder-malformed-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_each_nasty_case_gets_one_line_or_a_graded_report(case, folder, grader):
    path = CORPUS[case](folder)
    kind, text = contract(path, grader if case in GRADED else None)
    if kind == "exit 2":
        assert text and "\n" not in text and "Traceback" not in text
    elif case in GRADED:
        assert [p["id"] for p in json.loads(text)["parts"]] == ["masks"]
    else:
        _holds_the_contract(path)


def test_a_notebook_saved_with_a_utf8_bom_scores_as_without_it(folder, grader):
    plain = write_nb(folder, notebook())
    bom = folder / "bom" / "02_masks.ipynb"
    bom.parent.mkdir()
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    with_bom, without = grader.grade(bom), grader.grade(plain)
    masks = next(p for p in spec.DEFAULT.parts if p.id == "masks")
    assert [p.score for p in with_bom.parts] == [p.score for p in without.parts]
    assert next(p for p in with_bom.parts if p.id == "masks").score == masks.points


def test_a_fifo_or_a_device_in_a_folder_costs_only_its_own_parts_with_the_reason(folder, grader):
    write_nb(folder, notebook("01_scores"), "01_scores")
    os.mkfifo(folder / "02_masks.ipynb")
    os.symlink("/dev/zero", folder / "03_module.ipynb")
    result = grader.grade(folder)
    by_id = {p.id: p for p in result.parts}
    assert by_id["qkv_projection"].score == by_id["qkv_projection"].max_score
    assert by_id["masks"].score == 0 and "named pipe" in by_id["masks"].checks[0].message
    assert by_id["module"].score == 0 and "character device" in by_id["module"].checks[0].message


def test_the_command_line_keeps_its_contract_on_the_worst_cases(folder):
    """Through `python -m autograder grade`: a FIFO in a folder is graded (exit 0, one JSON document),
    a link loop and a .py of 100k nested signs exit 2 with one line."""
    for case, expected in (("folder_with_a_fifo_named_ipynb", 0), ("symlink_loop", 2),
                           ("py_of_100k_nested_unary_minus", 2)):
        sub = folder / case
        sub.mkdir()
        path = CORPUS[case](sub)
        proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(path), "--json"], cwd=REPO,
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert proc.returncode == expected, (case, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
        if expected == 2:
            assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: ")
        else:
            json.loads(proc.stdout)


NOBODY_SCRIPT = """
import json, sys
from autograder.commands.cli import one_line
from autograder.foundation.extract import SubmissionError, extract
out = {}
for path in sys.argv[1:]:
    try:
        e = extract(path)
        out[path] = ["graded", [None if s.error is None else str(s.error) for s in e.sources]]
    except SubmissionError as exc:
        out[path] = ["exit 2", one_line(str(exc))]
print(json.dumps(out))
"""


def test_files_and_folders_a_non_root_instructor_cannot_read_get_their_reason(folder):
    """As `nobody` (root reads everything): an unreadable notebook scores 0 with "permission denied",
    an unreadable folder exits 2 with one line, an unreadable notebook in a folder costs only its parts."""
    if os.getuid() != 0:
        pytest.skip("needs root to run the check as nobody")
    folder.chmod(0o755)
    alone = write_nb(folder, notebook())
    alone.chmod(0)
    closed = folder / "closed"
    closed.mkdir()
    write_nb(closed, notebook())
    closed.chmod(0)
    mixed = folder / "mixed"
    mixed.mkdir()
    write_nb(mixed, notebook("01_scores"), "01_scores")
    write_nb(mixed, notebook()).chmod(0)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": "/tmp"}
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                           NOBODY_SCRIPT, str(alone), str(closed), str(mixed)], capture_output=True, text=True,
                          env=env, cwd="/", timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out[str(alone)] == ["graded", ["02_masks.ipynb could not be read: permission denied"]]
    assert out[str(closed)][0] == "exit 2" and "permission denied" in out[str(closed)][1]
    assert out[str(mixed)] == ["graded", [None, "02_masks.ipynb could not be read: permission denied"]]


# --------------------------------------------------------------------------- the property test
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)
# Where a malformed value goes: a path of keys into the solved notebook (cells 0, 3 and the last).
WHERE = st.sampled_from([(), ("cells",), ("metadata",), ("nbformat",), ("cells", 0), ("cells", 3), ("cells", -1),
                         ("cells", 3, "source"), ("cells", 3, "metadata"), ("cells", 3, "metadata", "nbgrader"),
                         ("cells", 3, "metadata", "nbgrader", "solution"), ("cells", 3, "cell_type"),
                         ("cells", -1, "metadata", "nbgrader", "grade_id"), ("cells", -1, "metadata", "nbgrader", "grade"),
                         ("cells", 3, "source", 0)])
BASE = notebook()


def _put(nb, where, value):
    """nb with the value at `where`; unchanged where an earlier change removed the way there."""
    if not where:
        return value
    target = nb
    try:
        for key in where[:-1]:
            target = target[key]
        target[where[-1]] = value
    except (KeyError, IndexError, TypeError):
        pass
    return nb


@st.composite
def malformed_notebook_bytes(draw) -> bytes:
    nb = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(1, 3))):
        nb = _put(nb, draw(WHERE), draw(JSON)) if isinstance(nb, dict) else nb
    data = json.dumps(nb).encode()
    how = draw(st.sampled_from(["as is", "bom", "truncated", "prefix", "deep"]))
    if how == "bom":
        data = b"\xef\xbb\xbf" + data
    elif how == "truncated":
        data = data[: draw(st.integers(0, len(data)))]
    elif how == "prefix":
        data = draw(st.binary(max_size=8)) + data
    elif how == "deep":
        n = draw(st.integers(500, 50_000))
        data = b'{"cells": [' + b"[" * n + b"]" * n + b"]}"
    return data


ENTRY = st.sampled_from(["notebook", "good", "fifo", "dev_zero", "dangling", "loop", "folder", "text", "py"])
NAME = st.sampled_from(["01_scores", "02_masks", "03_module", "x", ".hidden", "a b", "ü"])


def _make_entry(folder: Path, kind: str, name: str, data: bytes) -> None:
    path = folder / (f"{name}.py" if kind == "py" else f"{name}.txt" if kind == "text" else f"{name}.ipynb")
    if path.exists() or path.is_symlink():
        return
    if kind in ("notebook", "text", "py"):
        path.write_bytes(data)
    elif kind == "good":
        path.write_bytes((SOLVED / "01_scores.ipynb").read_bytes())
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", path)
    elif kind == "dangling":
        os.symlink("nowhere", path)
    elif kind == "loop":
        os.symlink(path.name, path)
    else:
        path.mkdir()


PROPERTY = settings(derandomize=True, deadline=None, max_examples=60, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _holds_the_contract(path: Path) -> None:
    kind, text = contract(path)
    if kind == "exit 2":
        assert text and "\n" not in text
        return
    extracted = extract(path)
    for source in extracted.sources:
        assert all(isinstance(c, str) for c in source.cells)
        assert all(isinstance(n, (str, i18n.Message)) and str(n) for n in source.notes)
    scan.forbidden_in_source(extracted, spec.DEFAULT.parts)  # the trusted side's static look: no exception


@PROPERTY
@given(data=malformed_notebook_bytes())
def test_any_malformed_notebook_gets_one_line_or_its_code(data):
    with tempfile.TemporaryDirectory(prefix="autograder-prop-") as tmp:
        path = Path(tmp) / "02_masks.ipynb"
        path.write_bytes(data)
        _holds_the_contract(path)


@PROPERTY
@given(entries=st.lists(st.tuples(ENTRY, NAME, malformed_notebook_bytes()), max_size=5))
def test_any_folder_of_odd_entries_gets_one_line_or_its_code_and_a_fingerprint(entries):
    with tempfile.TemporaryDirectory(prefix="autograder-prop-") as tmp:
        folder = Path(tmp) / "submission"
        folder.mkdir()
        for kind, name, data in entries:
            _make_entry(folder, kind, name, data)
        _holds_the_contract(folder)
        assert len(resume.submission_hash(folder)) == 16  # grade-class's fingerprint never blocks or raises
        assert stat.S_ISDIR(folder.stat().st_mode)
