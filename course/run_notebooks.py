"""Executing notebooks headless (nbclient, one kernel each) and reading what they printed."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat


def problems_in_outputs(nb: nbformat.NotebookNode) -> list[str]:
    """Errors and stderr output of an executed notebook."""
    found = []
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                found.append(f"cell {index} ({cell.id}): {out.ename}: {out.evalue}")
            elif out.output_type == "stream" and out.name == "stderr":
                found.append(f"cell {index} ({cell.id}) wrote to stderr: {out.text[:300]!r}")
    return found


def coalesce_streams(nb: nbformat.NotebookNode) -> None:
    """Merge consecutive stdout/stderr chunks, so the saved outputs do not depend on timing."""
    for cell in nb.cells:
        merged = []
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and merged and merged[-1].output_type == "stream" and merged[-1].name == out.name:
                merged[-1].text += out.text
            else:
                merged.append(out)
        if "outputs" in cell:
            cell.outputs = merged


def warm_matplotlib() -> None:
    """Build matplotlib's font cache now, so that no kernel prints the 'building the font cache' note."""
    subprocess.run([sys.executable, "-c", "import matplotlib.pyplot"], capture_output=True, check=False)


def execute_notebooks(paths: list[Path], allow_errors: bool = False, timeout: int = 600) -> dict[Path, nbformat.NotebookNode]:
    """Execute notebooks headless and concurrently (one kernel each), each in its own folder.

    The kernels talk over Unix sockets in a private folder (ZeroMQ's ipc transport), not TCP:
    with TCP, a port picked as free can be taken by another process before the kernel binds
    it ("Address already in use"), and one kernel that fails to start fails the whole run."""
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    warm_matplotlib()

    async def run_one(path: Path, sockets: str) -> nbformat.NotebookNode:
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(
            nb,
            km=AsyncKernelManager(kernel_name="python3", transport="ipc", ip=sockets),
            timeout=timeout,
            kernel_name="python3",
            allow_errors=allow_errors,
            record_timing=False,
            extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no transport warnings on the terminal
            resources={"metadata": {"path": str(path.parent)}},
        )
        await client.async_execute()
        return nb

    async def run_all(folder: str):
        return await asyncio.gather(*(run_one(p, os.path.join(folder, f"kernel{i}")) for i, p in enumerate(paths)))

    with tempfile.TemporaryDirectory(prefix="kernels-") as folder:
        return dict(zip(paths, asyncio.run(run_all(folder))))
