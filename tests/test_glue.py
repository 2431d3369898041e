"""The book's glue: the cell says how a number is printed, and the notebook stores that text."""

import re
from pathlib import Path

import myst_nb
import nbformat
import numpy as np
import pytest
import torch

from transformer_tutorial.book.glue import glue

CHAPTERS = sorted((Path(__file__).parents[1] / "chapters").glob("*.ipynb"))


@pytest.fixture
def stored(monkeypatch):
    calls = {}

    def record(name, value, display=True):
        assert display is False
        calls[name] = value

    monkeypatch.setattr(myst_nb, "glue", record)
    return calls


def test_numbers_are_stored_as_the_prose_prints_them(stored):
    glue("share", 0.58949, ".2f")
    glue("rate", np.float64(0.9966), ".1%")
    glue("count", torch.tensor(60320), ",.0f")
    glue("gap", np.float32(1.25e-5), ".1e")
    glue("layer", 4)
    glue("word", "apple")
    assert stored == {
        "share": "0.59",
        "rate": "99.7%",
        "count": "60,320",
        "gap": "1.2e-05",
        "layer": 4,
        "word": "apple",
    }


def test_last_digits_that_differ_between_processors_do_not_reach_the_notebook(stored):
    glue("a", 0.6826295256614685, ".3f")
    glue("b", 0.6826293468475342, ".3f")  # the same share, computed on another CPU
    assert stored["a"] == stored["b"] == "0.683"


@pytest.mark.parametrize(
    ("name", "value", "fmt", "error", "message"),
    [
        ("a:b", 1, "", ValueError, "without ':'"),
        ("", 1, "", ValueError, "non-empty"),
        ("x", 0.5, "", ValueError, r"say how the float 0.5 is printed"),
        ("x", np.float64(0.5), "", ValueError, "say how the float"),
        ("x", True, "", TypeError, "a number or a string, got bool"),
        ("x", [1, 2], "", TypeError, "got list"),
        ("x", np.array([1.0, 2.0]), ".2f", TypeError, "got ndarray"),
    ],
)
def test_glue_refuses(stored, name, value, fmt, error, message):
    with pytest.raises(error, match=message):
        glue(name, value, fmt)
    assert stored == {}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_chapters_glue_through_the_book_and_print_in_the_cell(path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for key in re.findall(r"\{glue:text\}`([^`]*)`", cell.source):
                assert ":" not in key, f"format {key!r} in the prose: give it to glue() instead"
        else:
            assert "myst_nb" not in cell.source, "glue from transformer_tutorial.book.glue"
