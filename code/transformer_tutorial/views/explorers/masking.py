"""The mask explorer (chapter "Masking").

Which keys may each query see? Vaswani et al. (2017), section 3.2.3: masked scores are set to
``-inf`` before the softmax, so they get weight 0. The explorer shows, for one sentence padded
to ``S`` positions, the ``(T, S)`` boolean mask built by :mod:`transformer_tutorial.model.masks`
(``T = S``: self-attention) and what it does to one attention head:

- above, the mask: each cell coloured by *why* it is hidden (a future key, a ``[PAD]`` key, or
  both), with the head's score written in the cells that stay and ``−∞`` in the others;
- below, the weights after the softmax: masked cells are exactly 0 and drawn grey;
- beside them, each row's sum: 1, or 0 for a query with no key left at all (a ``[PAD]`` query under
  left padding, or a sequence that is all padding), where a naive softmax would give NaN.

Browser-side controls (Vega-Lite parameters, so it works on the static site): the sentence,
``n`` (how many of its tokens are real; the other ``S − n`` positions become ``[PAD]``), the
padding side and the causal mask on or off. Every combination is computed in Python at build
time; the page only filters. :func:`live_mask_explorer` takes any sentence in a live kernel.

The head is an illustration, not a trained model: random (seeded) word vectors plus sinusoidal
positions, and random ``W_Q``, ``W_K``. Tokens are always drawn as text (SVG text, escaped
tooltips), never as HTML.
"""

import hashlib
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import altair as alt
import numpy as np
import torch

from transformer_tutorial.model.attention import scaled_dot_product_attention
from transformer_tutorial.model.masks import causal_mask, combine_masks, padding_mask_from_ids
from transformer_tutorial.model.positions import sinusoidal_encoding
from transformer_tutorial.views.explorers.live import LiveView, sentence_box
from transformer_tutorial.views.explorers.render import check_menu_records, sentence_menu
from transformer_tutorial.views.plots import OKABE_ITO

__all__ = [
    "PAD",
    "SIDES",
    "WHY",
    "MaskPreset",
    "live_mask_explorer",
    "mask_explorer",
    "mask_explorer_data",
    "padded_tokens",
    "parse_matrix",
]

PAD = "[PAD]"
SIDES = ("right", "left")  # where the [PAD] tokens go
MAX_TOKENS = 10  # longest sentence the explorer takes (it must fit the text column)
WEIGHT_DECIMALS = 2  # weights shipped to the page (as shown in the cells)
SCORE_DECIMALS = 1  # scores shipped to the page (as shown in the cells)
# Why a cell is hidden, as a bit code: 1 = future key (causal mask), 2 = [PAD] key (padding mask).
WHY = ("may attend", "future key", "[PAD] key", "future and [PAD]")
WHY_COLOURS = ("#56B4E9", OKABE_ITO[1], "#BBBBBB", OKABE_ITO[4])  # sky blue, orange, grey, pink
MASKED_GREY = "#E4E4E4"  # weight cells that are masked (exactly 0)
DEAD_ROW = OKABE_ITO[3]  # vermilion: a query with no key left
TITLE = "Masks: which keys each query may see, and the weights that are left"
D_MODEL, D_K = 16, 8  # the illustrative head's sizes
DATASET = "mask_rows"  # the name of the chart's one dataset
# pixels: the whole chart, with Vega's padding of 5 px each side, fits a phone's 358 px column
MAX_WIDTH = 348
LABEL_LIMIT = 64  # pixels: longer token labels are cut with an ellipsis
TITLE_CHARACTERS = 38  # a title line this long fits MAX_WIDTH in a 13 px bold font


@dataclass
class MaskPreset:
    """A sentence for the explorer's menu: its tokens, all real (``n = S``) at the start."""

    label: str
    tokens: list[str]

    @classmethod
    def from_sentence(cls, sentence: str, label: str | None = None) -> "MaskPreset":
        """Tokens split on whitespace; the label is the sentence unless given."""
        tokens = sentence.split()
        if not tokens:
            raise ValueError("sentence has no words: type 1 to 10 words")
        return cls(" ".join(tokens) if label is None else label, tokens)


