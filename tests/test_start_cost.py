"""What a command's own process imports before it starts its worker pool: no torch.

torch takes seconds to import. `grade` starts its zygote first so that the two import it at the same time,
and grade-class's parent never needs it (its grading processes and their zygotes do the grading); a module
that imported torch on the way (an exception class kept next to the worker's protocol did) costs every
run those seconds, and `grade` on a missing file no longer answers at once.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_command_line_and_grade_class_import_no_torch():
    code = "import sys, autograder.commands.cli, autograder.commands.classgrade, autograder.commands.classpool; print(sorted(" \
           "m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout[:500]
