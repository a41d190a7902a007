"""Broken, not hostile: every mistake gets a clear message in its part, grading finishes, the CLI
exits 0; only a path that is no submission at all exits 2 with one line on stderr."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
import _kit as kit

from autograder.foundation.spec import PARTS

CHEAP = ["scaled_scores", "masks"]


def notebook(cells, grade_ids=None) -> str:
    """A minimal nbgrader notebook: one solution cell per code string (no nbformat import needed)."""
    out = []
    for i, code in enumerate(cells):
        meta = {"nbgrader": {"solution": True, "grade": False, "grade_id": f"cell_{i}", "locked": False}}
        out.append({"cell_type": "code", "metadata": meta, "source": code, "outputs": [], "execution_count": None})
    for gid in grade_ids or ():
        meta = {"nbgrader": {"solution": False, "grade": True, "grade_id": gid, "points": 1, "locked": True}}
        out.append({"cell_type": "code", "metadata": meta, "source": "", "outputs": [], "execution_count": None})
    return json.dumps({"cells": out, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def text_of(result) -> str:
    return "\n".join([c.message for p in result.parts for c in p.checks]
                     + [n for p in result.parts for n in p.notes] + list(result.notes))


def cli_grade(path, monkeypatch, capfd, part_ids=CHEAP) -> tuple[int, dict]:
    """The CLI's own code path, with the shared warm grader."""
    from autograder.commands import cli
    from autograder.grading import grade as grade_module

    monkeypatch.setattr(grade_module, "grade", lambda p, gpu=False, limits=None, assignment=None, lang=None,
                        part_ids=None, cheap=part_ids: kit.grade(p, part_ids=part_ids or cheap)[0])
    capfd.readouterr()
    status = cli.main(["grade", str(path), "--json"])
    out, _ = capfd.readouterr()
    return status, json.loads(out)


def test_corrupt_notebook_scores_zero_with_a_reason_and_exit_0(tmp_path, monkeypatch, capfd):
    path = tmp_path / "01_scores.ipynb"
    path.write_text('{"cells": [ {"cell_type": "code", "sour')
    status, doc = cli_grade(path, monkeypatch, capfd)
    assert status == 0 and doc["score"] == 0
    graded = [part for part in doc["parts"] if part["id"] in doc["only"]]  # 01_scores named alone: its own parts
    assert [part["id"] for part in graded] == ["qkv_projection", "scaled_scores"]
    for part in graded:
        assert "could not be read as a notebook" in part["checks"][0]["message"], part


def test_notebook_of_another_assignment_is_named_as_such(tmp_path, monkeypatch, capfd):
    path = tmp_path / "homework3.ipynb"
    path.write_text(notebook(["def fizzbuzz(n):\n    return n\n"], grade_ids=["fizzbuzz_tests"]))
    status, doc = cli_grade(path, monkeypatch, capfd)
    assert status == 0 and doc["score"] == 0
    assert any("another assignment" in n for n in doc.get("notes", [])), doc.get("notes")
    assert "scaled_scores is not defined in your submission" in json.dumps(doc)


def test_syntax_error_is_located_and_the_rest_still_graded(tmp_path):
    code = kit.REFERENCE.replace("def attend(", "def attend(:\n    pass\ndef _unused(", 1)
    path = tmp_path / "syntax.py"
    path.write_text(code)
    result, _ = kit.grade(path, part_ids=CHEAP)
    text = text_of(result)
    assert "SyntaxError" in text and "line" in text, text
    assert result.part("masks").score == result.part("masks").max_score
    assert result.part("scaled_scores").score < result.part("scaled_scores").max_score


def test_missing_names_say_which_names_are_missing(tmp_path):
    path = tmp_path / "partial.py"
    path.write_text("import torch\n\ndef scaled_scores(Q, K):\n    return Q @ K.transpose(-2, -1) / Q.shape[-1] ** 0.5\n")
    result, _ = kit.grade(path, part_ids=CHEAP)
    assert "missing from your submission: padding_mask, causal_mask, apply_padding_mask, apply_causal_mask" in \
        result.part("masks").notes
    assert "attend is not defined in your submission" in text_of(result)
    assert result.part("masks").score == 0


