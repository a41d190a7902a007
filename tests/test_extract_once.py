"""A submission is read once, at the command's entry point: `grade` validates it, recognises its assignment
and grades it from that one extraction (extract.Extracted), never from the files again."""
from __future__ import annotations

import json
from pathlib import Path

from autograder.commands import cli
from autograder.foundation import extract, spec
from autograder.grading.grade import Grader

REPO = Path(__file__).resolve().parent.parent


def counting_reads(monkeypatch) -> list[str]:
    """Every file extract.py reads from here on, by name."""
    reads, read = [], extract.read_bytes

    def counted(path, *args, **kwargs):
        reads.append(Path(path).name)
        return read(path, *args, **kwargs)

    monkeypatch.setattr(extract, "read_bytes", counted)
    return reads


def test_grade_reads_each_file_of_a_notebook_folder_once(private_tmp, monkeypatch, capsys):
    """Two notebooks that cannot be read as JSON: graded 0 with the reason, without a worker, each read once."""
    folder = private_tmp / "self_attention"
    folder.mkdir()
    for name in ("01_scores.ipynb", "02_masks.ipynb"):
        (folder / name).write_text("{ not json", encoding="utf-8")
    monkeypatch.setattr("autograder.sandbox.prestart.prestart", lambda: None)
    monkeypatch.setattr(Grader, "warm", lambda self: self)  # (no worker pool: nothing in it can run)
    reads = counting_reads(monkeypatch)
    assert cli.main(["grade", str(folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["submission"] == str(folder) and doc["score"] == 0
    assert sorted(reads) == ["01_scores.ipynb", "02_masks.ipynb"]


def test_a_notebook_of_another_assignment_is_read_once_and_named_when_graded_against_this_one(monkeypatch):
    """recognise and the other-assignment note both come from the graded cells that extract() found."""
    reads = counting_reads(monkeypatch)
    kv_cache = extract.extract(REPO / "assignments" / "generation" / "02_kv_cache.ipynb")
    assert extract.recognise(kv_cache) is spec.GENERATION
    [source] = kv_cache.sources
    assert not any("--assignment generation" in str(n) for n in source.notes_against(spec.GENERATION))
    assert any("--assignment generation" in str(n) for n in source.notes_against(spec.DEFAULT))
    assert reads == ["02_kv_cache.ipynb"]
