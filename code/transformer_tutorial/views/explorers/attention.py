"""The attention-heatmap explorer (chapters "Self-attention", "Multi-head attention" and later).

Shows the attention weights of Vaswani et al. (2017), section 3.2.1, equation (1):
``softmax(Q K^T / sqrt(d_k))``, one matrix per layer and head. Queries run down, keys across;
row ``t`` says how much query token ``t`` takes from each key token, and sums to 1.

The explorer takes :class:`AttentionRecord` s from *any* model that returns per-layer,
per-head weights (a toy model trained in seconds, or a real pretrained encoder), so the same
view serves every chapter. Menus pick the sentence, layer and head; below, the "all heads"
grid shows every head of the chosen layer at once (stacked, so the whole chart fits a phone's
text column). All of it is Vega-Lite parameters, so it works on the static site;
:func:`live_attention_explorer` adds a text box in a live kernel.

Tokens are placed by *position*, never by text: "the" at position 0 and "the" at position 4
are two different rows. Token text is always drawn as text (SVG text, escaped tooltips), so a
sentence containing ``<b>x</b>`` shows those characters.
"""

import hashlib
import json
import textwrap
from collections.abc import Callable, Sequence

import altair as alt
import numpy as np

from transformer_tutorial.studies.records import AttentionRecord
from transformer_tutorial.views.explorers.apple import flush_left, text_width
from transformer_tutorial.views.explorers.live import LiveView, sentence_box
from transformer_tutorial.views.explorers.render import check_menu_records, sentence_menu

__all__ = [
    "AttentionRecord",
    "attention_explorer",
    "attention_explorer_data",
    "live_attention_explorer",
]

DECIMALS = 3  # weights shipped to the page: 0.001 is finer than any colour difference
ROW_SUM_TOLERANCE = 1e-3  # rows of softmax weights must sum to 1 within this
# pixels: the whole chart, with Vega's padding of 5 px each side, fits a phone's 358 px column
MAX_WIDTH = 348
LABEL_LIMIT = 80  # pixels: longer token labels are cut with an ellipsis
GRID_SPACING = 8  # pixels between the small heatmaps of all heads
GRID_INSET = 8  # pixels: room left of the grid's first column
OUTLINE = "#D55E00"  # vermilion: the chosen head's cells in the grid of all heads
TITLE_CHARACTERS = 40  # a title line this long fits MAX_WIDTH in a 13 px bold font
NOTE_CHARACTERS = 40  # a line of the note above the heatmap (12 px bold)


def _check_record(record: AttentionRecord) -> np.ndarray:
    """The record's weights as a float array, after every check; ValueError names what is wrong."""
    where = f"record {record.label!r}"
    if not isinstance(record.label, str) or not record.label.strip():
        raise ValueError(f"record label must be a non-empty string, got {record.label!r}")
    weights = np.asarray(record.weights, dtype=float)
    if weights.ndim != 4:
        raise ValueError(
            f"{where}: weights must have shape (layers, heads, T, S), got shape {weights.shape}"
        )
    layers, _, queries, keys = weights.shape
    if 0 in weights.shape:
        raise ValueError(f"{where}: weights {weights.shape} are empty (layers, heads, T, S)")
    if len(record.tokens) != queries:
        raise ValueError(
            f"{where}: {len(record.tokens)} tokens but weights have T = {queries} query rows "
            f"(shape {weights.shape} is (layers, heads, T, S))"
        )
    if len(record.keys) != keys:
        name = "tokens" if record.key_tokens is None else "key_tokens"
        raise ValueError(
            f"{where}: {len(record.keys)} {name} but weights have S = {keys} key columns "
            f"(shape {weights.shape} is (layers, heads, T, S))"
        )
    if not all(isinstance(token, str) for token in [*record.tokens, *record.keys]):
        raise ValueError(f"{where}: every token must be a string")
    if record.layer_names is not None and len(record.layer_names) != layers:
        raise ValueError(
            f"{where}: {len(record.layer_names)} layer_names for {layers} layers in the weights"
        )
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise ValueError(f"{where}: weights must be finite and non-negative")
    sums = weights.sum(axis=-1)  # (layers, heads, T)
    worst = np.abs(sums - 1).max()
    if worst > ROW_SUM_TOLERANCE:
        layer, head, row = np.unravel_index(np.abs(sums - 1).argmax(), sums.shape)
        raise ValueError(
            f"{where}: every row of weights must sum to 1 (softmax output); layer {layer}, "
            f"head {head}, query {row} sums to {sums[layer, head, row]:.4f}"
        )
    return weights


