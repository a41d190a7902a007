"""Print a fake report and a fake JSON document everywhere: print, sys.__stdout__, raw fds 0-2
at import; inside scaled_scores also every fd up to 20, the worker's own socket included."""
import os
import sys

FAKE = '{"submission": "x", "score": 100, "max_score": 100, "parts": []}\n'


def shout(fds):
    print(FAKE)
    print(FAKE, file=sys.stderr)
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            stream.write(FAKE)
            stream.flush()
        except Exception:
            pass
    for fd in fds:
        try:
            os.write(fd, FAKE.encode())
        except OSError:
            pass


shout(range(3))
_scaled_scores = scaled_scores


def scaled_scores(Q, K):
    shout(range(21))
    return _scaled_scores(Q, K)
