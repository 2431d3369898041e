"""The built site as a reader sees it: headless Chromium opens each page of ``_build/html``.

Run after ``make book`` (``make browser`` runs ``pytest -m browser``). ``site_server.py`` serves
the site on 127.0.0.1 and answers every CDN request from the npm packages pinned in
``tests/browser/package.json``; ``conftest.py`` opens each page once and shares it.

Each page must load without console errors or failed requests, render all its math with
MathJax, load every image, pass axe-core's accessibility rules with no critical or serious
violation in the light and the dark theme, and stay light enough for a slow connection. The
chapters' explorers must redraw when their controls change and show the text they are given as
text, never as markup; ``test_site_explorers.py`` drives every control of every chart forward
and back, on a desktop and on a phone. Screenshots go to ``_build/screenshots/``.
"""

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from html.parser import HTMLParser
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote, urlsplit

import pytest
from playwright.sync_api import Locator, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from site_charts import charts, page_overflow
from site_server import (
    NODE_MODULES,
    PAGES,
    SCREENSHOTS,
    TIMEOUT_MS,
    WIDGET_VIEW,
    Visit,
    set_theme,
)

from transformer_tutorial.model.positions import sinusoidal_encoding
from transformer_tutorial.views.explorers.positional import DECIMALS

# ---------------------------------------------------------------------------------------------
# Every page


@pytest.mark.browser
def test_every_page_is_checked(site):
    built = {page.relative_to(site).as_posix() for page in site.glob("chapters/**/*.html")}
    assert built == set(PAGES), (
        f"pages built but not in PAGES: {sorted(built - set(PAGES))}; "
        f"in PAGES but not built: {sorted(set(PAGES) - built)}"
    )


@pytest.mark.browser
def test_site_root_opens_the_book(browser, site_url):
    context = browser.new_context()
    context.route(lambda url: not url.startswith(site_url), lambda route: route.abort())
    try:
        page = context.new_page()
        page.goto(site_url + "index.html", wait_until="commit")
        page.wait_for_url(site_url + "chapters/index.html", wait_until="commit", timeout=TIMEOUT_MS)
    finally:
        context.close()


@pytest.mark.browser
@pytest.mark.parametrize("path", PAGES)
def test_page_loads_cleanly(visits, path):
    visit = visits(path)
    visit.page.screenshot(path=SCREENSHOTS / f"{visit.name}.png")  # the top, as it opens
    problems = visit.problems()
    assert not problems, f"{path}:\n" + "\n".join(problems) + "\n" + visit.log()


@pytest.mark.browser
@pytest.mark.parametrize("path", PAGES)
def test_math_renders(visits, path):
    page = visits(path).page
    math = page.evaluate(
        """() => ({
            sources: document.querySelectorAll('.math').length,
            unrendered: [...document.querySelectorAll('.math')]
                .filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.trim()),
            rendered: document.querySelectorAll('mjx-container').length,
            // A TeX syntax error renders as <merror>; an unknown macro (MathJax's noundefined
            // package) renders as its name in red.
            errors: window.MathJax && MathJax.startup && MathJax.startup.document
                ? [...MathJax.startup.document.math]
                    .filter(item => /<merror|mathcolor="red"/
                        .test(MathJax.startup.toMML(item.root)))
                    .map(item => item.math)
                : null,
            merror: document.querySelectorAll('mjx-merror').length,
            text: document.body.innerText,
        })"""
    )
    if not PAGES[path]:
        assert math["sources"] == 0, f"{path} now shows math: mark it True in PAGES"
        return
    assert math["sources"] > 0, f"{path} shows no math, but PAGES says it does"
    assert math["errors"] is not None, f"{path}: MathJax did not start"
    assert not math["unrendered"], f"{path}: math MathJax did not render: {math['unrendered']}"
    assert math["rendered"] >= math["sources"], f"{path}: {math['rendered']} of {math['sources']}"
    assert not math["errors"], f"{path}: TeX errors (merror or undefined macro): {math['errors']}"
    assert math["merror"] == 0, f"{path}: {math['merror']} <mjx-merror> elements"
    for message in ("Undefined control sequence", "Missing argument", "Math input error"):
        assert message not in math["text"], f"{path} shows {message!r}"


@pytest.mark.browser
@pytest.mark.parametrize("path", PAGES)
def test_every_image_loads_and_has_alt_text(visits, path):
    page = visits(path).page
    images = page.evaluate(
        """async () => Promise.all([...document.querySelectorAll('img')].map(async img => {
            img.loading = 'eager';
            try { await img.decode(); } catch (error) {}
            return {src: img.getAttribute('src'), alt: (img.getAttribute('alt') || '').trim(),
                    loaded: img.complete && img.naturalWidth > 0};
        }))"""
    )
    broken = [image["src"] for image in images if not image["loaded"]]
    no_alt = [image["src"] for image in images if not image["alt"]]
    assert not broken, f"{path}: images that did not load: {broken}"
    assert not no_alt, f"{path}: images without alt text: {no_alt}"


# ---------------------------------------------------------------------------------------------
# The positional-encoding explorer

POSITIONAL = "chapters/03_positional_encoding.html"
MAX_LEN = 50  # positions in the explorer's tables
D_MODELS = ["16", "32", "64", "128"]  # the d_model menu
# The heatmap is the chart's one rect mark; Vega's SVG renderer draws each rect as a <path>.
HEATMAP = "g.mark-rect.role-mark"
LABEL_START = "PE(a)·PE(b) = "
# A reader waits this long at most for the explorer to redraw after a change. It takes about 1 s
# on a 2-core machine; the theme's FontAwesome script, watching every DOM change, made it 15 s.
REDRAW_SECONDS = 5.0
REDRAW_TIMEOUT_MS = 60_000


def _explorer(page: Page) -> Locator:
    charts = page.locator(".vega-embed").filter(has=page.locator(".vega-bindings select"))
    assert charts.count() == 1, "expected one Vega chart with a d_model menu on the page"
    return charts.first


def _heatmap_cells(chart: Locator) -> int:
    groups = chart.locator(HEATMAP)
    assert groups.count() == 1, f"expected one rect mark (the heatmap), found {groups.count()}"
    return groups.first.locator("path").count()


