"""Whether other users of this machine can read a course directory: the instructor's commands warn.

A course directory holds what students must not read: the solutions, the hidden checks (in a clone of
this repository), the gradebook and every student's submission. On a shared machine (a JupyterHub)
with Debian's default home mode 755 all of it is readable by every user. `chmod 700 COURSE` closes it
and the nbgrader cycle still works (the exchange is a directory of its own; docs/jupyterhub.md).
grade-class, `nbgrader autograde` through the plugin and `make formgrader` print `warning(course)`.
"""
from __future__ import annotations

import stat
from pathlib import Path


def others_can_enter(path: Path) -> bool:
    """Every folder from / down to `path` lets other users pass (o+x)."""
    path = Path(path).resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in (path, *path.parents))


def readable_by_others(course: Path) -> bool:
    """Other users can list the course directory or open a file whose path they know (o+r or o+x on it, and o+x on
    every folder above it)."""
    try:
        course = Path(course).resolve()
        return bool(course.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH)) and others_can_enter(course.parent)
    except OSError:
        return False


def warning(course: Path) -> str | None:
    """One line for the instructor when other users can read `course`; None when they cannot."""
    if not readable_by_others(course):
        return None
    course = Path(course).resolve()
    mode = stat.S_IMODE(course.stat().st_mode)
    return (f"warning: other users of this machine can read the course directory {course} (mode {mode:o}): the "
            f"solutions, the hidden checks, the gradebook and the submissions; run `chmod 700 {course}` "
            "(docs/jupyterhub.md)")
