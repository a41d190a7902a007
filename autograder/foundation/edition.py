"""Which edition is graded: the assignment, the language of its feedback and its nbgrader assignment id, resolved once.

Every entry point (grade, grade-workspace, grade-class, grade-gpu, the Gradescope bundle and its run, the
nbgrader preprocessor, the demo) resolves an `Edition` from what it has (an --assignment name, a --lang, the
notebooks' metadata language, the name of the folder graded) with `resolve`, and passes it down; nothing
below decides or checks the language again. The rule, in one place:

* the assignment: the one `name` names (an assignment's id or one of its editions', e.g. self_attention_zh),
  else `default` (the one the notebooks' graded cells name), else the course's default assignment;
* the language: the one asked for (--lang), else the first language other than English that the edition's
  name, the notebooks' metadata (course.lang) or the folder's name says, else English. The scores never
  depend on it;
* the nbgrader id: the id of the assignment's edition in that language (`name`, when one is given and
  no other language asked for).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import spec


class UnknownLanguage(ValueError):
    """No course language of that name; the message is one line that names the known ones."""


@dataclass(frozen=True)
class Edition:
    assignment: spec.Assignment
    lang: str  # the language of the feedback (spec.LANGUAGES)

    def __post_init__(self) -> None:
        if self.lang not in spec.LANGUAGES:
            raise UnknownLanguage(f"unknown language {self.lang!r}: the course's languages are "
                                  f"{', '.join(spec.LANGUAGES)}")

    @property
    def id(self) -> str:
        """The nbgrader assignment id: the folder in submitted/<student>/, the gradebook's assignment
        (self_attention_zh)."""
        return spec.edition_id(self.assignment.id, self.lang)


def _said_by(name: str | None) -> str:
    """The language an nbgrader assignment id or a folder's name says (self_attention_zh: zh; anything else: en)."""
    return spec.split_edition(name)[1] if name else spec.DEFAULT_LANGUAGE


def resolve(name: str | None = None, lang: str | None = None, *, notebooks: str | None = None,
            folder: str | Path | None = None, default: spec.Assignment | None = None) -> Edition:
    """The edition graded (the rule above). `name`: an assignment or edition id (spec.UnknownAssignment when
    none is registered); `lang`: the language asked for; `notebooks`: the language the notebooks' metadata
    name; `folder`: the folder graded (its name may be an edition's id); `default`: the assignment when no
    name is given."""
    assignment = spec.assignment(name) if name else (default or spec.DEFAULT)
    folder_name = Path(folder).resolve().name if folder is not None else None
    said = (_said_by(name), notebooks, _said_by(folder_name))
    lang = lang or next((s for s in said if s and s != spec.DEFAULT_LANGUAGE), spec.DEFAULT_LANGUAGE)
    return Edition(assignment, lang)
