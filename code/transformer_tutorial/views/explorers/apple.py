"""The "apple" embedding-shift explorer (chapters "Self-attention" and "A real model").

A word has one static vector; after attention it has a contextual one (see
:mod:`transformer_tutorial.studies.embedding_shift`). In a 2-D picture: anchor words of each group
("fruit", "tree", "juice"; "mac", "os", "app"), the word's static point, an arrow to its
contextual point in the chosen sentence (through one point per layer, when given), and, below
it, how much the word attended to each word of the sentence: the reason it moved.

The view takes generic data (:class:`ShiftRecord`, :class:`AnchorPoint`) in any 2-D coordinates:
a toy model whose ``d_model`` is 2, or a real model's vectors projected to a plane. A menu
picks the preset sentence in the browser; the other presets stay as faint arrows for
comparison. :func:`live_apple_explorer` takes free text in a live kernel.
"""

import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import altair as alt
import numpy as np

from transformer_tutorial.studies.records import AnchorPoint, ShiftRecord
from transformer_tutorial.views.explorers.live import LiveView, sentence_box
from transformer_tutorial.views.explorers.render import check_menu_records, sentence_menu
from transformer_tutorial.views.plots import OKABE_ITO

__all__ = [
    "AnchorPoint",
    "ShiftRecord",
    "apple_explorer",
    "apple_explorer_data",
    "live_apple_explorer",
]

DECIMALS = 3
PLANE_SIZE = 270  # pixels; the plane is square so angles and distances look right
BAR_WIDTH = 190  # pixels: the attention bars, under the plane
LABEL_FONT = 11  # pixels: the words on the plane
TITLE_CHARACTERS = 40  # a title line this long fits a phone's 358 px column (13 px bold)
VIEW_TITLE_CHARACTERS = 34  # a plane title line this long fits PLANE_SIZE
LEADER_GREY = "#999999"  # lines from a point to its label: visible on light and dark pages
OTHER_GREY = "#BBBBBB"  # the other presets' arrows


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
                "static_text": f"{record.word} (static)",
                "context_text": f"{record.word} (in context)",
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


# Labels are placed in Python, at build time, where every point of every preset is known: each
# label takes the first free spot around its point (right, left, above, below, the diagonals),
# then the same further out with a thin leader line back to the point. A spot is free when the
# label's box stays inside the plane and overlaps no other label and no drawn point. Text widths
# are estimated a little above those of the usual sans-serif fonts (Arial, Roboto, Helvetica);
# the browser checks measure the real ones.
_NARROW = set("iljtfrI.,:;!|'()[] ")
_WIDE = set("mwMW@")
_DIRECTIONS = ((1, 0), (-1, 0), (0, -1), (0, 1), (1, -1), (1, 1), (-1, -1), (-1, 1))


def text_width(text: str, size: float, bold: bool = False) -> float:
    """An upper estimate of ``text``'s width in pixels at font ``size``."""
    ems = sum(
        0.3 if char in _NARROW else 0.85 if char in _WIDE else 0.72 if char.isupper() else 0.58
        for char in text
    )
    return ems * size * (1.12 if bold else 1.0)


def flush_left(view: alt.TopLevelMixin) -> alt.HConcatChart:
    """``view`` in a stack of views, placed by its left edge (axis labels too) rather than by
    where its plot starts.

    Vega lines up the plots of stacked views, so a view with long labels on its left would
    push every other view right. Beside an empty 1-pixel view, the stack lines up that empty
    view instead, and ``view`` follows it with its labels. (Vega's ``center`` would do it too,
    but it places views at fractional offsets that depend on the views drawn before, so a
    state shown again would not give the same markup.)
    """
    spacer = alt.Chart(alt.InlineData(values=[])).mark_point().properties(width=1, height=1)
    return alt.hconcat(spacer, view, spacing=0)


