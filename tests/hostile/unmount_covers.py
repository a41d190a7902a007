"""Lift the sandbox's covers: umount2(MNT_DETACH) every mount point the worker sees (each cover among them),
several rounds, then read the reference solutions, the hidden checks and the sentinel course through the
holes. This worked on a grader that was not root (the worker kept every capability over its mount
namespace). Every unmount must fail and nothing must be read."""
import ctypes
import os

# --- attack ---
MNT_DETACH = 2
REPO = os.path.dirname(os.path.dirname("__HOSTILE__"))
TARGETS = [os.path.join(REPO, "solutions", "attention.py"), os.path.join(REPO, "autograder", "foundation", "spec.py"),
           os.path.join("__SENTINEL__", "SECRET.txt"), os.path.join("__SENTINEL__", "gradebook.db")]
_libc = ctypes.CDLL(None, use_errno=True)


def _mount_points():
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return sorted(set(points) - {"/", "/proc"}, key=len, reverse=True)  # (deepest first: children before parents)


UNMOUNTED, READ, TRIED = [], [], 0
for _ in range(3):
    for point in _mount_points():
        TRIED += 1
        if _libc.umount2(point.encode(), MNT_DETACH) == 0:
            UNMOUNTED.append(point)
for target in TARGETS:
    try:
        with open(target, "rb") as f:
            READ.append(f"{target}: {len(f.read())} bytes")
    except OSError:
        pass


def scaled_scores(Q, K):
    raise RuntimeError(f"tried {TRIED} unmounts, unmounted {UNMOUNTED}, read {READ}")
