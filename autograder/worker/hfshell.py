"""`transformers` in the worker: a shell the grader makes, never the library.

The library does not run in the sandbox: its files, and those of the packages made for it (HIDDEN), are covered
in the worker's view of the venv (sandbox.py, with LIBRARY_PATHS), and `import transformers` finds this shell
instead (`install`, in every worker before the student's code loads). The shell holds what a student's
`register_course_attention()` needs to register an attention with the library, and nothing that computes:

* `transformers.AttentionInterface` and `transformers.AttentionMaskInterface`: `.register(name, fn)` (on the
  class, as the library's), and as instances the library's mapping (`[name]`, `in`, `get`, `valid_keys`);
* `transformers.masking_utils.eager_mask`, `sdpa_mask`, `flex_attention_mask`: markers to register as a mask
  (calling one raises the rule).

Every other name of `transformers`, and every submodule, raises ImportError with RULE (an attribute whose name
starts with "_" an AttributeError, as Python's own probes expect). The shell is the grader's object placed in the
student's process: it is treated as the student's own, and what is read from it (`registered_attention`,
`registered_mask`, `registered_mask_function`: the worker-side reading the real_models checks use) is what the
student's code left there, run under the watch like the rest of their code.
"""
from __future__ import annotations

import os
import sys
import types

from .names import LIBRARY

# The packages that hold the library's code (the Hugging Face packages it brings): covered in the worker, refused on
# import. Generic dependencies it brings too (regex, tqdm, pydantic, ...) hold no model code and stay.
HIDDEN = (LIBRARY, "huggingface_hub", "tokenizers", "safetensors", "hf_xet", "kernels")
# One line, in the autograder catalog too (foundation/failures.py, LIBRARY_ABSENT: the student reads it translated).
RULE = ("{name} is not available: the transformers library does not run in the grader's sandbox, a graded forward "
        "is plain torch (only AttentionInterface, AttentionMaskInterface and masking_utils' eager_mask, sdpa_mask "
        "and flex_attention_mask are there, to register your attention)")
MASKING = LIBRARY + ".masking_utils"
ATTENTION_NAMES = ("sdpa", "flash_attention_2", "flex_attention")  # the library's own, in the shell as markers


def absent(name: str) -> ImportError:
    """What a name of the library that the shell does not hold raises (a plain ImportError: the student reads
    "raised ImportError: <the rule>")."""
    return ImportError(RULE.format(name=name), name=name)


def _marker(qualified: str, kind: str):
    def marker(*args, **kwargs):
        raise RuntimeError(RULE.format(name=qualified))

    marker.__name__ = marker.__qualname__ = qualified.rpartition(".")[2]
    marker.__module__ = qualified.rpartition(".")[0]
    marker.kind = kind
    return marker


eager_mask = _marker(MASKING + ".eager_mask", "eager")
sdpa_mask = _marker(MASKING + ".sdpa_mask", "sdpa")
flex_attention_mask = _marker(MASKING + ".flex_attention_mask", "flex")
MASKS = (eager_mask, sdpa_mask, flex_attention_mask)


def interface(name: str, defaults: dict) -> type:
    """A class like the library's AttentionInterface / AttentionMaskInterface (its GeneralInterface): a mapping
    shared by the class (`register`) and, per instance, local overrides (`obj[key] = fn`)."""

    class Interface:
        _global_mapping = dict(defaults)

        def __init__(self):
            self._local_mapping = {}

        @classmethod
        def register(cls, key, value):
            if not isinstance(key, str) or not callable(value):
                raise TypeError(f"{name}.register(name, function): a string and a function")
            cls._global_mapping[key] = value

        def __getitem__(self, key):
            return self._local_mapping[key] if key in self._local_mapping else self._global_mapping[key]

        def __setitem__(self, key, value):
            self._local_mapping[key] = value

        def valid_keys(self) -> list:
            return list(dict.fromkeys([*self._global_mapping, *self._local_mapping]))

        def __contains__(self, key) -> bool:
            return key in self._local_mapping or key in self._global_mapping

        def __iter__(self):
            return iter(self.valid_keys())

        def __len__(self) -> int:
            return len(self.valid_keys())

        def get(self, key, default=None):
            return self[key] if key in self else default

    Interface.__name__ = Interface.__qualname__ = name
    Interface.__module__ = LIBRARY
    return Interface


