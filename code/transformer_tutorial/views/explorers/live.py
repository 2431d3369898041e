"""A chart that redraws from Python when ipywidgets controls change (live kernels only).

On the static site the notebook cell that builds a :class:`LiveView` shows no output (its
cell is tagged ``remove-output``): controls without a kernel would do nothing. The chart it
draws is the same one the static page already shows with browser-side interaction.
"""

import html
from collections.abc import Callable, Mapping
from typing import Any

import altair as alt
import ipywidgets as ipw

from transformer_tutorial.views.explorers.render import chart_bundle

__all__ = ["LiveView", "sentence_box"]


def sentence_box(sentence: str) -> ipw.Text:
    """A wide text box that reports its value when the reader presses Enter or leaves it."""
    return ipw.Text(
        value=sentence,
        description="sentence",
        continuous_update=False,
        layout=ipw.Layout(width="36em"),
    )


class LiveView(ipw.VBox):
    """Controls on top, the chart below; any control change calls ``draw(**values)`` again.

    ``controls`` maps each keyword of ``draw`` to the widget that sets it. When ``draw``
    raises ``ValueError`` (say, an odd ``d_model``), the message is shown as plain text,
    escaped, and the previous chart stays.
    """

    def __init__(
        self,
        controls: Mapping[str, ipw.ValueWidget],
        draw: Callable[..., alt.TopLevelMixin],
    ):
        if not controls:
            raise ValueError("controls is empty: a live view needs at least one input")
        self.controls = dict(controls)
        self.draw = draw
        self.chart: alt.TopLevelMixin | None = None  # the chart shown now
        self.message = ipw.HTML()
        self.output = ipw.Output()
        for control in self.controls.values():
            control.observe(self.refresh, names="value")
        super().__init__([ipw.HBox(list(self.controls.values())), self.message, self.output])
        self.refresh()

    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def refresh(self, _change: object = None) -> None:
        """Redraw from the controls' current values."""
        try:
            chart = self.draw(**self.values())
        except ValueError as error:
            self.message.value = f'<span style="color:#D55E00">{html.escape(str(error))}</span>'
            return
        self.message.value = ""
        self.chart = chart
        # Set the outputs directly rather than `with self.output: display(...)`: that routes
        # through the kernel's output capture, which nbval does not replay.
        self.output.outputs = (
            {"output_type": "display_data", "data": chart_bundle(chart), "metadata": {}},
        )
