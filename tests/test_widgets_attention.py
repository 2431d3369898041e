"""Tests for transformer_tutorial.views.explorers.attention: the attention-heatmap explorer."""

import json
import re

import ipywidgets as ipw
import numpy as np
import pytest

from transformer_tutorial.model.attention import softmax
from transformer_tutorial.views import explorers
from transformer_tutorial.views.explorers import attention
from transformer_tutorial.views.explorers.attention import DECIMALS


def _record(
    label="a sentence",
    tokens=("the", "cat", "saw", "the", "dog"),
    layers=2,
    heads=3,
    seed=0,
    **kwargs,
):
    rng = np.random.default_rng(seed)
    keys = kwargs.get("key_tokens") or tokens
    weights = softmax(rng.normal(size=(layers, heads, len(tokens), len(keys))))  # (L, H, T, S)
    return explorers.AttentionRecord(label, list(tokens), weights, **kwargs)


def _params(spec):
    return {param["name"]: param for param in spec["params"]}


def test_data_holds_every_weight_of_every_record():
    records = [_record("first"), _record("second", tokens=("i", "eat", "pizza"), seed=1)]
    data = explorers.attention_explorer_data(records)
    assert len(data["weights"]) == 2 * 3 * 5 + 2 * 3 * 3  # one row per (layer, head, query)
    for row in data["weights"]:
        expected = records[row["r"]].weights[row["l"], row["h"], row["q"]]
        np.testing.assert_allclose(row["w"], expected, atol=10**-DECIMALS / 2)
    assert data["tokens"] == [
        {
            "r": 0,
            "qt": ["the", "cat", "saw", "the", "dog"],
            "kt": ["the", "cat", "saw", "the", "dog"],
        },
        {"r": 1, "qt": ["i", "eat", "pizza"], "kt": ["i", "eat", "pizza"]},
    ]


def test_cross_attention_keeps_its_key_tokens():
    record = _record(tokens=("le", "chat"), key_tokens=["the", "black", "cat"])
    (tokens,) = explorers.attention_explorer_data([record])["tokens"]
    assert tokens["kt"] == ["the", "black", "cat"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"weights": np.ones((2, 5, 5)) / 5}, r"shape \(layers, heads, T, S\)"),
        ({"tokens": ["a", "b"]}, "2 tokens but weights have T = 5"),
        ({"key_tokens": ["a"]}, "1 key_tokens but weights have S = 5"),
        ({"weights": np.full((1, 1, 5, 5), 0.3)}, "must sum to 1"),
        ({"weights": -np.eye(5)[None, None]}, "finite and non-negative"),
        ({"weights": np.zeros((1, 0, 5, 5))}, "are empty"),
        ({"layer_names": ["only one"]}, "1 layer_names for 2 layers"),
        ({"label": ""}, "non-empty string"),
    ],
)
def test_bad_records_are_refused(change, message):
    record = _record()
    for name, value in change.items():
        setattr(record, name, value)
    with pytest.raises(ValueError, match=message):
        explorers.attention_explorer([record])


def test_records_must_be_compatible_and_uniquely_labelled():
    with pytest.raises(ValueError, match="records is empty"):
        explorers.attention_explorer([])
    with pytest.raises(ValueError, match=r"unique .*\['same'\]"):
        explorers.attention_explorer([_record("same"), _record("same")])
    with pytest.raises(ValueError, match=r"same \(layers, heads\)"):
        explorers.attention_explorer([_record("a"), _record("b", heads=2)])


def test_controls_are_browser_side_parameters():
    records = [_record("first"), _record("second", seed=1), _record("third", seed=2)]
    spec = explorers.attention_explorer(records, start=1, start_layer=1, start_head=2).to_dict()
    params = _params(spec)
    assert params["sentence"]["value"] == 1
    assert params["sentence"]["bind"]["options"] == [0, 1, 2]
    assert params["sentence"]["bind"]["labels"] == ["first", "second", "third"]
    assert params["layer"]["value"] == 1
    assert params["layer"]["bind"]["labels"] == ["layer 1", "layer 2"]
    assert params["head"]["value"] == 3  # counted from 1 on the page
    assert (params["head"]["bind"]["min"], params["head"]["bind"]["max"]) == (1, 3)
    assert params["tokens_q"]["value"][0] == ["the", "cat", "saw", "the", "dog"]
    text = json.dumps(spec)
    for expression in ("datum.r == sentence && datum.l == layer", "datum.h + 1 == head"):
        assert expression in text
    assert '"scheme": "cividis"' in text and '"domain": [0, 1]' in text
    # the all-heads grid: a facet over heads under the chosen head's heatmap
    assert "facet" in spec["vconcat"][1]
    main = spec["vconcat"][0]["hconcat"][1]  # placed by its left edge, beside a 1 px spacer
    assert main["title"] == "The chosen head"
    # one model: the page's limits are the same for every sentence
    assert spec["usermeta"]["limits"] == {
        "layer": {"by": "sentence", "max": [1, 1, 1]},
        "head": {"by": "sentence", "max": [3, 3, 3]},
    }
    assert "the chosen head" in spec["description"]


