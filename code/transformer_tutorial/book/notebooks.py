"""Execute chapter notebooks in place, reproducibly, and measure them against the budget.

``python -m transformer_tutorial.book.notebooks chapters/*.ipynb`` (``make notebooks``) runs every
cell in a fresh kernel, saves outputs *and* widget state (without it a widget renders blank on
the static site), and then makes the file reproducible: widget model ids, random UUIDs in a
live kernel, are renamed in order of creation, so running twice gives byte-identical files.

Widget state is kept only for the widget views the site displays (and the models they use):
myst-nb loads the Jupyter widget manager and RequireJS (about 4.5 MB) on every page whose
notebook has any saved state, and the book's ``LiveView`` cells, tagged ``remove-output``, are
shown only in a live kernel. A notebook with no displayed widget view saves no widget state.

Every kernel gets the AVX2 vector kernels whatever the processor (:mod:`.kernels`), so an
AVX-512 machine writes the same files. It fails when a cell writes to stderr (warnings and
progress bars do not belong in the book) or when a notebook breaks the budget of DESIGN.md:
30 s and 1.5 GB peak memory on 2 cores.
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

from transformer_tutorial.book.kernels import pinned_environment

__all__ = ["BUDGET_MEMORY_MB", "BUDGET_SECONDS", "Run", "execute_notebook"]

BUDGET_SECONDS = 30.0
BUDGET_MEMORY_MB = 1536.0
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
REMOVED_OUTPUT_TAGS = {"remove-output", "remove-cell"}  # myst-nb leaves these outputs off the site


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


def _widget_views(notebook: nbformat.NotebookNode, displayed_only: bool = False) -> list[str]:
    """Model ids of the widget views in outputs; or only those the site shows (myst-nb drops
    the outputs of cells tagged ``remove-output`` or ``remove-cell``)."""
    return [
        output["data"][WIDGET_VIEW]["model_id"]
        for cell in notebook.cells
        if cell.cell_type == "code"
        and not (displayed_only and REMOVED_OUTPUT_TAGS & set(cell.metadata.get("tags", [])))
        for output in cell.get("outputs", [])
        if WIDGET_VIEW in output.get("data", {})
    ]


def _referenced_models(value: object) -> set[str]:
    """Model ids a widget's state refers to (``"IPY_MODEL_<id>"``, at any depth)."""
    if isinstance(value, str):
        return {value.removeprefix("IPY_MODEL_")} if value.startswith("IPY_MODEL_") else set()
    if isinstance(value, dict):
        return set().union(*map(_referenced_models, value.values()))
    if isinstance(value, list):
        return set().union(*map(_referenced_models, value))
    return set()


def _displayed_widget_state(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Keep the saved state of displayed views, the models they use, and links between those.

    A ``jslink`` is a model of its own that refers to the two widgets it links, and no widget
    refers to it; it is kept when everything it links is kept. No state left, no metadata.
    """
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    keep: set[str] = set()
    todo = [view for view in _widget_views(notebook, displayed_only=True) if view in state]
    while todo:
        model_id = todo.pop()
        if model_id not in keep:
            keep.add(model_id)
            todo += [ref for ref in _referenced_models(state[model_id]) if ref in state]
    for model_id, model in state.items():
        linked = _referenced_models(model)
        if model.get("model_name", "").endswith("LinkModel") and linked and linked <= keep:
            keep.add(model_id)
    if not keep:
        notebook.metadata.pop("widgets", None)
    else:
        saved = notebook.metadata.widgets[WIDGET_STATE]
        saved.state = {model_id: model for model_id, model in state.items() if model_id in keep}
    return notebook


def _drop_hidden_widget_views(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Keep only the text of widget outputs the site does not show.

    Their state is not saved (:func:`_displayed_widget_state`), so a view left in the file would
    point at a model that does not exist: JupyterLab shows "model not found" and Jupyter Book
    warns about widget outputs without state. The text (``LiveView(children=...)``) stays, so
    nbval still compares it.
    """
    for cell in notebook.cells:
        if cell.cell_type == "code" and REMOVED_OUTPUT_TAGS & set(cell.metadata.get("tags", [])):
            for output in cell.get("outputs", []):
                output.get("data", {}).pop(WIDGET_VIEW, None)
    return notebook


def _stable_widget_ids(notebook: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Rename widget model ids, in saved state (creation order) then in views without state.

    A live kernel names models with random UUIDs; they appear in outputs and in saved state.
    """
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    model_ids = list(dict.fromkeys([*state, *_widget_views(notebook)]))
    if not model_ids:
        return notebook
    text = nbformat.writes(notebook)
    for index, old_id in enumerate(model_ids):
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
    with client.setup_kernel(env=pinned_environment()):  # the same kernels on every x86 CPU
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)
        seconds = time.perf_counter() - start
        peak = _peak_memory_mb(client.km.provisioner.pid)
    client.set_widgets_metadata()
    notebook = _drop_hidden_widget_views(_displayed_widget_state(notebook))
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