def _check_preset(preset: MaskPreset) -> None:
    where = f"preset {preset.label!r}"
    if not isinstance(preset.label, str) or not preset.label.strip():
        raise ValueError(f"preset label must be a non-empty string, got {preset.label!r}")
    if not 1 <= len(preset.tokens) <= MAX_TOKENS:
        raise ValueError(f"{where}: give 1 to {MAX_TOKENS} tokens, got {len(preset.tokens)}")
    if not all(isinstance(token, str) and token for token in preset.tokens):
        raise ValueError(f"{where}: every token must be a non-empty string")
    if PAD in preset.tokens:
        raise ValueError(f"{where}: {PAD} is the padding token; choose n to add padding")


def padded_tokens(tokens: Sequence[str], real: int, side: str) -> list[str]:
    """The first ``real`` tokens, padded with ``[PAD]`` to ``len(tokens)`` on ``side``."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    if not 0 <= real <= len(tokens):
        raise ValueError(f"real must be in 0..{len(tokens)}, got {real}")
    pads = [PAD] * (len(tokens) - real)
    kept = list(tokens[:real])
    return kept + pads if side == "right" else pads + kept


def _token_vector(token: str) -> np.ndarray:
    """A fixed random vector per token text (the same in every sentence and every run)."""
    seed = int.from_bytes(hashlib.sha256(token.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(D_MODEL)  # (D,)


def _queries_and_keys(tokens: Sequence[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The illustrative head's queries and keys ``(S, K)`` for a padded sentence."""
    rng = np.random.default_rng(seed)
    w_q = rng.standard_normal((D_MODEL, D_K)) / np.sqrt(D_MODEL)  # (D, K)
    w_k = rng.standard_normal((D_MODEL, D_K)) / np.sqrt(D_MODEL)  # (D, K)
    x = np.stack([_token_vector(token) for token in tokens])  # (S, D)
    x = x + sinusoidal_encoding(len(tokens), D_MODEL)  # (S, D) + (S, D)
    return x @ w_q, x @ w_k  # (S, D) @ (D, K) -> (S, K)


