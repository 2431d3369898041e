"""Tests for transformer_tutorial.views.explorers: the explorer's data, chart and live view."""

import json
import re

import altair as alt
import ipywidgets as ipw
import numpy as np
import pytest

from transformer_tutorial.model.positions import sinusoidal_encoding
from transformer_tutorial.views import explorers
from transformer_tutorial.views.explorers import render
from transformer_tutorial.views.explorers.positional import DECIMALS


def _params(spec):
    return {param["name"]: param for param in spec["params"]}


def test_explorer_data_holds_the_tested_tables():
    data = explorers.positional_explorer_data((8, 16), max_len=12)
    assert len(data["table"]) == len(data["similarity"]) == 2 * 12
    for row in data["table"]:
        expected = sinusoidal_encoding(12, row["d"])[row["p"]]
        np.testing.assert_allclose(row["v"], expected, atol=10**-DECIMALS / 2)
    for row in data["similarity"]:
        table = sinusoidal_encoding(12, row["d"])
        np.testing.assert_allclose(row["s"], table @ table[row["p"]], atol=10**-DECIMALS / 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_models": ()}, "d_models is empty"),
        ({"d_models": (8, 8)}, "d_models has repeats"),
        ({"d_models": (7,)}, "d_model must be even"),
    ],
)
def test_explorer_data_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        explorers.positional_explorer_data(max_len=4, **kwargs)


def test_explorer_controls_are_browser_side_parameters():
    spec = explorers.positional_explorer((16, 32), max_len=20, start_a=3, start_b=9).to_dict()
    params = _params(spec)
    assert params["d_model"]["bind"] == {"input": "select", "options": [16, 32], "name": "d_model "}
    assert params["d_model"]["value"] == 32
    for name, start in (("pos_a", 3), ("pos_b", 9)):
        assert params[name]["value"] == start
        assert params[name]["bind"]["input"] == "range"
        assert (params[name]["bind"]["min"], params[name]["bind"]["max"]) == (0, 19)
    # every panel filters on the parameters, so the browser recomputes without a kernel
    text = json.dumps(spec)
    for expression in ("datum.d == d_model", "pos_a", "pos_b"):
        assert expression in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_d_model": 24}, "start_d_model=24 is not one of"),
        ({"start_a": 50}, r"start_a=50 is outside the positions 0..49"),
        ({"start_b": -1}, "start_b=-1 is outside"),
    ],
)
def test_explorer_rejects_bad_start(kwargs, message):
    with pytest.raises(ValueError, match=message):
        explorers.positional_explorer(**kwargs)


def _tiny_chart(labels, title="tiny"):
    rows = [{"label": label, "v": i} for i, label in enumerate(labels)]
    return (
        alt.Chart(alt.Data(values=rows), title=title)
        .mark_bar()
        .encode(x="v:Q", y="label:N", tooltip=["label:N", "v:Q"])
    )


def _spec_script(html):
    (text,) = re.findall(
        r'<script type="application/json" id="vega-[0-9a-f]{16}-spec">(.*?)</', html
    )
    return text


def test_chart_bundle_is_deterministic_and_self_contained():
    chart = explorers.positional_explorer((8,), max_len=6)
    first = explorers.chart_bundle(chart)
    second = explorers.chart_bundle(explorers.positional_explorer((8,), max_len=6))
    assert first == second
    html = first["text/html"]
    element_id = re.match(r'<div id="(vega-[0-9a-f]{16})" class="tt-chart"></div>\n', html)[1]
    assert first["text/plain"] == f"<Vega-Lite chart {element_id}>"
    assert f'<script type="application/json" id="{element_id}-spec">' in html
    assert (
        f'transformerTutorial.embed("{element_id}", {{"actions":false,"renderer":"svg"}});' in html
    )
    other = explorers.chart_bundle(explorers.positional_explorer((8,), max_len=7))
    assert element_id not in other["text/html"]


