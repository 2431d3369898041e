"""A test page with every explorer of the package, built at test time from small made-up data.

The site's pages show the explorers as the notebooks last drew them; this page shows them as the
package draws them *now*, through the same renderer (:func:`chart_bundle`), so the browser checks
can drive the current code without re-executing a notebook. Every label and token can be set to
text that is HTML or ends a script, which the page must show as text.
"""

from pathlib import Path

import numpy as np

from transformer_tutorial.views import explorers
from transformer_tutorial.views.explorers.render import chart_bundle

# Text a label or a token may hold that a page must never run or parse as markup.
SCRIPT = "</script><script>window.__pwned=1</script>"
IMAGE = '<img src=x onerror="window.__pwned=1">'
BOLD = "<b>bold</b> & co"
HOSTILE = (SCRIPT, IMAGE, BOLD)

# The mask explorer's presets: menu label -> tokens.
MASK_PRESETS = {IMAGE: [SCRIPT, BOLD, "sat", "on", "mat"], "how are you": ["how", "are", "you"]}

PAGE = """<!doctype html>
<html lang="en" data-theme="light">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Every explorer</title>
<style>
  /* The book's text column: 358 px on a 390 px phone, as the site's theme makes it. */
  body {{ margin: 0; font-family: sans-serif; }}
  html[data-theme="dark"] body {{ background: #14181e; color: #ced6dd; }}
  article {{ max-width: 44rem; margin: 0 auto; padding: 0 16px; }}
</style></head>
<body><main><article>
<h1>Every explorer</h1>
{charts}
</article></main></body>
</html>
"""


def _weights(rng: np.random.Generator, layers: int, heads: int, queries: int, keys: int):
    scores = rng.standard_normal((layers, heads, queries, keys))  # (L, H, T, S)
    weights = np.exp(scores)
    return weights / weights.sum(axis=-1, keepdims=True)  # each row sums to 1


def hostile_explorers() -> dict[str, object]:
    """Every explorer, with two or more presets where it has a menu; labels and tokens are
    :data:`HOSTILE` text."""
    rng = np.random.default_rng(0)
    script, image, bold = HOSTILE
    toy_tokens = [image, bold, "sat", "down"]
    real_tokens = [script, "cat", bold, "on", "the", "mat"]
    attention = [
        explorers.AttentionRecord(
            f"toy: {script}", toy_tokens, _weights(rng, 2, 2, 4, 4), model="toy model"
        ),
        explorers.AttentionRecord(
            f"real: {bold}", real_tokens, _weights(rng, 3, 4, 6, 6), model="real model"
        ),
    ]
    anchors = [
        explorers.AnchorPoint(image, "fruit", (0.5, 3.0)),
        explorers.AnchorPoint("juice", "fruit", (2.5, 0.5)),
        explorers.AnchorPoint(bold, "technology", (6.0, 8.0)),
        explorers.AnchorPoint("os", "technology", (7.5, 7.5)),
    ]
    shifts = [
        explorers.ShiftRecord(
            f"fruit: {bold}",
            "apple",
            np.array([[4.0, 4.0], [3.0, 3.5], [1.5, 2.5]]),
            [script, "apple", "pie"],
            np.array([0.5, 0.3, 0.2]),
        ),
        explorers.ShiftRecord(
            f"technology: {image}",
            "apple",
            np.array([[4.0, 4.0], [5.0, 6.0], [6.5, 7.0]]),
            [bold, "apple", image, "phone"],
            np.array([0.1, 0.4, 0.3, 0.2]),
        ),
    ]
    masks = [explorers.MaskPreset(label, tokens) for label, tokens in MASK_PRESETS.items()]
    neighbours = [
        explorers.NeighbourRecord(image, [(script, 0.9), (bold, 0.7), ("cats", 0.5)]),
        explorers.NeighbourRecord("dog", [("dogs", 0.8), (bold, 0.6), ("puppy", 0.4)]),
    ]
    return {
        "attention": explorers.attention_explorer(attention, start=1, start_head=1),
        "apple": explorers.apple_explorer(shifts, anchors),
        "mask": explorers.mask_explorer(masks, start_real=4),
        "neighbours": explorers.neighbour_explorer(neighbours),
        "positional": explorers.positional_explorer((8, 16), max_len=12),
        "gradient": explorers.gradient_explorer(lengths=(10, 20)),
    }


def write_page(directory: Path) -> Path:
    """Write ``explorers.html`` with every explorer into ``directory``; returns its path."""
    charts = "\n".join(
        f"<h2>{name}</h2>\n" + chart_bundle(chart)["text/html"]
        for name, chart in hostile_explorers().items()
    )
    path = directory / "explorers.html"
    path.write_text(PAGE.format(charts=charts), encoding="utf-8")
    return path
