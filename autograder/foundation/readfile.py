"""Reading a submission's files without trusting them: never hang, never follow a file into a
device, never read without bound, and say in one sentence why a file could not be read.

A submission folder may hold anything a student's machine or an LMS export can make: a FIFO
named like a notebook (a plain open() blocks on it for ever), a symbolic link to /dev/zero
(endless), a link loop, a dangling link, a file or folder the grader may not read. Every
reader of submitted files (extract.py, the resume fingerprint, the gradebook's "answered"
test) goes through `read_bytes`, which opens without blocking, refuses anything but a regular
file, and reads at most `limit` bytes. A file of a submission is read with `inside=` its folder: a
symbolic link is then followed only where its real path stays inside that folder (a link to the
instructor's source/ or to another student's submission is refused), and the file is opened with
O_NOFOLLOW, so that no link can be swapped in between.

The sentences below are what a student (or the instructor) reads; they are whole sentences in
one place so that a translation can wrap them.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from . import i18n

_ = i18n.message
MAX_FILE_BYTES = 20 * 2**20

NOT_REGULAR = "{name} is not a regular file (it is {kind}): it was not read"
TOO_LARGE = "{name} is larger than {limit} MB: it was not read"
NO_ACCESS = "{name} could not be read: permission denied"
LINK_LOOP = "{name} is a loop of symbolic links: it was not read"
DANGLING = "{name} is a symbolic link to a file that does not exist: it was not read"
MISSING = "{name} does not exist"
OTHER_OS_ERROR = "{name} could not be read: {reason}"

LINK_OUTSIDE = _("{name} is a symbolic link to {target}, outside the submission's folder: it was not "
                 "read (a submission's files must be its own)")

KINDS = {stat.S_IFIFO: "a named pipe (FIFO)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symbolic link"}


class Unreadable(Exception):
    """A file that cannot be read; str() is one sentence naming it and the reason."""


def os_error_sentence(path: Path, exc: OSError) -> str:
    """One sentence for an OSError about `path`: what a person can act on, never a traceback."""
    name = path.name or str(path)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return NO_ACCESS.format(name=name)
    if exc.errno == errno.ELOOP:
        return LINK_LOOP.format(name=name)
    if exc.errno == errno.ENOENT:
        return (DANGLING if os.path.islink(path) else MISSING).format(name=name)
    return OTHER_OS_ERROR.format(name=name, reason=exc.strerror or type(exc).__name__)


def kind_of(mode: int) -> str:
    return KINDS.get(stat.S_IFMT(mode), "not a regular file")


def outside(path: Path, folder: str | Path) -> str | None:
    """Where `path` really leads when that is outside `folder` (the link's own text), else None."""
    real, root = os.path.realpath(path), os.path.realpath(folder)
    if os.path.commonpath([real, root]) == root:
        return None
    try:
        return os.readlink(path)[:160]
    except OSError:  # (a folder on the way is the link)
        return real[:160]


def read_bytes(path: str | Path, limit: int = MAX_FILE_BYTES, inside: str | Path | None = None) -> bytes:
    """The contents of the regular file `path`, at most `limit` bytes. Symbolic links are followed; with
    `inside` (the submission's folder) only where the real path stays inside it, and the real path is then
    opened with O_NOFOLLOW.

    Opened with O_NONBLOCK, so that a FIFO cannot block; refused unless fstat says it is a
    regular file; read in bounded chunks, so that a file that grows cannot make it endless.
    Raises Unreadable with one sentence (a link that leads outside: an i18n.Message)."""
    path = Path(path)
    opened, flags = path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    if inside is not None:
        if (target := outside(path, inside)) is not None:
            raise Unreadable(LINK_OUTSIDE.format(name=path.name, target=target))
        opened, flags = Path(os.path.realpath(path)), flags | os.O_NOFOLLOW
    try:
        fd = os.open(opened, flags)
    except OSError as exc:
        raise Unreadable(os_error_sentence(path, exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Unreadable(NOT_REGULAR.format(name=path.name, kind=kind_of(mode)))
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise Unreadable(TOO_LARGE.format(name=path.name, limit=limit // 2**20))
        return b"".join(chunks)
    except OSError as exc:
        raise Unreadable(os_error_sentence(path, exc)) from None
    finally:
        os.close(fd)


def entry_kind(path: Path) -> str:
    """"file", "dir", or a sentence why `path` (not followed if it is a link that leads nowhere) is neither."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return os_error_sentence(path, exc)
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return NOT_REGULAR.format(name=path.name, kind=kind_of(mode))


def list_folder(folder: Path) -> list[Path]:
    """The entries of `folder`, sorted by name; Unreadable (one sentence) when it cannot be listed."""
    try:
        return sorted(folder.iterdir())
    except OSError as exc:
        raise Unreadable(os_error_sentence(folder, exc)) from None
