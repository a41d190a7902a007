"""Fixtures shared by the project's tests."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def private_tmp():
    """A temp dir of our own: pytest's tmp_path_factory dirs are pruned by other pytest runs on the machine."""
    path = Path(tempfile.mkdtemp(prefix="autograder-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
