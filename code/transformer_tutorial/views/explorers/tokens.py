"""The nearest-neighbour explorer (chapter "From text to vectors").

Which rows of a learned embedding table lie closest to a word's row, by cosine similarity?
The neighbours of a handful of preset words are computed in Python at build time (by
:func:`transformer_tutorial.studies.word_vectors.nearest_neighbours`) and shipped in one Vega-Lite
chart; a menu picks the word in the browser, so it works on the static site. A dashed line
marks a baseline (say, the 99th percentile of cosine similarity between random pairs of
tokens) so that a reader can tell a high similarity from an ordinary one.
:func:`live_neighbour_explorer` takes any word in a live kernel.
"""

import json
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import altair as alt
import ipywidgets as ipw

from transformer_tutorial.views.explorers.live import LiveView
from transformer_tutorial.views.explorers.render import check_menu_records
from transformer_tutorial.views.plots import OKABE_ITO

__all__ = [
    "NeighbourRecord",
    "live_neighbour_explorer",
    "neighbour_explorer",
    "neighbour_explorer_data",
]

DECIMALS = 3  # cosine similarities shipped to the page
TITLE = "Nearest neighbours in the embedding table"
WIDTH = 200  # pixels: the bars; with the token labels the chart fits a phone's 358 px column


@dataclass
class NeighbourRecord:
    """One word and its nearest tokens, nearest first: ``[(token, cosine similarity), ...]``."""

    word: str
    neighbours: list[tuple[str, float]]

    @property
    def label(self) -> str:  # the menu entry
        return self.word


def neighbour_explorer_data(records: Sequence[NeighbourRecord]) -> list[dict]:
    """One row per (record, rank): ``{"r": record, "k": rank from 1, "t": token, "c": cosine}``."""
    check_menu_records(records, "NeighbourRecord")
    rows = []
    for r, record in enumerate(records):
        if len(record.neighbours) == 0:
            raise ValueError(f"record {record.word!r} has no neighbours")
        previous = math.inf
        for rank, (token, cosine) in enumerate(record.neighbours, start=1):
            if not isinstance(token, str) or not token:
                raise ValueError(f"record {record.word!r}: token {rank} must be a non-empty str")
            if not (isinstance(cosine, (int, float)) and -1.0 - 1e-9 <= cosine <= 1.0 + 1e-9):
                raise ValueError(
                    f"record {record.word!r}: the cosine similarity of {token!r} must be a "
                    f"number in [-1, 1], got {cosine!r}"
                )
            if cosine > previous + 1e-12:
                raise ValueError(f"record {record.word!r}: neighbours must be nearest first")
            previous = cosine
            rows.append({"r": r, "k": rank, "t": token, "c": round(float(cosine), DECIMALS)})
    return rows