def _check_records(records: Sequence[AttentionRecord]) -> list[np.ndarray]:
    """Every record checked; the records of one ``model`` must share (layers, heads) and
    layer names. Records of different models may differ (see :func:`attention_explorer`)."""
    check_menu_records(records, "AttentionRecord")
    arrays = [_check_record(record) for record in records]
    first_of_model: dict[str | None, int] = {}
    for index, (record, weights) in enumerate(zip(records, arrays, strict=True)):
        if record.model is not None and (
            not isinstance(record.model, str) or not record.model.strip()
        ):
            raise ValueError(
                f"record {record.label!r}: model must be None or a non-empty string, "
                f"got {record.model!r}"
            )
        first = first_of_model.setdefault(record.model, index)
        same = "every record" if record.model is None else f"every record of {record.model!r}"
        if weights.shape[:2] != arrays[first].shape[:2]:
            raise ValueError(
                f"{same} needs the same (layers, heads) = {arrays[first].shape[:2]}; record "
                f"{record.label!r} has {weights.shape[:2]}"
            )
        if record.names != records[first].names:
            raise ValueError(
                f"{same} needs the same layer_names; record {record.label!r} has "
                f"{record.names}, {records[first].label!r} has {records[first].names}"
            )
    return arrays


def _mixed(records: Sequence[AttentionRecord]) -> bool:
    """Whether the records come from models of different shapes (layers, heads)."""
    return len({np.shape(record.weights)[:2] for record in records}) > 1


def attention_explorer_data(records: Sequence[AttentionRecord]) -> dict[str, list[dict]]:
    """The explorer's two datasets; validates the records first.

    - ``"weights"``: one row per (record ``r``, layer ``l``, head ``h``, query ``q``) holding
      that query's weights over every key as a list, ``{"r", "l", "h", "q", "w": [...]}``;
    - ``"tokens"``: one row per record, ``{"r", "qt": [query tokens], "kt": [key tokens]}``;
      when the records come from models of different shapes, also the record's model
      ``"m"``, its layer and head counts ``"nl"``, ``"nh"``, its layer names ``"ln"`` and
      the note that names them above the heatmap, ``"nt"`` (lines joined by ``\\n``).

    Lists keep the page small; the chart unpacks them with Vega-Lite's ``flatten``.
    """
    arrays = _check_records(records)
    weight_rows, token_rows = [], []
    for r, (record, weights) in enumerate(zip(records, arrays, strict=True)):
        rounded = np.round(weights, DECIMALS)  # (layers, heads, T, S)
        layers, heads, queries, _ = rounded.shape
        for layer in range(layers):
            for head in range(heads):
                for query in range(queries):
                    weight_rows.append(
                        {
                            "r": r,
                            "l": layer,
                            "h": head,
                            "q": query,
                            "w": rounded[layer, head, query].tolist(),
                        }
                    )
        token_rows.append({"r": r, "qt": list(record.tokens), "kt": record.keys})
    if _mixed(records):
        for row, record in zip(token_rows, records, strict=True):
            layers, heads = np.shape(record.weights)[:2]
            model = record.model or "this model"
            row.update(m=model, nl=int(layers), nh=int(heads), ln=record.names)
            row["nt"] = _model_note(model, int(layers), int(heads))
    return {"weights": weight_rows, "tokens": token_rows}


def _model_note(model: str, layers: int, heads: int) -> str:
    """``"<model>: <layers> layers × <heads> heads;"`` in lines (joined by ``\\n``) that fit
    the column: the model's name on lines of its own when the whole is too long."""
    size = f"{layers} layer{'s' * (layers != 1)} × {heads} head{'s' * (heads != 1)};"
    lines = textwrap.wrap(f"{model}: {size}", NOTE_CHARACTERS, break_on_hyphens=False)
    if len(lines) > 1:
        lines = [*textwrap.wrap(f"{model}:", NOTE_CHARACTERS, break_on_hyphens=False), size]
    return "\n".join(lines)


