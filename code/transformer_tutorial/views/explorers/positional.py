"""The positional-encoding explorer (chapter "Positional encoding").

Three linked panels, one above the other, over tables computed by
:mod:`transformer_tutorial.model.positions`:

- the table itself, positions down and dimensions across, with the two chosen positions marked;
- the two chosen positions' vectors, dimension by dimension;
- ``PE(a) . PE(q)`` for every position ``q``, with the value at ``q = b`` printed.

A menu picks ``d_model`` and two sliders pick positions ``a`` and ``b``; all of it runs in the
browser. :func:`live_positional_explorer` recomputes for any ``d_model`` and length in a kernel.
"""

import math
from collections.abc import Sequence

import altair as alt
import ipywidgets as ipw
import numpy as np

from transformer_tutorial.model.positions import sinusoidal_encoding
from transformer_tutorial.views.explorers.live import LiveView
from transformer_tutorial.views.plots import OKABE_ITO

__all__ = ["live_positional_explorer", "positional_explorer", "positional_explorer_data"]

DECIMALS = 4  # values shipped to the page; enough for the eye, small enough for the page
WIDTH = 290  # pixels: each panel, so that the chart fits a phone's 358 px text column
HEIGHT = 220  # pixels: the table


def positional_explorer_data(
    d_models: Sequence[int], max_len: int, base: float = 10000.0
) -> dict[str, list[dict]]:
    """The explorer's two datasets, one row per (``d_model``, position) with a list per row.

    - ``"table"``: ``{"d": D, "p": pos, "v": PE[pos, :]}``
    - ``"similarity"``: ``{"d": D, "p": a, "s": [PE[a] . PE[q] for q in range(max_len)]}``

    Lists keep the page small; the chart unpacks them with Vega-Lite's ``flatten``.
    """
    if not d_models:
        raise ValueError("d_models is empty: give at least one even d_model")
    if len(set(d_models)) != len(d_models):
        raise ValueError(f"d_models has repeats: {list(d_models)}")
    table_rows, similarity_rows = [], []
    for d_model in d_models:
        table = sinusoidal_encoding(max_len, d_model, base)  # (P, D)
        similarity = table @ table.T  # (P, D) @ (D, P) -> (P, P)
        for pos in range(max_len):
            table_rows.append(
                {"d": int(d_model), "p": pos, "v": np.round(table[pos], DECIMALS).tolist()}
            )
            similarity_rows.append(
                {"d": int(d_model), "p": pos, "s": np.round(similarity[pos], DECIMALS).tolist()}
            )
    return {"table": table_rows, "similarity": similarity_rows}


