"""Interactive views: interactive in the browser on the static site, and live in a kernel.

The pattern every explorer follows (see DESIGN.md, "Views"):

1. A pure function computes the data at build time, from the tested modules.
2. A Vega-Lite chart (built with Altair) carries that data and keeps *all* its interaction in
   the browser through Vega-Lite parameters: sliders, menus and hover work on the static site
   where no Python runs.
3. In a live kernel, :class:`LiveView` adds ipywidgets controls for inputs that cannot be
   precomputed (any ``d_model``, any sentence) and redraws the same chart from Python.

:func:`use_book_renderer` makes charts display as self-contained HTML with a stable element id,
so executing a notebook twice gives byte-identical outputs.
"""

from transformer_tutorial.studies.records import AnchorPoint, AttentionRecord, ShiftRecord
from transformer_tutorial.views.explorers.apple import (
    apple_explorer,
    apple_explorer_data,
    live_apple_explorer,
)
from transformer_tutorial.views.explorers.attention import (
    attention_explorer,
    attention_explorer_data,
    live_attention_explorer,
)
from transformer_tutorial.views.explorers.live import LiveView
from transformer_tutorial.views.explorers.masking import (
    MaskPreset,
    live_mask_explorer,
    mask_explorer,
    mask_explorer_data,
)
from transformer_tutorial.views.explorers.positional import (
    live_positional_explorer,
    positional_explorer,
    positional_explorer_data,
)
from transformer_tutorial.views.explorers.render import chart_bundle, use_book_renderer
from transformer_tutorial.views.explorers.rnn import (
    gradient_explorer,
    gradient_explorer_data,
    live_gradient_explorer,
)
from transformer_tutorial.views.explorers.tokens import (
    NeighbourRecord,
    live_neighbour_explorer,
    neighbour_explorer,
    neighbour_explorer_data,
)

__all__ = [
    "AnchorPoint",
    "AttentionRecord",
    "LiveView",
    "MaskPreset",
    "NeighbourRecord",
    "ShiftRecord",
    "apple_explorer",
    "apple_explorer_data",
    "attention_explorer",
    "attention_explorer_data",
    "chart_bundle",
    "gradient_explorer",
    "gradient_explorer_data",
    "live_apple_explorer",
    "live_attention_explorer",
    "live_gradient_explorer",
    "live_mask_explorer",
    "live_neighbour_explorer",
    "live_positional_explorer",
    "mask_explorer",
    "mask_explorer_data",
    "neighbour_explorer",
    "neighbour_explorer_data",
    "positional_explorer",
    "positional_explorer_data",
    "use_book_renderer",
]
