"""Execute chapter notebooks in place, reproducibly, and measure them against the budget.

``python -m transformer_tutorial.notebooks chapters/*.ipynb`` (``make notebooks``) runs every
cell in a fresh kernel, saves outputs *and* widget state (without it a widget renders blank on
the static site), and then makes the file reproducible: widget model ids, random UUIDs in a
live kernel, are renamed in order of creation, so running twice gives byte-identical files.

It fails when a cell writes to stderr (warnings and progress bars do not belong in the book)
or when a notebook breaks the budget of DESIGN.md: 30 s and 1.5 GB peak memory on 2 cores.
"""

import argparse
import hashlib
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

__all__ = ["BUDGET_MEMORY_MB", "BUDGET_SECONDS", "Run", "execute_notebook"]

BUDGET_SECONDS = 30.0
BUDGET_MEMORY_MB = 1536.0
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


@dataclass
class Run:
    """What one execution produced and cost."""

    notebook: nbformat.NotebookNode
    seconds: float  # wall time from kernel start to the last cell
    peak_memory_mb: float  # the kernel process's peak resident memory (VmHWM)

    @property
    def within_budget(self) -> bool:
        return self.seconds < BUDGET_SECONDS and self.peak_memory_mb < BUDGET_MEMORY_MB


def _peak_memory_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    kilobytes = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    if kilobytes is None:
        raise RuntimeError(f"no VmHWM line in /proc/{pid}/status")
    return int(kilobytes.group(1)) / 1024


def _stable_widget_ids(notebook: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Rename widget model ids by creation order; they appear in outputs and in saved state."""
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    if not state:
        return notebook
    text = nbformat.writes(notebook)
    for index, old_id in enumerate(state):
        new_id = hashlib.sha256(f"{name}:{index}".encode()).hexdigest()[:32]
        text = text.replace(old_id, new_id)
    return nbformat.reads(text, as_version=4)


def _stderr_outputs(notebook: nbformat.NotebookNode) -> list[str]:
    found = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                found.append(f"cell {index}: {output['text'][:200]!r}")
    return found


def execute_notebook(path: Path | str, timeout: int = 120) -> Run:
    """Run ``path`` top to bottom in a new kernel (working directory: its folder)."""
    path = Path(path)
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,
        # one print can reach the kernel's stdout in two flushes; merge them so the file does
        # not depend on when the kernel happened to flush
        coalesce_streams=True,
    )
    start = time.perf_counter()
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)
        seconds = time.perf_counter() - start
        peak = _peak_memory_mb(client.km.provisioner.pid)
    client.set_widgets_metadata()
    return Run(_stable_widget_ids(notebook, path.stem), seconds, peak)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="notebooks to execute in place")
    args = parser.parse_args(argv)
    failures = []
    for path in args.paths:
        run = execute_notebook(path)
        nbformat.write(run.notebook, path)
        print(f"{path}: {run.seconds:.1f} s, peak {run.peak_memory_mb:.0f} MB")
        if not run.within_budget:
            failures.append(
                f"{path}: over budget ({BUDGET_SECONDS:.0f} s, {BUDGET_MEMORY_MB:.0f} MB)"
            )
        failures += [f"{path}: stderr in {where}" for where in _stderr_outputs(run.notebook)]
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
