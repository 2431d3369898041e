"""The gradient explorer (chapter "Why not RNNs?").

How much of a gradient arriving at the last hidden state ``h_T`` survives the trip back to
``h_(T-k)``: the norm ``||dh_T / dh_(T-k)||`` measured by
:func:`~transformer_tutorial.studies.recurrence.hidden_state_jacobian_norms` for a tanh RNN whose
recurrent weight is ``r`` times a random orthogonal matrix, against the linear prediction ``r^k``.

A slider picks the scale ``r`` (the spectral radius), menus pick the sequence length ``T`` and
the size of the inputs; the y axis is logarithmic, so geometric decay is a straight line. Every
curve is computed in Python at build time and the chart switches between them in the browser.
:func:`live_gradient_explorer` recomputes for any ``r`` and ``T`` in a kernel.
"""

import math
from collections.abc import Sequence

import altair as alt
import ipywidgets as ipw
import numpy as np
import torch

from transformer_tutorial.model.rnn import RNNConfig, TanhRNN, orthogonal_recurrent_weight
from transformer_tutorial.studies.recurrence import jacobian_norms_by_length
from transformer_tutorial.views.explorers.live import LiveView
from transformer_tutorial.views.plots import OKABE_ITO

__all__ = ["gradient_explorer", "gradient_explorer_data", "live_gradient_explorer"]

SIGNIFICANT = 4  # significant digits shipped to the page (the y axis spans 40 decades)
INPUT_SCALES = {"small (0.01)": 0.01, "ordinary (1)": 1.0}  # std of the random inputs x_t
WIDTH = 280  # pixels: the plot, so that the chart fits a phone's 358 px text column
GRID_GREY = "#888888"  # the decades' lines (drawn faint): visible on light and dark pages


def _rounded(values: np.ndarray) -> list[float]:
    return [float(f"{value:.{SIGNIFICANT}g}") for value in values]


def gradient_explorer_data(
    radii: Sequence[float],
    lengths: Sequence[int],
    input_scales: dict[str, float] | None = None,
    hidden_size: int = 32,
    input_size: int = 8,
    seed: int = 0,
) -> list[dict]:
    """One row per (radius, length, input scale): ``{"r", "T", "x", "n"}`` where ``n[k]`` is
    ``||dh_T / dh_(T-k)||_2`` for ``k = 0 .. T``.

    The same RNN (weights from ``seed``, biases zero) and the same input sequence are used
    throughout; only ``W_hh = r Q`` changes with ``r``, and length ``T`` reads the first ``T``
    inputs, so curves differ only in what the controls change.
    """
    input_scales = INPUT_SCALES if input_scales is None else input_scales
    for name, values in (("radii", radii), ("lengths", lengths), ("input_scales", input_scales)):
        if len(values) == 0:
            raise ValueError(f"{name} is empty: give at least one value")
        if len(set(values)) != len(values):
            raise ValueError(f"{name} has repeats: {list(values)}")
    for length in lengths:
        if not isinstance(length, (int, np.integer)) or not 1 <= length <= 1000:
            raise ValueError(f"every length must be an int in 1..1000, got {length!r}")
    generator = torch.Generator().manual_seed(seed)
    rnn = TanhRNN(RNNConfig(input_size, hidden_size), generator)
    orthogonal = orthogonal_recurrent_weight(hidden_size, 1.0, generator)  # Q (D, D)
    noise = torch.randn(max(lengths), input_size, generator=generator)  # (T, E)
    with torch.no_grad():
        rnn.bias_ih_l0.zero_()
        rnn.bias_hh_l0.zero_()
    rows = []
    for radius in radii:
        if not 0 < radius <= 10:
            raise ValueError(f"every radius must be in (0, 10], got {radius!r}")
        with torch.no_grad():
            rnn.weight_hh_l0.copy_(radius * orthogonal)
        for label, scale in input_scales.items():
            by_length = jacobian_norms_by_length(rnn, scale * noise, lengths)
            for length in lengths:
                norms = np.maximum(by_length[length], 1e-300)  # a log axis cannot show 0
                rows.append(
                    {"r": float(radius), "T": int(length), "x": label, "n": _rounded(norms)}
                )
    return rows


def _uniform_steps(values: Sequence[float]) -> float | None:
    """The common step of an evenly spaced, increasing grid with 3 or more values, else None."""
    if len(values) < 3:
        return None
    steps = np.diff(np.asarray(values, dtype=float))
    return float(steps[0]) if steps[0] > 0 and np.allclose(steps, steps[0]) else None


