"""Reading an executed notebook: its code cells (all, the visible checks, or the graded ones) and what a cell
printed. Shared by the tests that run the notebooks (test_notebooks, test_generation_notebooks,
test_efficient_notebooks)."""
from __future__ import annotations


def code_cells(nb, role=None):
    """The code cells of `nb`; role "check": the visible checks (grade_id check_*), "graded": the graded cells."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id", "")
        if role is None or (role == "check" and gid.startswith("check_")) or (role == "graded" and meta.get("grade")):
            yield cell


def stream_text(cell, name="stdout") -> str:
    """What the cell wrote to stdout (or `name`, e.g. "stderr")."""
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == name)
