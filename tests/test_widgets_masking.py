"""Tests for transformer_tutorial.views.explorers.masking: the mask explorer."""

import json

import ipywidgets as ipw
import numpy as np
import pytest
import torch

from transformer_tutorial.model.attention import softmax
from transformer_tutorial.model.masks import causal_mask, padding_mask, padding_mask_from_ids
from transformer_tutorial.views.explorers import chart_bundle
from transformer_tutorial.views.explorers.masking import (
    MAX_TOKENS,
    PAD,
    SCORE_DECIMALS,
    SIDES,
    WEIGHT_DECIMALS,
    WHY,
    MaskPreset,
    live_mask_explorer,
    mask_explorer,
    mask_explorer_data,
    padded_tokens,
    parse_matrix,
)

PRESETS = [
    MaskPreset.from_sentence("the cat sat on the mat"),
    MaskPreset.from_sentence("I eat pizza"),
    MaskPreset("one", ["hello"]),
]


@pytest.fixture(scope="module")
def data():
    return mask_explorer_data(PRESETS)


def _params(spec):
    return {param["name"]: param for param in spec["params"]}


def _expected_padding(real: int, length: int, side: str) -> np.ndarray:
    """Which keys are real, from masking.padding_mask (mirrored for left padding): (S,)."""
    real_keys = padding_mask([real], length)[0, 0, 0].numpy()  # (1, 1, 1, S) -> (S,)
    return real_keys if side == "right" else real_keys[::-1]


def _queries(data):
    """Every query row of every combination: (r, n, side, causal, q, why, scores, weights)."""
    for row in data["rows"]:
        why, scores, weights = (parse_matrix(row[name]) for name in ("m", "sc", "w"))
        assert why.shape == scores.shape == weights.shape
        for q in range(why.shape[0]):
            yield (
                row["r"],
                row["n"],
                row["s"],
                row["c"],
                q,
                why[q].astype(int),
                scores[q],
                weights[q],
            )


def test_one_row_per_combination(data):
    expected = sum((len(p.tokens) + 1) * len(SIDES) * 2 for p in PRESETS)
    assert len(data["rows"]) == expected
    combinations = {(row["r"], row["n"], row["s"], row["c"]) for row in data["rows"]}
    assert len(combinations) == expected  # no duplicates
    assert {row["c"] for row in data["rows"]} == {0, 1}
    assert {row["s"] for row in data["rows"]} == set(SIDES)
    for row in data["rows"]:
        length = len(PRESETS[row["r"]].tokens)
        assert parse_matrix(row["m"]).shape == (length, length)  # (T, S) with T = S


def test_matrix_text_reads_back():
    assert parse_matrix("013|200").tolist() == [[0, 1, 3], [2, 0, 0]]
    assert parse_matrix("0.25 0|-1.5 2.0").tolist() == [[0.25, 0], [-1.5, 2.0]]
    assert parse_matrix("1|0").tolist() == [[1], [0]]


def test_mask_cells_equal_the_library_masks(data):
    checked = 0
    for r, real, side, causal, q, why, _, _ in _queries(data):
        length = len(PRESETS[r].tokens)
        future = ~causal_mask(length)[q].numpy() if causal else np.zeros(length, dtype=bool)
        real_keys = _expected_padding(real, length, side)
        np.testing.assert_array_equal((why & 1) == 1, future)
        np.testing.assert_array_equal((why & 2) == 2, ~real_keys)
        np.testing.assert_array_equal(why == 0, ~future & real_keys)  # the combined mask
        checked += 1
    assert checked == sum((len(p.tokens) + 1) * 4 * len(p.tokens) for p in PRESETS)


def test_weights_are_the_masked_softmax_of_the_scores(data):
    dead_rows = 0
    for *_, why, scores, weights in _queries(data):
        allowed = why == 0
        assert (weights[~allowed] == 0).all(), "a masked key got weight"
        if not allowed.any():
            assert (weights == 0).all()  # no NaN: the library's all-masked rows are zeros
            dead_rows += 1
            continue
        assert abs(weights.sum() - 1) <= len(weights) * 10**-WEIGHT_DECIMALS / 2 + 1e-9
        expected = softmax(np.where(allowed, scores, -np.inf))  # from the rounded scores
        np.testing.assert_allclose(weights, expected, atol=0.03)
    assert dead_rows > 0