def gradient_explorer(
    radii: Sequence[float] = tuple(np.round(np.arange(0.5, 1.51, 0.1), 2)),
    lengths: Sequence[int] = (10, 20, 50, 100),
    *,
    input_scales: dict[str, float] | None = None,
    start_radius: float | None = None,
    start_length: int | None = None,
    start_input: str | None = None,
    hidden_size: int = 32,
    seed: int = 0,
) -> alt.LayerChart:
    """The explorer as one Vega-Lite chart; every control is a Vega-Lite parameter.

    The radius is a slider when the grid is evenly spaced (a menu otherwise); the length and
    the input size are menus. Starts at ``r = 0.9``-ish (the grid value nearest), the longest
    length and the ordinary inputs unless told otherwise.
    """
    input_scales = INPUT_SCALES if input_scales is None else input_scales
    radii = [float(radius) for radius in radii]
    if start_radius is None and radii:
        start_radius = min(radii, key=lambda radius: abs(radius - 0.9))
    start_length = max(lengths) if start_length is None and lengths else start_length
    start_input = list(input_scales)[-1] if start_input is None and input_scales else start_input
    data = gradient_explorer_data(radii, lengths, input_scales, hidden_size, seed=seed)
    if start_radius not in radii:
        raise ValueError(f"start_radius={start_radius} is not one of radii={radii}")
    if start_length not in lengths:
        raise ValueError(f"start_length={start_length} is not one of lengths={list(lengths)}")
    if start_input not in input_scales:
        raise ValueError(f"start_input={start_input!r} is not one of {list(input_scales)}")

    step = _uniform_steps(radii)
    radius_binding = (
        alt.binding_range(min=min(radii), max=max(radii), step=step, name="scale r of W_hh ")
        if step is not None
        else alt.binding_select(options=radii, name="scale r of W_hh ")
    )
    radius = alt.param(name="radius", value=start_radius, bind=radius_binding)
    length = alt.param(
        name="length",
        value=int(start_length),
        bind=alt.binding_select(options=[int(n) for n in lengths], name="length T "),
    )
    inputs = alt.param(
        name="inputs",
        value=start_input,
        bind=alt.binding_select(options=list(input_scales), name="inputs "),
    )

    curves = (
        alt.Chart(alt.InlineData(values=data))
        .transform_filter("abs(datum.r - radius) < 1e-6 && datum.T == length && datum.x == inputs")
        .transform_calculate(k_list="sequence(0, length(datum.n))")
        .transform_flatten(["n", "k_list"], as_=["norm", "k"])
        .transform_calculate(
            linear="pow(datum.r, datum.k)", t="datum.T - datum.k", k_share="datum.k / datum.T"
        )
        .transform_fold(["norm", "linear"], as_=["which", "value"])
        .transform_calculate(
            curve="datum.which == 'norm' ? 'measured ||∂h_T/∂h_t||' : 'r^k (linear RNN)'"
        )
    )
    colour = alt.Color(
        "curve:N",
        scale=alt.Scale(
            domain=["measured ||∂h_T/∂h_t||", "r^k (linear RNN)"],
            range=[OKABE_ITO[0], OKABE_ITO[3]],
        ),
        legend=alt.Legend(title=None, orient="bottom", direction="vertical", symbolType="stroke"),
    )
    dash = alt.StrokeDash(
        "curve:N",
        scale=alt.Scale(
            domain=["measured ||∂h_T/∂h_t||", "r^k (linear RNN)"], range=[[1, 0], [5, 4]]
        ),
        legend=None,
    )
    # Both axes keep the same tick items whatever the controls do (Vega keeps a tick that stays
    # and appends those that come back, so changing axes would draw the same picture in another
    # order in the markup): x is k / T with ticks at fixed fractions, labelled with k; the log
    # y axis has no ticks of its own, its decades are drawn by the layers `decades` below.
    x = alt.X(
        "k_share:Q",
        title=["distance k = T − t", "(steps back from the last hidden state)"],
        scale=alt.Scale(domain=[0, 1], nice=False),
        axis=alt.Axis(
            values=[0, 0.2, 0.4, 0.6, 0.8, 1],
            labelExpr="format(datum.value * length, '~r')",
            aria=False,  # its domain is k / T: no description of it
        ),
    )
    y = alt.Y(
        "value:Q",
        title="gradient norm (log scale)",
        scale=alt.Scale(type="log", nice=False),
        # aria=False: Vega writes an axis's description (its domain) only when the axis moves,
        # so it would go stale as the controls change the curves
        axis=alt.Axis(labels=False, ticks=False, grid=False, titlePadding=44, aria=False),
    )
    lines = curves.mark_line(strokeWidth=2).encode(x=x, y=y, color=colour, strokeDash=dash)
    hover = alt.selection_point(
        name="hover", on="pointerover", nearest=True, fields=["k"], empty=False, clear="pointerout"
    )
    points = (
        curves.mark_point(filled=True, size=40)
        .encode(
            x="k_share:Q",
            y="value:Q",
            color=colour,
            opacity=alt.condition(hover, alt.value(1), alt.value(0)),
            tooltip=[
                alt.Tooltip("k:Q", title="distance k"),
                alt.Tooltip("t:Q", title="hidden state h_t, t ="),
                alt.Tooltip("curve:N", title="curve"),
                alt.Tooltip("value:Q", title="value", format=".3e"),
            ],
        )
        .add_params(hover)
    )
    label = (
        curves.transform_filter("datum.k == datum.T && datum.curve != 'r^k (linear RNN)'")
        .transform_calculate(
            text="'gradient reaching the first token (k = ' + datum.T + '):\\n'"
            " + format(datum.value, '.2e') + ' (r^T = ' + format(datum.linear, '.2e') + ')'"
        )
        .mark_text(align="left", baseline="bottom", x=0, y=-14, fontSize=12, lineBreak="\n")
        .encode(text="text:N")
    )
    # The log axis's decades: one row per curve, its range in whole decades and the decades
    # to mark, at most 7 (every 2nd, 5th, 10th... decade when the curves span many).
    decade_rows = []
    for row in data:
        values = np.concatenate([row["n"], row["r"] ** np.arange(len(row["n"]))])
        values = np.maximum(values, 1e-300)
        low = math.floor(math.log10(values.min()))
        high = max(math.ceil(math.log10(values.max())), low + 1)
        step = next(s for s in (1, 2, 5, 10, 20, 50, 100) if (high - low) // s <= 6)
        marks = [e for e in range(low, high + 1) if e % step == 0]
        decade_rows.append({**{key: row[key] for key in ("r", "T", "x")}, "lo": low, "hi": high,
                            "e": marks})  # fmt: skip
    decades = alt.Chart(alt.InlineData(values=decade_rows)).transform_filter(
        "abs(datum.r - radius) < 1e-6 && datum.T == length && datum.x == inputs"
    )
    bounds = (  # invisible: the y scale runs from the first decade to the last
        decades.transform_calculate(bound_list="[pow(10, datum.lo), pow(10, datum.hi)]")
        .transform_flatten(["bound_list"], as_=["value"])
        .mark_point(opacity=0)
        .encode(y="value:Q")
    )
    decade = decades.transform_flatten(["e"], as_=["exponent"]).transform_calculate(
        value="pow(10, datum.exponent)", decade_text="format(pow(10, datum.exponent), '.0e')"
    )
    grid = decade.mark_rule(color=GRID_GREY, opacity=0.35).encode(
        y="value:Q", x=alt.value(0), x2=alt.value(WIDTH)
    )
    decade_labels = decade.mark_text(align="right", dx=-5, fontSize=10).encode(
        y="value:Q", x=alt.value(0), text="decade_text:N"
    )
    chart = (
        alt.layer(grid, bounds, lines, points, label, decade_labels)
        .add_params(radius, length, inputs)
        .properties(
            width=WIDTH,
            height=240,
            title=alt.Title(
                ["How much gradient survives k steps", "of backpropagation through time"],
                offset=42,  # room for the two lines of the label above the plot
                anchor="start",
            ),
        )
    )
    chart.description = (
        "On a log scale, the norm of the gradient that reaches the hidden state k steps back "
        "from the last one in a tanh RNN, measured, against r to the power k for a linear RNN. "
        "The controls pick the scale r of the recurrent weights, the sequence length T and the "
        "size of the inputs."
    )
    return chart.configure_view(stroke=None)


def live_gradient_explorer(radius: float = 0.9, length: int = 100) -> LiveView:
    """In a kernel: type any scale ``r`` and any length up to 1000; the curves are recomputed."""
    controls = {
        "radius": ipw.BoundedFloatText(
            value=radius, min=0.01, max=10.0, step=0.05, description="scale r"
        ),
        "length": ipw.BoundedIntText(value=length, min=1, max=1000, description="length T"),
    }

    def draw(radius: float, length: int) -> alt.LayerChart:
        return gradient_explorer((radius,), (length,))

    return LiveView(controls, draw)