def positional_explorer(
    d_models: Sequence[int] = (16, 32, 64, 128),
    max_len: int = 50,
    *,
    start_d_model: int | None = None,
    start_a: int | None = None,
    start_b: int | None = None,
    base: float = 10000.0,
) -> alt.VConcatChart:
    """The explorer as one Vega-Lite chart; every control is a Vega-Lite parameter.

    The sliders start at positions 10 and 20 (or the last position, for shorter tables).
    """
    start_d_model = d_models[len(d_models) // 2] if start_d_model is None else start_d_model
    if start_d_model not in d_models:
        raise ValueError(f"start_d_model={start_d_model} is not one of d_models={list(d_models)}")
    start_a = min(10, max_len - 1) if start_a is None else start_a
    start_b = min(20, max_len - 1) if start_b is None else start_b
    for name, value in (("start_a", start_a), ("start_b", start_b)):
        if not 0 <= value < max_len:
            raise ValueError(f"{name}={value} is outside the positions 0..{max_len - 1}")
    data = positional_explorer_data(d_models, max_len, base)

    d_model = alt.param(
        name="d_model",
        value=start_d_model,
        bind=alt.binding_select(options=list(d_models), name="d_model "),
    )
    pos_a = alt.param(
        name="pos_a",
        value=start_a,
        bind=alt.binding_range(min=0, max=max_len - 1, step=1, name="position a "),
    )
    pos_b = alt.param(
        name="pos_b",
        value=start_b,
        bind=alt.binding_range(min=0, max=max_len - 1, step=1, name="position b "),
    )
    chosen = alt.Scale(domain=["a", "b"], range=[OKABE_ITO[0], OKABE_ITO[3]])

    table = (
        alt.Chart(alt.InlineData(values=data["table"]))
        .transform_filter("datum.d == d_model")
        .transform_calculate(i_list="sequence(0, length(datum.v))")
        .transform_flatten(["v", "i_list"], as_=["value", "dim"])
        .transform_calculate(kind="datum.dim % 2 == 0 ? 'sin' : 'cos'")
    )
    # a label every 4 dimensions for d_model 16, every 8 for 32... about 4 to 8 labels in all
    # (aria=False: Vega writes an axis's description, its domain, only when the axis moves;
    # on a d_model change it would go stale. The cells' tooltips describe them.)
    few = alt.Axis(
        labelExpr="datum.value % max(4, floor(d_model / 4)) ? '' : datum.value",
        labelAngle=0,
        aria=False,
    )
    # a label every 5 positions, or every 10, 20... when the rows are too thin for that
    every = next(n for n in (5, 10, 20, 25, 50, 100, 200, 500) if HEIGHT / max_len * n >= 14)
    every_nth = alt.Axis(labelExpr=f"datum.value % {every} ? '' : datum.value")
    heat = table.mark_rect().encode(
        x=alt.X("dim:O", title="dimension", axis=few, scale=alt.Scale(paddingInner=0)),
        y=alt.Y("p:O", title="position", axis=every_nth, scale=alt.Scale(paddingInner=0)),
        color=alt.Color(
            "value:Q",
            scale=alt.Scale(scheme="purpleorange", domain=[-1, 1]),
            legend=alt.Legend(title="PE value", orient="bottom", gradientLength=140),
        ),
        tooltip=[
            alt.Tooltip("p:O", title="position"),
            alt.Tooltip("dim:O", title="dimension"),
            alt.Tooltip("kind:N", title="function"),
            alt.Tooltip("value:Q", title="value", format=".4f"),
        ],
    )
    marks = (
        alt.Chart(alt.InlineData(values=[{"which": "a"}, {"which": "b"}]))
        .transform_calculate(p="datum.which == 'a' ? pos_a : pos_b")
        .mark_rule(strokeWidth=2)
        .encode(
            y=alt.Y("p:O", bandPosition=0.5),
            color=alt.Color(
                "which:N", scale=chosen, legend=alt.Legend(title="position", orient="bottom")
            ),
        )
    )
    heatmap = (
        (heat + marks)
        .properties(
            width=WIDTH,
            height=HEIGHT,
            title=["The table PE: one row per position,", "one column per dimension"],
        )
        .resolve_scale(color="independent")
    )

    # One layer per position: when a slider moves, its whole line is replaced (a shared layer
    # would keep the other line's points first and draw the markup in another order).
    def vector(which: str, position: str, colour: str) -> alt.Chart:
        return (
            table.transform_filter(f"datum.p == {position}")
            .mark_line(
                point=alt.OverlayMarkDef(color=colour, filled=True), strokeWidth=1.5, color=colour
            )
            .encode(
                x=alt.X("dim:O", title="dimension", axis=few, scale=alt.Scale(padding=0.5)),
                y=alt.Y("value:Q", title="PE value", scale=alt.Scale(domain=[-1, 1])),
                tooltip=[
                    alt.Tooltip("p:Q", title=f"position {which}"),
                    alt.Tooltip("dim:Q", title="dimension"),
                    alt.Tooltip("value:Q", format=".4f"),
                ],
            )
        )

    vectors = alt.layer(
        vector("a", "pos_a", OKABE_ITO[0]), vector("b", "pos_b", OKABE_ITO[3])
    ).properties(width=WIDTH, height=130, title="PE(a) and PE(b), dimension by dimension")

    # The curve is drawn as PE(a)·PE(q) / (d_model / 2), the dot product over its largest value
    # (|PE(p)|² = d_model / 2 at every position), on one fixed scale for every d_model; the axis
    # labels say the dot product itself. So the axis keeps its ticks when d_model changes: Vega
    # appends ticks that come back after ones that stayed, and the picture would not come back
    # to the same markup.
    lowest = min(min(row["s"]) / (row["d"] / 2) for row in data["similarity"])
    low = min(0.0, math.floor(lowest * 4) / 4)
    ticks = [low + step * 0.25 for step in range(round((1 - low) / 0.25) + 1)]
    if len(ticks) > 6:
        ticks = ticks[::2] if ticks[-1] in ticks[::2] else ticks[1::2]
    similarity = (
        alt.Chart(alt.InlineData(values=data["similarity"]))
        .transform_filter("datum.d == d_model && datum.p == pos_a")
        .transform_calculate(q_list="sequence(0, length(datum.s))")
        .transform_flatten(["s", "q_list"], as_=["dot", "q"])
        .transform_calculate(share="datum.dot / (d_model / 2)")
    )
    share_axis = alt.Axis(
        values=ticks, labelExpr="format(datum.value * d_model / 2, '~r')", aria=False
    )  # its domain is the share, not the dot product: no description of it
    share = alt.Y(
        "share:Q",
        title="PE(a) · PE(q)",
        axis=share_axis,
        scale=alt.Scale(domain=[low, 1], nice=False),
    )
    curve = similarity.mark_line(color=OKABE_ITO[0]).encode(
        x=alt.X("q:Q", title="position q"),
        y=share,
        tooltip=[alt.Tooltip("q:Q", title="position q"), alt.Tooltip("dot:Q", format=".3f")],
    )
    at_b = similarity.transform_filter("datum.q == pos_b")
    point_b = at_b.mark_point(filled=True, size=80, color=OKABE_ITO[3]).encode(x="q:Q", y="share:Q")
    label_b = (
        at_b.transform_calculate(
            label="'PE(a)·PE(b) = ' + format(datum.dot, '.3f')"
            " + '   (b − a = ' + (pos_b - pos_a) + ')'"
        )
        .mark_text(align="left", baseline="bottom", x=0, y=-6, fontSize=12)  # above the plot
        .encode(text="label:N")
    )
    dot_panel = (curve + point_b + label_b).properties(
        width=WIDTH,
        height=130,
        title=alt.Title("Similarity of a to every position", offset=24),  # room for the label
    )

    # Stacked, so that the whole chart fits a phone's text column.
    chart = alt.vconcat(heatmap, vectors, dot_panel, spacing=20).add_params(d_model, pos_a, pos_b)
    chart.description = (
        "The sinusoidal positional-encoding table PE as a heatmap (positions down, dimensions "
        "across) with positions a and b marked; the two rows PE(a) and PE(b) as curves; and "
        "the dot product of PE(a) with every position. The controls pick d_model and the "
        "positions a and b."
    )
    return chart.configure_view(stroke=None)


def live_positional_explorer(d_model: int = 64, max_len: int = 50) -> LiveView:
    """In a kernel: type any even ``d_model`` and any length, and the explorer is recomputed."""
    controls = {
        "d_model": ipw.BoundedIntText(value=d_model, min=2, max=1024, description="d_model"),
        "max_len": ipw.BoundedIntText(value=max_len, min=2, max=200, description="positions"),
    }

    return LiveView(controls, lambda d_model, max_len: positional_explorer((d_model,), max_len))