def test_dead_rows_appear_exactly_where_no_key_is_left(data):
    dead = {}
    for r, real, side, causal, _, why, _, _ in _queries(data):
        dead[r, real, side, causal] = dead.get((r, real, side, causal), 0) + (why != 0).all()
    for (r, real, side, causal), count in dead.items():
        length = len(PRESETS[r].tokens)
        if real == 0:
            expected = length  # a sequence that is all padding: every query
        elif side == "left" and causal:
            expected = length - real  # a [PAD] query before the first real token sees only pads
        else:
            expected = 0
        assert count == expected, (r, real, side, causal)


def test_scores_do_not_depend_on_the_mask(data):
    by_key = {}
    for row in data["rows"]:
        by_key.setdefault((row["r"], row["n"], row["s"]), []).append(row["sc"])
    assert all(masked == unmasked for masked, unmasked in by_key.values())
    # the same words score the same in every preset list and every run
    again = mask_explorer_data([PRESETS[1]])["rows"]
    assert [row["sc"] for row in again] == [row["sc"] for row in data["rows"] if row["r"] == 1]
    for value in again[-1]["sc"].replace("|", " ").split(" "):
        assert value == "0" or len(value.split(".")[1]) == SCORE_DECIMALS


def test_token_labels_are_the_padded_sentences(data):
    assert data["tokens"][1]["right"][1] == ["I", PAD, PAD]
    assert data["tokens"][1]["left"][1] == [PAD, PAD, "I"]
    assert data["tokens"][1]["left"][0] == [PAD, PAD, PAD]
    assert data["tokens"][0]["right"][6] == "the cat sat on the mat".split()
    assert padded_tokens(["a", "b", "c"], 2, "left") == [PAD, "a", "b"]
    with pytest.raises(ValueError, match="side must be one of"):
        padded_tokens(["a"], 1, "top")
    with pytest.raises(ValueError, match=r"real must be in 0..1, got 2"):
        padded_tokens(["a"], 2, "right")


def test_controls_are_browser_side_parameters():
    spec = mask_explorer(PRESETS, start=1, start_real=2, start_side="left").to_dict()
    params = _params(spec)
    assert params["sentence"]["value"] == 1
    assert params["sentence"]["bind"]["labels"] == ["the cat sat on the mat", "I eat pizza", "one"]
    assert params["real"]["value"] == 2
    assert (params["real"]["bind"]["min"], params["real"]["bind"]["max"]) == (0, 6)
    assert params["side"]["bind"]["input"] == "radio"
    assert params["side"]["bind"]["options"] == ["right", "left"]
    assert params["side"]["value"] == "left"
    assert params["causal"]["bind"]["input"] == "checkbox" and params["causal"]["value"] is True
    assert params["lengths"]["value"] == [6, 3, 1]
    assert params["shown"]["expr"] == "min(real, lengths[sentence])"
    text = json.dumps(spec)
    assert "datum.n == shown && datum.s == side && datum.c == (causal ? 1 : 0)" in text
    assert '"scheme": "cividis"' in text
    for label in WHY:
        assert json.dumps(label) in text  # the mask legend names every reason
    # the line under the title names the combination shown, from the same parameters
    (state,) = [view for view in spec["vconcat"] if view.get("mark", {}).get("type") == "text"]
    (calculation,) = state["transform"]
    assert "' [PAD] on the ' + side" in calculation["calculate"]
    assert "(causal ? 'on' : 'off')" in calculation["calculate"]
    assert "shown" in calculation["calculate"] and "lengths[sentence]" in calculation["calculate"]
    assert spec["title"]["text"] == [
        "Masks: which keys each query may see,",
        "and the weights that are left",
    ]
    # the page narrows the n slider to the chosen sentence's length
    assert spec["usermeta"] == {"limits": {"real": {"by": "sentence", "max": [6, 3, 1]}}}
    assert "causal mask" in spec["description"]


def test_default_start_leaves_two_pads():
    params = _params(mask_explorer(PRESETS).to_dict())
    assert params["real"]["value"] == 4 and params["side"]["value"] == "right"


def test_labels_are_text_never_markup():
    preset = MaskPreset.from_sentence("<b>cat</b> & <i>dog</i>")
    spec = mask_explorer([preset]).to_dict()
    text = json.dumps(spec)
    assert "tokens[sentence][side][shown][datum.value]" in text  # axis labels come from data
    assert '"<b>cat</b>"' in text  # in the spec, as data
    assert "<b>" not in chart_bundle(mask_explorer([preset]))["text/html"]  # never as markup