def neighbour_explorer(
    records: Sequence[NeighbourRecord],
    *,
    start: int = 0,
    baseline: float | None = None,
    baseline_label: str = "baseline",
) -> alt.LayerChart:
    """The explorer as one Vega-Lite chart; the word menu is a browser-side parameter.

    ``baseline`` (a cosine similarity) is drawn as a dashed vertical line labelled
    ``baseline_label``, e.g. "99% of random pairs are below".
    """
    rows = neighbour_explorer_data(records)
    if not 0 <= start < len(records):
        raise ValueError(f"start={start} is outside 0..{len(records) - 1}")
    if baseline is not None and not -1.0 <= baseline <= 1.0:
        raise ValueError(f"baseline must be a cosine similarity in [-1, 1], got {baseline!r}")
    word = alt.param(
        name="word",
        value=start,
        bind=alt.binding_select(
            options=list(range(len(records))),
            labels=[record.word for record in records],
            name="word ",
        ),
    )
    tokens = alt.param(
        name="neighbour_tokens",
        value=[[token for token, _ in record.neighbours] for record in records],
    )
    lowest = min([row["c"] for row in rows] + ([baseline] if baseline is not None else []))
    domain = [min(0.0, math.floor(lowest * 10) / 10), 1.0]
    chosen = alt.Chart(alt.InlineData(values=rows)).transform_filter("datum.r == word")
    bars = chosen.mark_bar(color=OKABE_ITO[0]).encode(
        y=alt.Y(
            "k:O",
            title=None,
            # aria=False: Vega would not update its description as the word changes
            axis=alt.Axis(
                labelExpr="neighbour_tokens[word][datum.value - 1]", labelLimit=100, aria=False
            ),
        ),
        x=alt.X("c:Q", title="cosine similarity", scale=alt.Scale(domain=domain, nice=False)),
        tooltip=[
            alt.Tooltip("k:O", title="rank"),
            alt.Tooltip("t:N", title="token"),
            alt.Tooltip("c:Q", title="cosine similarity", format=".3f"),
        ],
    )
    values = chosen.mark_text(align="left", dx=3, fontSize=11).encode(
        y="k:O", x="c:Q", text=alt.Text("c:Q", format=".2f")
    )
    layers: list[alt.Chart] = [bars, values]
    lines: list[str] = []  # the baseline's label
    if baseline is not None:
        line = alt.Chart(
            alt.InlineData(values=[{"c": round(float(baseline), DECIMALS), "l": baseline_label}])
        )
        layers.append(
            line.mark_rule(color=OKABE_ITO[3], strokeDash=[5, 4], strokeWidth=2).encode(
                x="c:Q", tooltip=[alt.Tooltip("l:N", title="line"), alt.Tooltip("c:Q")]
            )
        )
        # The line's label above the bars, on the side of the line with room for it (about
        # 6.5 px a character), in more lines if neither side has room for one.
        words = f"{baseline_label} {baseline:.2f}"
        at = (baseline - domain[0]) / (domain[1] - domain[0]) * WIDTH
        need = 6.5 * len(words) + 4
        room_right, room_left = WIDTH + 40 - at, at + 40  # up to 40 px beyond the bars
        if need <= room_right or need <= room_left:
            right, lines = need <= room_right, [words]
        else:  # lines as long as the roomier side allows
            right = room_right >= room_left
            lines = textwrap.wrap(words, max(12, int(max(room_right, room_left) / 6.5)))
        text = "\n".join(lines)
        layers.append(
            line.transform_calculate(line_text=json.dumps(text))
            .mark_text(
                align="left" if right else "right",
                baseline="bottom",
                dx=4 if right else -4,
                y=-4 - 13 * (len(lines) - 1),
                color=OKABE_ITO[3],
                lineBreak="\n",
            )
            .encode(x="c:Q", text="line_text:N")
        )
    chart = (
        alt.layer(*layers)
        .add_params(word, tokens)
        .properties(
            width=WIDTH,
            height=alt.Step(22),
            title=alt.Title(
                TITLE,
                subtitle="each bar: one token's row against the word's row",
                anchor="start",
                offset=10 + 13 * len(lines),  # room for the line's label
            ),
        )
    )
    chart.description = (
        "Bars of cosine similarity between a word's row of the embedding table and its nearest "
        "rows, nearest first"
        + (
            f", with a dashed line at {baseline:.2f} ({baseline_label})"
            if baseline is not None
            else ""
        )
        + ". The menu picks the word."
    )
    return chart.configure_view(stroke=None)


def live_neighbour_explorer(
    compute: Callable[[str], NeighbourRecord], word: str, **explorer_options
) -> LiveView:
    """In a kernel: type any word; its neighbours are recomputed by ``compute(word)``.

    A word that is not one token of the vocabulary makes ``compute`` raise ``ValueError``,
    whose message the view shows instead of a chart.
    """
    controls = {
        "word": ipw.Text(
            value=word, description="word", continuous_update=False, layout=ipw.Layout(width="20em")
        )
    }

    def draw(word: str) -> alt.LayerChart:
        return neighbour_explorer([compute(word.strip())], **explorer_options)

    return LiveView(controls, draw)