def _label_room(record: AttentionRecord, step: int) -> float:
    """About how far the big heatmap's axes reach left of its cells, in pixels: the query
    labels with the axis title, or the first key's label (slanted 50 degrees), if further."""
    labels = min(LABEL_LIMIT, max((text_width(token, 10) for token in record.tokens), default=0))
    first_key = min(LABEL_LIMIT, text_width(record.keys[0], 10)) if record.keys else 0
    return max(labels + 26, 0.65 * first_key + 5 - step / 2)


def _cell_sizes(records: Sequence[AttentionRecord], columns: int) -> tuple[int, int]:
    """Cell sizes (pixels) of the big heatmap and of the grid of all heads: as large as they
    can be while the whole chart fits MAX_WIDTH for every record. The views are placed by
    their left edges, so the heatmap with its labels and the grid each have the whole width;
    the labels' widths are estimated generously."""
    longest = max(max(len(record.tokens), len(record.keys)) for record in records)
    room = max(_label_room(record, 8) for record in records)
    main_step = int(np.clip((MAX_WIDTH - 1 - room) // longest, 8, 26))
    widest_grid = max(
        min(int(np.shape(record.weights)[1]), columns) * len(record.keys) for record in records
    )  # cells side by side in the grid's widest row
    # (Vega-Lite sets a facet's cells a few pixels in from its left edge: GRID_INSET)
    grid_step = (MAX_WIDTH - GRID_INSET - (columns - 1) * GRID_SPACING) // widest_grid
    return main_step, int(np.clip(grid_step, 2, 12))


def _named(values: list[dict], datasets: dict[str, list[dict]]) -> alt.NamedData:
    """``values`` as a named dataset, under the name Altair itself would give inline data
    (``"data-"`` and a hash of the JSON), so the chart's spec is the same either way."""
    text = json.dumps(values, sort_keys=True, default=str)
    name = "data-" + hashlib.sha256(text.encode()).hexdigest()[:32]
    datasets[name] = values
    return alt.NamedData(name=name)


class _DatasetChart(alt.VConcatChart):
    """A chart whose datasets join its spec only after Altair has validated the rest.

    Altair deep-copies inline data at every step of building a chart and checks every number
    against the Vega-Lite schema: for a real model's 6 layers x 12 heads that took about 2 s,
    too slow to redraw as a reader types. Here the chart refers to its data by name, and
    ``to_dict`` adds the datasets at the top level, where Altair would have put them; the
    records were checked by :func:`_check_records` already. Display it as a chart of its own
    (inside another chart its datasets would not reach the top level).
    """

    _book_datasets: dict[str, list[dict]]

    @classmethod
    def wrap(cls, chart: alt.VConcatChart, datasets: dict[str, list[dict]]) -> "_DatasetChart":
        wrapped = chart.copy(deep=False)
        object.__setattr__(wrapped, "__class__", cls)  # same fields; to_dict and copy differ
        object.__setattr__(wrapped, "_book_datasets", datasets)
        return wrapped

    def copy(self, *args, **kwargs) -> "_DatasetChart":  # Altair's methods all copy first
        copied = super().copy(*args, **kwargs)
        object.__setattr__(copied, "_book_datasets", self._book_datasets)
        return copied

    def to_dict(self, *args, **kwargs) -> dict:
        spec = super().to_dict(*args, **kwargs)
        spec["datasets"] = {**spec.get("datasets", {}), **self._book_datasets}
        return spec


def attention_explorer(
    records: Sequence[AttentionRecord],
    *,
    title: str = "Attention weights: each row is one query token's weights over the key tokens",
    start: int = 0,
    start_layer: int = 0,
    start_head: int = 0,
) -> alt.VConcatChart:
    """The explorer as one Vega-Lite chart: sentence, layer and head are browser-side parameters.

    The top panel is the chosen head; the grid below shows every head of the chosen layer.
    ``start``, ``start_layer`` and ``start_head`` are 0-based; the page counts from 1.

    Records of several models (``AttentionRecord.model``) may differ in their numbers of layers
    and heads, say a toy model's 2 x 2 beside a real model's 6 x 12. The layer menu and the head
    slider then run over the largest; a record with fewer shows its last layer (or head) when
    asked for one it does not have, and a line above the heatmap names its model, its size and
    the layer and head shown.
    """
    data = attention_explorer_data(records)
    mixed = _mixed(records)
    deepest = max(records, key=lambda record: np.shape(record.weights)[0])
    layers = int(np.shape(deepest.weights)[0])
    heads = int(max(np.shape(record.weights)[1] for record in records))
    for name, value, count in (
        ("start", start, len(records)),
        ("start_layer", start_layer, layers),
        ("start_head", start_head, heads),
    ):
        if not 0 <= value < count:
            raise ValueError(f"{name}={value} is outside 0..{count - 1}")

    sentence = sentence_menu("sentence", [record.label for record in records], start)
    layer = alt.param(
        name="layer",
        value=start_layer,
        bind=alt.binding_select(options=list(range(layers)), labels=deepest.names, name="layer "),
    )
    head = alt.param(
        name="head",
        value=start_head + 1,  # the slider counts heads from 1, like the page
        bind=alt.binding_range(min=1, max=heads, step=1, name="head "),
    )

    # The layer and head shown: the chosen ones, or the record's last if it has fewer.
    shown_layer, shown_head = ("shown_layer", "shown_head") if mixed else ("layer", "head")
    note_lines = 1 + max((row.get("nt", "").count("\n") + 1 for row in data["tokens"]), default=0)
    datasets = {}
    weights_data, tokens_data = (_named(data[key], datasets) for key in ("weights", "tokens"))
    # Vega changes the rows it is given in place: every step writes a field of its own, never
    # one of the source rows (r, l, h, q, w) nor one an earlier step wrote.
    cells = (
        alt.Chart(weights_data)
        .transform_filter(f"datum.r == sentence && datum.l == {shown_layer}")
        .transform_lookup(
            lookup="r",
            from_=alt.LookupData(tokens_data, "r", ["qt", "kt"]),
        )
        .transform_calculate(k_list="sequence(0, length(datum.w))")
        .transform_flatten(["w", "kt", "k_list"], as_=["weight", "key_token", "k"])
        .transform_calculate(
            query_token="datum.qt[datum.q]",
            head_number="datum.h + 1",
            query_label="datum.q + ': ' + datum.qt[datum.q]",
            key_label="datum.k + ': ' + datum.key_token",
        )
    )
    weight_scale = alt.Scale(scheme="cividis", domain=[0, 1])
    colour = alt.Color(
        "weight:Q",
        scale=weight_scale,
        legend=alt.Legend(title="weight", orient="bottom", gradientLength=160),
    )
    tooltip = [
        alt.Tooltip("query_label:N", title="query"),
        alt.Tooltip("key_label:N", title="key"),
        alt.Tooltip("weight:Q", title="weight", format=".3f"),
        alt.Tooltip("head_number:O", title="head"),
    ]
    # Positions are the axis fields, so repeated tokens stay distinct; the labels show the text.
    # aria=False: Vega writes an axis's description (its domain) only when the axis moves, so
    # it would go stale as the sentence changes; the cells' own descriptions name the tokens.
    query_axis = alt.Axis(
        labelExpr="tokens_q[sentence][datum.value]", labelLimit=LABEL_LIMIT, aria=False
    )
    key_axis = alt.Axis(
        labelExpr="tokens_k[sentence][datum.value]",
        labelAngle=-50,
        labelLimit=LABEL_LIMIT,
        aria=False,
    )
    columns = min(heads, 4)
    main_step, grid_step = _cell_sizes(records, columns)
    tokens_q = alt.param(name="tokens_q", value=[list(record.tokens) for record in records])
    tokens_k = alt.param(name="tokens_k", value=[record.keys for record in records])

    main = (
        cells.transform_filter(f"datum.h + 1 == {shown_head}")
        .mark_rect()
        .encode(
            x=alt.X("k:O", title="key (looked at)", axis=key_axis),
            y=alt.Y("q:O", title="query (looking)", axis=query_axis),
            color=colour,
            tooltip=tooltip,
        )
        .properties(width=alt.Step(main_step), height=alt.Step(main_step), title="The chosen head")
    )
    # The small heatmaps have no token labels (they would be too small to read): each is named
    # by its head, and its tooltips name the tokens.
    grid = (
        cells.mark_rect()
        .encode(
            x=alt.X("k:O", axis=None),
            y=alt.Y("q:O", axis=None),
            color=colour,
            tooltip=tooltip,
            stroke=alt.condition(
                f"datum.h + 1 == {shown_head}", alt.value(OUTLINE), alt.value(None)
            ),
        )
        .properties(width=alt.Step(grid_step), height=alt.Step(grid_step))
        .facet(
            facet=alt.Facet(
                "head_number:O",
                title=["All heads of the chosen layer", "(the chosen head is outlined)"],
                header=alt.Header(
                    labelExpr="'head ' + datum.value",
                    labelFontSize=11,
                    labelPadding=3,
                    titleFontSize=12,
                    titlePadding=6,
                ),
            ),
            columns=columns,
            spacing=GRID_SPACING,
        )
    )
    panels: list[alt.TopLevelMixin] = [flush_left(main), grid]
    params = [sentence, layer, head, tokens_q, tokens_k]
    record_layers = [int(np.shape(record.weights)[0]) for record in records]
    record_heads = [int(np.shape(record.weights)[1]) for record in records]
    if mixed:
        params += [
            alt.param(name="record_layers", value=record_layers),
            alt.param(name="record_heads", value=record_heads),
            alt.param(name="shown_layer", expr="min(layer, record_layers[sentence] - 1)"),
            alt.param(name="shown_head", expr="min(head, record_heads[sentence])"),
        ]
        note = (
            alt.Chart(tokens_data)
            .transform_filter("datum.r == sentence")
            .transform_calculate(
                note="datum.nt + '\\nshowing ' + datum.ln[shown_layer] + ', head ' + shown_head"
                " + (layer >= datum.nl || head > datum.nh ? ' (it has no more)' : '')"
            )
            .mark_text(
                align="left",
                baseline="top",
                fontSize=12,
                fontWeight="bold",
                lineHeight=16,
                lineBreak="\n",
            )
            .encode(x=alt.value(0), y=alt.value(0), text="note:N")
            .properties(width=1, height=16 * note_lines)
        )
        panels.insert(0, note)
    # The views placed by their left edges: the grid, which has no axes, reaches under the
    # heatmap's labels, and each of them may use the whole width of the column.
    chart = alt.vconcat(
        *panels,
        spacing=22,
        title=alt.Title(textwrap.wrap(title, TITLE_CHARACTERS), anchor="start", offset=10),
    )
    # Set the parameters directly: `add_params` cannot yet walk into a facet inside a concat.
    chart.params = [param.param for param in params]
    chart.description = (
        "Attention weights as heatmaps, queries down and keys across, each row summing to 1: "
        "first the chosen head of the chosen layer, then every head of that layer, the chosen "
        "one outlined. The controls pick the sentence, the layer and the head."
    )
    # The page narrows the layer menu and the head slider to the chosen sentence's model.
    chart.usermeta = {
        "limits": {
            "layer": {"by": "sentence", "max": [count - 1 for count in record_layers]},
            "head": {"by": "sentence", "max": record_heads},
        }
    }
    return _DatasetChart.wrap(chart.configure_view(stroke=None), datasets)


def live_attention_explorer(compute: Callable[[str], AttentionRecord], sentence: str) -> LiveView:
    """In a kernel: type any sentence; ``compute`` turns it into a record and the chart redraws.

    A ``ValueError`` from ``compute`` (say, an empty sentence) is shown as escaped text and
    the previous chart stays.
    """
    controls = {"sentence": sentence_box(sentence)}

    def draw(sentence: str) -> alt.TopLevelMixin:
        return attention_explorer([compute(sentence)])

    return LiveView(controls, draw)