HOSTILE = [
    "</script><script>window.__pwned=1</script>",
    "<!-- <script>",
    "<b>&amp;</b>",
    "line\u2028sep\u2029end",
    "</SCRIPT >",
]


def test_spec_json_cannot_end_its_script():
    chart = _tiny_chart(HOSTILE, title=HOSTILE[0])
    html = render.chart_html(chart.to_dict())
    text = _spec_script(html)
    for character in "<>&\u2028\u2029":
        assert character not in text
    assert "\\u003c/script\\u003e" in text
    spec = json.loads(text)  # the escapes are plain JSON: the browser's JSON.parse reads the same
    assert [row["label"] for row in spec["data"]["values"]] == HOSTILE
    assert spec == render.spec_from_html(html)
    # only the book's own scripts: the spec script, and the loader script
    assert html.lower().count("<script") == 2 and html.lower().count("</script") == 2
    assert "<!--" not in html


def test_every_spec_resizes_with_its_content_and_has_a_description():
    spec = render.spec_from_html(render.chart_html(_tiny_chart(["a"], title="Tiny").to_dict()))
    assert spec["autosize"] == {"type": "pad", "resize": True}
    assert spec["description"] == "Tiny"
    given = _tiny_chart(["a"]).properties(description="Bars.", autosize={"contains": "padding"})
    spec = render.spec_from_html(render.chart_html(given.to_dict()))
    assert spec["autosize"] == {"type": "pad", "resize": True, "contains": "padding"}
    assert spec["description"] == "Bars."
    titled = _tiny_chart(["a"], title=alt.Title(["Two", "lines"], subtitle="s"))
    assert render.spec_from_html(render.chart_html(titled.to_dict()))["description"] == "Two lines"


def test_loader_is_the_package_file_inlined_once_behind_a_guard():
    loader = render.LOADER_PATH.read_text()
    assert "</script" not in loader.lower() and "<!--" not in loader
    assert "if (tt.embed) return;" in loader  # a page with many charts sets up once
    html = explorers.chart_bundle(_tiny_chart(["a", "b"]))["text/html"]
    assert html.count(loader.strip()) == 1
    assert html.count('transformerTutorial.embed("') == 1
    for url in render.LIBRARIES.values():
        assert url in html
    assert render.LIBRARIES["vega"] == f"https://cdn.jsdelivr.net/npm/vega@{alt.VEGA_VERSION}?noext"
    assert "require.js" not in html and "require.min.js" not in html  # uses it only if present


def test_loader_ships_with_the_package():
    from importlib.resources import files

    assert (files("transformer_tutorial") / "views" / "explorers" / "explorer.js").is_file()


def test_book_renderer_is_used_for_display():
    previous = alt.renderers.active
    try:
        explorers.use_book_renderer()
        chart = explorers.positional_explorer((8,), max_len=6)
        bundle = chart._repr_mimebundle_()
        bundle = bundle[0] if isinstance(bundle, tuple) else bundle
        assert bundle["text/html"] == explorers.chart_bundle(chart)["text/html"]
    finally:
        alt.renderers.enable(previous)


def test_live_view_shows_the_bundle_of_its_chart():
    view = explorers.live_positional_explorer(d_model=8, max_len=10)
    (output,) = view.output.outputs
    assert output["output_type"] == "display_data"
    assert output["data"] == explorers.chart_bundle(view.chart)


def test_live_explorer_redraws_when_a_control_changes():
    view = explorers.live_positional_explorer(d_model=8, max_len=10)
    spec = view.chart.to_dict()
    assert _params(spec)["d_model"]["value"] == 8
    view.controls["d_model"].value = 12
    spec = view.chart.to_dict()
    assert _params(spec)["d_model"]["bind"]["options"] == [12]
    (rows,) = [rows for rows in spec["datasets"].values() if "v" in rows[0]]
    assert len(rows) == 10 and len(rows[0]["v"]) == 12
    view.controls["max_len"].value = 4
    assert _params(view.chart.to_dict())["pos_b"]["value"] == 3  # start positions follow the length


