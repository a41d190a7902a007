"""Try to change the gradebook, the course, another student's work, the reference solutions
and the hidden checks; try to lift the sandbox's covers first."""
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
for target in ("__SENTINEL__", "/work/main", "/work", "/tmp", "/"):
    libc.umount2(target.encode(), 2)
    libc.mount(b"none", target.encode(), None, 4096 | 16384 | 32, None)  # remount the cover writable
for root in ("__SENTINEL__", "__HOSTILE__", "/work/main/solutions", "/work/main/autograder", "/work/shared"):
    for path in [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs] + [os.path.join(root, "new.txt")]:
        for attempt in (lambda p: open(p, "a").write("hacked"), lambda p: open(p, "w").write("hacked"),
                        os.unlink, lambda p: os.chmod(p, 0o777), lambda p: os.rename(p, p + ".x")):
            try:
                attempt(path)
            except Exception:
                pass
