"""The "apple" embedding-shift explorer (chapters "Self-attention" and "A real model").

A word has one static vector; after attention it has a contextual one (see
:mod:`transformer_tutorial.embedding_shift`). In a 2-D picture: anchor words of each group
("fruit", "tree", "juice"; "mac", "os", "app"), the word's static point, an arrow to its
contextual point in the chosen sentence (through one point per layer, when given), and, beside
it, how much the word attended to each word of the sentence: the reason it moved.

The view takes generic data (:class:`ShiftRecord`, :class:`AnchorPoint`) in any 2-D coordinates:
a toy model whose ``d_model`` is 2, or a real model's vectors projected to a plane. A menu
picks the preset sentence in the browser; the other presets stay as faint arrows for
comparison. :func:`live_apple_explorer` takes free text in a live kernel.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import altair as alt
import numpy as np

from transformer_tutorial.plots import OKABE_ITO
from transformer_tutorial.widgets.live import LiveView, sentence_box
from transformer_tutorial.widgets.render import check_menu_records, sentence_menu

__all__ = [
    "AnchorPoint",
    "ShiftRecord",
    "apple_explorer",
    "apple_explorer_data",
    "live_apple_explorer",
]

DECIMALS = 3
PLANE_SIZE = 320  # pixels; the plane is square so angles and distances look right


@dataclass
class AnchorPoint:
    """A reference word drawn as a labelled dot: it does not move."""

    word: str
    group: str  # e.g. "fruit" or "technology": the dot's colour and legend entry
    point: tuple[float, float]


@dataclass
class ShiftRecord:
    """One sentence: where the word starts (static) and where attention takes it."""

    label: str  # shown in the preset menu
    word: str  # the word that moves, e.g. "apple"
    trajectory: np.ndarray  # (n >= 2, 2): static point, [after each layer...], contextual point
    tokens: list[str] | None = None  # the sentence, to show the word's attention over it
    attention: np.ndarray | None = None  # (T,) the word's weights over the tokens, sum 1


def _check(records: Sequence[ShiftRecord], anchors: Sequence[AnchorPoint]) -> list[np.ndarray]:
    check_menu_records(records, "ShiftRecord")
    if len(anchors) == 0:
        raise ValueError("anchors is empty: give the reference words to compare against")
    for anchor in anchors:
        if np.shape(anchor.point) != (2,) or not np.isfinite(anchor.point).all():
            raise ValueError(
                f"anchor {anchor.word!r}: point must be 2 finite numbers (x, y), got {anchor.point}"
            )
    paths = []
    for record in records:
        where = f"record {record.label!r}"
        path = np.asarray(record.trajectory, dtype=float)
        if path.ndim != 2 or path.shape[1] != 2 or path.shape[0] < 2:
            raise ValueError(
                f"{where}: trajectory must have shape (n >= 2, 2): static point "
                f"first, contextual last; got {path.shape}"
            )
        if not np.isfinite(path).all():
            raise ValueError(f"{where}: trajectory must be finite")
        if (record.tokens is None) != (record.attention is None):
            raise ValueError(f"{where}: give both tokens and attention, or neither")
        if record.tokens is not None:
            attention = np.asarray(record.attention, dtype=float)
            if attention.shape != (len(record.tokens),):
                raise ValueError(
                    f"{where}: attention must have shape (T,) = "
                    f"({len(record.tokens)},) for the tokens, got {attention.shape}"
                )
            if (attention < 0).any() or abs(attention.sum() - 1) > 1e-3:
                raise ValueError(
                    f"{where}: attention must be non-negative and sum to 1, "
                    f"sums to {attention.sum():.4f}"
                )
        paths.append(path)
    return paths


def apple_explorer_data(
    records: Sequence[ShiftRecord], anchors: Sequence[AnchorPoint]
) -> dict[str, list[dict]]:
    """The explorer's datasets, after validation:

    - ``"anchors"``: ``{"word", "group", "x", "y"}``;
    - ``"paths"``: one row per point of each record's trajectory, ``{"r", "step", "x", "y"}``;
    - ``"ends"``: one row per record, its static and contextual points and the arrowhead's angle;
    - ``"attention"``: one row per record, ``{"r", "tokens": [...], "a": [...]}``.
    """
    paths = _check(records, anchors)
    anchor_rows = [
        {
            "word": a.word,
            "group": a.group,
            "x": round(float(a.point[0]), DECIMALS),
            "y": round(float(a.point[1]), DECIMALS),
        }
        for a in anchors
    ]
    path_rows, end_rows, attention_rows = [], [], []
    for r, (record, path) in enumerate(zip(records, paths, strict=True)):
        rounded = np.round(path, DECIMALS)  # (n, 2)
        for step, (x, y) in enumerate(rounded.tolist()):
            path_rows.append({"r": r, "step": step, "x": x, "y": y})
        dx, dy = path[-1] - path[-2]
        end_rows.append(
            {
                "r": r,
                "word": record.word,
                "x0": rounded[0, 0],
                "y0": rounded[0, 1],
                "x1": rounded[-1, 0],
                "y1": rounded[-1, 1],
                # Vega rotates a triangle clockwise from pointing up; equal x and y scales assumed
                "angle": round(math.degrees(math.atan2(dx, dy)), 1),
            }
        )
        if record.tokens is not None:
            attention_rows.append(
                {
                    "r": r,
                    "tokens": list(record.tokens),
                    "a": np.round(np.asarray(record.attention, dtype=float), DECIMALS).tolist(),
                }
            )
    return {
        "anchors": anchor_rows,
        "paths": path_rows,
        "ends": end_rows,
        "attention": attention_rows,
    }


def _spread_labels(rows: list[dict], domain: list[float], size: int) -> None:
    """Give each anchor label a height ``label_y`` (data units) so close labels do not overlap."""
    pixels = size / (domain[1] - domain[0])
    placed: list[tuple[float, float]] = []  # (x, y) of labels already placed, in pixels
    for row in sorted(rows, key=lambda row: (-row["y"], row["x"])):
        x, y = row["x"] * pixels, -row["y"] * pixels  # screen y grows downwards
        target = y
        while any(abs(px - x) < 45 and abs(py - target) < 13 for px, py in placed):
            target += 13
        placed.append((x, target))
        row["label_y"] = round(-target / pixels, DECIMALS)


def _domain(data: dict[str, list[dict]]) -> list[float]:
    """One square domain for both axes, so the picture keeps its angles and distances."""
    values = [row[key] for row in data["anchors"] + data["paths"] for key in ("x", "y")]
    low, high = min(values), max(values)
    margin = 0.12 * (high - low or 1.0)
    return [round(low - margin, 2), round(high + margin, 2)]


def apple_explorer(
    records: Sequence[ShiftRecord],
    anchors: Sequence[AnchorPoint],
    *,
    title: str = "Where attention moves the word",
    start: int = 0,
    axis_titles: tuple[str, str] = ("dimension 1", "dimension 2"),
    plane_title: str = "Static vector → contextual vector",
) -> alt.TopLevelMixin:
    """The explorer as one Vega-Lite chart; the preset menu is a browser-side parameter.

    ``axis_titles`` and ``plane_title`` name the plane: what its two coordinates measure (for a
    real model's vectors projected to 2-D, say which projection).
    """
    data = apple_explorer_data(records, anchors)
    if not 0 <= start < len(records):
        raise ValueError(f"start={start} is outside 0..{len(records) - 1}")
    domain = _domain(data)
    _spread_labels(data["anchors"], domain, PLANE_SIZE)
    preset = sentence_menu("preset", [record.label for record in records], start)

    def position(x_field: str, y_field: str) -> dict:
        scale = alt.Scale(domain=domain, nice=False)
        return {
            "x": alt.X(f"{x_field}:Q", title=axis_titles[0], scale=scale),
            "y": alt.Y(f"{y_field}:Q", title=axis_titles[1], scale=scale),
        }

    groups = sorted({anchor.group for anchor in anchors})
    group_colour = alt.Color(
        "group:N",
        scale=alt.Scale(
            domain=groups, range=[OKABE_ITO[1], OKABE_ITO[0], *OKABE_ITO[2:]][: len(groups)]
        ),
        legend=alt.Legend(title="anchor words", orient="bottom"),
    )
    anchor_base = alt.Chart(alt.InlineData(values=data["anchors"])).encode(**position("x", "y"))
    anchor_dots = anchor_base.mark_circle(size=90, opacity=1).encode(
        color=group_colour,
        tooltip=[
            alt.Tooltip("word:N"),
            alt.Tooltip("group:N"),
            alt.Tooltip("x:Q", format=".2f"),
            alt.Tooltip("y:Q", format=".2f"),
        ],
    )
    anchor_labels = (
        alt.Chart(alt.InlineData(values=data["anchors"]))
        .mark_text(align="left", baseline="middle", dx=7, fontSize=12)
        .encode(**position("x", "label_y"), text="word:N")
    )

    paths = alt.Chart(alt.InlineData(values=data["paths"])).encode(
        **position("x", "y"), order="step:Q"
    )
    other_paths = (
        paths.transform_filter("datum.r != preset")
        .mark_line(color="#BBBBBB", strokeWidth=1.2)
        .encode(detail="r:N")
    )
    chosen_path = paths.transform_filter("datum.r == preset").mark_line(
        color=OKABE_ITO[3], strokeWidth=2.5
    )
    layer_points = (
        paths.transform_filter("datum.r == preset && datum.step > 0")
        .mark_point(color=OKABE_ITO[3], size=30, filled=True)
        .encode(
            tooltip=[
                alt.Tooltip("step:Q", title="after layer"),
                alt.Tooltip("x:Q", format=".2f"),
                alt.Tooltip("y:Q", format=".2f"),
            ]
        )
    )

    ends = alt.Chart(alt.InlineData(values=data["ends"])).transform_filter("datum.r == preset")
    static_point = ends.mark_point(
        size=140, shape="circle", filled=False, strokeWidth=2, color=OKABE_ITO[7]
    ).encode(
        **position("x0", "y0"),
        tooltip=[
            alt.Tooltip("word:N"),
            alt.Tooltip("x0:Q", title="static x", format=".2f"),
            alt.Tooltip("y0:Q", title="static y", format=".2f"),
        ],
    )
    static_label = (
        ends.transform_calculate(text="datum.word + ' (static)'")
        .mark_text(align="right", dx=-9, dy=-8, fontSize=12, fontWeight="bold")
        .encode(**position("x0", "y0"), text="text:N")
    )
    arrowhead = ends.mark_point(
        shape="triangle-up", size=160, filled=True, opacity=1, color=OKABE_ITO[3]
    ).encode(
        **position("x1", "y1"),
        angle=alt.Angle("angle:Q", scale=None),
        tooltip=[
            alt.Tooltip("word:N"),
            alt.Tooltip("x1:Q", title="in context x", format=".2f"),
            alt.Tooltip("y1:Q", title="in context y", format=".2f"),
        ],
    )
    context_label = (
        ends.transform_calculate(text="datum.word + ' (in context)'")
        .mark_text(align="left", dx=10, dy=10, fontSize=12, fontWeight="bold", color=OKABE_ITO[3])
        .encode(**position("x1", "y1"), text="text:N")
    )

    plane = alt.layer(
        other_paths,
        anchor_dots,
        anchor_labels,
        chosen_path,
        layer_points,
        static_point,
        static_label,
        arrowhead,
        context_label,
    ).properties(width=PLANE_SIZE, height=PLANE_SIZE, title=plane_title)

    panels: list[alt.TopLevelMixin] = [plane]
    if data["attention"]:
        bars = (
            alt.Chart(alt.InlineData(values=data["attention"]))
            .transform_filter("datum.r == preset")
            .transform_calculate(i="sequence(0, length(datum.a))")
            .transform_flatten(["tokens", "a", "i"], as_=["token", "weight", "i"])
            .transform_calculate(position_token="datum.i + ': ' + datum.token")
            .mark_bar(color=OKABE_ITO[0])
            .encode(
                y=alt.Y(
                    "i:O",
                    title=None,
                    axis=alt.Axis(
                        labelExpr="attention_tokens[preset][datum.value]",
                        labelLimit=100,
                        minExtent=105,
                        maxExtent=105,
                    ),
                ),
                x=alt.X("weight:Q", title="attention weight", scale=alt.Scale(domain=[0, 1])),
                tooltip=[
                    alt.Tooltip("position_token:N", title="token"),
                    alt.Tooltip("weight:Q", format=".3f"),
                ],
            )
            .properties(width=150, height=alt.Step(22), title="Where it looked")
        )
        panels.append(bars)
    chart = alt.hconcat(*panels, spacing=24, title=alt.Title(title, anchor="start"))
    token_lists = [list(record.tokens or []) for record in records]
    chart.params = [preset.param, alt.param(name="attention_tokens", value=token_lists).param]
    return chart.configure_view(stroke=None)


def live_apple_explorer(
    compute: Callable[[str], ShiftRecord],
    anchors: Sequence[AnchorPoint],
    sentence: str,
    **explorer_options,
) -> LiveView:
    """In a kernel: type any sentence containing the word; the picture is recomputed."""
    controls = {"sentence": sentence_box(sentence)}

    def draw(sentence: str) -> alt.TopLevelMixin:
        return apple_explorer([compute(sentence)], anchors, **explorer_options)

    return LiveView(controls, draw)