def _label(chart: Locator) -> str:
    texts = chart.locator("g.mark-text text").all_text_contents()
    labels = [text for text in texts if text.startswith(LABEL_START)]
    assert len(labels) == 1, f"expected one label starting {LABEL_START!r}, texts: {texts}"
    return labels[0]


def _control(chart: Locator, name: str, kind: str) -> Locator:
    """The bound ``kind`` element (``select``, ``input[type=range]``) labelled ``name``."""
    label = chart.page.locator(".vega-bind-name", has_text=name)  # not its options' text
    control = chart.locator(".vega-bindings .vega-bind").filter(has=label).locator(kind)
    assert control.count() == 1, f"no {kind} named {name!r} in the chart's bindings"
    return control


def _change(control: Locator, value: int) -> None:
    """Set a control as a reader's input would: new value, then its input and change events.

    (Playwright's select_option waits for a page that can be busy for seconds; this doesn't.)
    """
    control.evaluate(
        """(element, value) => {
            element.value = String(value);
            element.dispatchEvent(new Event('input', {bubbles: true}));
            element.dispatchEvent(new Event('change', {bubbles: true}));
        }""",
        value,
    )


def _redraw(page: Page, condition: str, arg: object, what: str, start: float) -> float:
    """Seconds from ``start`` until ``condition`` holds, failing with ``what`` if it never does."""
    try:
        page.wait_for_function(condition, arg=arg, timeout=REDRAW_TIMEOUT_MS)
    except PlaywrightTimeoutError:
        pytest.fail(f"{what}: not redrawn within {REDRAW_TIMEOUT_MS / 1000:.0f} s")
    return time.monotonic() - start


def _page_shows(dot: float) -> str:
    """``dot`` as the page prints it: rounded to DECIMALS in Python, then d3-format's ``.3f``
    (half away from zero, with a real minus sign)."""
    shipped = Decimal(round(float(dot), DECIMALS))  # the exact double the page receives
    text = str(shipped.quantize(Decimal("0.001"), rounding=ROUND_HALF_UP))
    return text.replace("-", "−")


@pytest.mark.browser
def test_explorer_renders(visits):
    chart = _explorer(visits(POSITIONAL).page)
    menu = _control(chart, "d_model", "select")
    options = menu.locator("option").all_text_contents()
    assert options == D_MODELS, f"d_model menu offers {options}"
    assert chart.locator(".vega-bindings input[type=range]").count() == 2
    _control(chart, "position a", "input[type=range]")
    _control(chart, "position b", "input[type=range]")
    d_model = int(menu.input_value())
    cells = _heatmap_cells(chart)
    assert cells == MAX_LEN * d_model, f"heatmap: {cells} cells for {MAX_LEN} × {d_model}"
    assert _label(chart).startswith(LABEL_START)


@pytest.mark.browser
def test_explorer_follows_its_controls(visits):
    visit = visits(POSITIONAL)
    page = visit.page
    chart = _explorer(page)
    chart.scroll_into_view_if_needed()
    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.explorer-before.png")
    menu = _control(chart, "d_model", "select")
    start_d_model = menu.input_value()

    # Another model width: as many columns in the heatmap.
    d_model = 128 if start_d_model != "128" else 16
    start = time.monotonic()
    _change(menu, d_model)
    seconds = _redraw(
        page,
        "([heatmap, count]) => document.querySelectorAll(heatmap + ' path').length === count",
        [f".vega-embed {HEATMAP}", MAX_LEN * d_model],
        f"heatmap for d_model {d_model} ({MAX_LEN * d_model} cells)",
        start,
    )
    visit.notes.append(f"redrawn for d_model {d_model} in {seconds:.1f} s")

    # Another position b: the printed dot product is Python's.
    label_before = _label(chart)
    pos_a = int(_control(chart, "position a", "input[type=range]").input_value())
    slider_b = _control(chart, "position b", "input[type=range]")
    start_b = slider_b.input_value()
    pos_b = 37 if start_b != "37" else 36
    start = time.monotonic()
    _change(slider_b, pos_b)
    _redraw(
        page,
        """([start, old]) => [...document.querySelectorAll('.vega-embed g.mark-text text')]
            .some(text => text.textContent.startsWith(start) && text.textContent !== old)""",
        [LABEL_START, label_before],
        f"label {label_before!r} after moving b to {pos_b}",
        start,
    )
    label = _label(chart)
    table = sinusoidal_encoding(MAX_LEN, d_model)  # (L, D)
    dot = float(table[pos_a] @ table[pos_b])
    shown = re.match(re.escape(LABEL_START) + r"([−-]?[0-9.]+)", label)
    assert shown, f"no number in label {label!r}"
    assert shown[1] == _page_shows(dot), (
        f"label {label!r}: PE({pos_a})·PE({pos_b}) for d_model {d_model} is {dot:.6f}"
    )
    assert f"b − a = {pos_b - pos_a})" in label, f"label {label!r} misses b − a"
    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.explorer-after.png")

    _change(slider_b, start_b)  # as the page opened, for the tests that share it
    _change(menu, start_d_model)
    problems = visit.problems()
    assert not problems, "\n".join(problems)
    assert seconds < REDRAW_SECONDS, (
        f"the explorer took {seconds:.1f} s to redraw for d_model {d_model}: too slow to use"
    )


# ---------------------------------------------------------------------------------------------
# The attention explorers (chapters 4 and 5), the apple explorer (chapter 4) and the gradient
# explorer (chapter 1). A chart is found by a title it shows, a view of it by the view's title.

SELF_ATTENTION = "chapters/04_self_attention.html"
MULTI_HEAD = "chapters/05_multi_head_attention.html"
WHY_NOT_RNNS = "chapters/01_why_not_rnns.html"

Snapshot = TypeVar("Snapshot")


@dataclass(frozen=True)
class AttentionExplorer:
    sentences: int  # options of the sentence menu
    layers: int  # options of the layer menu
    heads: int  # the head slider runs 1 .. heads; the grid shows one small heatmap per head


