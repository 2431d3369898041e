"""Display Altair charts as self-contained HTML that works on the static site and in a kernel.

Altair's own HTML renderer names each chart's element with a random UUID, so re-running a
notebook changes its outputs. Here the id is a hash of the chart's spec: the same chart always
gives the same bytes, and nbval can compare it. The HTML loads Vega from the jsDelivr CDN with
RequireJS when the page has it (pages with saved widget state do) and plain script tags when
it does not; that is Altair's "universal" template.
"""

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import altair as alt
from altair.utils.html import spec_to_html

__all__ = [
    "EMBED_OPTIONS",
    "chart_bundle",
    "check_menu_records",
    "sentence_menu",
    "use_book_renderer",
]

RENDERER_NAME = "transformer_tutorial"
# SVG puts every mark in the DOM (tests can read it), and the action menu would link to an
# online editor a reader offline cannot reach.
EMBED_OPTIONS = {"renderer": "svg", "actions": False}


# vega-embed puts a chart's controls to its right, outside the book's text column: stack them
# above the chart instead, in one wrapping row.
_CONTROLS_ON_TOP = """<style>
  #{id}.vega-embed {{ flex-direction: column; align-items: flex-start; }}
  #{id} .vega-bindings {{ order: -1; display: flex; flex-wrap: wrap; gap: 0.2rem 1.5rem;
    margin-bottom: 0.5rem; font-size: 0.9rem; }}
</style>"""


def _bundle_from_spec(spec: dict[str, Any], **_: Any) -> dict[str, str]:
    text = json.dumps(spec, sort_keys=True)
    element_id = "vega-" + hashlib.sha256(text.encode()).hexdigest()[:16]
    html = spec_to_html(
        spec,
        mode="vega-lite",
        vega_version=alt.VEGA_VERSION,
        vegaembed_version=alt.VEGAEMBED_VERSION,
        vegalite_version=alt.VEGALITE_VERSION,
        output_div=element_id,
        embed_options=EMBED_OPTIONS,
        json_kwds={"sort_keys": True, "separators": (",", ":")},
        fullhtml=False,
        template="universal",
    )
    return {
        "text/html": _CONTROLS_ON_TOP.format(id=element_id) + html,
        "text/plain": f"<Vega-Lite chart {element_id}>",
    }


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