def test_live_view_shows_errors_as_escaped_text_and_keeps_the_chart():
    view = explorers.live_positional_explorer(d_model=8, max_len=10)
    before = view.output.outputs
    view.controls["d_model"].value = 9  # odd: the module refuses it
    assert "d_model must be even" in view.message.value
    assert view.output.outputs == before
    view.controls["d_model"].value = 10
    assert view.message.value == ""


def test_live_view_escapes_html_in_messages():
    def draw(text):
        if text.startswith("<"):
            raise ValueError(f"bad text {text}")
        return explorers.positional_explorer((8,), max_len=4, start_a=0, start_b=1)

    view = explorers.LiveView({"text": ipw.Text("ok")}, draw)
    view.controls["text"].value = "<b>x</b>"
    assert "&lt;b&gt;x&lt;/b&gt;" in view.message.value and "<b>" not in view.message.value


def test_live_view_needs_controls():
    with pytest.raises(ValueError, match="controls is empty"):
        explorers.LiveView({}, lambda: None)


# =============================================================================================
# Every explorer's Vega-Lite spec (and the positional explorer's layout). This block belongs to
# the explorers (widgets/{masking,attention,apple,positional,rnn,tokens}.py), not to render.py.

# A Vega transform that writes a field of the rows it reads changes the shared source rows in
# place (Vega's formula and lookup transforms set fields on the tuples they get): the second
# visit to a state then reads its own output, e.g. split() twice. The rule checked here is
# stricter and simple: within a view's chain of transforms every field is written at most once,
# never over a field of the source rows, and a calculation never reads the field it writes.
# Views that share a dataset must also agree on any field they write onto its rows in place.
_COPYING = ("flatten", "fold", "aggregate", "pivot")  # transforms that emit new rows


def _transform_outputs(transform: dict) -> list[str]:
    if "calculate" in transform:
        return [transform["as"]]
    if "flatten" in transform:
        return list(transform.get("as", transform["flatten"]))
    if "fold" in transform:
        return list(transform.get("as", ["key", "value"]))
    if "lookup" in transform:
        source = transform["from"]
        return list(transform.get("as") or source.get("fields") or [source.get("param", "")])
    if "aggregate" in transform:
        return [step["as"] for step in transform["aggregate"]]
    if "window" in transform or "joinaggregate" in transform:
        return [step["as"] for step in transform.get("window", transform.get("joinaggregate"))]
    outputs = transform.get("as", [])
    return [outputs] if isinstance(outputs, str) else list(outputs)


def _unit_views(node: dict, data: dict | None = None, chain: tuple = (), where: str = ""):
    """Every unit view of a spec: (where, its data, all transforms that reach it, in order)."""
    data = node.get("data", data)
    chain = chain + tuple(node.get("transform", ()))
    if "mark" in node:
        yield where or "top", data, chain
    for key in ("layer", "hconcat", "vconcat", "concat"):
        for index, child in enumerate(node.get(key, ())):
            yield from _unit_views(child, data, chain, f"{where}/{key}[{index}]")
    if "spec" in node:
        yield from _unit_views(node["spec"], data, chain, f"{where}/spec")


def transform_problems(spec: dict) -> list[str]:
    """Transforms in ``spec`` that write a field twice, over a source field, or from itself."""
    problems, in_place = [], {}
    datasets = spec.get("datasets", {})
    for where, data, chain in _unit_views(spec):
        data = data or {}
        rows = datasets.get(data.get("name"), data.get("values", []))
        source = data.get("name") or json.dumps(data.get("values"), sort_keys=True)[:80]
        seen = {field for row in rows if isinstance(row, dict) for field in row}
        copied = False
        for transform in chain:
            for field in _transform_outputs(transform):
                if field in seen:
                    problems.append(f"{where}: {transform} writes {field!r}, already a field")
                seen.add(field)
            if "calculate" in transform:
                field = re.escape(transform["as"])
                reads_itself = rf"datum\.{field}\b|datum\[['\"]{field}['\"]\]"
                if re.search(reads_itself, transform["calculate"]):
                    problems.append(f"{where}: {transform} reads the field it writes")
                if not copied:
                    key = (source, transform["as"])
                    if in_place.setdefault(key, transform["calculate"]) != transform["calculate"]:
                        problems.append(f"{where}: {transform} writes {key[1]!r} of {source} rows")
            copied = copied or any(kind in transform for kind in _COPYING)
    return problems


