"""A corpus of real implementations, graded: faithful public code earns full marks, and every difference is named.

Each file of tests/real_code/ adapts one public implementation (nanoGPT, minGPT, the Annotated Transformer,
d2l, timm, Hugging Face's Llama, Meta's Llama 3, nanochat, transformers 4.10's GPT-2, Meta's Llama 2) to the course contract: the math is the source's,
only names, argument order, mask convention and shapes are adapted (each adaptation marked ADAPTED), and its
header records the repository, file and commit. A file provides some of the API names of some parts; the
reference solution provides the rest of its assignment, and only the parts the file covers are graded. Where the
source follows the contract the part scores full marks; where it differs, the part loses points and one of its
messages names the difference (asserted on the message's words, never on a score total).

    .venv/bin/python tests/test_real_code.py    # grade the corpus and print its table
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "real_code"
REFERENCES = {"self_attention": ROOT / "solutions" / "attention.py", "generation": ROOT / "solutions" / "generation.py",
              "real_models": ROOT / "solutions" / "real_models.py"}


@dataclass(frozen=True)
class Source:
    file: str  # in tests/real_code/
    assignment: str
    full: tuple[str, ...] = ()  # parts where the source follows the contract: full marks
    differs: tuple[tuple[str, str], ...] = ()  # (part, words a message of that part must hold): points taken
    note: str = ""  # words a note of the (full-marks) parts must hold, e.g. a forbidden name that never ran

    @property
    def parts(self) -> tuple[str, ...]:
        return self.full + tuple(part for part, _ in self.differs)


SOURCES = (
    Source("nanogpt.py", "self_attention", full=("multihead",), note="flagged for your instructor's review"),
    Source("mingpt.py", "self_attention", full=("multihead",)),
    Source("timm_attention.py", "self_attention", full=("multihead",), note="flagged for your instructor's review"),
    Source("annotated_transformer.py", "self_attention", full=("scaled_scores", "multihead"),
           differs=(("masks", "the course's convention is -inf"),)),
    Source("d2l.py", "self_attention", differs=(("scaled_scores", "torch.bmm (d2l's DotProductAttention) takes 3-D tensors only"),
                                                ("masks", "the course's convention is -inf"))),
    Source("annotated_transformer_generation.py", "generation", full=("positions", "cross_attention")),
    Source("hf_llama.py", "generation", differs=(("positions", "the half-split pairing"),
                                                 ("kv_cache", "is_causal = q_len > 1"))),
    Source("llama3.py", "generation", full=("kv_cache",), differs=(("positions", "base 500000"),)),
    Source("nanochat.py", "generation", differs=(
        ("positions", "the half-split pairing (x[i], x[i + head_dim/2]) of rotate_half code, where the contract pairs "
                      "neighbours (x[2i], x[2i + 1]), as in x[..., 0::2] with x[..., 1::2]; the other rotation "
                      "direction"),)),
    # issue 53: the library's own older code, reading the module's attributes and config as its authors did
    Source("hf_gpt2_410.py", "real_models", full=("gpt2",)),
    Source("meta_llama.py", "real_models", full=("llama",)),
)


def submission(source: Source, folder: Path) -> Path:
    """The reference of the source's assignment with the source's definitions after it (they take its place)."""
    reference = REFERENCES[source.assignment].read_text(encoding="utf-8")
    adapted = (CORPUS / source.file).read_text(encoding="utf-8")
    path = folder / source.file
    path.write_text(f"{reference}\n\n# ---- tests/real_code/{source.file} ----\n{adapted}", encoding="utf-8")
    return path


def grade(grader, source: Source, folder: Path):
    from autograder.foundation import spec

    return grader.grade(submission(source, folder), part_ids=list(source.parts),
                        assignment=spec.assignment(source.assignment))


def said(part) -> list[str]:
    return [c.message for c in part.checks if not c.passed] + list(part.notes)


def test_every_file_of_the_corpus_is_graded_and_records_its_source():
    """each file names its repository, file and commit, and each is in SOURCES"""
    files = {p.name for p in CORPUS.glob("*.py")}
    assert files == {s.file for s in SOURCES}
    for name in files:
        head = (CORPUS / name).read_text(encoding="utf-8")[:1200]
        assert "github.com/" in head and "commit " in head and "License" in head and "ADAPTED" in head, name
    assert {s.assignment for s in SOURCES} == set(REFERENCES) and len(SOURCES) >= 8


@pytest.mark.parametrize("source", SOURCES, ids=[s.file for s in SOURCES])
def test_real_code_scores_full_marks_where_faithful_and_names_each_difference(grader, private_tmp, source):
    result = grade(grader, source, private_tmp)
    for part_id in source.full:
        part = result.part(part_id)
        failed = [(c.name, c.message) for c in part.checks if not c.passed]
        assert part.score == pytest.approx(part.max_score), (source.file, part_id, failed)
    for part_id, words in source.differs:
        part = result.part(part_id)
        assert part.score < part.max_score, (source.file, part_id)
        assert any(words in message for message in said(part)), (source.file, part_id, said(part))
    if source.note:
        notes = [n for p in source.full for n in result.part(p).notes]
        assert any(source.note in n for n in notes), (source.file, notes)


def table() -> str:
    """source | parts | score | the message where points were taken (markdown), graded now."""
    import tempfile

    from autograder.grading.grade import Grader

    rows = ["| source | parts | score | where points were taken |", "|---|---|---|---|"]
    with Grader() as grader, tempfile.TemporaryDirectory() as folder:
        for source in SOURCES:
            result = grade(grader, source, Path(folder))
            scores = ", ".join(f"{p.id} {p.score:.3g}/{p.max_score:.3g}" for p in result.parts)
            taken = "; ".join(next(iter(said(p)), "")[:160] for p in result.parts if p.score < p.max_score)
            rows.append(f"| {source.file} | {', '.join(source.parts)} | {scores} | {taken or '-'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(table())
