"""What the course build makes: each edition of each assignment (its content modules, the support files
shipped beside its notebooks, its output folders, its language and compiled catalogs)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autograder.foundation import spec
from course import content
from course.content import efficient, generation, real_models, serving

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    """One nbgrader assignment's notebooks: their content modules, support files and output folders."""
    id: str
    modules: tuple
    support: dict = field(default_factory=dict)  # generated file name -> origin in the repository
    solved: Path = Path("solutions") / "notebooks"
    lang: str = spec.DEFAULT_LANGUAGE
    catalogs: dict = field(default_factory=dict)  # compiled .mo file name -> its .po source in the repository

    @property
    def source(self) -> Path:
        return Path("source") / self.id

    @property
    def release(self) -> Path:
        return Path("assignments") / self.id

    @property
    def outputs(self) -> tuple[Path, Path, Path]:
        return (self.source, self.release, self.solved)


# What every assignment ships beside its notebooks: the visible checks' machinery and the graded cell.
_SHARED_SUPPORT = {"check_harness.py": REPO / "course" / "check_harness.py",
                   "graded_cells.py": REPO / "course" / "graded_cells.py"}
_METER = {"memory_meter.py": REPO / "autograder" / "worker" / "meter.py"}
_SELF_ATTENTION_SUPPORT = {"visible_checks.py": REPO / "course" / "visible_checks.py",
                           "visible_checks_scores_masks.py": REPO / "course" / "visible_checks_scores_masks.py",
                           "visible_checks_module.py": REPO / "course" / "visible_checks_module.py",
                           **_SHARED_SUPPORT, **_METER}
_GENERATION_SUPPORT = {"visible_checks.py": REPO / "course" / "visible_checks_generation.py",
                       "visible_checks_decoder.py": REPO / "course" / "visible_checks_decoder.py", **_SHARED_SUPPORT}
_EFFICIENT_SUPPORT = {"visible_checks.py": REPO / "course" / "visible_checks_efficient.py",
                      "visible_checks_flash.py": REPO / "course" / "visible_checks_flash.py",
                      "visible_checks_flash_backward.py": REPO / "course" / "visible_checks_flash_backward.py",
                      "visible_checks_flex.py": REPO / "course" / "visible_checks_flex.py",
                      **_SHARED_SUPPORT, **_METER}
_REAL_MODELS_SUPPORT = {"visible_checks.py": REPO / "course" / "visible_checks_real_models.py",
                        "visible_checks_real_models_llama.py": REPO / "course" / "visible_checks_real_models_llama.py",
                        "visible_checks_real_models_interface.py":
                            REPO / "course" / "visible_checks_real_models_interface.py",
                        "visible_checks_real_models_gpt2.py": REPO / "course" / "visible_checks_real_models_gpt2.py",
                        **_SHARED_SUPPORT}
_SERVING_SUPPORT = {"visible_checks.py": REPO / "course" / "visible_checks_serving.py",
                    "visible_checks_serving_batching.py": REPO / "course" / "visible_checks_serving_batching.py",
                    "visible_checks_serving_sinks.py": REPO / "course" / "visible_checks_serving_sinks.py",
                    "visible_checks_serving_dense.py": REPO / "course" / "visible_checks_serving_dense.py",
                    **_SHARED_SUPPORT}
# The visible checks' messages in Chinese (one catalog for every assignment's visible checks).
_ZH_CATALOGS = {"locale/zh_CN/LC_MESSAGES/visible_checks.mo":
                REPO / "course" / "locale" / "zh_CN" / "LC_MESSAGES" / "visible_checks.po"}
_SOLVED = Path("solutions") / "notebooks"

TARGETS = (
    Target(spec.ASSIGNMENT, content.MODULES, _SELF_ATTENTION_SUPPORT),
    Target("generation", generation.MODULES, _GENERATION_SUPPORT, _SOLVED / "generation"),
    Target(spec.edition_id(spec.ASSIGNMENT, "zh"), content.MODULES, _SELF_ATTENTION_SUPPORT, _SOLVED / "zh",
           "zh", _ZH_CATALOGS),
    Target(spec.edition_id("generation", "zh"), generation.MODULES, _GENERATION_SUPPORT, _SOLVED / "generation" / "zh",
           "zh", _ZH_CATALOGS),
    Target("efficient", efficient.MODULES, _EFFICIENT_SUPPORT, _SOLVED / "efficient"),
    Target(spec.edition_id("efficient", "zh"), efficient.MODULES, _EFFICIENT_SUPPORT, _SOLVED / "efficient" / "zh",
           "zh", _ZH_CATALOGS),
    Target("real_models", real_models.MODULES, _REAL_MODELS_SUPPORT, _SOLVED / "real_models"),
    Target(spec.edition_id("real_models", "zh"), real_models.MODULES, _REAL_MODELS_SUPPORT,
           _SOLVED / "real_models" / "zh", "zh", _ZH_CATALOGS),
    Target("serving", serving.MODULES, _SERVING_SUPPORT, _SOLVED / "serving"),
    Target(spec.edition_id("serving", "zh"), serving.MODULES, _SERVING_SUPPORT, _SOLVED / "serving" / "zh", "zh",
           _ZH_CATALOGS),
)
TARGET_BY_ID = {t.id: t for t in TARGETS}
# The first assignment's folders, under the names the tests and the demo use.
SOURCE_DIR, RELEASE_DIR, SOLVED_DIR = TARGETS[0].outputs
OUTPUT_DIRS = tuple(d for t in TARGETS for d in t.outputs)
