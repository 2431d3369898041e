"""Tests for transformer_tutorial.views.explorers.apple: the "apple" embedding-shift explorer."""

import json
import re

import numpy as np
import pytest

from transformer_tutorial.views import explorers
from transformer_tutorial.views.explorers import apple

ANCHORS = [
    explorers.AnchorPoint("fruit", "fruit", (0.5, 3.0)),
    explorers.AnchorPoint("juice", "fruit", (2.5, 0.5)),
    explorers.AnchorPoint("mac", "technology", (6.0, 8.0)),
    explorers.AnchorPoint("os", "technology", (7.5, 7.5)),
]


def _records():
    return [
        explorers.ShiftRecord(
            "tech",
            "apple",
            np.array([[4.5, 4.5], [6.7, 6.5]]),
            ["my", "apple", "os"],
            np.array([0.1, 0.2, 0.7]),
        ),
        explorers.ShiftRecord(
            "fruit",
            "apple",
            np.array([[4.5, 4.5], [3.5, 3.0], [2.0, 1.5]]),
            ["apple", "juice"],
            np.array([0.25, 0.75]),
        ),
    ]


def _params(spec):
    return {param["name"]: param for param in spec["params"]}


def test_data_equals_the_inputs():
    data = explorers.apple_explorer_data(_records(), ANCHORS)
    assert [(row["word"], row["group"], row["x"], row["y"]) for row in data["anchors"]] == [
        ("fruit", "fruit", 0.5, 3.0),
        ("juice", "fruit", 2.5, 0.5),
        ("mac", "technology", 6.0, 8.0),
        ("os", "technology", 7.5, 7.5),
    ]
    assert [(row["r"], row["step"], row["x"], row["y"]) for row in data["paths"]] == [
        (0, 0, 4.5, 4.5),
        (0, 1, 6.7, 6.5),
        (1, 0, 4.5, 4.5),
        (1, 1, 3.5, 3.0),
        (1, 2, 2.0, 1.5),
    ]
    tech, fruit = data["ends"]
    assert (tech["x0"], tech["y0"], tech["x1"], tech["y1"]) == (4.5, 4.5, 6.7, 6.5)
    # the arrowhead turns clockwise from "up" toward the direction of the last step
    assert tech["angle"] == pytest.approx(np.degrees(np.arctan2(2.2, 2.0)), abs=0.05)
    assert fruit["angle"] == pytest.approx(np.degrees(np.arctan2(-1.5, -1.5)), abs=0.05)
    assert data["attention"][1] == {"r": 1, "tokens": ["apple", "juice"], "a": [0.25, 0.75]}


def test_preset_menu_is_a_browser_side_parameter():
    spec = explorers.apple_explorer(_records(), ANCHORS, start=1).to_dict()
    preset = _params(spec)["preset"]
    assert preset["value"] == 1
    assert preset["bind"]["options"] == [0, 1]
    assert preset["bind"]["labels"] == ["tech", "fruit"]
    assert _params(spec)["attention_tokens"]["value"] == [["my", "apple", "os"], ["apple", "juice"]]
    text = json.dumps(spec)
    assert "datum.r == preset" in text
    assert "'apple' (a ring)" in spec["description"]
    # one square domain on both axes, so angles and distances are true to the data
    domains = re.findall(r'"domain": \[(-?[0-9.]+), (-?[0-9.]+)\]', text)
    assert len(set(domains)) == 2  # the plane's (x and y share one) and the weight axis [0, 1]


def test_without_attention_there_is_no_bar_panel():
    record = explorers.ShiftRecord("only points", "apple", np.array([[0.0, 0.0], [1.0, 1.0]]))
    spec = explorers.apple_explorer([record], ANCHORS).to_dict()
    assert len(spec["vconcat"]) == 1


def _label_boxes(spec):
    """Every label's estimated box on the plane, in pixels: [(text, x0, y0, x1, y1)]."""
    plane = spec["vconcat"][0]["hconcat"][1]  # beside a 1 px spacer: placed by its left edge
    low, high = plane["layer"][0]["encoding"]["x"]["scale"]["domain"]
    scale = apple.PLANE_SIZE / (high - low)
    rows = [row for rows in spec["datasets"].values() for row in rows]
    labels = [(row["word"], row["lx"], row["ly"], False) for row in rows if "lx" in row]
    for row in rows:
        if "sx" in row:
            labels += [(row["static_text"], row["sx"], row["sy"], True),
                       (row["context_text"], row["cx"], row["cy"], True)]  # fmt: skip
    boxes = []
    for text, x, y, bold in labels:
        width = apple.text_width(text, apple.LABEL_FONT, bold)
        px, py = (x - low) * scale, (high - y) * scale
        height = apple.LABEL_FONT + 2
        boxes.append((text, px - width / 2, py - height / 2, px + width / 2, py + height / 2))
    return boxes


def _overlap(a, b):
    return min(a[3], b[3]) > max(a[1], b[1]) and min(a[4], b[4]) > max(a[2], b[2])