REAL_MODEL = "chapters/10_real_model.html"
# Explorers mixing a toy model's records with the real model's (6 layers of 12 heads): the menus
# cover the largest; each starts on a real-model preset.
ATTENTION_EXPLORERS = {
    SELF_ATTENTION: AttentionExplorer(sentences=10, layers=6, heads=12),
    MULTI_HEAD: AttentionExplorer(sentences=9, layers=6, heads=12),
    REAL_MODEL: AttentionExplorer(sentences=5, layers=6, heads=12),
}
CHOSEN_HEAD = re.compile(r"^The chosen head$")  # the big heatmap's title
ALL_HEADS = re.compile(r"^All heads of the chosen layer")  # the grid of small heatmaps (a facet)
HEAD_TITLE = re.compile(r"^head (\d+)$")  # each small heatmap's title
OUTLINE = "#D55E00"  # the stroke around the chosen head's small heatmap
# Chapter 4's last sentence has a token that is HTML markup, which the page must show as text.
MARKUP_TOKEN = "<b>cat</b>"

APPLE = re.compile(r"^Static vector")  # the apple explorer's plane of word vectors
APPLE_BARS = re.compile(r"^Where it looked$")  # its bar chart of attention weights
# The two ends of the arrow are found by their tooltip titles, which Vega repeats in each mark's
# aria-label: the static vector of "apple" (a hollow circle), its vector in context (a triangle).
STATIC_POINT = "static x:"
CONTEXT_POINT = "in context x:"
OTHER_SENSE = "technology"  # the menu's presets for the other sense of "apple" start with this

GRADIENT = re.compile(r"^How much gradient survives")
GRADIENT_LABEL = "gradient reaching the first token"


def _chart(page: Page, title: str | re.Pattern[str]) -> Locator:
    """The one chart on ``page`` that shows ``title`` (its own or a view's, a line of
    ``site_charts.Chart.titles``), once drawn."""
    pattern = title if isinstance(title, re.Pattern) else re.compile(re.escape(title))
    page.wait_for_function("() => siteCheck.allDrawn()")
    shown = charts(page)
    found = [chart for chart in shown if any(map(pattern.search, chart.titles.split("\n")))]
    if not found:
        pytest.fail(f"no chart titled {title!r}; titles: {[chart.titles for chart in shown]}")
    assert len(found) == 1, f"{len(found)} charts show a title {title!r}"
    return page.locator(f"#{found[0].id}")


def _view(chart: Locator, title: str | re.Pattern[str]) -> Locator:
    """The view of ``chart`` (the innermost Vega scope: its marks, axes and title) titled
    ``title``."""
    heading = chart.page.locator("g.role-title, g.role-column-title", has_text=title)
    scopes = chart.page.locator("g.role-scope", has=heading)
    views = chart.locator("g.role-scope").filter(has=heading).filter(has_not=scopes)
    assert views.count() == 1, f"{views.count()} views of the chart are titled {title!r}"
    return views.first


def _shapes(view: Locator, marks: str) -> list[list[str | None]]:
    """Every item of the ``marks`` groups in ``view`` as its path, colour and position."""
    return view.locator(f"{marks} > path").evaluate_all(
        """items => items.map(item => ['d', 'fill', 'stroke', 'transform']
            .map(name => item.getAttribute(name)))"""
    )


def _axis_labels(view: Locator) -> list[list[str]]:
    """The labels of each axis of ``view``."""
    return [
        axis.locator("g.role-axis-label text").all_text_contents()
        for axis in view.locator("g.role-axis").all()
    ]


def _until_changed(
    read: Callable[[], Snapshot], before: Snapshot, what: str
) -> tuple[Snapshot, float]:
    """What ``read()`` returns once it differs from ``before``, and how many seconds that took.

    Vega redraws the whole SVG in one task, so a snapshot is never half old and half new.
    """
    start = time.monotonic()
    while (after := read()) == before:
        if time.monotonic() - start > REDRAW_TIMEOUT_MS / 1000:
            pytest.fail(f"{what}: not redrawn within {REDRAW_TIMEOUT_MS / 1000:.0f} s")
        time.sleep(0.05)
    return after, time.monotonic() - start


def _small_heatmaps(grid: Locator) -> dict[int, dict]:
    """The grid's small heatmaps by head number: cell colours, and whether it is outlined."""
    found = grid.locator("g.mark-rect.role-mark").evaluate_all(
        """(marks, outline) => marks.map(mark => ({
            title: [...mark.parentElement.children]
                .filter(sibling => sibling.classList.contains('role-title'))
                .map(sibling => sibling.textContent).join(' | '),
            fills: [...mark.querySelectorAll('path')].map(cell => cell.getAttribute('fill')),
            strokes: [...mark.querySelectorAll('path')]
                .map(cell => cell.getAttribute('stroke') === outline),
        }))""",
        OUTLINE,
    )
    heatmaps = {}
    for heatmap in found:
        number = HEAD_TITLE.match(heatmap["title"])
        assert number, f"a small heatmap is titled {heatmap['title']!r}, not 'head <n>'"
        strokes = heatmap["strokes"]
        assert all(strokes) or not any(strokes), f"{heatmap['title']} is partly outlined"
        heatmaps[int(number[1])] = {"fills": heatmap["fills"], "outlined": all(strokes)}
    assert len(heatmaps) == len(found), f"two small heatmaps share a title: {found}"
    return heatmaps


def _check_chosen_head(chart: Locator, heads: int) -> int:
    """The head slider's head: outlined in the grid of all heads, and the big heatmap's.

    The grid must show one small heatmap per head, each of the big heatmap's size.
    """
    head = int(_control(chart, "head", "input[type=range]").input_value())
    big = _shapes(_view(chart, CHOSEN_HEAD), HEATMAP)
    small = _small_heatmaps(_view(chart, ALL_HEADS))
    assert sorted(small) == list(range(1, heads + 1)), (
        f"the grid shows heads {sorted(small)}, the model has {heads}"
    )
    for number, heatmap in small.items():
        assert len(heatmap["fills"]) == len(big), (
            f"head {number}: {len(heatmap['fills'])} cells, the big heatmap {len(big)}"
        )
    outlined = [number for number, heatmap in small.items() if heatmap["outlined"]]
    assert outlined == [head], f"heads outlined in the grid: {outlined}; head slider: {head}"
    # Same weights, same colour scale: the same colours, cell for cell.
    assert sorted(fill for _, fill, _, _ in big) == sorted(small[head]["fills"]), (
        f"the big heatmap does not show the colours of head {head} in the grid"
    )
    return head


