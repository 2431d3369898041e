"""Display Altair charts as small, safe, self-contained HTML: on the static site and in a kernel.

Each chart becomes three elements (``ID`` is ``vega-`` + 16 hex digits of the spec's SHA-256, so
the same chart always gives the same bytes and re-executing a notebook changes nothing)::

    <div id="ID" class="tt-chart"></div>
    <script type="application/json" id="ID-spec">{...the Vega-Lite spec...}</script>
    <script>(function () { ...explorer.js...; setUp({...CDN URLs...}); }());
    transformerTutorial.embed("ID", {...EMBED_OPTIONS...});</script>

- The spec is JSON that the browser never runs: ``<``, ``>``, ``&``, U+2028 and U+2029 are
  written ``\\u003c`` etc., so no label (``</script>``, ``<!--``) can end the script.
- ``explorer.js`` (next to this file, read and inlined here) sets up ``window.transformerTutorial``
  once per page: it loads vega, vega-lite and vega-embed from jsDelivr once (the versions
  Altair pins; through RequireJS when the page has it), then draws each chart into ``#ID``.
- Inside ``#ID``: a ``div.vega-embed`` (controls on top, in a wrapping row, then the SVG) and a
  ``details.tt-values`` ("Table of the values shown") that lists, when opened, every drawn item
  carrying a tooltip, one row each, as text.
- ``#ID`` gets ``data-drawn="true"`` after each successful drawing (tests wait for it); if a
  drawing fails it shows a ``p.tt-chart-error`` message instead. ``transformerTutorial.views[ID]``
  is the chart's Vega view.
- The chart follows the site theme (``data-theme="dark"`` on ``<html>``, or JupyterLab's
  ``data-jp-theme-light="false"`` on ``<body>``), redrawing with light text on a transparent
  background and keeping every control's value; data colour scales do not change.
- Every spec gets ``autosize: {type: "pad", resize: true}`` (the chart grows and shrinks with
  its content), ``aria: false`` on marks without a tooltip (decorative: outlines, arrows)
  and a ``description`` (its title when it has none),
  which Vega puts in the ``aria-label`` of the chart.
- ``usermeta.limits``: ``{"real": {"by": "sentence", "max": [4, 6, 3]}}`` lets the ``real``
  control go up to ``max[sentence]`` only; the browser lowers its value when needed.
"""

import copy
import hashlib
import json
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import altair as alt

__all__ = [
    "EMBED_OPTIONS",
    "LIBRARIES",
    "chart_bundle",
    "chart_html",
    "check_menu_records",
    "sentence_menu",
    "spec_from_html",
    "use_book_renderer",
]

RENDERER_NAME = "transformer_tutorial"
# SVG puts every mark in the DOM (tests can read it), and the action menu would link to an
# online editor a reader offline cannot reach.
EMBED_OPTIONS = {"renderer": "svg", "actions": False}
CDN = "https://cdn.jsdelivr.net/npm"
# The files Altair's own HTML loads. "?noext" keeps RequireJS from adding ".js".
LIBRARIES = {
    "vega": f"{CDN}/vega@{alt.VEGA_VERSION}?noext",
    "vega-lite": f"{CDN}/vega-lite@{alt.VEGALITE_VERSION}?noext",
    "vega-embed": f"{CDN}/vega-embed@{alt.VEGAEMBED_VERSION}?noext",
}
LOADER_PATH = Path(__file__).with_name("explorer.js")
AUTOSIZE = {"type": "pad", "resize": True}
_UNSAFE_IN_SCRIPT = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


@cache
def _loader() -> str:
    text = LOADER_PATH.read_text(encoding="utf-8")
    if any(tag in text.lower() for tag in ("<script", "</script", "<!--")):
        raise ValueError(f"{LOADER_PATH.name} must not contain '<script', '</script' or '<!--'")
    return text.strip()


def _script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside an HTML ``<script>`` element."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.translate(_UNSAFE_IN_SCRIPT)  # only strings can hold these characters


