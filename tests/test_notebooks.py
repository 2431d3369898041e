"""Every chapter notebook runs within budget and reproduces its committed file byte for byte.

nbval (``make nbval``) compares text outputs cell by cell; this test is stricter where it can
be: a fresh execution must give the committed file exactly, figures and widget state included,
so ``make notebooks`` never produces a diff by itself. It also enforces DESIGN.md's budget of
30 s and 1.5 GB per notebook on the machine that runs the tests.
"""

from pathlib import Path

import nbformat
import pytest

from transformer_tutorial.notebooks import (
    BUDGET_MEMORY_MB,
    BUDGET_SECONDS,
    _stable_widget_ids,
    _stderr_outputs,
    execute_notebook,
)

CHAPTERS = sorted((Path(__file__).parents[1] / "chapters").glob("*.ipynb"))


def test_there_are_chapters():
    assert CHAPTERS


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_runs_within_budget_and_reproduces_its_committed_file(path):
    run = execute_notebook(path)
    assert run.seconds < BUDGET_SECONDS, f"{path.name} took {run.seconds:.1f} s"
    assert run.peak_memory_mb < BUDGET_MEMORY_MB, f"{path.name} peaked at {run.peak_memory_mb} MB"
    assert _stderr_outputs(run.notebook) == []
    committed = path.read_text()
    fresh = nbformat.writes(run.notebook) + "\n"
    if fresh != committed:
        changed = [
            index
            for index, (old, new) in enumerate(
                zip(nbformat.reads(committed, 4).cells, run.notebook.cells, strict=True)
            )
            if old != new
        ]
        pytest.fail(f"{path.name}: cells {changed} differ from a fresh run; run `make notebooks`")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_committed_chapter_is_complete(path):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    counts = [cell.execution_count for cell in code]
    assert counts == list(range(1, len(code) + 1)), "commit after one full run: make notebooks"
    for cell in code:
        tags = cell.metadata.get("tags", [])
        assert "nbval-skip" not in tags, "every cell must run under nbval"
        if "nbval-ignore-output" in tags:
            assert "# nbval-ignore-output:" in cell.source, "say why the output cannot match"
        for output in cell.outputs:
            assert output.output_type != "error"
            if "image/png" in output.get("data", {}):
                figure = cell.metadata.get("mystnb", {})
                assert figure.get("figure", {}).get("caption"), f"figure without caption: {cell.id}"
                assert figure.get("image", {}).get("alt"), f"figure without alt text: {cell.id}"
    view_type = "application/vnd.jupyter.widget-view+json"
    views = [out for cell in code for out in cell.outputs if view_type in out.get("data", {})]
    if views:
        state = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
        for view in views:
            assert view["data"][view_type]["model_id"] in state


def test_widget_ids_are_renamed_by_creation_order():
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("w")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={"application/vnd.jupyter.widget-view+json": {"model_id": "aaaa1111"}},
        )
    ]
    notebook.cells = [cell]
    notebook.metadata["widgets"] = {
        "application/vnd.jupyter.widget-state+json": {
            "state": {
                "aaaa1111": {"state": {"children": ["IPY_MODEL_bbbb2222"]}},
                "bbbb2222": {"state": {}},
            }
        }
    }
    renamed = _stable_widget_ids(notebook, "chapter")
    state = renamed.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    first, second = list(state)
    assert "aaaa1111" not in nbformat.writes(renamed) and "bbbb2222" not in nbformat.writes(renamed)
    assert state[first]["state"]["children"] == [f"IPY_MODEL_{second}"]
    model_id = renamed.cells[0].outputs[0]["data"]["application/vnd.jupyter.widget-view+json"]
    assert model_id["model_id"] == first
    assert _stable_widget_ids(notebook, "chapter") == renamed  # the same names every time