@pytest.mark.browser
@pytest.mark.parametrize("path", ATTENTION_EXPLORERS)
def test_attention_explorer_renders(visits, path):
    explorer = ATTENTION_EXPLORERS[path]
    chart = _chart(visits(path).page, CHOSEN_HEAD)
    sentences = _control(chart, "sentence", "select").locator("option").all_text_contents()
    assert len(sentences) == explorer.sentences, f"sentence menu offers {sentences}"
    layers = _control(chart, "layer", "select").locator("option").all_text_contents()
    assert len(layers) == explorer.layers, f"layer menu offers {layers}"
    head = _control(chart, "head", "input[type=range]")
    slider = (head.get_attribute("min"), head.get_attribute("max"))
    assert slider == ("1", str(explorer.heads)), f"head slider runs {slider[0]} to {slider[1]}"

    view = _view(chart, CHOSEN_HEAD)
    cells = len(_shapes(view, HEATMAP))
    axes = _axis_labels(view)
    assert len(axes) == 2, f"the big heatmap has {len(axes)} axes"
    tokens = len(axes[0])
    assert axes[0] == axes[1], f"keys and queries differ: {axes}"
    assert tokens >= 4, f"the big heatmap shows {tokens} tokens: {axes[0]}"
    assert cells == tokens * tokens, f"big heatmap: {cells} cells for {tokens} × {tokens} tokens"
    _check_chosen_head(chart, explorer.heads)


@pytest.mark.browser
@pytest.mark.parametrize("path", ATTENTION_EXPLORERS)
def test_attention_explorer_follows_its_controls(visits, path):
    explorer = ATTENTION_EXPLORERS[path]
    visit = visits(path)
    page = visit.page
    chart = _chart(page, CHOSEN_HEAD)
    view = _view(chart, CHOSEN_HEAD)
    chart.scroll_into_view_if_needed()
    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.heatmap-before.png")
    seconds = {}

    # Another head: other colours in the big heatmap, and the outline moves to that head.
    head = _check_chosen_head(chart, explorer.heads)
    other = head % explorer.heads + 1
    before = _shapes(view, HEATMAP)
    _change(_control(chart, "head", "input[type=range]"), other)
    after, seconds["head"] = _until_changed(
        lambda: _shapes(view, HEATMAP), before, f"big heatmap for head {other}"
    )
    assert [cell[0] for cell in after] == [cell[0] for cell in before], "cells moved"
    assert _check_chosen_head(chart, explorer.heads) == other

    # Another layer: other colours again.
    if explorer.layers > 1:
        menu = _control(chart, "layer", "select")
        layer = (int(menu.input_value()) + 1) % explorer.layers
        before = after
        _change(menu, layer)
        after, seconds["layer"] = _until_changed(
            lambda: _shapes(view, HEATMAP), before, f"big heatmap for layer {layer + 1}"
        )
        _check_chosen_head(chart, explorer.heads)

    # Another sentence: other tokens on the axes, and one cell per pair of them.
    menu = _control(chart, "sentence", "select")
    sentence = (int(menu.input_value()) + 1) % explorer.sentences
    before = _axis_labels(view)
    _change(menu, sentence)
    axes, seconds["sentence"] = _until_changed(
        lambda: _axis_labels(view), before, f"axis labels for sentence {sentence}"
    )
    assert axes[0] == axes[1], f"keys and queries differ: {axes}"
    cells = len(_shapes(view, HEATMAP))
    assert cells == len(axes[0]) ** 2, f"{cells} cells for {len(axes[0])} tokens: {axes[0]}"
    _check_chosen_head(chart, explorer.heads)

    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.heatmap-after.png")
    visit.notes.append(
        "attention explorer redrawn in "
        + ", ".join(f"{taken:.1f} s ({what})" for what, taken in seconds.items())
    )
    problems = visit.problems()
    assert not problems, "\n".join(problems)
    slow = {what: taken for what, taken in seconds.items() if taken >= REDRAW_SECONDS}
    assert not slow, f"the explorer redraws too slowly to use (seconds): {slow}"


@pytest.mark.browser
def test_attention_explorer_shows_markup_as_text(visits):
    """A token like ``<b>cat</b>`` is text: shown with its brackets, never parsed as HTML."""
    visit = visits(SELF_ATTENTION)
    page = visit.page
    chart = _chart(page, CHOSEN_HEAD)
    view = _view(chart, CHOSEN_HEAD)
    menu = _control(chart, "sentence", "select")
    option = menu.locator("option").filter(has_text=MARKUP_TOKEN)
    assert option.count() == 1, f"{option.count()} sentences with {MARKUP_TOKEN!r} in the menu"
    axes = _axis_labels(view)
    if menu.input_value() != option.get_attribute("value"):
        _change(menu, option.get_attribute("value"))
        axes, _ = _until_changed(
            lambda: _axis_labels(view), axes, f"axis labels for the sentence with {MARKUP_TOKEN}"
        )
    for labels in axes:
        assert MARKUP_TOKEN in labels, f"axis labels {labels} do not show {MARKUP_TOKEN!r}"
    bold = chart.locator("b")
    assert bold.count() == 0, f"the chart made <b> elements: {bold.all_text_contents()}"

    # Vega-Lite repeats the tooltip's fields in each cell's aria-label.
    cell = view.locator(f"{HEATMAP} > path[aria-label*='{MARKUP_TOKEN}']").first
    cell.hover()
    tooltip = page.locator("#vg-tooltip-element")
    try:
        tooltip.filter(has_text=MARKUP_TOKEN).wait_for(state="visible")
    except PlaywrightTimeoutError:
        shown = tooltip.inner_html() if tooltip.count() else "no tooltip"
        pytest.fail(f"hovering a cell of {MARKUP_TOKEN!r} shows: {shown}")
    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.heatmap-markup.png")
    markup = tooltip.inner_html()
    assert "&lt;b&gt;" in markup, f"the tooltip's HTML does not escape the token: {markup}"
    assert tooltip.locator("b").count() == 0, f"the tooltip made a <b> element: {markup}"
    page.mouse.move(0, 0)  # the tooltip goes: other tests share the page
    problems = visit.problems()
    assert not problems, "\n".join(problems)