@dataclass
class _LabelPlacer:
    """Free spots for labels in a ``size`` x ``size`` pixel plane (y grows downwards)."""

    size: float
    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    discs: list[tuple[float, float, float]] = field(default_factory=list)  # drawn points

    def _clashes(self, box: tuple[float, float, float, float]) -> float:
        """How badly ``box`` clashes: 0 when the spot is free."""
        x0, y0, x1, y1 = box
        outside = max(0.0, -x0) + max(0.0, -y0) + max(0.0, x1 - self.size)
        outside += max(0.0, y1 - self.size)
        overlap = sum(
            max(0.0, min(x1, b[2]) - max(x0, b[0]) + 2)
            * max(0.0, min(y1, b[3]) - max(y0, b[1]) + 2)
            for b in self.boxes
        )
        for x, y, radius in self.discs:
            near_x, near_y = min(max(x, x0), x1), min(max(y, y0), y1)
            overlap += max(0.0, radius + 1 - math.hypot(x - near_x, y - near_y)) * 10
        return 100 * outside + overlap

    def place(
        self, x: float, y: float, width: float, height: float, gap: float
    ) -> tuple[float, float, tuple[float, float, float, float] | None]:
        """The centre of a free ``width`` x ``height`` box near the point ``(x, y)``, and the
        leader line from the point to the box (None when the label sits next to its point)."""
        best = None
        for step, extra in enumerate((0, 12, 26, 42, 60, 80)):
            for dx, dy in _DIRECTIONS:
                scale = 0.75 if dx and dy else 1.0
                cx = x + dx * ((gap + extra) * scale + width / 2)
                cy = y + dy * ((gap + extra) * scale + height / 2)
                box = (cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2)
                clash = self._clashes(box)
                if best is None or clash < best[0]:
                    best = (clash, step, cx, cy, box)
                if clash == 0:
                    break
            if best[0] == 0:
                break
        _, step, cx, cy, box = best
        self.boxes.append(box)
        if step == 0:
            return cx, cy, None
        # from the point to the nearest point of the box's edge
        near_x, near_y = min(max(x, box[0]), box[2]), min(max(y, box[1]), box[3])
        return cx, cy, (x, y, near_x, near_y)


