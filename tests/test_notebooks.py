"""Every chapter notebook runs within budget and reproduces its committed file byte for byte.

nbval (``make nbval``) compares text outputs cell by cell; this test is stricter where it can
be: a fresh execution must give the committed file exactly, figures and widget state included,
so ``make notebooks`` never produces a diff by itself. It also enforces DESIGN.md's budget of
30 s and 1.5 GB per notebook on the machine that runs the tests.
"""

import copy
from pathlib import Path

import nbformat
import pytest

from transformer_tutorial.book.notebooks import (
    BUDGET_MEMORY_MB,
    BUDGET_SECONDS,
    WIDGET_STATE,
    WIDGET_VIEW,
    _displayed_widget_state,
    _drop_hidden_widget_views,
    _stable_widget_ids,
    _stderr_outputs,
    _widget_views,
    execute_notebook,
)

CHAPTERS = sorted((Path(__file__).parents[1] / "chapters").glob("*.ipynb"))
DISPLAYED = {"image/png", "image/svg+xml", "text/html"}  # outputs myst-nb shows as a figure


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
        if "figure" in cell.metadata.get("mystnb", {}):
            # myst-nb makes every displayed output of the cell a figure with the cell's name,
            # and the -W build fails on the duplicate: a table goes in a cell of its own
            shown = [output for output in cell.outputs if DISPLAYED & set(output.get("data", {}))]
            assert len(shown) == 1, f"{cell.id}: a figure cell displays {len(shown)} outputs"
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for view in _widget_views(notebook):
        assert view in state, "a widget view without saved state (model not found): make notebooks"
    pruned = _displayed_widget_state(copy.deepcopy(notebook))
    kept = pruned.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    hidden = len(state) - len(kept)  # saved for nothing: myst-nb would load the widget manager
    assert hidden == 0, f"state of {hidden} widgets the site does not show: run make notebooks"


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


def _notebook_with_widgets(tags: list[str]) -> nbformat.NotebookNode:
    """A displayed or removed VBox (with a Text child, their layouts, a jslink to a slider)."""
    notebook = nbformat.v4.new_notebook()
    hidden = nbformat.v4.new_code_cell("slider", metadata={"tags": ["remove-output"]})
    cell = nbformat.v4.new_code_cell("box", metadata={"tags": tags})
    for code_cell, model_id in [(hidden, "slider"), (cell, "box")]:
        data = {WIDGET_VIEW: {"model_id": model_id}, "text/plain": model_id}
        code_cell.outputs = [nbformat.v4.new_output("display_data", data=data)]
    notebook.cells = [hidden, cell]

    def model(name: str, **state: object) -> dict:
        return {"model_name": name, "model_module": "@jupyter-widgets/controls", "state": state}

    notebook.metadata["widgets"] = {
        WIDGET_STATE: {
            "state": {
                "box": model("VBoxModel", children=["IPY_MODEL_text"], layout="IPY_MODEL_l1"),
                "l1": model("LayoutModel"),
                "text": model("TextModel", layout="IPY_MODEL_l2"),
                "l2": model("LayoutModel"),
                "link": model(
                    "LinkModel",
                    source=["IPY_MODEL_text", "value"],
                    target=["IPY_MODEL_box", "value"],
                ),
                "slider": model("IntSliderModel", layout="IPY_MODEL_l3"),
                "l3": model("LayoutModel"),
                "link_to_slider": model(
                    "LinkModel",
                    source=["IPY_MODEL_text", "value"],
                    target=["IPY_MODEL_slider", "value"],
                ),
            },
            "version_major": 2,
            "version_minor": 0,
        }
    }
    return notebook


def test_widget_state_is_kept_for_displayed_views_and_what_they_use():
    notebook = _displayed_widget_state(_notebook_with_widgets(tags=["hide-input"]))
    state = notebook.metadata["widgets"][WIDGET_STATE]["state"]
    assert list(state) == ["box", "l1", "text", "l2", "link"]  # in creation order
    assert _widget_views(notebook, displayed_only=True) == ["box"]
    assert _widget_views(notebook) == ["slider", "box"]


@pytest.mark.parametrize("tag", ["remove-output", "remove-cell"])
def test_no_widget_state_when_the_site_shows_no_widget(tag):
    notebook = _displayed_widget_state(_notebook_with_widgets(tags=[tag]))
    assert "widgets" not in notebook.metadata  # myst-nb then loads no widget manager
    assert _widget_views(notebook) == ["slider", "box"]  # outputs stay, for JupyterLab and nbval


def test_views_without_saved_state_get_stable_ids_too():
    notebook = _displayed_widget_state(_notebook_with_widgets(tags=["remove-output"]))
    renamed = _stable_widget_ids(notebook, "chapter")
    assert _widget_views(renamed) == [
        _widget_views(_stable_widget_ids(copy.deepcopy(notebook), "chapter"))[index]
        for index in range(2)
    ]
    assert not {"slider", "box"} & set(_widget_views(renamed))


def test_views_of_removed_outputs_keep_their_text_only():
    notebook = _displayed_widget_state(_notebook_with_widgets(tags=["remove-output"]))
    notebook = _drop_hidden_widget_views(notebook)
    assert "widgets" not in notebook.metadata
    for cell, text in zip(notebook.cells, ["slider", "box"], strict=True):
        assert cell.outputs[0]["data"] == {"text/plain": text}
    shown = _drop_hidden_widget_views(_notebook_with_widgets(tags=[]))
    assert shown.cells[1].outputs[0]["data"][WIDGET_VIEW] == {"model_id": "box"}
