"""`transformers` in the worker is the grader's shell (autograder/worker/hfshell.py), never the library: a
registration works, everything else fails at once with one line naming the rule, whatever the route (import,
importlib, the files on disk); the grader reads back what the student registered."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
import _kit as kit

from autograder.foundation import failures
from autograder.foundation.extract import Source
from autograder.sandbox.session import Session
from autograder.sandbox.student import Student
from autograder.worker import hfshell


@pytest.fixture
def installed(monkeypatch):
    """The shell's modules as `transformers` in this process, for one test (sys.modules restored after)."""
    for name in [n for n in sys.modules if n.split(".")[0] in hfshell.HIDDEN]:
        monkeypatch.delitem(sys.modules, name)
    for name, module in hfshell.shell().items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(sys, "meta_path", [hfshell.Refuser(), *sys.meta_path])
    return sys.modules["transformers"]


def test_a_registration_through_the_shell_is_read_back_by_the_grader(installed):
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import eager_mask, sdpa_mask

    def course_attention(module, query, key, value, attention_mask, **kwargs):
        return query, None

    def my_mask(*args, **kwargs):
        return None

    assert hfshell.registered_attention("course") is None and hfshell.registered_mask("course") is None
    AttentionInterface.register("course", course_attention)
    AttentionMaskInterface.register("course", sdpa_mask)
    AttentionMaskInterface.register("mine", my_mask)
    AttentionMaskInterface.register("plain", eager_mask)
    assert hfshell.registered_attention("course") is course_attention
    assert AttentionInterface()["course"] is course_attention and "course" in AttentionInterface()
    assert "sdpa" in AttentionInterface() and hfshell.registered_attention("sdpa") is None  # the library's: a marker
    assert [hfshell.registered_mask(n) for n in ("course", "plain", "mine", "flex_attention", "none")] == [
        "sdpa", "eager", "custom", "flex", None]
    assert hfshell.registered_mask_function("mine") is my_mask and hfshell.registered_mask_function("course") is None
    with pytest.raises(TypeError):
        AttentionInterface.register("course", "not a function")


def test_every_other_name_or_module_of_the_library_fails_with_the_rule(installed):
    import importlib

    for attempt in ("from transformers import AutoModel", "import transformers.models.llama.modeling_llama",
                    "from transformers.models.llama import modeling_llama", "import huggingface_hub",
                    "from transformers.masking_utils import causal_mask_function", "import safetensors.torch"):
        with pytest.raises(ImportError) as caught:
            exec(attempt, {})
        assert "the transformers library does not run in the grader's sandbox" in str(caught.value), attempt
    with pytest.raises(ImportError, match="does not run in the grader's sandbox"):
        importlib.import_module("transformers.modeling_utils")
    with pytest.raises(RuntimeError, match="transformers.masking_utils.sdpa_mask is not available"):
        installed.masking_utils.sdpa_mask(batch_size=2)
    assert not hasattr(installed, "_private_probe")  # (Python's own probes get an AttributeError)


def test_the_rule_is_one_line_in_the_autograder_catalog_in_both_languages():
    assert failures.LIBRARY_ABSENT.msgid == hfshell.RULE and "\n" not in hfshell.RULE
    text = hfshell.RULE.format(name="transformers.models")
    rendered = failures.worker_text(text)
    assert rendered.render("en") == text
    assert "transformers.models" in rendered.render("zh") and rendered.render("zh") != text
    assert failures.worker_text("something else") == "something else"


def test_the_library_paths_are_every_hugging_face_package_and_its_metadata(tmp_path):
    for name in ("transformers", "transformers-5.0.dist-info", "huggingface_hub", "tokenizers.libs", "torch", "regex"):
        (tmp_path / name).mkdir()
    found = {Path(p).name for p in hfshell.library_paths([str(tmp_path)])}
    assert found == {"transformers", "transformers-5.0.dist-info", "huggingface_hub", "tokenizers.libs"}


PROBE = r'''
import importlib, os, sys
import transformers
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import sdpa_mask

def course_attention(module, query, key, value, attention_mask, **kwargs):
    return value, None

AttentionInterface.register("course", course_attention)
AttentionMaskInterface.register("course", sdpa_mask)

def probe():
    out = {}
    for route in ("import transformers.models.llama", "from transformers import LlamaConfig", "import tokenizers",
                  "importlib.import_module('huggingface_hub')"):
        try:
            exec(route)
            out[route] = "worked"
        except ImportError as exc:
            out[route] = str(exc)
    out["files"] = {p: sorted(os.listdir(p)) if os.path.isdir(p) else "missing" for p in PATHS}
    out["modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("transformers", "huggingface_hub"))
    return repr(out)
'''


def test_in_the_worker_the_library_is_absent_on_every_route_and_a_registration_is_read_back(tmp_path):
    paths = [p for p in hfshell.LIBRARY_PATHS if Path(p).name in ("transformers", "huggingface_hub")]
    assert paths, "the venv holds transformers (a requirement): its folder must be found to be covered"
    code = f"PATHS = {paths!r}\n" + PROBE
    path = tmp_path / "probe.py"
    path.write_text(code)
    session = Session(kit.grader().zygote, (Source("probe", str(path), (code,)),), kit.LIMITS)
    try:
        session.start()
        session.enter_part("qkv_projection")
        student = Student(session)
        seen = eval(student.call("probe"))  # noqa: S307 - our own probe's repr of plain data
        job = student.job()
        kinds = job.builtin_value("registered_mask", "course"), job.builtin_value("registered_mask", "other")
        result = student.run([job])[0]
    finally:
        session.close()
    for route in ("import transformers.models.llama", "from transformers import LlamaConfig", "import tokenizers",
                  "importlib.import_module('huggingface_hub')"):
        assert "does not run in the grader's sandbox" in seen[route], (route, seen[route])
    assert all(listing == [] for listing in seen["files"].values()), seen["files"]
    assert seen["modules"] == ["transformers", "transformers.masking_utils"]
    assert [result[k] for k in kinds] == ["sdpa", None]


def test_solution_cells_that_import_transformers_at_the_top_still_grade(tmp_path):
    """A notebook's solution cells may start with `import transformers` (the released notebooks' habit): the shell
    makes the import succeed, so the layers below it are graded as before; only using the library's code fails."""
    reference = (kit.REPO / "solutions" / "real_models.py").read_text()
    header = "import transformers\nfrom transformers import AttentionInterface\nfrom transformers.masking_utils import sdpa_mask\n"
    course = kit.make_course()
    honest = kit.grade(kit.write_submission(course, "plain", reference, "real_models"), part_ids=["rope_permutation"],
                       assignment="real_models")[0]
    future = "from __future__ import annotations\n"
    headed_code = reference.replace(future, future + header, 1)
    assert header in headed_code
    headed = kit.grade(kit.write_submission(course, "headed", headed_code, "real_models"),
                       part_ids=["rope_permutation"], assignment="real_models")[0]
    assert headed.part("rope_permutation").score == honest.part("rope_permutation").score > 0
    assert not any("transformers" in note for note in headed.notes), headed.notes
