"""The copy check (autograder/foundation/copies.py) costs a class little: the released notebook a submission is
compared with is parsed once per process while it is unchanged, and read again once it changes."""
from __future__ import annotations

import json
import os
from pathlib import Path

from autograder.foundation import copies
from autograder.foundation.extract import read_notebook


def notebook(path: Path, code: str) -> Path:
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": "a", "metadata": {}, "execution_count": None, "outputs": [], "source": code}]}))
    return path


def test_the_released_notebook_is_parsed_once_for_every_submission_compared_with_it(tmp_path, monkeypatch):
    release = notebook(tmp_path / "01_scores.ipynb", "x = 1\n")
    parsed = []
    monkeypatch.setattr(copies, "read_notebook", lambda path, inside=None: parsed.append(path) or read_notebook(path))
    first = [copies.released_cells(release) for _ in range(50)]
    assert first[0] == read_notebook(release).cells and all(c == first[0] for c in first)
    assert len(parsed) == 1


def test_a_changed_released_notebook_is_read_again_and_an_unreadable_one_matches_nothing(tmp_path):
    release = notebook(tmp_path / "02_masks.ipynb", "y = 1\n")
    before = copies.released_cells(release)
    notebook(release, "y = 22222\n")
    os.utime(release, ns=(1, 1))  # (a new mtime even on a coarse clock)
    after = copies.released_cells(release)
    assert before != after and after == read_notebook(release).cells
    release.write_text("{ not json")
    assert copies.released_cells(release) is None
    assert copies.released_cells(tmp_path / "missing.ipynb") is None
