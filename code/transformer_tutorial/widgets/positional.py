"""The positional-encoding explorer (chapter "Positional encoding").

Three linked panels over tables computed by :mod:`transformer_tutorial.positional_encoding`:

- the table itself, positions down and dimensions across, with the two chosen positions marked;
- the two chosen positions' vectors, dimension by dimension;
- ``PE(a) . PE(q)`` for every position ``q``, with the value at ``q = b`` printed.

A menu picks ``d_model`` and two sliders pick positions ``a`` and ``b``; all of it runs in the
browser. :func:`live_positional_explorer` recomputes for any ``d_model`` and length in a kernel.
"""

from collections.abc import Sequence

import altair as alt
import ipywidgets as ipw
import numpy as np

from transformer_tutorial.plots import OKABE_ITO
from transformer_tutorial.positional_encoding import sinusoidal_encoding
from transformer_tutorial.widgets.live import LiveView

__all__ = ["live_positional_explorer", "positional_explorer", "positional_explorer_data"]

DECIMALS = 4  # values shipped to the page; enough for the eye, small enough for the page


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
        table = sinusoidal_encoding(max_len, d_model, base)  # (L, D)
        similarity = table @ table.T  # (L, D) @ (D, L) -> (L, L)
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
        .transform_calculate(i="sequence(0, length(datum.v))")
        .transform_flatten(["v", "i"], as_=["value", "dim"])
        .transform_calculate(kind="datum.dim % 2 == 0 ? 'sin' : 'cos'")
    )
    every_8th = alt.Axis(labelExpr="datum.value % 8 ? '' : datum.value", labelAngle=0)
    every_5th = alt.Axis(labelExpr="datum.value % 5 ? '' : datum.value")
    heat = table.mark_rect().encode(
        x=alt.X("dim:O", title="dimension", axis=every_8th, scale=alt.Scale(paddingInner=0)),
        y=alt.Y("p:O", title="position", axis=every_5th, scale=alt.Scale(paddingInner=0)),
        color=alt.Color(
            "value:Q",
            scale=alt.Scale(scheme="purpleorange", domain=[-1, 1]),
            legend=alt.Legend(title="PE value"),
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
            color=alt.Color("which:N", scale=chosen, legend=alt.Legend(title="position")),
        )
    )
    heatmap = (
        (heat + marks)
        .properties(
            width=560,
            height=260,
            title="The table PE: one row per position, one column per dimension",
        )
        .resolve_scale(color="independent")
    )

    vectors = (
        table.transform_filter("datum.p == pos_a || datum.p == pos_b")
        .transform_calculate(which="datum.p == pos_a ? 'a' : 'b'")
        .mark_line(point=True, strokeWidth=1.5)
        .encode(
            x=alt.X("dim:Q", title="dimension"),
            y=alt.Y("value:Q", title="PE value", scale=alt.Scale(domain=[-1, 1])),
            color=alt.Color("which:N", scale=chosen, legend=None),
            tooltip=[
                alt.Tooltip("p:Q", title="position"),
                alt.Tooltip("dim:Q", title="dimension"),
                alt.Tooltip("value:Q", format=".4f"),
            ],
        )
        .properties(width=260, height=180, title="PE(a) and PE(b), dimension by dimension")
    )

    similarity = (
        alt.Chart(alt.InlineData(values=data["similarity"]))
        .transform_filter("datum.d == d_model && datum.p == pos_a")
        .transform_calculate(q="sequence(0, length(datum.s))")
        .transform_flatten(["s", "q"], as_=["dot", "q"])
    )
    curve = similarity.mark_line(color=OKABE_ITO[0]).encode(
        x=alt.X("q:Q", title="position q"),
        y=alt.Y("dot:Q", title="PE(a) · PE(q)"),
        tooltip=[alt.Tooltip("q:Q", title="position q"), alt.Tooltip("dot:Q", format=".3f")],
    )
    at_b = similarity.transform_filter("datum.q == pos_b")
    point_b = at_b.mark_point(filled=True, size=80, color=OKABE_ITO[3]).encode(x="q:Q", y="dot:Q")
    label_b = (
        at_b.transform_calculate(
            label="'PE(a)·PE(b) = ' + format(datum.dot, '.3f')"
            " + '   (b − a = ' + (pos_b - pos_a) + ')'"
        )
        .mark_text(align="left", baseline="top", x=4, y=2, fontSize=12)
        .encode(text="label:N")
    )
    dot_panel = (curve + point_b + label_b).properties(
        width=260, height=180, title="Similarity of a to every position"
    )

    return (
        alt.vconcat(heatmap, alt.hconcat(vectors, dot_panel), spacing=24)
        .add_params(d_model, pos_a, pos_b)
        .configure_view(stroke=None)
    )


def live_positional_explorer(d_model: int = 64, max_len: int = 50) -> LiveView:
    """In a kernel: type any even ``d_model`` and any length, and the explorer is recomputed."""
    controls = {
        "d_model": ipw.BoundedIntText(value=d_model, min=2, max=1024, description="d_model"),
        "max_len": ipw.BoundedIntText(value=max_len, min=2, max=200, description="positions"),
    }

    return LiveView(controls, lambda d_model, max_len: positional_explorer((d_model,), max_len))
