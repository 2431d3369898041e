"""Tests for views/explorers/rnn.py: the gradient explorer's data, chart and live view."""

import json

import numpy as np
import pytest
import torch

from transformer_tutorial.model.rnn import RNNConfig, TanhRNN, orthogonal_recurrent_weight
from transformer_tutorial.studies.recurrence import hidden_state_jacobian_norms
from transformer_tutorial.views import explorers
from transformer_tutorial.views.explorers.rnn import SIGNIFICANT


def _params(spec):
    return {param["name"]: param for param in spec["params"]}


def test_explorer_data_holds_the_measured_norms():
    scales = {"small": 0.01, "big": 1.0}
    rows = explorers.gradient_explorer_data((0.5, 1.2), (5, 12), scales, hidden_size=6, seed=3)
    assert [(row["r"], row["x"], row["T"]) for row in rows] == [
        (r, x, n) for r in (0.5, 1.2) for x in ("small", "big") for n in (5, 12)
    ]
    # rebuild the explorer's RNN from the same seed and measure one curve independently
    generator = torch.Generator().manual_seed(3)
    rnn = TanhRNN(RNNConfig(8, 6), generator)
    orthogonal = orthogonal_recurrent_weight(6, 1.0, generator)
    noise = torch.randn(12, 8, generator=generator)
    with torch.no_grad():
        rnn.bias_ih_l0.zero_()
        rnn.bias_hh_l0.zero_()
        rnn.weight_hh_l0.copy_(1.2 * orthogonal)
    expected = hidden_state_jacobian_norms(rnn, 1.0 * noise[:5])
    (row,) = [row for row in rows if (row["r"], row["x"], row["T"]) == (1.2, "big", 5)]
    assert len(row["n"]) == 6 and row["n"][0] == 1.0
    np.testing.assert_allclose(row["n"], expected, rtol=10 ** (1 - SIGNIFICANT))


def test_explorer_data_small_inputs_follow_r_to_the_k():
    rows = explorers.gradient_explorer_data((0.6, 1.3), (30,), {"small": 1e-4}, hidden_size=8)
    for row in rows:
        np.testing.assert_allclose(row["n"], row["r"] ** np.arange(31), rtol=0.03)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (((), (5,)), "radii is empty"),
        (((0.5, 0.5), (5,)), "radii has repeats"),
        (((0.5,), ()), "lengths is empty"),
        (((0.5,), (0,)), r"every length must be an int in 1\.\.1000"),
        (((0.0,), (5,)), r"every radius must be in \(0, 10\]"),
    ],
)
def test_explorer_data_rejects_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        explorers.gradient_explorer_data(*args, hidden_size=4)


def test_explorer_controls_are_browser_side_parameters():
    chart = explorers.gradient_explorer((0.5, 0.7, 0.9, 1.1), (10, 20), hidden_size=4)
    spec = chart.to_dict()
    params = _params(spec)
    radius = params["radius"]
    assert radius["value"] == 0.9
    assert radius["bind"]["input"] == "range"
    assert (radius["bind"]["min"], radius["bind"]["max"]) == (0.5, 1.1)
    assert radius["bind"]["step"] == pytest.approx(0.2)
    assert params["length"]["bind"] == {"input": "select", "options": [10, 20], "name": "length T "}
    assert params["length"]["value"] == 20
    assert params["inputs"]["bind"]["options"] == ["small (0.01)", "ordinary (1)"]
    text = json.dumps(spec)
    for expression in ("abs(datum.r - radius) < 1e-6", "datum.T == length", "datum.x == inputs"):
        assert expression in text
    assert '"type": "log"' in text  # geometric decay is a straight line
    assert "tooltip" in text and "pointerover" in text


def test_uneven_radii_get_a_menu():
    spec = explorers.gradient_explorer((0.5, 1.5), (10,), hidden_size=4).to_dict()
    assert _params(spec)["radius"]["bind"]["input"] == "select"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_radius": 0.8}, "start_radius=0.8 is not one of"),
        ({"start_length": 7}, "start_length=7 is not one of"),
        ({"start_input": "huge"}, "start_input='huge' is not one of"),
    ],
)
def test_explorer_rejects_bad_start(kwargs, message):
    with pytest.raises(ValueError, match=message):
        explorers.gradient_explorer((0.5, 1.0), (10, 20), hidden_size=4, **kwargs)


def test_chart_bundle_is_deterministic():
    first = explorers.chart_bundle(explorers.gradient_explorer((0.5, 1.0), (10,), hidden_size=4))
    second = explorers.chart_bundle(explorers.gradient_explorer((0.5, 1.0), (10,), hidden_size=4))
    assert first == second


def test_live_explorer_redraws_and_reports_errors():
    view = explorers.live_gradient_explorer(radius=0.9, length=12)
    spec = view.chart.to_dict()
    assert _params(spec)["radius"]["value"] == 0.9
    (rows,) = [rows for rows in spec["datasets"].values() if "n" in rows[0]]
    assert {len(row["n"]) for row in rows} == {13}
    view.controls["length"].value = 30
    datasets = view.chart.to_dict()["datasets"].values()
    (rows,) = [rows for rows in datasets if "n" in rows[0]]
    assert {len(row["n"]) for row in rows} == {31}
    view.controls["radius"].value = 1.4
    assert _params(view.chart.to_dict())["radius"]["value"] == 1.4
    assert view.message.value == ""


def test_the_axes_keep_their_ticks_and_the_decades_follow_the_curves():
    chart = explorers.gradient_explorer((0.5, 1.0, 1.5), (10, 40), hidden_size=4)
    spec = chart.to_dict()
    text = json.dumps(spec)
    # x is k / T with ticks at fixed fractions, labelled with k
    assert '"values": [0, 0.2, 0.4, 0.6, 0.8, 1]' in text
    assert "format(datum.value * length, '~r')" in text
    (decades,) = [rows for rows in spec["datasets"].values() if "e" in rows[0]]
    (curves,) = [rows for rows in spec["datasets"].values() if "n" in rows[0]]
    for row, curve in zip(decades, curves, strict=True):
        values = np.concatenate([curve["n"], curve["r"] ** np.arange(len(curve["n"]))])
        assert 10.0 ** row["lo"] <= values.min() and values.max() <= 10.0 ** row["hi"]
        assert 2 <= len(row["e"]) <= 7 and all(row["lo"] <= e <= row["hi"] for e in row["e"])
    assert "How much gradient survives" in spec["title"]["text"][0]
    assert "r of the recurrent weights" in spec["description"]