def test_close_anchor_labels_are_spread():
    words = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa")
    crowded = [explorers.AnchorPoint(word, "g", (4.0, 4.0)) for word in words]
    spec = explorers.apple_explorer(_records()[:1], crowded).to_dict()
    boxes = _label_boxes(spec)
    assert len(boxes) == len(words) + 2  # the anchors, and the static and in-context labels
    anchors = boxes[: len(words)]
    assert not any(_overlap(a, b) for i, a in enumerate(anchors) for b in anchors[i + 1 :])
    # ten labels do not all fit next to one point: those set further away get a leader line
    (leaders,) = [rows for rows in spec["datasets"].values() if rows and "x2" in rows[0]]
    assert sum(row["r"] == -1 for row in leaders) >= 2


def test_labels_of_each_preset_overlap_nothing_and_stay_on_the_plane():
    spec = explorers.apple_explorer(_records(), ANCHORS).to_dict()
    boxes = _label_boxes(spec)
    anchors, ends = boxes[: len(ANCHORS)], boxes[len(ANCHORS) :]
    for preset in range(len(_records())):
        shown = anchors + ends[2 * preset : 2 * preset + 2]  # the preset's own two labels
        for i, a in enumerate(shown):
            assert -1 <= a[1] and a[3] <= apple.PLANE_SIZE + 1, a
            assert -1 <= a[2] and a[4] <= apple.PLANE_SIZE + 1, a
            assert not any(_overlap(a, b) for b in shown[i + 1 :]), a


def test_no_colour_that_a_dark_page_would_hide():
    text = json.dumps(explorers.apple_explorer(_records(), ANCHORS).to_dict())
    assert "#000000" not in text and '"black"' not in text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"trajectory": np.zeros((1, 2))}, r"shape \(n >= 2, 2\)"),
        ({"trajectory": np.zeros((2, 3))}, r"shape \(n >= 2, 2\)"),
        ({"trajectory": np.array([[0.0, np.nan], [1, 1]])}, "finite"),
        ({"attention": None}, "both tokens and attention"),
        ({"attention": np.array([0.5, 0.5])}, r"shape \(T,\) = \(3,\)"),
        ({"attention": np.array([0.5, 0.5, 0.5])}, "sum to 1"),
    ],
)
def test_bad_records_are_refused(change, message):
    record = _records()[0]
    for name, value in change.items():
        setattr(record, name, value)
    with pytest.raises(ValueError, match=message):
        explorers.apple_explorer([record], ANCHORS)


def test_bad_collections_are_refused():
    with pytest.raises(ValueError, match="records is empty"):
        explorers.apple_explorer([], ANCHORS)
    with pytest.raises(ValueError, match="anchors is empty"):
        explorers.apple_explorer(_records(), [])
    with pytest.raises(ValueError, match=r"repeated: \['tech'\]"):
        explorers.apple_explorer([_records()[0], _records()[0]], ANCHORS)
    with pytest.raises(ValueError, match="must be 2 finite numbers"):
        explorers.apple_explorer(_records(), [explorers.AnchorPoint("x", "g", (1.0, 2.0, 3.0))])
    with pytest.raises(ValueError, match="start=2 is outside"):
        explorers.apple_explorer(_records(), ANCHORS, start=2)


def test_bundle_is_deterministic():
    first = explorers.chart_bundle(explorers.apple_explorer(_records(), ANCHORS))
    assert first == explorers.chart_bundle(explorers.apple_explorer(_records(), ANCHORS))
    assert len(first["text/html"].encode()) < 50_000


def test_live_explorer_recomputes_and_escapes_errors():
    def compute(sentence):
        words = sentence.split()
        if "apple" not in words:
            raise ValueError(f"'apple' is not in {sentence!r}")
        return explorers.ShiftRecord(sentence, "apple", np.array([[0.0, 0.0], [len(words), 1.0]]))

    view = explorers.live_apple_explorer(compute, ANCHORS, "my apple")
    assert _params(view.chart.to_dict())["preset"]["bind"]["labels"] == ["my apple"]
    view.controls["sentence"].value = "apple <b>x</b> os"
    assert _params(view.chart.to_dict())["preset"]["bind"]["labels"] == ["apple <b>x</b> os"]
    before = view.output.outputs
    view.controls["sentence"].value = "<i>pear</i>"
    assert "&lt;i&gt;pear&lt;/i&gt;" in view.message.value and "<i>" not in view.message.value
    assert view.output.outputs == before


def test_the_plane_can_be_renamed():
    default = explorers.apple_explorer(_records(), ANCHORS).to_dict()
    assert default["vconcat"][0]["hconcat"][1]["title"] == ["Static vector → contextual vector"]
    spec = explorers.apple_explorer(
        _records(), ANCHORS, plane_title="Layer by layer", axis_titles=("fruit", "tech")
    ).to_dict()
    assert spec["vconcat"][0]["hconcat"][1]["title"] == ["Layer by layer"]
    assert '"title": "fruit"' in json.dumps(spec)
