import os
import sys

from .commands.cli import main

status = main()
if sys.argv[1:2] == ["grade"]:
    # Grading is over and its worker pool is gone: skip the interpreter's teardown of torch
    # (about half a second), which has nothing left to clean up.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
sys.exit(status)
