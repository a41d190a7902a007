"""One page rendered in a child process of its own, with a deadline and a memory limit.

nbgrader renders a class's pages one after the other in its own process, with no deadline: a notebook whose
page takes too long or too much memory to render (huge or pathological markdown, a flood of outputs) held up,
or brought down, the whole `generate_feedback`. `render_isolated` forks, renders in the child under
RLIMIT_DATA and sends the page back through a pipe; past the deadline the child is killed. The caller makes a
short page that says why in place of the one that was not made, and goes on with the next notebook.
"""
from __future__ import annotations

import os
import pickle
import resource
import select
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Callable

CHUNK = 1 << 20


@dataclass(frozen=True)
class Rendered:
    """A render's outcome: the page and its resources (those that pickle), or why there is none ("deadline",
    "memory", or the error's last line)."""

    page: str | None
    resources: dict | None
    why: str | None = None


def portable(resources: dict) -> dict:
    """The resources that can cross to the parent (nbconvert's hold functions: the parent keeps its own)."""
    kept = {}
    for key, value in resources.items():
        try:
            pickle.dumps(value)
        except (pickle.PicklingError, AttributeError, TypeError):
            continue
        kept[key] = value
    return kept


def child(render: Callable[[], tuple[str, dict]], write_fd: int, memory_bytes: int) -> None:
    """In the forked child: render under the memory limit, send the outcome, end without running atexit handlers."""
    status = 0
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
        page, resources = render()
        body = pickle.dumps(Rendered(page, portable(resources)))
    except MemoryError:
        body = pickle.dumps(Rendered(None, None, "memory"))
    except BaseException:  # noqa: BLE001 - any failure of a render is reported as its reason, never raised here
        body = pickle.dumps(Rendered(None, None, traceback.format_exc().strip().splitlines()[-1][:300]))
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(write_fd, view[:CHUNK]):]
    except OSError:
        status = 1
    finally:
        os._exit(status)


def read_until(fd: int, deadline: float) -> bytes | None:
    """Everything the child sends, or None when the deadline (time.monotonic) passes first."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def ended(pid: int, kill: bool) -> int:
    """Wait for the child (killed first when `kill`); its wait status."""
    if kill:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return os.waitpid(pid, 0)[1]


def render_isolated(render: Callable[[], tuple[str, dict]], seconds: float, memory_bytes: int) -> Rendered:
    """`render()` in a forked child with RLIMIT_DATA `memory_bytes`, given `seconds` of wall clock."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        child(render, write_fd, memory_bytes)
    os.close(write_fd)
    try:
        body = read_until(read_fd, time.monotonic() + seconds)
    finally:
        os.close(read_fd)
    status = ended(pid, kill=body is None)
    if body is None:
        return Rendered(None, None, "deadline")
    try:
        return pickle.loads(body)
    except (pickle.UnpicklingError, EOFError, ValueError):
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        return Rendered(None, None, "memory" if killed else f"the render ended with status {status}")