def _place_labels(data: dict[str, list[dict]], domain: list[float], size: float) -> None:
    """Label positions (``lx, ly`` for anchors; ``sx, sy`` and ``cx, cy`` for each record's
    static and in-context labels, in data units) and leader lines (``data["leaders"]``)."""
    low, high = domain
    scale = size / (high - low)

    def pixels(x: float, y: float) -> tuple[float, float]:
        return (x - low) * scale, (high - y) * scale

    def units(px: float, py: float) -> tuple[float, float]:
        return round(low + px / scale, DECIMALS), round(high - py / scale, DECIMALS)

    leaders = []

    def leader(r: int, line: tuple[float, float, float, float] | None) -> None:
        if line is not None:
            (x, y), (x2, y2) = units(*line[:2]), units(*line[2:])
            leaders.append({"r": r, "x": x, "y": y, "x2": x2, "y2": y2})

    placer = _LabelPlacer(size)
    placer.discs += [(*pixels(row["x"], row["y"]), 6) for row in data["anchors"]]
    placer.discs += [(*pixels(row["x"], row["y"]), 4) for row in data["paths"]]
    for row in data["ends"]:
        placer.discs += [(*pixels(row["x0"], row["y0"]), 8), (*pixels(row["x1"], row["y1"]), 9)]
    for row in data["anchors"]:
        width = text_width(row["word"], LABEL_FONT)
        cx, cy, line = placer.place(*pixels(row["x"], row["y"]), width, LABEL_FONT + 2, 7)
        row["lx"], row["ly"] = units(cx, cy)
        leader(-1, line)
    for row in data["ends"]:
        own = _LabelPlacer(size, list(placer.boxes), list(placer.discs))
        for end, text, gap in (("0", row["static_text"], 9), ("1", row["context_text"], 10)):
            width = text_width(text, LABEL_FONT, bold=True)
            point = pixels(row["x" + end], row["y" + end])
            cx, cy, line = own.place(*point, width, LABEL_FONT + 2, gap)
            row["sx" if end == "0" else "cx"], row["sy" if end == "0" else "cy"] = units(cx, cy)
            leader(row["r"], line)
    data["leaders"] = leaders


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
    real model's vectors projected to 2-D, say which projection). The plane, then the bars of
    attention under it, fit a phone's text column; labels are placed so that none overlaps
    another or a point (with a thin leader line when a label has to sit away from its point).
    """
    data = apple_explorer_data(records, anchors)
    if not 0 <= start < len(records):
        raise ValueError(f"start={start} is outside 0..{len(records) - 1}")
    domain = _domain(data)
    _place_labels(data, domain, PLANE_SIZE)
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
    anchor_base = alt.Chart(alt.InlineData(values=data["anchors"]))
    anchor_dots = anchor_base.mark_circle(size=90, opacity=1).encode(
        **position("x", "y"),
        color=group_colour,
        tooltip=[
            alt.Tooltip("word:N"),
            alt.Tooltip("group:N"),
            alt.Tooltip("x:Q", format=".2f"),
            alt.Tooltip("y:Q", format=".2f"),
        ],
    )
    # no colour of their own: the page's text colour (light on a dark theme)
    anchor_labels = anchor_base.mark_text(fontSize=LABEL_FONT).encode(
        **position("lx", "ly"), text="word:N"
    )
    # Leader lines from a point to its label: the anchors' always, the chosen preset's own.
    # (Two layers: a layer whose rows partly stay and partly change when the menu changes would
    # draw the same picture in another order in the markup.)
    leader_rows = data["leaders"] or [{"r": -2, "x": 0, "y": 0, "x2": 0, "y2": 0}]
    leader_base = alt.Chart(alt.InlineData(values=leader_rows)).encode(
        **position("x", "y"), x2="x2:Q", y2="y2:Q"
    )
    leaders = alt.layer(
        leader_base.transform_filter("datum.r == -1").mark_rule(color=LEADER_GREY, strokeWidth=0.8),
        leader_base.transform_filter("datum.r == preset").mark_rule(
            color=LEADER_GREY, strokeWidth=0.8
        ),
    )

    paths = alt.Chart(alt.InlineData(values=data["paths"])).encode(
        **position("x", "y"), order="step:Q"
    )
    # Every preset's path in grey (the chosen one is drawn again on top, in colour): no filter,
    # so the grey paths keep their order in the markup whatever the menu did before.
    other_paths = paths.mark_line(color=OTHER_GREY, strokeWidth=1.2).encode(detail="r:N")
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
        size=140, shape="circle", filled=False, strokeWidth=2, color=OKABE_ITO[3]
    ).encode(
        **position("x0", "y0"),
        tooltip=[
            alt.Tooltip("word:N"),
            alt.Tooltip("x0:Q", title="static x", format=".2f"),
            alt.Tooltip("y0:Q", title="static y", format=".2f"),
        ],
    )
    static_label = ends.mark_text(fontSize=LABEL_FONT, fontWeight="bold").encode(
        **position("sx", "sy"), text="static_text:N"
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
    context_label = ends.mark_text(
        fontSize=LABEL_FONT, fontWeight="bold", color=OKABE_ITO[3]
    ).encode(**position("cx", "cy"), text="context_text:N")

    plane = alt.layer(
        other_paths,
        leaders,
        anchor_dots,
        anchor_labels,
        chosen_path,
        layer_points,
        static_point,
        static_label,
        arrowhead,
        context_label,
    ).properties(
        width=PLANE_SIZE,
        height=PLANE_SIZE,
        title=textwrap.wrap(plane_title, VIEW_TITLE_CHARACTERS),
    )

    panels: list[alt.TopLevelMixin] = [flush_left(plane)]
    if data["attention"]:
        bars = (
            alt.Chart(alt.InlineData(values=data["attention"]))
            .transform_filter("datum.r == preset")
            .transform_calculate(i_list="sequence(0, length(datum.a))")
            .transform_flatten(["tokens", "a", "i_list"], as_=["token", "weight", "i"])
            .transform_calculate(position_token="datum.i + ': ' + datum.token")
            .mark_bar(color=OKABE_ITO[0])
            .encode(
                y=alt.Y(
                    "i:O",
                    title=None,
                    # aria=False: Vega would not update its description (see masking.py)
                    axis=alt.Axis(
                        labelExpr="attention_tokens[preset][datum.value]",
                        labelLimit=100,
                        aria=False,
                    ),
                ),
                x=alt.X("weight:Q", title="attention weight", scale=alt.Scale(domain=[0, 1])),
                tooltip=[
                    alt.Tooltip("position_token:N", title="token"),
                    alt.Tooltip("weight:Q", format=".3f"),
                ],
            )
            .properties(width=BAR_WIDTH, height=alt.Step(20), title="Where it looked")
        )
        panels.append(flush_left(bars))
    # Both views placed by their left edges: the bars' token labels need no room of their own
    # beside the plane's axis, and the chart fits a phone's column.
    chart = alt.vconcat(
        *panels,
        spacing=20,
        title=alt.Title(textwrap.wrap(title, TITLE_CHARACTERS), anchor="start", offset=10),
    )
    chart = chart.resolve_legend(color="independent")  # the legend under the plane, not the bars
    token_lists = [list(record.tokens or []) for record in records]
    chart.params = [preset.param, alt.param(name="attention_tokens", value=token_lists).param]
    word = records[start].word
    chart.description = (
        f"A plane of word vectors: anchor words as dots coloured by group, the static vector of "
        f"'{word}' (a ring) and an arrow to its vector in the chosen sentence, through one "
        "point per layer when there are layers; the other sentences' arrows are faint grey."
        + (" Below, how much the word attended to each token." if data["attention"] else "")
        + " The menu picks the sentence."
    )
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