def _every_explorer() -> dict[str, alt.TopLevelMixin]:
    """Each explorer with small presets that reach every branch of its code."""
    rng = np.random.default_rng(0)

    def attention(label, tokens, layers, heads, model=None, keys=None):
        keys = keys or tokens
        weights = rng.random((layers, heads, len(tokens), len(keys)))
        weights /= weights.sum(axis=-1, keepdims=True)  # rows sum to 1
        return explorers.AttentionRecord(label, list(tokens), weights, keys, model=model)

    anchors = [
        explorers.AnchorPoint("fruit", "fruit", (0.5, 3.0)),
        explorers.AnchorPoint("juice", "fruit", (0.6, 3.1)),
        explorers.AnchorPoint("mac", "technology", (6.0, 8.0)),
    ]
    shifts = [
        explorers.ShiftRecord("a", "apple", np.array([[4.0, 4.0], [5.0, 6.0], [6.0, 7.5]]),
                            ["my", "apple"], np.array([0.3, 0.7])),
        explorers.ShiftRecord("b", "apple", np.array([[4.0, 4.0], [1.0, 2.5]]),
                            ["apple", "pie"], np.array([0.6, 0.4])),
    ]  # fmt: skip
    neighbours = [
        explorers.NeighbourRecord("cat", [("cats", 0.8), ("dog", 0.5)]),
        explorers.NeighbourRecord("red", [("blue", 0.6), ("green", 0.55)]),
    ]
    return {
        "mask": explorers.mask_explorer(
            [
                explorers.MaskPreset.from_sentence("the cat sat on the mat"),
                explorers.MaskPreset.from_sentence("how are you"),
            ]
        ),
        "attention": explorers.attention_explorer(
            [attention("one", ["a", "b", "c"], 2, 3), attention("two", ["d", "e"], 2, 3)]
        ),
        "attention, two models": explorers.attention_explorer(
            [attention("toy", ["a", "b"], 1, 2, "toy"), attention("real", ["c", "d"], 3, 4, "real")]
        ),
        "cross-attention": explorers.attention_explorer(
            [attention("x", ["a"], 1, 1, keys=["b", "c"])]
        ),
        "apple": explorers.apple_explorer(shifts, anchors),
        "apple without attention": explorers.apple_explorer(
            [explorers.ShiftRecord("c", "apple", np.array([[0.0, 0.0], [1.0, 1.0]]))], anchors
        ),
        "positional": explorers.positional_explorer((8, 16), max_len=12),
        "gradient": explorers.gradient_explorer((0.5, 0.9, 1.3), (5, 10), hidden_size=4),
        "neighbours": explorers.neighbour_explorer(neighbours, baseline=0.3),
    }


EXPLORERS = _every_explorer()


@pytest.mark.parametrize("name", EXPLORERS)
def test_no_transform_overwrites_a_field(name):
    spec = EXPLORERS[name].to_dict()
    assert list(_unit_views(spec)), "found no views to check"
    assert transform_problems(spec) == []


