"""Tests for transformer_tutorial.widgets: the explorer's data, chart and live view."""

import json
import re

import altair as alt
import ipywidgets as ipw
import numpy as np
import pytest

from transformer_tutorial import widgets
from transformer_tutorial.positional_encoding import sinusoidal_encoding
from transformer_tutorial.widgets.positional import DECIMALS


def _params(spec):
    return {param["name"]: param for param in spec["params"]}


def test_explorer_data_holds_the_tested_tables():
    data = widgets.positional_explorer_data((8, 16), max_len=12)
    assert len(data["table"]) == len(data["similarity"]) == 2 * 12
    for row in data["table"]:
        expected = sinusoidal_encoding(12, row["d"])[row["p"]]
        np.testing.assert_allclose(row["v"], expected, atol=10**-DECIMALS / 2)
    for row in data["similarity"]:
        table = sinusoidal_encoding(12, row["d"])
        np.testing.assert_allclose(row["s"], table @ table[row["p"]], atol=10**-DECIMALS / 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_models": ()}, "d_models is empty"),
        ({"d_models": (8, 8)}, "d_models has repeats"),
        ({"d_models": (7,)}, "d_model must be even"),
    ],
)
def test_explorer_data_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        widgets.positional_explorer_data(max_len=4, **kwargs)


def test_explorer_controls_are_browser_side_parameters():
    spec = widgets.positional_explorer((16, 32), max_len=20, start_a=3, start_b=9).to_dict()
    params = _params(spec)
    assert params["d_model"]["bind"] == {"input": "select", "options": [16, 32], "name": "d_model "}
    assert params["d_model"]["value"] == 32
    for name, start in (("pos_a", 3), ("pos_b", 9)):
        assert params[name]["value"] == start
        assert params[name]["bind"]["input"] == "range"
        assert (params[name]["bind"]["min"], params[name]["bind"]["max"]) == (0, 19)
    # every panel filters on the parameters, so the browser recomputes without a kernel
    text = json.dumps(spec)
    for expression in ("datum.d == d_model", "pos_a", "pos_b"):
        assert expression in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_d_model": 24}, "start_d_model=24 is not one of"),
        ({"start_a": 50}, r"start_a=50 is outside the positions 0..49"),
        ({"start_b": -1}, "start_b=-1 is outside"),
    ],
)
def test_explorer_rejects_bad_start(kwargs, message):
    with pytest.raises(ValueError, match=message):
        widgets.positional_explorer(**kwargs)


def test_chart_bundle_is_deterministic_and_self_contained():
    chart = widgets.positional_explorer((8,), max_len=6)
    first = widgets.chart_bundle(chart)
    second = widgets.chart_bundle(widgets.positional_explorer((8,), max_len=6))
    assert first == second
    element_id = re.search(r'<div id="(vega-[0-9a-f]{16})"></div>', first["text/html"]).group(1)
    assert first["text/plain"] == f"<Vega-Lite chart {element_id}>"
    assert '{"renderer": "svg", "actions": false' in first["text/html"]
    other = widgets.chart_bundle(widgets.positional_explorer((8,), max_len=7))
    assert element_id not in other["text/html"]


def test_book_renderer_is_used_for_display():
    previous = alt.renderers.active
    try:
        widgets.use_book_renderer()
        chart = widgets.positional_explorer((8,), max_len=6)
        bundle = chart._repr_mimebundle_()
        bundle = bundle[0] if isinstance(bundle, tuple) else bundle
        assert bundle["text/html"] == widgets.chart_bundle(chart)["text/html"]
    finally:
        alt.renderers.enable(previous)


def test_live_view_shows_the_bundle_of_its_chart():
    view = widgets.live_positional_explorer(d_model=8, max_len=10)
    (output,) = view.output.outputs
    assert output["output_type"] == "display_data"
    assert output["data"] == widgets.chart_bundle(view.chart)


def test_live_explorer_redraws_when_a_control_changes():
    view = widgets.live_positional_explorer(d_model=8, max_len=10)
    spec = view.chart.to_dict()
    assert _params(spec)["d_model"]["value"] == 8
    view.controls["d_model"].value = 12
    spec = view.chart.to_dict()
    assert _params(spec)["d_model"]["bind"]["options"] == [12]
    (rows,) = [rows for rows in spec["datasets"].values() if "v" in rows[0]]
    assert len(rows) == 10 and len(rows[0]["v"]) == 12
    view.controls["max_len"].value = 4
    assert _params(view.chart.to_dict())["pos_b"]["value"] == 3  # start positions follow the length


def test_live_view_shows_errors_as_escaped_text_and_keeps_the_chart():
    view = widgets.live_positional_explorer(d_model=8, max_len=10)
    before = view.output.outputs
    view.controls["d_model"].value = 9  # odd: the module refuses it
    assert "d_model must be even" in view.message.value
    assert view.output.outputs == before
    view.controls["d_model"].value = 10
    assert view.message.value == ""


def test_live_view_escapes_html_in_messages():
    def draw(text):
        if text.startswith("<"):
            raise ValueError(f"bad text {text}")
        return widgets.positional_explorer((8,), max_len=4, start_a=0, start_b=1)

    view = widgets.LiveView({"text": ipw.Text("ok")}, draw)
    view.controls["text"].value = "<b>x</b>"
    assert "&lt;b&gt;x&lt;/b&gt;" in view.message.value and "<b>" not in view.message.value


def test_live_view_needs_controls():
    with pytest.raises(ValueError, match="controls is empty"):
        widgets.LiveView({}, lambda: None)
