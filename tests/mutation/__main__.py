"""`python -m tests.mutation`: see run.py."""
import sys

from .run import main

sys.exit(main())