def _title_text(title: Any) -> str | None:
    if isinstance(title, dict):
        title = title.get("text")
    if isinstance(title, list):
        title = " ".join(str(line) for line in title)
    return title if isinstance(title, str) and title else None


def _hide_marks_without_tooltips(node: Any) -> None:
    """Take marks that carry no tooltip (outlines, arrows, leader lines) out of the
    accessibility tree: Vega would give them an image role with no name (axe: svg-img-alt).
    Marks with a tooltip keep the description Vega-Lite writes from its fields."""
    if isinstance(node, list):
        for item in node:
            _hide_marks_without_tooltips(item)
    elif isinstance(node, dict):
        if "mark" in node:
            encoding = node.get("encoding") or {}
            if "tooltip" not in encoding and "description" not in encoding:
                mark = node["mark"] if isinstance(node["mark"], dict) else {"type": node["mark"]}
                node["mark"] = {**mark, "aria": False}
        for key, value in node.items():
            if key not in ("mark", "datasets", "data"):
                _hide_marks_without_tooltips(value)


def _book_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``spec`` with the settings every chart in the book has: autosize, no ARIA on
    decorative marks, and a description."""
    spec = copy.deepcopy(spec)
    autosize = spec.get("autosize")
    spec["autosize"] = {**(autosize if isinstance(autosize, dict) else {}), **AUTOSIZE}
    _hide_marks_without_tooltips(spec)
    if not spec.get("description"):
        title = _title_text(spec.get("title"))
        if title:
            spec["description"] = title
    return spec


def chart_html(spec: dict[str, Any]) -> str:
    """The HTML that draws the Vega-Lite ``spec`` (see the module docstring for its parts)."""
    spec_json = _script_json(_book_spec(spec))
    element_id = "vega-" + hashlib.sha256(spec_json.encode()).hexdigest()[:16]
    return (
        f'<div id="{element_id}" class="tt-chart"></div>\n'
        f'<script type="application/json" id="{element_id}-spec">{spec_json}</script>\n'
        "<script>\n(function () {\n"
        f"{_loader()}\nsetUp({_script_json(LIBRARIES)});\n"
        "}());\n"
        f'transformerTutorial.embed("{element_id}", {_script_json(EMBED_OPTIONS)});\n'
        "</script>\n"
    )


def spec_from_html(html: str) -> dict[str, Any]:
    """The spec inside HTML from :func:`chart_html` (its only ``-spec`` script), for tests."""
    (text,) = re.findall(
        r'<script type="application/json" id="vega-[0-9a-f]{16}-spec">([^<]*)<', html
    )
    return json.loads(text)


def _bundle_from_spec(spec: dict[str, Any], **_: Any) -> dict[str, str]:
    html = chart_html(spec)
    element_id = re.match(r'<div id="(vega-[0-9a-f]{16})"', html).group(1)
    return {"text/html": html, "text/plain": f"<Vega-Lite chart {element_id}>"}


def chart_bundle(chart: alt.TopLevelMixin) -> dict[str, str]:
    """The MIME bundle (``text/html`` + ``text/plain``) the book shows for ``chart``."""
    return _bundle_from_spec(chart.to_dict())


def use_book_renderer() -> None:
    """Make every Altair chart displayed from now on use :func:`chart_bundle`."""
    if RENDERER_NAME not in alt.renderers.names():
        alt.renderers.register(RENDERER_NAME, _bundle_from_spec)
    alt.renderers.enable(RENDERER_NAME)


def sentence_menu(name: str, labels: Sequence[str], start: int) -> alt.Parameter:
    """A browser-side menu over presets: the parameter ``name`` holds the chosen index."""
    return alt.param(
        name=name,
        value=start,
        bind=alt.binding_select(
            options=list(range(len(labels))), labels=list(labels), name="sentence "
        ),
    )


def check_menu_records(records: Sequence, kind: str) -> None:
    """Presets for a :func:`sentence_menu`: at least one, and labels unique (they fill the menu)."""
    if len(records) == 0:
        raise ValueError(f"records is empty: give at least one {kind}")
    labels = [record.label for record in records]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"record labels must be unique (they fill the menu); repeated: {repeated}")