def test_the_grid_names_each_head_and_draws_no_token_labels():
    spec = explorers.attention_explorer([_record(heads=12)]).to_dict()
    grid = spec["vconcat"][1]
    assert grid["columns"] == 4
    header = grid["facet"]["header"]
    assert header["labelExpr"] == "'head ' + datum.value" and header["labelFontSize"] >= 11
    assert grid["spec"]["encoding"]["x"]["axis"] is None
    assert grid["spec"]["encoding"]["y"]["axis"] is None


@pytest.mark.parametrize("length", [2, 8, 15, 40])
def test_cells_shrink_with_the_longest_sentence(length):
    record = _record(tokens=tuple(f"word{i}" for i in range(length)), heads=12)
    spec = explorers.attention_explorer([record]).to_dict()
    main, grid = spec["vconcat"][0]["hconcat"][1], spec["vconcat"][1]
    step, small = main["width"]["step"], grid["spec"]["width"]["step"]
    assert 8 <= step <= 26 and 2 <= small <= 12
    if step > 8:  # the big heatmap and its labels fit the column
        assert step * length + 26 <= attention.MAX_WIDTH
    # four small heatmaps side by side fit the column too
    assert 4 * small * length + 3 * attention.GRID_SPACING <= attention.MAX_WIDTH or small == 2


def test_repeated_tokens_are_distinct_cells():
    spec = explorers.attention_explorer([_record()]).to_dict()
    text = json.dumps(spec)
    # the axes are positions (q, k), labelled with the text; the tooltip names both
    assert '"field": "q"' in text and '"field": "k"' in text
    assert "datum.q + ': ' + datum.qt[datum.q]" in text


@pytest.mark.parametrize(("name", "value"), [("start", 3), ("start_layer", 2), ("start_head", -1)])
def test_start_values_are_checked(name, value):
    with pytest.raises(ValueError, match=f"{name}={value} is outside"):
        explorers.attention_explorer([_record()], **{name: value})


def test_layer_names_fill_the_menu():
    record = _record(layer_names=["embedding mix", "top"])
    spec = explorers.attention_explorer([record]).to_dict()
    assert _params(spec)["layer"]["bind"]["labels"] == ["embedding mix", "top"]


def test_markup_in_tokens_stays_data():
    record = _record(label="<b>bold</b>", tokens=("<b>x</b>", "&", "y"))
    chart = explorers.attention_explorer([record])
    # the text is data for Vega (SVG text, escaped tooltips), and never markup in the page
    assert '"<b>x</b>"' in json.dumps(chart.to_dict())
    assert "<b>" not in explorers.chart_bundle(chart)["text/html"]


def test_bundle_is_deterministic_and_small():
    records = [
        _record(
            f"sentence {i}", tokens=tuple(f"w{j}" for j in range(15)), layers=6, heads=12, seed=i
        )
        for i in range(4)
    ]
    first = explorers.chart_bundle(explorers.attention_explorer(records))
    assert first == explorers.chart_bundle(explorers.attention_explorer(records))
    size = len(first["text/html"].encode())
    assert size < 1_000_000, f"4 sentences × 6 layers × 12 heads × 15 tokens take {size} bytes"


def test_live_explorer_recomputes_from_the_text_box():
    def compute(sentence):
        words = sentence.split()
        if not words:
            raise ValueError("sentence has no words")
        weights = np.full((1, 2, len(words), len(words)), 1 / len(words))
        return explorers.AttentionRecord(sentence, words, weights)

    view = explorers.live_attention_explorer(compute, "a b c")
    assert _params(view.chart.to_dict())["tokens_q"]["value"] == [["a", "b", "c"]]
    view.controls["sentence"].value = "<b>x</b> y"
    assert _params(view.chart.to_dict())["tokens_q"]["value"] == [["<b>x</b>", "y"]]
    before = view.output.outputs
    view.controls["sentence"].value = "   "
    assert "sentence has no words" in view.message.value
    assert view.output.outputs == before
    assert isinstance(view.controls["sentence"], ipw.Text)