def test_the_transform_check_catches_a_field_split_in_place():
    # the mask explorer's first version: split() writes back into the field it reads, so Vega
    # split the same source row again when a state came back (a chart of one row, stray −inf)
    rows = [{"m": "01|00", "sc": "1 2|3 4"}]
    spec = {
        "datasets": {"rows": rows},
        "data": {"name": "rows"},
        "transform": [
            {"calculate": "split(datum.m, '|')", "as": "m"},
            {"calculate": "sequence(0, length(datum.m))", "as": "q"},
            {"flatten": ["m", "q"]},
        ],
        "mark": "rect",
    }
    problems = transform_problems(spec)
    assert any("writes 'm', already a field" in problem for problem in problems)
    assert any("'as': 'm'} reads the field it writes" in problem for problem in problems)
    assert any("flatten" in problem and "'q'" in problem for problem in problems)
    fine = dict(spec, transform=[
        {"calculate": "split(datum.m, '|')", "as": "m_rows"},
        {"calculate": "sequence(0, length(datum.m_rows))", "as": "q_list"},
        {"flatten": ["m_rows", "q_list"], "as": ["m_row", "q"]},
    ])  # fmt: skip
    assert transform_problems(fine) == []
    # two views writing different things into the same field of shared rows
    clash = {
        "datasets": {"rows": rows},
        "data": {"name": "rows"},
        "layer": [
            {"transform": [{"calculate": "1", "as": "x"}], "mark": "rect"},
            {"transform": [{"calculate": "2", "as": "x"}], "mark": "rect"},
        ],
    }
    assert len(transform_problems(clash)) == 1


def _under(node, name: str):
    """Every value set under the key ``name`` anywhere in a spec (not looking inside them)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == name:
                yield value
            else:
                yield from _under(value, name)
    elif isinstance(node, list):
        for value in node:
            yield from _under(value, name)


def _fixed_widths(node: dict):
    """Every pixel width set in a spec (``width: 290``, or ``width: {step: 20}`` as 20)."""
    return [value["step"] if isinstance(value, dict) else value for value in _under(node, "width")]


@pytest.mark.parametrize("name", EXPLORERS)
def test_every_explorer_is_described_and_stacked(name):
    spec = EXPLORERS[name].to_dict()
    # Vega names the SVG with the description: what the chart shows and what the controls do
    assert len(spec["description"]) > 80 and spec["description"].endswith(".")
    # views one above the other (a phone's column is 358 px); only the mask explorer has a
    # narrow column of row sums beside its weights
    assert "hconcat" not in spec
    assert all(isinstance(width, int) and width <= 318 for width in _fixed_widths(spec))
    assert "minExtent" not in json.dumps(spec)  # no room kept for labels that are not there


def test_positional_panels_are_stacked_and_keep_their_ticks():
    spec = explorers.positional_explorer((16, 32), max_len=20).to_dict()
    heatmap, vectors, similarity = spec["vconcat"]
    assert heatmap["title"] == ["The table PE: one row per position,", "one column per dimension"]
    # the similarity is drawn as a share of d_model / 2 on one scale for every d_model, and the
    # axis says the dot product: its ticks stay when d_model changes
    axis = similarity["layer"][0]["encoding"]["y"]["axis"]
    assert axis["labelExpr"] == "format(datum.value * d_model / 2, '~r')"
    assert (
        axis["values"][-1] == 1
        and similarity["layer"][0]["encoding"]["y"]["scale"]["nice"] is False
    )
    # one layer per position: a slider replaces its own line only
    assert [layer["transform"][-1]["filter"] for layer in vectors["layer"]] == [
        "datum.p == pos_a",
        "datum.p == pos_b",
    ]
    assert "d_model" in spec["description"]


def _axes(node):
    return [axis for axis in _under(node, "axis") if isinstance(axis, dict)]


@pytest.mark.parametrize("name", EXPLORERS)
def test_axes_that_follow_the_controls_have_no_description(name):
    # Vega writes an axis's aria-label (its domain) only when the axis moves or resizes: an
    # axis whose labels follow the controls would keep describing an earlier state
    following = [
        axis
        for axis in _axes(EXPLORERS[name].to_dict())
        if any(word in axis.get("labelExpr", "") for word in ("[", "d_model", "length"))
    ]
    assert all(axis.get("aria") is False for axis in following)
