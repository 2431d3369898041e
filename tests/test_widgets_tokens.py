"""Tests for transformer_tutorial.views.explorers.tokens: the nearest-neighbour explorer."""

import json

import pytest

from transformer_tutorial.views.explorers.render import chart_bundle
from transformer_tutorial.views.explorers.tokens import (
    DECIMALS,
    NeighbourRecord,
    live_neighbour_explorer,
    neighbour_explorer,
    neighbour_explorer_data,
)

RECORDS = [
    NeighbourRecord("cat", [("cats", 0.8153), ("kitten", 0.56), ("dog", 0.4239)]),
    NeighbourRecord("king", [("kings", 0.69), ("queen", 0.6271)]),
]


def _params(spec):
    return {param["name"]: param for param in spec["params"]}


def test_explorer_data_has_one_row_per_neighbour():
    rows = neighbour_explorer_data(RECORDS)
    assert rows == [
        {"r": 0, "k": 1, "t": "cats", "c": 0.815},
        {"r": 0, "k": 2, "t": "kitten", "c": 0.56},
        {"r": 0, "k": 3, "t": "dog", "c": 0.424},
        {"r": 1, "k": 1, "t": "kings", "c": 0.69},
        {"r": 1, "k": 2, "t": "queen", "c": 0.627},
    ]
    assert all(row["c"] == round(row["c"], DECIMALS) for row in rows)


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([], "records is empty"),
        ([RECORDS[0], RECORDS[0]], r"labels must be unique .*\['cat'\]"),
        ([NeighbourRecord("cat", [])], "'cat' has no neighbours"),
        ([NeighbourRecord("cat", [("dog", 1.5)])], r"must be a number in \[-1, 1\], got 1.5"),
        ([NeighbourRecord("cat", [("", 0.5)])], "token 1 must be a non-empty str"),
        ([NeighbourRecord("cat", [("a", 0.2), ("b", 0.5)])], "nearest first"),
    ],
)
def test_explorer_data_rejects_bad_records(records, message):
    with pytest.raises(ValueError, match=message):
        neighbour_explorer_data(records)


def test_word_menu_is_a_browser_side_parameter():
    spec = neighbour_explorer(RECORDS, start=1, baseline=0.22, baseline_label="99% below").to_dict()
    params = _params(spec)
    assert params["word"]["value"] == 1
    assert params["word"]["bind"] == {
        "input": "select",
        "options": [0, 1],
        "labels": ["cat", "king"],
        "name": "word ",
    }
    assert params["neighbour_tokens"]["value"] == [["cats", "kitten", "dog"], ["kings", "queen"]]
    text = json.dumps(spec)
    assert "datum.r == word" in text
    assert "neighbour_tokens[word][datum.value - 1]" in text
    assert '"strokeDash": [5, 4]' in text and "99% below" in text
    assert spec["title"]["text"] == "Nearest neighbours in the embedding table"


def test_no_baseline_no_line():
    text = json.dumps(neighbour_explorer(RECORDS).to_dict())
    assert "rule" not in text


def test_axis_reaches_below_zero_only_when_needed():
    def domain(spec):
        return spec["layer"][0]["encoding"]["x"]["scale"]["domain"]

    assert domain(neighbour_explorer(RECORDS).to_dict()) == [0.0, 1.0]
    negative = [NeighbourRecord("odd", [("a", 0.1), ("b", -0.23)])]
    assert domain(neighbour_explorer(negative).to_dict()) == [-0.3, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": 2}, r"start=2 is outside 0..1"),
        ({"baseline": 1.5}, r"baseline must be a cosine similarity in \[-1, 1\]"),
    ],
)
def test_explorer_rejects_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        neighbour_explorer(RECORDS, **kwargs)


def test_chart_bundle_is_deterministic():
    assert chart_bundle(neighbour_explorer(RECORDS)) == chart_bundle(neighbour_explorer(RECORDS))


def test_live_explorer_recomputes_and_reports_errors():
    def compute(word):
        if word not in ("cat", "king"):
            raise ValueError(f"word {word!r} is not one token of the vocabulary")
        return RECORDS[0] if word == "cat" else RECORDS[1]

    view = live_neighbour_explorer(compute, "cat", baseline=0.2)
    assert _params(view.chart.to_dict())["word"]["bind"]["labels"] == ["cat"]
    view.controls["word"].value = " king "
    assert _params(view.chart.to_dict())["word"]["bind"]["labels"] == ["king"]
    assert view.message.value == ""
    view.controls["word"].value = "tokenization"
    assert "is not one token" in view.message.value
    assert _params(view.chart.to_dict())["word"]["bind"]["labels"] == ["king"]  # kept


@pytest.mark.parametrize(
    ("baseline", "label", "lines", "align"),
    [
        (0.22, "99% below", 1, "left"),  # short: beside the line, on its right
        (0.95, "99% of random pairs are below", 1, "right"),  # near the end: on its left
        (0.5, "99% of random pairs of tokens are below this", 3, "left"),  # long: lines
    ],
)
def test_the_baseline_label_fits_beside_its_line(baseline, label, lines, align):
    spec = neighbour_explorer(RECORDS, baseline=baseline, baseline_label=label).to_dict()
    (text,) = [layer for layer in spec["layer"] if "line_text" in json.dumps(layer)]
    shown = text["transform"][0]["calculate"]
    assert shown.count("\\n") == lines - 1 and f"{baseline:.2f}" in shown
    assert text["mark"]["align"] == align
    # the chart is narrow enough for a phone, and says what it shows
    assert spec["width"] <= 200 and "dashed line" in spec["description"]