WRONG = '''
def scaled_scores(Q, K):
    return (Q @ K.transpose(-2, -1)).to("meta")              # a device with no values
def attention_weights(scores):
    return torch.softmax(scores, -1).double()                 # wrong dtype
def attend(weights, V):
    return [1, 2]                                             # wrong type
def padding_mask(lengths, seq_len):
    import sys, warnings
    warnings.warn("careful!")                                 # noise on stderr: harmless
    print("debugging", file=sys.stderr)
    return torch.arange(seq_len)[None, :] < lengths[:, None]
def causal_mask(seq_len):
    return torch.full((seq_len, seq_len), float("nan"))      # NaN (and not a bool mask)
def apply_causal_mask(scores):
    return scores.transpose(-2, -1)                           # right shape only when square
def apply_padding_mask(scores, mask):
    return scores[..., :1]                                    # wrong shape
'''


@pytest.fixture(scope="module")
def wrong(tmp_path_factory):
    path = tmp_path_factory.mktemp("wrong") / "wrong.py"
    path.write_text(WRONG)
    result, seconds = kit.grade(path, part_ids=CHEAP)
    return result


def _messages(result, part, function):
    return [c.message for c in result.part(part).checks if not c.passed and function in c.message]


@pytest.mark.parametrize("part,function,words", [
    ("scaled_scores", "scaled_scores", ("meta",)),
    ("scaled_scores", "attention_weights", ("dtype", "float64")),
    ("scaled_scores", "attend", ("torch.Tensor", "list")),
    ("masks", "causal_mask", ("bool",)),
    ("masks", "apply_padding_mask", ("shape",)),
])
def test_wrong_results_fail_with_a_message_naming_function_and_mistake(wrong, part, function, words):
    messages = _messages(wrong, part, function)
    assert messages, [c.message for c in wrong.part(part).checks]
    assert any(all(w in m for w in words) for m in messages), messages


def test_warnings_and_stderr_noise_cost_nothing(wrong):
    passed = [c for c in wrong.part("masks").checks if c.passed]
    assert any("padding_mask" in c.name for c in passed), wrong.part("masks").checks


def test_nan_outputs_earn_nothing(tmp_path):
    path = tmp_path / "nan.py"
    path.write_text(kit.REFERENCE + "\n\ndef attend(weights, V):\n    return (weights @ V) * float('nan')\n")
    result, _ = kit.grade(path, part_ids=["scaled_scores"])
    failed = [c for c in result.part("scaled_scores").checks if not c.passed]
    assert failed and all("attend" in c.name or "attend" in c.message for c in failed), failed


def test_folder_with_stray_files_grades_its_notebooks_and_notes_the_rest(tmp_path, monkeypatch, capfd):
    folder = tmp_path / "alice"
    (folder / "data").mkdir(parents=True)
    (folder / "notes.txt").write_text("hello")
    (folder / "helper.py").write_text("raise SystemExit")
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / "01_scores.ipynb").write_text(notebook([kit.REFERENCE]))
    status, doc = cli_grade(folder, monkeypatch, capfd)
    assert status == 0
    notes = " ".join(doc.get("notes", []))
    assert "notes.txt" in notes and "helper.py" in notes and "data/" in notes, notes
    assert doc["score"] == sum(p.points for p in PARTS if p.id in CHEAP)


def test_paths_that_are_no_submission_exit_2_with_one_line(tmp_path):
    (tmp_path / "essay.txt").write_text("not code")
    (tmp_path / "empty").mkdir()
    cases = [tmp_path / "does-not-exist.ipynb", tmp_path / "essay.txt", tmp_path / "empty"]  # one process each, in parallel
    env = {**os.environ, "PYTHONPATH": str(kit.REPO)}
    procs = [subprocess.Popen([sys.executable, "-m", "autograder", "grade", str(c), "--json"], cwd=kit.REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for c in cases]
    for case, proc in zip(cases, procs):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (case, err)
        assert out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and case.name in lines[0], err


def test_a_cell_that_raised_is_named_by_its_place_in_the_notebook_not_among_solution_cells(tmp_path):
    """The student counts every cell from the top (markdown included): the failing code cell here is the fifth
    cell of the notebook and the second solution cell, and the report must say 5."""
    doc = json.loads(notebook([kit.REFERENCE, "raise ValueError('my own mistake')"]))
    prose = {"cell_type": "markdown", "metadata": {}, "source": "text"}
    doc["cells"] = [prose, prose, doc["cells"][0], prose, doc["cells"][1]]
    path = tmp_path / "01_scores.ipynb"
    path.write_text(json.dumps(doc))
    result, _ = kit.grade(path, part_ids=CHEAP)
    text = text_of(result)
    assert "cell 5 raised ValueError" in text, text
    assert "cell 2 " not in text, text
