"""`python -m autograder grade NOTEBOOK.ipynb` (issue 47): one notebook of an assignment named alone grades only
the parts it owns. The JSON keeps the course contract's form (every part, max_score 100), the parts of other
notebooks at 0 with one check that says where they are graded; the readable report shows only the notebook's
own parts; a pasted copy of another part's function is not graded as that part, and the note names its file."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from autograder.foundation import spec

SOLVED = Path(__file__).resolve().parent.parent / "solutions" / "notebooks"
WRONG_ROPE = ("\n\n_right_rope = apply_rope\n\n\ndef apply_rope(x, positions, base=10000.0):\n"
              "    return _right_rope(x, positions, base) * 1.5\n")


def run_cli(args, grader, monkeypatch, capfd) -> tuple[int, str]:
    """The CLI's own code path in this process, grading with the session's warm grader."""
    from autograder.commands import cli
    from autograder.grading import grade as grade_module

    def warm_grade(submission, gpu=False, limits=None, assignment=None, lang=None, part_ids=None):
        return grader.grade(submission, gpu=gpu, part_ids=part_ids, assignment=assignment, lang=lang)

    monkeypatch.setattr(grade_module, "grade", warm_grade)
    capfd.readouterr()
    status = cli.main(["grade", *map(str, args)])
    return status, capfd.readouterr().out


def decoder_with_wrong_rope(folder: Path) -> Path:
    """The solved 04_decoder.ipynb in `folder`, its pasted apply_rope wrong (every result 1.5 times too large)."""
    path = folder / "04_decoder.ipynb"
    shutil.copy(SOLVED / "generation" / "04_decoder.ipynb", path)
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and "def apply_rope" in "".join(c["source"]))
    cell["source"] = "".join(cell["source"]) + WRONG_ROPE
    path.write_text(json.dumps(nb))
    return path


def graded_alone(path, grader, monkeypatch, capfd) -> dict:
    status, out = run_cli([path, "--json"], grader, monkeypatch, capfd)
    assert status == 0
    return json.loads(out)


@pytest.mark.parametrize("assignment, notebook", [("self_attention", "01_scores"), ("generation", "01_positions"),
                                                  ("efficient", "03_linear"), ("real_models", "03_llama"),
                                                  ("real_models", "04_interface"),
                                                  ("serving", "05_continuous_batching")])
def test_one_solved_notebook_grades_exactly_its_own_parts_at_full_marks(assignment, notebook, grader, monkeypatch,
                                                                       capfd):
    folder = SOLVED if assignment == "self_attention" else SOLVED / assignment
    doc = graded_alone(folder / f"{notebook}.ipynb", grader, monkeypatch, capfd)
    owned = [p.id for p in spec.assignment(assignment).parts_of(notebook)]
    assert doc["only"] == owned
    assert [p["id"] for p in doc["parts"]] == [p.id for p in spec.assignment(assignment).parts]  # the contract's form
    for part in doc["parts"]:
        if part["id"] in owned:
            assert part["score"] == part["max_score"] > 0, part
        else:
            assert part["score"] == 0 and [c["name"] for c in part["checks"]] == ["graded_elsewhere"], part
    assert doc["score"] == sum(p.points for p in spec.assignment(assignment).parts_of(notebook))
    assert f"graded only the parts of {notebook}.ipynb: {', '.join(owned)}" in doc["notes"][0]


def test_the_readable_report_of_one_notebook_shows_only_its_parts_and_their_score(grader, monkeypatch, capfd):
    status, out = run_cli([SOLVED / "01_scores.ipynb"], grader, monkeypatch, capfd)
    assert status == 0
    assert "score 25 / 25" in out and "qkv_projection" in out and "scaled_scores" in out
    assert not any(other in out for other in ("masks", "module", "multihead", "long_sequence")), out
    assert "grade the folder for the whole assignment" in out


def test_a_wrong_pasted_copy_in_04_decoder_is_no_part_and_its_note_names_the_notebook(tmp_path, grader, monkeypatch,
                                                                                       capfd):
    """04_decoder's own apply_rope, pasted and wrong: DecoderAttention keeps full marks (the grader's stands in),
    positions is not graded from the copy, and the note says the copy is in 04_decoder.ipynb"""
    doc = graded_alone(decoder_with_wrong_rope(tmp_path), grader, monkeypatch, capfd)
    assert doc["only"] == ["decoder"]
    parts = {p["id"]: p for p in doc["parts"]}
    assert parts["decoder"]["score"] == parts["decoder"]["max_score"]
    assert [c["name"] for c in parts["positions"]["checks"]] == ["graded_elsewhere"]
    assert "01_positions.ipynb" in parts["positions"]["checks"][0]["message"]
    notes = parts["decoder"].get("notes", [])
    assert any("your copies in 04_decoder.ipynb" in n and "apply_rope" in n for n in notes), notes
    assert not any("their own parts say why" in n for n in notes), notes


def test_05_flash_backwards_pasted_flash_attention_is_not_graded_as_the_flash_part(grader, monkeypatch, capfd):
    """The solved 05_flash_backward holds its own copy of flash_attention (the flash part's): named alone, the
    notebook earns flash_backward's 20 points and nothing for flash, whose check names 01_flash.ipynb"""
    doc = graded_alone(SOLVED / "efficient" / "05_flash_backward.ipynb", grader, monkeypatch, capfd)
    parts = {p["id"]: p for p in doc["parts"]}
    assert doc["only"] == ["flash_backward"] and doc["score"] == parts["flash_backward"]["max_score"] == 20
    assert parts["flash"]["score"] == 0
    assert [c["name"] for c in parts["flash"]["checks"]] == ["graded_elsewhere"]
    assert "01_flash.ipynb" in parts["flash"]["checks"][0]["message"]


def test_in_a_folder_the_note_about_04_decoders_wrong_copy_names_04_decoder_not_the_parts_that_show_a_tick(
        tmp_path, grader):
    """The whole generation folder, 01_positions right and 04_decoder's pasted apply_rope wrong: the scores are the
    folder's as ever (positions and decoder full), and decoder's note sends the student to 04_decoder.ipynb"""
    folder = tmp_path / "generation"
    folder.mkdir()
    for notebook in ("01_positions", "02_kv_cache", "03_cross_attention"):
        shutil.copy(SOLVED / "generation" / f"{notebook}.ipynb", folder)
    decoder_with_wrong_rope(folder)
    result = grader.grade(str(folder), assignment=spec.assignment("generation"))
    assert result.score == 100 and [p.id for p in result.parts] == [p.id for p in spec.assignment("generation").parts]
    notes = result.part("decoder").notes
    assert any("your copies in 04_decoder.ipynb" in n and "apply_rope" in n for n in notes), notes
    assert not any("their own parts say why" in n for n in notes), notes