def _apple_arrow(plane: Locator) -> dict[str, tuple[float, float]]:
    """The static point, the point in context, and where the one line drawn from the static
    point to the point in context runs through (a polyline: one point per layer)."""
    symbols = plane.locator("g.mark-symbol.role-mark > path").evaluate_all(
        "items => items.map(item => [item.getAttribute('aria-label') || '',"
        " item.getAttribute('transform') || ''])"
    )
    lines = plane.locator("g.mark-line.role-mark > path").evaluate_all(
        "items => items.map(item => item.getAttribute('d') || '')"
    )

    def point(label: str) -> tuple[float, float]:
        found = [transform for aria, transform in symbols if label in aria]
        assert len(found) == 1, f"{len(found)} points labelled {label!r}"
        at = re.match(r"translate\(([-\d.e]+),\s*([-\d.e]+)\)", found[0])
        assert at, f"point {label!r} placed by {found[0]!r}"
        return float(at[1]), float(at[2])

    def near(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return abs(a[0] - b[0]) < 0.01 and abs(a[1] - b[1]) < 0.01  # d has 3 decimals

    static, context = point(STATIC_POINT), point(CONTEXT_POINT)
    arrows = set()  # the chosen sentence's path may be drawn twice (under its highlight)
    for d in lines:
        points = [(float(x), float(y)) for x, y in re.findall(r"[ML]([-\d.e]+),([-\d.e]+)", d)]
        if len(points) >= 2 and near(points[0], static) and near(points[-1], context):
            arrows.add(tuple(points))
    assert len(arrows) == 1, f"{len(arrows)} paths from {static} to {context}: {lines}"
    return {"static": static, "context": context, "arrow": arrows.pop()}


@pytest.mark.browser
def test_apple_explorer_renders(visits):
    chart = _chart(visits(SELF_ATTENTION).page, APPLE)
    presets = _control(chart, "sentence", "select").locator("option").all_text_contents()
    assert len(presets) >= 2, f"the apple explorer's menu offers {presets}"
    assert any(preset.startswith(OTHER_SENSE) for preset in presets), presets
    ends = _apple_arrow(_view(chart, APPLE))
    shift = math.dist(ends["static"], ends["context"])
    assert shift > 5, f"the arrow is {shift:.1f} px long: {ends}"
    bars = len(_shapes(_view(chart, APPLE_BARS), "g.mark-rect.role-mark"))
    assert bars >= 2, f"{bars} bars of attention weights"


@pytest.mark.browser
def test_apple_explorer_follows_its_menu(visits):
    visit = visits(SELF_ATTENTION)
    page = visit.page
    chart = _chart(page, APPLE)
    plane, bars = _view(chart, APPLE), _view(chart, APPLE_BARS)
    chart.scroll_into_view_if_needed()
    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.apple-before.png")
    menu = _control(chart, "sentence", "select")
    sense = re.compile("^" + OTHER_SENSE)
    shown = menu.evaluate("menu => menu.options[menu.selectedIndex].text")
    if sense.match(shown):
        preset = menu.locator("option").filter(has_not_text=sense).first
    else:
        preset = menu.locator("option").filter(has_text=sense).first
    before = _apple_arrow(plane), _shapes(bars, "g.mark-rect.role-mark")

    # A sentence about the other sense of "apple" (or back): "apple" in context moves, its
    # static vector stays.
    _change(menu, preset.get_attribute("value"))
    after, seconds = _until_changed(
        lambda: (_apple_arrow(plane), _shapes(bars, "g.mark-rect.role-mark")),
        before,
        f"apple explorer for {preset.text_content()!r}",
    )
    assert after[0]["static"] == before[0]["static"], "the static vector moved"
    moved = math.dist(after[0]["context"], before[0]["context"])
    assert moved > 5, f"'apple' in context moved {moved:.1f} px: {before[0]} -> {after[0]}"
    assert after[1] != before[1], "the attention bars did not change"

    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.apple-after.png")
    visit.notes.append(f"apple explorer redrawn in {seconds:.1f} s")
    problems = visit.problems()
    assert not problems, "\n".join(problems)
    assert seconds < REDRAW_SECONDS, f"took {seconds:.1f} s to redraw: too slow to use"


def _gradient_label(chart: Locator) -> str:
    texts = chart.locator("g.mark-text text").all_text_contents()
    labels = [text for text in texts if text.startswith(GRADIENT_LABEL)]
    assert len(labels) == 1, f"expected one label starting {GRADIENT_LABEL!r}, texts: {texts}"
    return labels[0]


def _d3_exponential(value: float) -> str:
    """``value`` as d3-format's ``.2e`` prints it: ``2.66e-5``, ``1.00e+0``."""
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{value:.2e}")


@pytest.mark.browser
def test_gradient_explorer_follows_its_slider(visits):
    """Every stop of the r slider draws its curves and its label, with r^T as Python has it."""
    visit = visits(WHY_NOT_RNNS)
    page = visit.page
    chart = _chart(page, GRADIENT)
    chart.scroll_into_view_if_needed()
    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.gradient-before.png")
    slider = _control(chart, "scale r", "input[type=range]")
    length = int(_control(chart, "length T", "select").input_value())
    lines = "g.mark-line.role-mark"
    assert len(_shapes(chart, lines)) == 2, "expected two curves: measured and r^k"

    def picture() -> tuple[str, list]:
        return _gradient_label(chart), _shapes(chart, lines)

    # A reader's keys: Home for the smallest r, then one step right at a time.
    stops, seconds = [], []
    slider.focus()
    for key in ["Home"] + ["ArrowRight"] * 20:
        before = picture()
        value = slider.input_value()
        page.keyboard.press(key)
        if slider.input_value() == value:
            if key == "Home":
                continue  # the slider was at the smallest r already
            break  # the largest r
        (label, curves), taken = _until_changed(picture, before, f"{key} from r = {value}")
        seconds.append(taken)
        r = float(slider.input_value())
        stops.append(r)
        assert label != before[0] and curves != before[1], f"r = {r}: {label!r}"
        assert f"(k = {length})" in label, f"r = {r}, T = {length}: {label!r}"
        assert label.endswith(f"(r^T = {_d3_exponential(r**length)})"), (
            f"r = {r}, T = {length}: r^T is {r**length:.3e}, label {label!r}"
        )
    assert len(stops) >= 5, f"the slider stops at r = {stops}"
    visit.notes.append(f"slider stops {stops}, redrawn in at most {max(seconds):.1f} s")

    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.gradient-after.png")
    problems = visit.problems()
    assert not problems, "\n".join(problems)
    assert max(seconds) < REDRAW_SECONDS, f"took {max(seconds):.1f} s to redraw: too slow"


# ---------------------------------------------------------------------------------------------
# Page weight: every byte a page transfers

# What a page transfers, measured on the builds of 2026-11-23 (raw bytes; a server's gzip
# sends about a third): the theme (CSS, fonts and FontAwesome's 1.5 MB script) about 2.5 MB,
# all the bibliography loads (2.6 MB); MathJax 1.2 MB and 0.1 MB of fonts (index 3.9 MB,
# chapters 6 and 7 4.3 to 4.4 MB with their figures); explorers add vega + vega-lite +
# vega-embed (0.83 MB) and their data in the page's HTML (up to 0.6 MB): 5.0 to 5.4 MB, the
# heaviest chapter 10. Saved ipywidgets would add RequireJS (90 kB) and the widget manager
# (4.4 MB with its fonts), which nothing else needs: an earlier build loaded them on every
# chapter with explorers though none showed a widget (10.1 MB for chapter 10). Budgets: the
# heaviest page of each kind with 0.6 MB to spare (a figure, or an explorer's data).
PAGE_BUDGET = 6_000_000  # bytes: a page that shows no saved widget
WIDGET_PAGE_BUDGET = PAGE_BUDGET + 4_500_000  # bytes: a page that shows saved ipywidgets
WIDGET_ONLY = {  # files a page needs only to show saved widgets
    "@jupyter-widgets/html-manager": re.compile(r"/npm/@jupyter-widgets/html-manager@"),
    "require.js": re.compile(r"/require(\.min)?\.js($|\?)"),
}


class _ImageSources(HTMLParser):
    """The ``src``/``srcset``/``href`` of every ``<img>``, ``<source>`` and SVG ``<image>``."""

    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ("img", "source", "image"):
            return
        for name, value in attrs:
            if value and name in ("src", "href", "xlink:href"):
                self.sources.append(value)
            elif value and name == "srcset":
                self.sources += [part.split()[0] for part in value.split(",") if part.strip()]


def _local_images(page: Path) -> set[Path]:
    """The files of the site that ``page`` shows as images (not data: URLs, not off-host)."""
    parser = _ImageSources()
    parser.feed(page.read_text(encoding="utf-8"))
    images = set()
    for source in parser.sources:
        url = urlsplit(source)
        if url.scheme or url.netloc:
            continue  # data: is part of the HTML already; off-host is a CDN's
        path = (page.parent / unquote(url.path)).resolve()
        assert path.is_file(), f"{page.name} shows {source}, which is not in the site"
        images.add(path)
    return images


def _transferred(visit: Visit, site: Path) -> dict[str, int]:
    """URL (or site file) -> bytes, for everything the page loaded, and the images it shows
    that a reader's scrolling would load (lazy images the visit has not reached)."""
    files = dict(visit.transferred)
    loaded = {unquote(urlsplit(url).path).lstrip("/") for url in files}
    for image in _local_images(site / visit.path):
        relative = image.relative_to(site.resolve()).as_posix()
        if relative not in loaded:
            files[relative] = image.stat().st_size
    return files


@pytest.mark.browser
@pytest.mark.parametrize("path", PAGES)
def test_page_weight(visits, site, report, path):
    visit = visits(path)
    files = _transferred(visit, site)
    total = sum(files.values())
    cdn = sum(size for url, size in files.items() if url in visit.served)
    widgets = visit.page.locator(f'script[type="{WIDGET_VIEW}"]').count()
    heaviest = sorted(files.items(), key=lambda item: -item[1])[:5]
    report(
        f"{path}: {total:,} B in {len(files)} files ({cdn:,} B from CDNs); {widgets} widget "
        "views; heaviest: " + ", ".join(f"{Path(urlsplit(u).path).name} {n:,}" for u, n in heaviest)
    )
    if widgets == 0:
        needless = {
            name: [url for url in files if pattern.search(url)]
            for name, pattern in WIDGET_ONLY.items()
        }
        needless = {name: urls for name, urls in needless.items() if urls}
        assert not needless, f"{path} shows no widget but loads {needless}"
    budget = WIDGET_PAGE_BUDGET if widgets else PAGE_BUDGET
    assert total <= budget, (
        f"{path} transfers {total:,} B, over its budget of {budget:,} B; heaviest: {heaviest}"
    )


# ---------------------------------------------------------------------------------------------
# Accessibility: axe-core's rules, in the light and the dark theme

AXE = NODE_MODULES / "axe-core" / "axe.min.js"
SERIOUS = ("critical", "serious")
COLOUR_RULES = ["color-contrast", "link-in-text-block"]


def _axe_violations(page: Page, rules: list[str] | None = None) -> list[str]:
    """axe-core's critical and serious violations on the page as it is, one line each (of
    ``rules`` only, if given)."""
    if not page.evaluate("Boolean(window.axe)"):
        page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    found = page.evaluate(
        """async ([impacts, rules]) => {
            const options = {resultTypes: ['violations']};
            if (rules) options.runOnly = {type: 'rule', values: rules};
            // MathJax's output is MathJax's (text in the page's colours, with its own
            // assistive MathML): leaving it out makes axe a third faster on a chapter.
            const context = {exclude: [['mjx-container']]};
            const results = await axe.run(context, options);
            return results.violations.filter(v => impacts.includes(v.impact)).map(v => ({
                id: v.id, impact: v.impact, help: v.help, count: v.nodes.length,
                targets: v.nodes.slice(0, 4).map(node => node.target.join(' ')),
            }));
        }""",
        [list(SERIOUS), rules],
    )
    return [
        f"{v['impact']} {v['id']} ({v['help']}) on {v['count']} elements, e.g. "
        + " | ".join(v["targets"])
        for v in found
    ]


@pytest.mark.browser
@pytest.mark.parametrize("path", PAGES)
def test_no_serious_accessibility_violations(visits, path):
    """axe-core finds no critical or serious violation, in either theme. The dark theme
    changes colours only, so there only the colour rules run (half the time of all rules).
    (The test switches the page to the dark theme and back.)"""
    page = visits(path).page
    found = {"light": _axe_violations(page)}
    set_theme(page, "dark")
    found["dark"] = _axe_violations(page, COLOUR_RULES)
    set_theme(page, "light")
    report = [f"{theme}: {line}" for theme, lines in found.items() for line in lines]
    assert not report, f"{path}: axe-core {_axe_version()}:\n" + "\n".join(report)


def _axe_version() -> str:
    """Read when a test fails, not at import: `make unit` collects this file before `npm ci`."""
    return json.loads((AXE.parent / "package.json").read_text())["version"]


# ---------------------------------------------------------------------------------------------
# The explorers of chapters 2, 8, 9 and 10, and the real model's apple explorers (chapters 4, 10).

TEXT_TO_VECTORS = "chapters/02_text_to_vectors.html"
NEIGHBOURS = re.compile(r"^Nearest neighbours in the embedding table")
BARS = "g.mark-rect.role-mark"


def _word_labels(view: Locator) -> list[str]:
    """The labels of the axis that shows words (the other one shows numbers)."""
    for labels in _axis_labels(view):
        if labels and not all(re.fullmatch(r"[−-]?[\d.]+", label) for label in labels):
            return labels
    return []


@pytest.mark.browser
def test_neighbour_explorer_follows_its_menu(visits):
    visit = visits(TEXT_TO_VECTORS)
    chart = _chart(visit.page, NEIGHBOURS)
    menu = _control(chart, "word", "select")
    words = menu.locator("option").all_text_contents()
    assert len(words) >= 10 and "apple" in words, f"the word menu offers {words}"
    bars = _shapes(chart, BARS)
    assert len(bars) == 10, f"{len(bars)} bars of neighbours"
    before = _word_labels(chart)
    assert menu.evaluate("menu => menu.options[menu.selectedIndex].text") not in before
    _change(menu, menu.locator("option").nth(words.index("apple")).get_attribute("value"))
    labels, seconds = _until_changed(lambda: _word_labels(chart), before, "neighbours of 'apple'")
    assert labels[0] == "apples" and "iphone" in labels, f"neighbours of 'apple': {labels}"
    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.neighbours-apple.png")
    problems = visit.problems()
    assert not problems, "\n".join(problems)
    assert seconds < REDRAW_SECONDS, f"took {seconds:.1f} s to redraw: too slow to use"


MASKING = "chapters/08_masking.html"
MASKS = re.compile(r"^Masks: which keys each query may see")
MASK_PANEL = re.compile(r"^Mask, and the scores it leaves$")
MASK_STATE = re.compile(
    r"S = (\d+) positions: n = (\d+) real tokens?,\s*\d+ \[PAD\] on the (left|right); "
    r"causal mask (on|off)"
)


def _mask_state(chart: Locator) -> tuple[int, int, str, bool]:
    """(S, n, padding side, causal) as the explorer states them (in its title or a line of
    text under it; a text of several lines joins them with no space)."""
    texts = " ".join(chart.locator("svg text").all_text_contents())
    state = MASK_STATE.search(texts)
    assert state, f"the mask explorer does not say what it shows: {texts[:300]!r}"
    length, real, side, causal = state.groups()
    return int(length), int(real), side, causal == "on"


def _hidden_cells(length: int, real: int, side: str, causal: bool) -> int:
    """Cells (query t, key s) the masks hide, counted from their definitions."""
    first_real = 0 if side == "right" else length - real
    return sum(
        not (first_real <= s < first_real + real and (s <= t or not causal))
        for t in range(length)
        for s in range(length)
    )


def _mask_cells(panel: Locator) -> tuple[int, int]:
    """(cells, cells showing −∞) in the mask panel."""
    texts = panel.locator("g.mark-text text").all_text_contents()
    return len(_shapes(panel, HEATMAP)), texts.count("−∞")


@pytest.mark.browser
def test_mask_explorer_follows_its_controls(visits):
    visit = visits(MASKING)
    chart = _chart(visit.page, MASKS)
    panel = _view(chart, MASK_PANEL)
    chart.scroll_into_view_if_needed()
    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.masks-before.png")

    def check() -> tuple[int, int, str, bool]:
        state = _mask_state(chart)
        length = state[0]
        cells, hidden = _mask_cells(panel)
        assert cells == length * length, f"{cells} cells for S = {length}"
        assert hidden == _hidden_cells(*state), f"{hidden} cells show −∞ for {state}"
        return state

    state = check()
    causal = _control(chart, "causal mask", "input[type=checkbox]")
    causal.click()
    after, seconds = _until_changed(lambda: _mask_state(chart), state, "causal mask toggled")
    assert after[3] != state[3]
    state = check()

    real = _control(chart, "real tokens n", "input[type=range]")
    _change(real, max(1, state[1] - 2))
    state_before, state = state, _until_changed(lambda: _mask_state(chart), state, "n changed")[0]
    assert state[1] < state_before[1]
    state = check()

    other_side = "left" if state[2] == "right" else "right"
    bindings = chart.locator(".vega-bindings .vega-bind").filter(
        has=visit.page.locator(".vega-bind-name", has_text="[PAD] on the")
    )
    bindings.locator(f"input[type=radio][value={other_side}]").click()
    state = _until_changed(lambda: _mask_state(chart), state, "padding side")[0]
    assert state[2] == other_side
    check()

    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.masks-after.png")
    problems = visit.problems()
    assert not problems, "\n".join(problems)
    assert seconds < REDRAW_SECONDS, f"took {seconds:.1f} s to redraw: too slow to use"


WHOLE_TRANSFORMER = "chapters/09_whole_transformer.html"
# Chapter 9's three explorers of the trained reversal model (2 layers of 4 heads per stack):
# title -> whether queries and keys are the same tokens.
WHOLE_EXPLORERS = {
    "Cross-attention": False,
    "Decoder self-attention": True,
    "Encoder self-attention": True,
}


@pytest.mark.browser
@pytest.mark.parametrize("title", WHOLE_EXPLORERS)
def test_trained_model_explorers_render(visits, title):
    chart = _chart(visits(WHOLE_TRANSFORMER).page, re.compile("^" + re.escape(title)))
    sentences = _control(chart, "sentence", "select").locator("option").all_text_contents()
    assert len(sentences) >= 4, f"sentence menu offers {sentences}"
    assert all("→" in sentence for sentence in sentences), sentences
    layers = _control(chart, "layer", "select").locator("option").all_text_contents()
    assert len(layers) == 2, f"layer menu offers {layers}"
    view = _view(chart, CHOSEN_HEAD)
    axes = _axis_labels(view)
    assert len(axes) == 2, f"the big heatmap has {len(axes)} axes"
    cells = len(_shapes(view, HEATMAP))
    assert cells == len(axes[0]) * len(axes[1]), f"{cells} cells for axes {axes}"
    if WHOLE_EXPLORERS[title]:
        assert axes[0] == axes[1], f"keys and queries differ: {axes}"
    else:  # decoder positions ([START] and the reversed letters) over the source letters
        assert axes[0] != axes[1] and "[START]" in axes[0] + axes[1], f"axes: {axes}"
    _check_chosen_head(chart, 4)


REAL_APPLES = {  # page -> title of the real model's apple explorer
    SELF_ATTENTION: re.compile(r"^The real model: where its six layers move 'apple'"),
    REAL_MODEL: re.compile(r"^all-MiniLM-L6-v2: where the layers move 'apple'"),
}


@pytest.mark.browser
@pytest.mark.parametrize("path", REAL_APPLES)
def test_real_apple_explorer_follows_its_menu(visits, path):
    visit = visits(path)
    chart = _chart(visit.page, REAL_APPLES[path])
    menu = _control(chart, "sentence", "select")
    contexts = menu.locator("option").all_text_contents()
    assert len(contexts) >= 3, f"the real apple explorer offers {contexts}"
    senses = {context.split(":")[0] for context in contexts}
    assert {"fruit", "technology"} <= senses, f"contexts: {contexts}"
    bars = _view(chart, APPLE_BARS)

    def marks() -> tuple:
        lines = chart.locator("g.mark-line.role-mark path").evaluate_all(
            "paths => paths.map(path => path.getAttribute('d'))"
        )
        return tuple(lines), tuple(map(tuple, _shapes(bars, BARS)))

    before = marks()
    assert before[0], "no trajectory drawn"
    assert before[1], "no attention bars drawn"
    index = int(menu.input_value())
    target = next(
        i for i, context in enumerate(contexts)
        if context.split(":")[0] != contexts[index].split(":")[0]
    )  # fmt: skip
    _change(menu, menu.locator("option").nth(target).get_attribute("value"))
    after, seconds = _until_changed(marks, before, f"apple explorer for {contexts[target]!r}")
    assert after[0] != before[0], "the trajectory did not move"
    chart.screenshot(path=SCREENSHOTS / f"{visit.name}.real-apple.png")
    problems = visit.problems()
    assert not problems, "\n".join(problems)
    assert seconds < REDRAW_SECONDS, f"took {seconds:.1f} s to redraw: too slow to use"


@pytest.mark.browser
@pytest.mark.parametrize("path", PAGES)
def test_display_math_fits_the_text_column(visits, path):
    """A display equation wider than the column is cut off at its right edge (seen once: two
    formulas side by side in chapter 6)."""
    too_wide = visits(path).page.evaluate(
        """() => [...document.querySelectorAll('mjx-container[display="true"]')].map(math => {
            const column = math.closest('article') || document.body;
            const box = math.firstElementChild.getBoundingClientRect();
            const edge = column.getBoundingClientRect().right;
            return {tex: math.textContent.slice(0, 60), right: box.right, edge: edge};
        }).filter(size => size.right > size.edge + 1)"""
    )
    assert not too_wide, f"{path}: display math wider than the column: {too_wide}"


@pytest.mark.browser
@pytest.mark.parametrize("path", PAGES)
def test_inline_math_fits_a_phone(phone_visits, path):
    """An inline formula cannot wrap: one longer than a phone's line runs past the column and is
    cut off (seen in chapters 1-3, 5, 6, 8 and 9 at 390 px). Display math may be wider: it
    scrolls in its own box (sphinx_fixes.BOOK_CSS), as do tables."""
    too_wide = phone_visits(path).page.evaluate(
        """() => {
            const column = document.querySelector('article') || document.body;
            const edge = column.getBoundingClientRect().right;
            const scrolls = (element) => {  // inside a box that scrolls: a table, an output
                let box = element.parentElement;
                for (; box && box !== column; box = box.parentElement) {
                    if (['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) return true;
                }
                return false;
            };
            return [...document.querySelectorAll('span.math > mjx-container')]
                .filter(math => !math.closest('details:not([open])') && !scrolls(math))
                .map(math => ({tex: math.textContent.slice(0, 60),
                               right: math.getBoundingClientRect().right, edge: edge}))
                .filter(size => size.right > size.edge + 1);
        }"""
    )
    assert not too_wide, f"{path}: inline math past the column at 390 px: {too_wide}"


# ---------------------------------------------------------------------------------------------
# The package's source pages (book/source.py): what a chapter's listing links to

SOURCE_PAGE = "code/transformer_tutorial/model/attention.py.html"


@pytest.mark.browser
def test_a_source_page_loads_fits_a_phone_and_passes_axe(phone_visits, site):
    """One module's highlighted page at 390 px, in the light and the dark colour scheme; the
    link checker (make links) has already checked that every listing's link and line anchor
    lands on such a page."""
    assert (site / SOURCE_PAGE).is_file(), "the Sphinx extension wrote no source pages"
    visit = phone_visits(SOURCE_PAGE)
    page = visit.page
    problems = [*visit.problems(), page_overflow(page) or ""]
    found = {"light": _axe_violations(page)}
    page.emulate_media(color_scheme="dark")
    found["dark"] = _axe_violations(page, COLOUR_RULES)
    page.emulate_media(color_scheme="light")
    problems += [f"{theme}: {line}" for theme, lines in found.items() for line in lines]
    assert not [p for p in problems if p], f"{SOURCE_PAGE}:\n" + "\n".join(problems)
