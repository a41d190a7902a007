"""The edition (assignment, language, nbgrader id) is resolved once, at each entry point, and reaches everything
below it: grade-gpu of a Chinese edition reads and records that edition, and the GPU stage speaks its language."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autograder.commands import cli, gradebook
from autograder.foundation import spec
from autograder.foundation.extract import extract
from autograder.commands import gpucourse as gpu_course
from autograder.grading.gpu import stage as gpu_stage
from autograder.grading.gpu.config import GpuConfig
from autograder.foundation.results import PartResult

REPO = Path(__file__).resolve().parent.parent
CHINESE = re.compile(r"[\u4e00-\u9fff]")
ZH = spec.edition_id(spec.SELF_ATTENTION.id, "zh")
SMALL = GpuConfig(device="cpu", seq_lens=(256,), heads=2, head_dim=16, dtype="float32", chunk_size=32, rows=16,
                  warmup=64)


def notebook(folder: Path, source: str = "def nothing():\n    pass\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (folder / "05_long_sequence.ipynb").write_text(json.dumps(nb))
    return folder


class NoPool:
    def close(self) -> None:
        pass


# --------------------------------------------------------------------------- grade-gpu of the Chinese edition
def test_grade_gpu_of_the_chinese_edition_grades_its_own_folders_in_chinese(tmp_path, monkeypatch, capsys):
    course = tmp_path / "course"
    notebook(course / "submitted" / "alice" / ZH)
    notebook(course / "submitted" / "bob" / spec.SELF_ATTENTION.id)  # the English edition's: not this run's
    graded = []

    def fake_run(zygote, limits, extracted, edition, config=None, inputs=None):
        graded.append((Path(extracted.path), edition.id, edition.lang))
        return gpu_stage.StageRun(SMALL, [], part=PartResult(spec.GPU_PART.id, spec.GPU_PART.points, ()))

    monkeypatch.setattr(gpu_stage, "cuda_available", lambda: True)
    monkeypatch.setattr(gpu_stage, "run", fake_run)
    monkeypatch.setattr(gpu_course, "Zygote", NoPool)
    assert cli.main(["grade-gpu", str(course), "--assignment", ZH, "--no-gradebook"]) == 0, capsys.readouterr().err
    assert graded == [(course / "submitted" / "alice" / ZH, ZH, "zh")]


def test_grade_gpu_of_the_chinese_edition_records_extra_credit_in_that_editions_gradebook_assignment(tmp_path,
                                                                                                   monkeypatch):
    course = tmp_path / "course"
    course.mkdir()
    (course / "gradebook.db").touch()
    rows = [{"student_id": "alice", "ran": "True", "score": "7.5", "max_score": "10"}]
    csv_path = gpu_course.write_csv(rows, tmp_path / "long_sequence_gpu.csv")
    written = []

    def fake_set_extra_credit(location, assignment, notebook, cell, credits):
        written.append((assignment, notebook, cell, dict(credits)))
        return {sid: None for sid in credits}

    monkeypatch.setattr(gradebook, "set_extra_credit", fake_set_extra_credit)
    assert cli.main(["grade-gpu", str(course), "--assignment", ZH, "--from-csv", str(csv_path)]) == 0
    assert written == [(ZH, "05_long_sequence", "long_sequence", {"alice": "7.5"})]


# --------------------------------------------------------------------------- the GPU stage's language
def test_without_cuda_the_gpu_parts_note_is_in_the_language_asked_for(grader, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_stage, "cuda_available", lambda: False)
    sub = tmp_path / "sub.py"
    sub.write_text((REPO / "solutions" / "attention.py").read_text())
    english = grader.grade(sub, gpu=True, part_ids=["qkv_projection"]).gpu
    chinese = grader.grade(sub, gpu=True, part_ids=["qkv_projection"], lang="zh").gpu
    assert english.notes == (gpu_stage.NO_CUDA,)
    assert not chinese.ran and len(chinese.notes) == 1 and CHINESE.search(chinese.notes[0]), chinese.notes
    assert (chinese.score, chinese.max_score) == (english.score, english.max_score)


def test_the_gpu_stage_says_why_code_could_not_be_loaded_in_the_editions_language(grader, tmp_path):
    from autograder.foundation import edition

    sub = tmp_path / "sub.py"
    sub.write_text("raise RuntimeError('stop')\n")
    part = gpu_stage.run(grader.zygote, grader.limits, extract(sub), edition.resolve(ZH), config=SMALL).part
    assert part.score == 0 and any(CHINESE.search(n) for n in part.notes), part.notes


# --------------------------------------------------------------------------- the one rule
def test_an_editions_name_says_its_assignment_language_and_nbgrader_id():
    from autograder.foundation import edition

    zh = edition.resolve(ZH)
    assert (zh.assignment, zh.lang, zh.id) == (spec.SELF_ATTENTION, "zh", ZH)
    en = edition.resolve("generation")
    assert (en.assignment, en.lang, en.id) == (spec.GENERATION, "en", "generation")
    assert edition.resolve(None) == edition.Edition(spec.DEFAULT, "en") and edition.resolve(None).id == spec.DEFAULT.id
    with pytest.raises(spec.UnknownAssignment):
        edition.resolve("homework_7")


def test_the_language_asked_for_wins_else_any_other_than_english_the_names_or_notebooks_say():
    from autograder.foundation import edition

    assert edition.resolve(ZH, "en").lang == "en"  # --lang en: the Chinese edition's feedback in English
    assert edition.resolve(spec.DEFAULT.id, "zh").id == ZH
    assert edition.resolve("self_attention", notebooks="zh").lang == "zh"
    assert edition.resolve(None, folder=ZH).lang == "zh"  # a folder named as the edition is
    assert edition.resolve(None, folder="my_work").lang == "en"
    assert edition.resolve(None, folder="homework_7", default=spec.GENERATION).id == "generation"


def test_an_unknown_language_is_refused_with_one_line_naming_the_known_ones():
    from autograder.foundation import edition

    with pytest.raises(edition.UnknownLanguage, match=r"^unknown language 'fr': the course's languages are en, zh$"):
        edition.resolve(ZH, "fr")