@pytest.mark.parametrize(
    ("presets", "message"),
    [
        ([], "records is empty"),
        ([MaskPreset("a", ["x"]), MaskPreset("a", ["y"])], "unique"),
        ([MaskPreset("long", ["w"] * (MAX_TOKENS + 1))], f"give 1 to {MAX_TOKENS} tokens, got 11"),
        ([MaskPreset("none", [])], "give 1 to 10 tokens, got 0"),
        ([MaskPreset("blank", ["a", ""])], "non-empty string"),
        ([MaskPreset("pad", ["a", PAD])], "choose n to add padding"),
        ([MaskPreset(" ", ["a"])], "label must be a non-empty string"),
    ],
)
def test_bad_presets_are_refused(presets, message):
    with pytest.raises(ValueError, match=message):
        mask_explorer(presets)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"start": 3}, "start=3 is outside 0..2"),
        ({"start_real": 7}, "start_real=7 is outside 0..6"),
        ({"start_side": "up"}, "start_side must be one of"),
    ],
)
def test_start_values_are_checked(option, message):
    with pytest.raises(ValueError, match=message):
        mask_explorer(PRESETS, **option)


def test_from_sentence_needs_words():
    with pytest.raises(ValueError, match="sentence has no words"):
        MaskPreset.from_sentence("   ")
    assert MaskPreset.from_sentence("  a   b ").label == "a b"


def test_bundle_is_deterministic_and_small():
    presets = [
        MaskPreset.from_sentence(" ".join(f"w{i}{j}" for j in range(MAX_TOKENS))) for i in range(4)
    ]
    first = chart_bundle(mask_explorer(presets))
    assert first == chart_bundle(mask_explorer(presets))
    size = len(first["text/html"].encode())
    assert size < 300_000, f"4 sentences of {MAX_TOKENS} tokens take {size} bytes"


def test_live_explorer_redraws_from_the_text_box():
    view = live_mask_explorer("a b c")
    assert isinstance(view.controls["sentence"], ipw.Text)
    assert _params(view.chart.to_dict())["lengths"]["value"] == [3]
    view.controls["sentence"].value = "<b>x</b> y"
    assert _params(view.chart.to_dict())["tokens"]["value"][0]["right"][2] == ["<b>x</b>", "y"]
    before = view.output.outputs
    view.controls["sentence"].value = " ".join(["w"] * (MAX_TOKENS + 1))
    assert "give 1 to 10 tokens" in view.message.value
    assert view.output.outputs == before
    view.controls["sentence"].value = ""
    assert "sentence has no words" in view.message.value


def test_the_library_mask_functions_agree_with_the_hand_rule():
    # the explorer's left padding is padding_mask mirrored; check that rule once by hand
    ids = torch.tensor([[0, 0, 5, 6]])
    by_ids = padding_mask_from_ids(ids, pad_id=0)[0, 0, 0].numpy()
    np.testing.assert_array_equal(by_ids, _expected_padding(2, 4, "left"))


def test_the_panels_are_stacked_and_fit_a_phone():
    from transformer_tutorial.views.explorers import masking

    presets = [MaskPreset.from_sentence(" ".join(["word"] * MAX_TOKENS))]
    spec = mask_explorer(presets).to_dict()
    _state, mask, weights = spec["vconcat"]
    step = mask["width"]["step"]
    # labels, axis title, the cells, the row sums: the column's width (Vega adds 5 px a side)
    assert masking.LABEL_LIMIT + 30 + MAX_TOKENS * step + 6 + 24 <= masking.MAX_WIDTH
    assert [view.get("title") for view in weights["hconcat"]] == [
        "Weights after the softmax",
        "sum",
    ]
    # no grey text that a dark page would hide; text on the light cells stays black
    assert "#555555" not in json.dumps(spec)
    assert mask["layer"][1]["mark"]["color"] == "black"


def test_every_state_is_computed_from_untouched_rows():
    # Vega changes the rows it is given in place: no step may write m, sc or w (the first
    # version split them in place, and a state shown twice was split twice)
    spec = mask_explorer(PRESETS).to_dict()
    text = json.dumps(spec)
    for field in ("m", "sc", "w"):
        assert f'"as": "{field}"' not in text
