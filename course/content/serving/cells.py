"""The solution cells of the `serving` notebooks: one or more definitions of the reference (solutions/serving.py),
each cell led by the standard-library imports its definitions use (the grader gives a cell math, torch, nn and F
only), with the hints in the edition's language."""
from course.cells import Cell, solution_source

# The imports the reference's definitions need beyond math, torch, nn and F.
IMPORTS = {
    "BlockAllocator": ("from collections import deque",),
    "continuous_batching_generate": ("from collections import deque", "from types import SimpleNamespace"),
    "static_batching_generate": ("from types import SimpleNamespace",),
}


def solution_cell(name: str, hints: dict, names: tuple[str, ...] = ()) -> Cell:
    """The solution cell graded as `name` (grade id solution_<name>): the definitions `names` (default: `name`
    alone; pieces of earlier notebooks first, as stubs to paste over), after the imports they need."""
    names = names or (name,)
    meta = {"solution": True, "grade": False, "locked": False, "grade_id": f"solution_{name}", "schema_version": 3}
    imports = list(dict.fromkeys(line for n in names for line in IMPORTS.get(n, ())))

    def source(lang):
        body = "\n\n\n".join(solution_source(n, hints, lang) for n in names)
        return "\n".join(imports) + "\n\n\n" + body if imports else body

    return Cell("code", source("en"), role="solution", nbgrader=meta, zh=source("zh"))
