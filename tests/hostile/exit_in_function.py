"""sys.exit inside a function: that function's checks fail with a message, the rest is graded."""
import sys


def attend(weights, V):
    sys.exit(0)


def padding_mask(lengths, seq_len):
    raise SystemExit("bye")
