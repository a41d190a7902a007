"""`make demo`: build the whole course into build/demo and report what the solved notebooks show.

Runs the real pipeline (instructor notebooks, `nbgrader generate_assignment`, solved notebooks
executed headless) without touching the committed files, then prints every visible check and
graded cell of the solved notebooks.
"""
from __future__ import annotations

import sys
import time

import nbformat

from autograder.spec import NOTEBOOKS, PART_BY_ID
from course.build import OUTPUT_DIRS, REPO, SOLVED_DIR, build, problems_in_outputs

OUT = REPO / "build" / "demo"


def main() -> int:
    start = time.time()
    print(f"Building the course into {OUT.relative_to(REPO)}/ (release with nbgrader, solved notebooks executed) ...", flush=True)
    build(OUT, execute=True)
    print(f"built {', '.join(str(d) for d in OUTPUT_DIRS)} in {time.time() - start:.0f} s\n")
    failures = 0
    for name in NOTEBOOKS:
        nb = nbformat.read(OUT / SOLVED_DIR / f"{name}.ipynb", as_version=4)
        print(f"== {name}.ipynb (solved)")
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            gid = meta.get("grade_id", "")
            text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream").strip()
            if gid.startswith("check_"):
                print(f"   {text}")
                failures += not text.startswith("✓")
            elif meta.get("grade"):
                print(f"   [graded part {gid}: {PART_BY_ID[gid].points:g} points, scored by the hidden autograder]")
        for problem in problems_in_outputs(nb):
            print(f"   ! {problem}")
            failures += 1
    print(f"\nreleased notebooks for students: {OUT.relative_to(REPO)}/assignments/self_attention/ "
          "(committed copy: assignments/self_attention/)")
    print("all visible checks pass on the solved notebooks" if not failures else f"{failures} problem(s) found")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