def test_live_message_escapes_markup():
    def compute(sentence):
        raise ValueError(f"unknown word {sentence}")

    view = explorers.live_attention_explorer(compute, "<b>x</b>")
    assert "&lt;b&gt;x&lt;/b&gt;" in view.message.value and "<b>x" not in view.message.value


# --- records of several models (a toy model beside a real one) --------------------------------


def _two_models():
    toy = [
        _record("toy a", layers=2, heads=2, seed=0, model="toy"),
        _record("toy b", tokens=("i", "eat", "pizza"), layers=2, heads=2, seed=1, model="toy"),
    ]
    real = [_record("real", layers=6, heads=12, seed=2, model="real model")]
    return toy + real


def test_records_of_different_models_may_differ_in_shape():
    records = _two_models()
    spec = explorers.attention_explorer(records, start=2, start_layer=5, start_head=11).to_dict()
    params = _params(spec)
    assert params["layer"]["bind"]["labels"] == [f"layer {i}" for i in range(1, 7)]
    assert (params["head"]["bind"]["min"], params["head"]["bind"]["max"]) == (1, 12)
    assert params["record_layers"]["value"] == [2, 2, 6]
    assert params["record_heads"]["value"] == [2, 2, 12]
    # a record with fewer layers or heads shows its last one
    assert params["shown_layer"]["expr"] == "min(layer, record_layers[sentence] - 1)"
    assert params["shown_head"]["expr"] == "min(head, record_heads[sentence])"
    text = json.dumps(spec)
    assert "datum.r == sentence && datum.l == shown_layer" in text
    assert "datum.h + 1 == shown_head" in text
    # the line above the heatmap names the model and its size
    (note,) = [panel for panel in spec["vconcat"] if panel.get("mark", {}).get("type") == "text"]
    assert "datum.nt + '\\nshowing ' + datum.ln[shown_layer]" in note["transform"][1]["calculate"]
    names = [row["nt"] for row in spec["datasets"].values() for row in row if "nt" in row]
    assert names == ["toy: 2 layers × 2 heads;"] * 2 + ["real model: 6 layers × 12 heads;"]
    # the page narrows the layer menu and the head slider to each sentence's model
    assert spec["usermeta"]["limits"] == {
        "layer": {"by": "sentence", "max": [1, 1, 5]},
        "head": {"by": "sentence", "max": [2, 2, 12]},
    }
    tokens = explorers.attention_explorer_data(records)["tokens"]
    assert [(row["m"], row["nl"], row["nh"]) for row in tokens] == [
        ("toy", 2, 2), ("toy", 2, 2), ("real model", 6, 12)
    ]  # fmt: skip
    assert tokens[2]["ln"] == [f"layer {i}" for i in range(1, 7)]


def test_one_model_keeps_the_plain_explorer():
    spec = explorers.attention_explorer([_record("a"), _record("b", seed=1)]).to_dict()
    assert {"record_layers", "shown_layer", "shown_head"}.isdisjoint(_params(spec))
    assert "shown_layer" not in json.dumps(spec) and len(spec["vconcat"]) == 2
    (row, _) = explorers.attention_explorer_data([_record("a"), _record("b", seed=1)])["tokens"]
    assert set(row) == {"r", "qt", "kt"}


def test_records_of_one_model_must_still_agree():
    with pytest.raises(ValueError, match=r"every record of 'toy' needs the same \(layers, heads\)"):
        explorers.attention_explorer(
            [_record("a", model="toy"), _record("b", heads=2, model="toy")]
        )
    with pytest.raises(ValueError, match="model must be None or a non-empty string"):
        explorers.attention_explorer([_record("a", model=" ")])


def test_a_model_without_a_name_is_called_this_model():
    records = [_record("a", model="real", layers=3), _record("b", heads=2)]
    tokens = explorers.attention_explorer_data(records)["tokens"]
    assert [row["m"] for row in tokens] == ["real", "this model"]


def test_datasets_are_added_after_validation_and_survive_copies():
    records = _two_models()
    chart = explorers.attention_explorer(records)
    spec = chart.to_dict(validate=True)  # the whole structure is valid Vega-Lite
    data = explorers.attention_explorer_data(records)
    shipped = [rows for rows in spec["datasets"].values() if rows]  # not the spacer's []
    assert sorted(map(json.dumps, shipped)) == sorted(map(json.dumps, data.values()))
    named = set(re.findall(r'"data": \{"name": "([^"]+)"\}', json.dumps(spec)))
    assert named == set(spec["datasets"])  # every reference has its data, nothing is extra
    copied = chart.configure_view(strokeWidth=1)  # Altair's methods copy the chart
    assert copied.to_dict()["datasets"] == spec["datasets"]
