"""benchmarks/run.py --compare REV (benchmarks/compare.py): the two sides alternate, each figure is the median
run's, and REV's files are REV's as committed."""
from __future__ import annotations

import subprocess
from pathlib import Path

from benchmarks import compare

REPO = Path(__file__).resolve().parent.parent


def fake_run(wall: float, tree: float, largest: float, rc: int = 0) -> dict:
    return {"wall": wall, "tree_mib": tree, "largest_mib": largest, "rc": rc}


def test_compare_alternates_the_sides_so_that_a_change_of_load_falls_on_both(capsys):
    order = []
    walls = iter([3.0, 1.0, 2.0, 5.0, 4.0, 6.0])

    def job(name, tree):
        order.append(name)
        return fake_run(next(walls), 100.0, 50.0)

    result = compare.alternate({"this": Path("a"), "other": Path("b")}, 3, job)
    assert order == ["this", "other", "other", "this", "this", "other"]
    # this: 3.0, 5.0, 4.0 -> median 4.0; other: 1.0, 2.0, 6.0 -> median 2.0
    assert result["this"]["wall"] == 4.0 and result["other"]["wall"] == 2.0
    assert result["this"]["each"] == [3.0, 5.0, 4.0]


def test_a_flipped_size_is_begun_by_the_other_side():
    order = []
    compare.alternate({"this": Path("a"), "other": Path("b")}, 1, lambda name, tree: order.append(name) or
                      fake_run(1.0, 100.0, 50.0), flip=True)
    assert order == ["other", "this"]


def test_a_side_s_figure_is_its_median_run_and_its_memory_the_largest_of_its_runs():
    runs = [fake_run(9.0, 800.0, 300.0), fake_run(7.0, 900.0, 310.0, rc=1), fake_run(8.0, 850.0, 305.0)]
    mid = compare.median_run(runs)
    assert mid["wall"] == 8.0
    assert mid["tree_mib"] == 900.0 and mid["largest_mib"] == 310.0
    assert mid["rcs"] == [0, 1, 0]


def test_the_compared_revision_is_run_from_its_own_committed_files(tmp_path):
    tree = compare.extract("HEAD", tmp_path)
    committed = subprocess.run(["git", "-C", str(REPO), "show", "HEAD:autograder/__main__.py"], check=True,
                               capture_output=True, text=True).stdout
    assert (tree / "autograder" / "__main__.py").read_text() == committed
    assert compare.side_env(tree)["PYTHONPATH"] == str(tree)