def _masks(tokens: Sequence[str], causal: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(keep, future, pad)``, each ``(T, S)`` boolean, from the library's mask functions."""
    length = len(tokens)
    ids = torch.tensor([[0 if token == PAD else 1 for token in tokens]])  # (1, S), [PAD] = 0
    padding = padding_mask_from_ids(ids, pad_id=0)  # (1, 1, 1, S)
    allowed = causal_mask(length) if causal else torch.ones(length, length, dtype=torch.bool)
    keep = combine_masks(allowed, padding)[0, 0]  # (T, T) & (1, 1, 1, S) -> (1, 1, T, S) -> (T, S)
    pad = (~padding[0, 0]).expand(length, length)  # (1, S) -> (T, S)
    return keep.numpy(), (~allowed).numpy(), pad.numpy()


def _number(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` decimals, exact zeros as ``0``, never ``-0.0``."""
    if value == 0:
        return "0"
    text = f"{value:.{decimals}f}"
    return "0" if float(text) == 0 else text


def _matrix_text(matrix: np.ndarray, decimals: int | None) -> str:
    """A ``(T, S)`` matrix as text: rows joined by ``|``; numbers with ``decimals`` decimals
    joined by spaces, or (``decimals=None``) one digit per entry with no separator."""
    if decimals is None:
        return "|".join("".join(str(int(value)) for value in row) for row in matrix)
    return "|".join(" ".join(_number(value, decimals) for value in row) for row in matrix)


def parse_matrix(text: str) -> np.ndarray:
    """The inverse of the explorer's matrix text: ``(T, S)`` floats (the page does the same)."""
    rows = text.split("|")
    if " " in text or "." in text:  # numbers (a one-key row of a weight or score matrix too)
        return np.array([[float(value) for value in row.split(" ")] for row in rows])
    return np.array([[float(digit) for digit in row] for row in rows])  # one digit per entry


def mask_explorer_data(presets: Sequence[MaskPreset], seed: int = 0) -> dict[str, list]:
    """The explorer's data: one row per (preset ``r``, real tokens ``n`` in ``0..S``, padding
    side ``s``, causal ``c`` in 1/0), each holding three ``(T, S)`` matrices as text (rows
    joined by ``|``, so the page stays small and quick to build; :func:`parse_matrix` reads
    them back):

    - ``"m"``: for each query and key, one digit, the bit code of :data:`WHY`: 0 = may attend,
      +1 = a future key (causal mask), +2 = a ``[PAD]`` key (padding mask);
    - ``"sc"``: the head's scores ``q . k / sqrt(d_k)`` before masking (space-separated);
    - ``"w"``: the weights after masking and softmax; a row with no key allowed (all codes
      nonzero) is all zeros.

    Also ``"tokens"``: ``tokens[r][side][n]``, the padded token list, for the axis labels.
    """
    check_menu_records(presets, "MaskPreset")
    for preset in presets:
        _check_preset(preset)
    rows, labels = [], []
    for r, preset in enumerate(presets):
        length = len(preset.tokens)
        by_side = {}
        for side in SIDES:
            by_side[side] = []
            for real in range(length + 1):
                tokens = padded_tokens(preset.tokens, real, side)
                by_side[side].append(tokens)
                queries, keys = _queries_and_keys(tokens, seed)  # (S, K) each
                scores = queries @ keys.T / np.sqrt(D_K)  # (T, K) @ (K, S) -> (T, S)
                for causal in (1, 0):
                    keep, future, pad = _masks(tokens, bool(causal))  # (T, S) each
                    _, weights = scaled_dot_product_attention(
                        queries, keys, np.eye(length), mask=keep
                    )  # (T, S): all-masked rows are zeros
                    why = future.astype(int) + 2 * pad.astype(int)  # (T, S) bit codes
                    rows.append(
                        {
                            "r": r,
                            "n": real,
                            "s": side,
                            "c": causal,
                            "m": _matrix_text(why, None),
                            "sc": _matrix_text(scores, SCORE_DECIMALS),
                            "w": _matrix_text(weights, WEIGHT_DECIMALS),
                        }
                    )
        labels.append(by_side)
    return {"rows": rows, "tokens": labels}


def mask_explorer(
    presets: Sequence[MaskPreset],
    *,
    start: int = 0,
    start_real: int | None = None,
    start_side: str = "right",
    start_causal: bool = True,
    seed: int = 0,
    title: str = TITLE,
) -> alt.VConcatChart:
    """The explorer as one Vega-Lite chart; every control is a Vega-Lite parameter.

    ``start_real`` (default: all tokens of the starting sentence but two) is where the ``n``
    slider starts. The slider runs to the longest preset; the page narrows it to the chosen
    sentence's length (``usermeta["limits"]``), and a shorter sentence shows all its tokens
    when ``n`` is beyond its length (the title says which ``n`` is shown).

    The panels are stacked (mask, then weights and row sums) so that the whole chart fits a
    phone's text column (:data:`MAX_WIDTH` pixels) for every sentence of up to
    :data:`MAX_TOKENS` tokens.
    """
    data = mask_explorer_data(presets, seed)
    if not 0 <= start < len(presets):
        raise ValueError(f"start={start} is outside 0..{len(presets) - 1}")
    lengths = [len(preset.tokens) for preset in presets]
    longest = max(lengths)
    start_real = max(lengths[start] - 2, 0) if start_real is None else start_real
    if not 0 <= start_real <= lengths[start]:
        raise ValueError(f"start_real={start_real} is outside 0..{lengths[start]}")
    if start_side not in SIDES:
        raise ValueError(f"start_side must be one of {SIDES}, got {start_side!r}")

    sentence = sentence_menu("sentence", [preset.label for preset in presets], start)
    real = alt.param(
        name="real",
        value=start_real,
        bind=alt.binding_range(min=0, max=longest, step=1, name="real tokens n "),
    )
    side = alt.param(
        name="side",
        value=start_side,
        bind=alt.binding_radio(options=list(SIDES), name="[PAD] on the "),
    )
    causal = alt.param(
        name="causal", value=bool(start_causal), bind=alt.binding_checkbox(name="causal mask ")
    )
    token_lists = alt.param(name="tokens", value=data["tokens"])
    sentence_lengths = alt.param(name="lengths", value=lengths)
    shown = alt.param(name="shown", expr="min(real, lengths[sentence])")  # n actually shown

    # One named dataset at the top level: every panel reads it, none carries a copy. Vega
    # changes the rows it is given in place, so every step writes a field of its own and never
    # one it reads (the source fields m, sc, w stay as they are): a state shown a second time
    # is computed from the same rows as the first time.
    cells = (
        alt.Chart(alt.NamedData(name=DATASET))
        .transform_filter(
            "datum.r == sentence && datum.n == shown && datum.s == side"
            " && datum.c == (causal ? 1 : 0)"
        )
        .transform_calculate(
            m_rows="split(datum.m, '|')",
            sc_rows="split(datum.sc, '|')",
            w_rows="split(datum.w, '|')",
            q_list="sequence(0, length(split(datum.m, '|')))",
        )
        .transform_flatten(
            ["m_rows", "sc_rows", "w_rows", "q_list"], as_=["m_row", "sc_row", "w_row", "q"]
        )  # one row per query
        .transform_calculate(
            dead="indexof(datum.m_row, '0') < 0 ? 1 : 0",  # no key allowed
            m_cells="split(datum.m_row, '')",
            sc_cells="split(datum.sc_row, ' ')",
            w_cells="split(datum.w_row, ' ')",
            k_list="sequence(0, length(datum.m_row))",
        )
        .transform_flatten(
            ["m_cells", "sc_cells", "w_cells", "k_list"], as_=["m_cell", "sc_cell", "w_cell", "k"]
        )  # one row per (query, key)
        .transform_calculate(
            why="toNumber(datum.m_cell)",
            score="toNumber(datum.sc_cell)",
            weight="toNumber(datum.w_cell)",
            query_label="datum.q + ': ' + tokens[sentence][side][shown][datum.q]",
            key_label="datum.k + ': ' + tokens[sentence][side][shown][datum.k]",
            mask=f"{list(WHY)}[datum.why]",
            score_text="datum.why == 0 ? format(datum.score, '.1f') : '−∞'",
            weight_text="datum.why == 0 ? format(datum.weight, '.2f') : '0'",
            masked_score="datum.why == 0 ? format(datum.score, '.1f') : '−∞ (masked)'",
        )
    )
    # Square cells, as large as the column allows for the longest sentence: labels (at most
    # LABEL_LIMIT px), the axis title, the cells and the row sums fit MAX_WIDTH.
    step = int(np.clip((MAX_WIDTH - LABEL_LIMIT - 68) // longest, 18, 32))
    font = 9 if step >= 24 else 8
    # aria=False: Vega writes an axis's description (its domain) only when the axis moves, so
    # it would go stale as the sentence changes; the cells' own descriptions name the tokens.
    x_axis = alt.Axis(
        labelExpr="tokens[sentence][side][shown][datum.value]",
        labelAngle=-45,
        labelLimit=LABEL_LIMIT,
        aria=False,
    )
    y_axis = alt.Axis(
        labelExpr="tokens[sentence][side][shown][datum.value]",
        labelLimit=LABEL_LIMIT,
        aria=False,
    )
    band = alt.Scale(paddingInner=0.06)  # the page shows through: no hard-coded grid colour
    x = alt.X("k:O", title="key (looked at)", axis=x_axis, scale=band)
    y = alt.Y("q:O", title="query (looking)", axis=y_axis, scale=band)
    tooltip = [
        alt.Tooltip("query_label:N", title="query"),
        alt.Tooltip("key_label:N", title="key"),
        alt.Tooltip("mask:N", title="mask"),
        alt.Tooltip("masked_score:N", title="score"),
        alt.Tooltip("weight:Q", title="weight", format=".2f"),
    ]
    size = {"width": alt.Step(step), "height": alt.Step(step)}

    why_colour = alt.Color(
        "mask:N",
        scale=alt.Scale(domain=list(WHY), range=list(WHY_COLOURS)),
        legend=alt.Legend(title="cell", orient="bottom", columns=2, symbolType="square"),
    )
    mask_cells = cells.mark_rect().encode(x=x, y=y, color=why_colour, tooltip=tooltip)
    # text on the light cell colours: black in light and dark pages alike
    mask_text = cells.mark_text(fontSize=font, color="black").encode(
        x="k:O", y="q:O", text="score_text:N", tooltip=tooltip
    )
    mask_panel = (mask_cells + mask_text).properties(title="Mask, and the scores it leaves", **size)

    weight_colour = alt.condition(
        "datum.why == 0",
        alt.Color(
            "weight:Q",
            scale=alt.Scale(scheme="cividis", domain=[0, 1]),
            legend=alt.Legend(title="weight", orient="bottom", gradientLength=120),
        ),
        alt.value(MASKED_GREY),
    )
    weight_cells = cells.mark_rect(strokeWidth=2).encode(
        x=x,
        y=y,
        color=weight_colour,
        stroke=alt.condition("datum.dead == 1", alt.value(DEAD_ROW), alt.value(None)),
        tooltip=tooltip,
    )
    weight_text = cells.mark_text(fontSize=font).encode(
        x="k:O",
        y="q:O",
        text="weight_text:N",
        color=alt.condition(
            "datum.why == 0 && datum.weight < 0.5", alt.value("white"), alt.value("black")
        ),
        tooltip=tooltip,
    )
    weight_panel = (weight_cells + weight_text).properties(
        title="Weights after the softmax", **size
    )

    row_sums = cells.transform_filter("datum.k == 0").transform_calculate(
        total="datum.dead == 1 ? '0' : '1'",
        note="datum.dead == 1 ? 'no key left: a plain softmax gives NaN; here all 0' : 'sums to 1'",
    )
    sum_encoding = {
        "y": alt.Y("q:O", axis=None, scale=band),
        "text": "total:N",
        "tooltip": [
            alt.Tooltip("query_label:N", title="query"),
            alt.Tooltip("note:N", title="row"),
        ],
    }
    sums = (
        (
            # the page's text colour for the 1s (it follows a dark theme), vermilion for the 0s
            row_sums.transform_filter("datum.dead == 0").mark_text(fontSize=11, fontWeight="bold")
            + row_sums.transform_filter("datum.dead == 1").mark_text(
                fontSize=11, fontWeight="bold", color=DEAD_ROW
            )
        )
        .encode(**sum_encoding)
        .properties(width=24, height=alt.Step(step), title="sum")
    )

    # A line under the title says which combination is shown; it follows the controls. (A
    # text mark, not the title: Vega updates a title's text but not its aria-label.)
    state = (
        alt.Chart(alt.InlineData(values=[{}]))
        .transform_calculate(
            shown_state="['S = ' + lengths[sentence] + ' positions: n = ' + shown"
            " + ' real tokens,', (lengths[sentence] - shown) + ' [PAD] on the ' + side"
            " + '; causal mask ' + (causal ? 'on' : 'off')]"
        )
        .mark_text(align="left", baseline="top", fontSize=12, fontWeight="bold", lineHeight=16)
        .encode(x=alt.value(0), y=alt.value(0), text=alt.Text("shown_state:N", title="shown"))
        .properties(width=1, height=32)
    )
    chart = alt.vconcat(
        state,
        mask_panel,
        alt.hconcat(weight_panel, sums, spacing=6),
        spacing=14,
        title=alt.Title(textwrap.wrap(title, TITLE_CHARACTERS), anchor="start", offset=8),
    ).resolve_scale(color="independent")
    chart.datasets = {DATASET: data["rows"]}
    chart.params = [
        param.param
        for param in (sentence, real, side, causal, token_lists, sentence_lengths, shown)
    ]
    chart.description = (
        "The attention mask of one sentence and what it does to one head: above, each query's "
        "row of keys coloured by why a key is hidden (a future key, a [PAD] key) with the "
        "scores that stay; below, the weights after the softmax and each row's sum. The "
        "controls pick the sentence, how many of its tokens are real (the rest become [PAD]), "
        "the side the padding goes on, and whether the causal mask is on."
    )
    # The page narrows the n slider to the chosen sentence's length (see render.py).
    chart.usermeta = {"limits": {"real": {"by": "sentence", "max": lengths}}}
    return chart.configure_view(stroke=None)


def live_mask_explorer(sentence: str = "the cat sat on the mat") -> LiveView:
    """In a kernel: type any sentence (1 to 10 words); the browser-side controls keep working
    on the redrawn chart."""

    def draw(sentence: str) -> alt.TopLevelMixin:
        return mask_explorer([MaskPreset.from_sentence(sentence)])

    return LiveView({"sentence": sentence_box(sentence)}, draw)