class Shell(types.ModuleType):
    """A module of the shell: its names as given, every other public name the rule (`absent`)."""

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        raise absent(f"{self.__name__}.{attr}")


class Refuser:
    """A finder first on sys.meta_path: any module of the hidden packages that the shell does not hold is refused
    with the rule (their files are covered anyway: this makes the failure say why)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in HIDDEN:
            raise absent(fullname)
        return None

    def invalidate_caches(self):
        pass


def shell() -> dict[str, types.ModuleType]:
    """The shell's modules, by name (fresh ones: each worker gets its own)."""
    top = Shell(LIBRARY, "The grader's stand-in for the transformers library: registration only (RULE).")
    masking = Shell(MASKING, "The mask names a registration may use; calling one raises the rule.")
    top.__path__ = []  # a package: its submodules are looked for, and refused by Refuser
    top.AttentionInterface = interface("AttentionInterface", {n: _marker(f"{LIBRARY}.{n}", n) for n in ATTENTION_NAMES})
    top.AttentionMaskInterface = interface("AttentionMaskInterface", {"sdpa": sdpa_mask, "eager": eager_mask,
                                                                      "flex_attention": flex_attention_mask})
    for marker in MASKS:
        setattr(masking, marker.__name__, marker)
    top.masking_utils = masking
    return {LIBRARY: top, MASKING: masking}


def install() -> None:
    """In the worker, before the student's code: the shell as `transformers`, the rest of the hidden packages refused
    (any of their modules already imported dropped first)."""
    for name in [n for n in sys.modules if n.split(".")[0] in HIDDEN]:
        del sys.modules[name]
    sys.modules.update(shell())
    sys.meta_path.insert(0, Refuser())


def library_paths(entries=None) -> tuple[str, ...]:
    """The folders of the hidden packages (and their .dist-info, .libs) in the import path `entries` (sys.path), as
    found and as real paths: what the sandbox covers in the worker's view of the venv."""
    found = []
    for entry in sys.path if entries is None else entries:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.split("-")[0].split(".")[0].lower() in HIDDEN and os.path.isdir(os.path.join(entry, name)):
                path = os.path.join(entry, name)
                found += [os.path.abspath(path), os.path.realpath(path)]
    return tuple(dict.fromkeys(found))


# ---------------------------------------------------------------- what the grader reads from the student's shell
def _mapping(attr: str) -> dict:
    mapping = getattr(getattr(sys.modules.get(LIBRARY), attr, None), "_global_mapping", None)
    return mapping if isinstance(mapping, dict) else {}


def registered_attention(name: str):
    """The attention function registered as `name` with AttentionInterface.register, or None (none, or one of the
    library's names, whose markers compute nothing)."""
    fn = _mapping("AttentionInterface").get(name)
    return None if fn is None or getattr(fn, "kind", None) in ATTENTION_NAMES else fn


def registered_mask(name: str) -> str | None:
    """What AttentionMaskInterface holds under `name`: "eager", "sdpa" or "flex" (the library's mask, registered
    through the shell's marker), "custom" (a function of the student's: `registered_mask_function`), or None."""
    fn = _mapping("AttentionMaskInterface").get(name)
    if fn is None:
        return None
    return next((marker.kind for marker in MASKS if fn is marker), "custom")


def registered_mask_function(name: str):
    """The student's own mask function registered as `name` (registered_mask "custom"), else None."""
    return _mapping("AttentionMaskInterface").get(name) if registered_mask(name) == "custom" else None


LIBRARY_PATHS = library_paths()  # at import, in the zygote: each worker covers these before its student's code runs
