"""The solution cells of the `serving` notebooks: one or more definitions of the reference (solutions/serving.py) in
one cell (pieces of earlier notebooks, or a helper, before the graded definition), with the hints in the edition's
language."""
from course.cells import Cell, solution_source


def solution_cell(name: str, hints: dict, names: tuple[str, ...] = ()) -> Cell:
    """The solution cell graded as `name` (grade id solution_<name>): the definitions `names` (default: `name`
    alone; pieces of earlier notebooks first, as stubs to paste over)."""
    names = names or (name,)
    meta = {"solution": True, "grade": False, "locked": False, "grade_id": f"solution_{name}", "schema_version": 3}

    def source(lang):
        return "\n\n\n".join(solution_source(n, hints, lang) for n in names)

    return Cell("code", source("en"), role="solution", nbgrader=meta, zh=source("zh"))
