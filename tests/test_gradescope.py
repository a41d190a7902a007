"""The Gradescope bundle: its layout follows Gradescope's spec, and run_autograder's results.json
carries the same scores as Grader().grade on the same submission."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


from importlib.metadata import version

from autograder.commands.gradescope import TORCH_VERSION, build_bundle, requirements
from autograder.foundation import spec
from autograder.foundation.spec import PARTS

REPO = Path(__file__).resolve().parent.parent
# The bundle's interpreter: this one, or another's venv built as setup.sh builds it (README, "Python versions").
BUNDLE_PYTHON = os.environ.get("BUNDLE_PYTHON", sys.executable)
BUGGY_EDIT = ("return Q @ K.transpose(-2, -1) / math.sqrt(d_k)", "return Q @ K.transpose(-2, -1)")


@pytest.fixture(scope="module")
def bundle(private_tmp):
    out = build_bundle(private_tmp / "bundle" / "autograder.zip")
    return out


def test_bundle_has_gradescope_entry_points_and_the_hidden_checks(bundle):
    with zipfile.ZipFile(bundle) as z:
        names = set(z.namelist())
        setup = z.read("setup.sh").decode()
        mode = z.getinfo("run_autograder").external_attr >> 16
    assert {"setup.sh", "run_autograder", "requirements.txt", "solutions/attention.py",
            "autograder/grading/grade.py", "autograder/worker/zygote.py"} <= names
    assert {f"autograder/checks/self_attention/test_{p.id}.py" for p in PARTS} <= names
    assert f"torch=={TORCH_VERSION}" in setup and "download.pytorch.org/whl/cpu" in setup
    assert mode & stat.S_IXUSR, "run_autograder must be executable"


def _run_bundle(bundle: Path, root: Path, submission_file: Path) -> dict:
    with zipfile.ZipFile(bundle) as z:
        z.extractall(root / "source")
    (root / "submission").mkdir(parents=True)
    (root / "submission" / submission_file.name).write_bytes(submission_file.read_bytes())
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AUTOGRADER_ROOT": str(root),
           "AUTOGRADER_PYTHON": BUNDLE_PYTHON, "HOME": str(root)}
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text())



@pytest.mark.parametrize("buggy", [False, True], ids=["correct", "buggy"])
def test_results_json_scores_equal_the_graders(bundle, grader, private_tmp, buggy):
    tmp_path = private_tmp / ("buggy" if buggy else "correct")
    tmp_path.mkdir()
    code = (REPO / "solutions" / "attention.py").read_text()
    if buggy:
        assert BUGGY_EDIT[0] in code
        code = code.replace(*BUGGY_EDIT)
    sub = tmp_path / "attention.py"
    sub.write_text(code)
    doc = _run_bundle(bundle, tmp_path / "autograder", sub)
    expected = grader.grade(sub)
    assert doc["score"] == pytest.approx(expected.score, abs=1e-3)
    want = [(f"{part.id}: {c.name}", c.points, c.max_points) for part in expected.parts for c in part.checks]
    assert [t["name"] for t in doc["tests"]] == [w[0] for w in want]
    for t, (_, points, max_points) in zip(doc["tests"], want):
        assert t["score"] == pytest.approx(points, abs=1e-3) and t["max_score"] == pytest.approx(max_points, abs=1e-3)
    assert all(t["visibility"] == "visible" for t in doc["tests"])
    assert sum(t["max_score"] for t in doc["tests"]) == pytest.approx(sum(p.points for p in PARTS))
    if buggy:
        failed = [t for t in doc["tests"] if t["score"] < t["max_score"]]
        assert failed and all(t["name"].startswith("scaled_scores") for t in failed)
        assert all(t["output"] and t["output"] != "passed" for t in failed)
    else:
        assert doc["score"] == pytest.approx(sum(p.points for p in PARTS))


def test_a_search_of_its_own_process_puts_no_line_of_a_reference_piece_in_results_json(bundle, private_tmp):
    """tests/hostile/lent_code_search.py through the bundle: results.json is shown to the student at once, so a
    reference piece found in the worker would be theirs on the next submission (issue 46)."""
    import inspect

    import solutions as ref
    from autograder.foundation.spec import PIECES

    sub = private_tmp / "leak" / "attention.py"
    sub.parent.mkdir()
    sub.write_text((REPO / "solutions" / "attention.py").read_text() + "\n\n"
                   + (REPO / "tests" / "hostile" / "lent_code_search.py").read_text())
    doc = _run_bundle(bundle, private_tmp / "leak" / "autograder", sub)
    text = "\n".join([str(doc.get("output", ""))] + [str(t.get(key, "")) for t in doc["tests"] for key in ("name", "output")])
    assert "LEAK" in text, text[:500]  # (the search ran)
    lines = {line.strip().strip('"') for name in PIECES for line in inspect.getsource(getattr(ref, name)).splitlines()}
    lines |= {line.strip() for name in PIECES for line in inspect.getdoc(getattr(ref, name)).splitlines()}
    assert not sorted(line for line in lines if len(line) > 12 and line in text)


def test_a_generation_bundle_grades_the_second_assignment_like_the_grader(grader, private_tmp):
    """gradescope-bundle --assignment generation: run_autograder grades its three parts, scores as Grader().grade"""
    from autograder.foundation import edition, spec

    bundle = build_bundle(private_tmp / "generation-bundle" / "autograder.zip", edition.resolve("generation"))
    with zipfile.ZipFile(bundle) as z:
        assert z.read("run_autograder").decode().rstrip().endswith('-m autograder.commands.gradescope "$ROOT" generation')
        assert {f"autograder/checks/generation/test_{p.id}.py" for p in spec.GENERATION.parts} | {
            "solutions/generation.py"} <= set(z.namelist())
    code = (REPO / "solutions" / "generation.py").read_text()
    wrong = code.replace(".tril(diagonal=offset)", ".tril()")  # top-left causal alignment in decoding
    assert wrong != code
    sub = private_tmp / "generation-buggy" / "generation.py"
    sub.parent.mkdir()
    sub.write_text(wrong)
    doc = _run_bundle(bundle, private_tmp / "generation-buggy" / "autograder", sub)
    expected = grader.grade(sub, assignment=spec.GENERATION)
    assert doc["score"] == pytest.approx(expected.score, abs=1e-3) and expected.score < 100
    failed = [t["name"] for t in doc["tests"] if t["score"] < t["max_score"]]
    # (decoder too: in a .py submission DecoderAttention calls the file's own decode_causal_mask)
    assert failed and all(name.startswith(("kv_cache: ", "decoder: ")) for name in failed), failed
    assert sum(t["max_score"] for t in doc["tests"]) == pytest.approx(100)


def test_an_efficient_bundle_grades_the_third_assignment_like_the_grader(grader, private_tmp):
    """gradescope-bundle --assignment efficient: run_autograder grades its five parts (FlexAttention's mods in the
    bundle's own worker), scores as Grader().grade; a top-left causal flash_attention loses only flash"""
    from autograder.foundation import edition, spec

    efficient = spec.assignment("efficient")
    bundle = build_bundle(private_tmp / "efficient-bundle" / "autograder.zip", edition.resolve("efficient"))
    with zipfile.ZipFile(bundle) as z:
        assert z.read("run_autograder").decode().rstrip().endswith('-m autograder.commands.gradescope "$ROOT" efficient')
        assert {f"autograder/checks/efficient/test_{p.id}.py" for p in efficient.parts} | {
            "solutions/efficient.py", "autograder/worker/warmup.py"} <= set(z.namelist())
    code = (REPO / "solutions" / "efficient.py").read_text()
    wrong = code.replace("offset = S_k - S_q  #", "offset = 0  #", 1)  # top-left causal alignment, flash_attention's only
    assert wrong != code
    sub = private_tmp / "efficient-buggy" / "efficient.py"
    sub.parent.mkdir()
    sub.write_text(wrong)
    doc = _run_bundle(bundle, private_tmp / "efficient-buggy" / "autograder", sub)
    expected = grader.grade(sub, assignment=efficient)
    assert doc["score"] == pytest.approx(expected.score, abs=1e-3) and expected.score < 100
    failed = [t["name"] for t in doc["tests"] if t["score"] < t["max_score"]]
    assert failed and all(name.startswith("flash: ") for name in failed), failed
    assert sum(t["max_score"] for t in doc["tests"]) == pytest.approx(100)


def _pins_for(python_version: str, extra: tuple[str, ...] = ()) -> dict[str, str]:
    from packaging.requirements import Requirement

    reqs = [Requirement(line) for line in requirements(extra).splitlines() if line.strip()]
    env = {"python_version": python_version, "python_full_version": f"{python_version}.0"}
    return {r.name: str(r.specifier) for r in reqs if r.marker is None or r.marker.evaluate(env)}


def test_the_bundles_requirements_install_on_ubuntu_2204s_python_310_numpy_2_2_6_at_most():
    """setup.sh installs the image's python3 (3.10 on Gradescope's Ubuntu 22.04 image): numpy has no release after
    2.2.6 there, so a newer instructor's pin gets a second line for 3.10, each with its marker."""
    old, new = _pins_for("3.10"), _pins_for("3.11")
    assert set(old) == set(new) == {"pytest", "rich", "numpy", "Babel"}
    assert tuple(int(n) for n in old["numpy"].lstrip("=").split(".")[:3]) <= (2, 2, 6)
    assert new["numpy"] == f"=={version('numpy')}"


def test_a_real_models_bundle_installs_transformers_5_on_python_311_and_the_last_4x_on_310():
    """real_models' checks import transformers (spec.Assignment.requires): its bundle pins the instructor's 5.x for
    Python 3.11+ and 4.57.6 for Gradescope's 3.10, as requirements.txt does; the other assignments' bundles do not"""
    extra = spec.assignment("real_models").requires
    assert extra == ("transformers",) and spec.assignment("efficient").requires == ()
    assert _pins_for("3.10", extra)["transformers"] == "==4.57.6"
    assert _pins_for("3.11", extra)["transformers"] == f"=={version('transformers')}"
