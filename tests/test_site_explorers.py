"""Every chart of the book driven as a reader drives it, on a desktop and on a phone, in the light
and the dark theme (DESIGN.md, "Explorer rules learned the hard way").

- Every control of every explorer goes through its values and back, alone and in pairs; every
  drawing on the way draws (no error, no collapsed heatmap), and every return gives exactly the
  first drawing's SVG (a Vega transform that writes a field it reads breaks the second visit).
  "Exactly": the same elements and attributes, numbers to 1/1000 px, with the items of each
  mark taken in any order and without Vega's generated guide captions (``site_check.js``
  says why).
- Every chart, and the page, fits a 390 px phone and a 1280 px desktop for every preset: the
  SVG lies inside the text column, holds all it draws (no legend cut off) and has no band of
  dead space.
- In the dark theme every chart draws again, on a dark background with readable text, and keeps
  the values of its controls; back in the light theme it is the first drawing again.
- Per-preset limits: chapter 8's "real tokens n" runs to the chosen sentence's length; an
  attention explorer offers the layers and heads of the chosen sentence's model only.
- The package's explorers, fed labels and tokens that are HTML or end a script, show them as
  text and run none of them (a page built at test time, served like the site).

Screenshots of each explorer, after its controls went forward and back, go to
``_build/screenshots/<chapter>.<width>px.<theme>.<n>.png`` (n: its place on the page).
"""

import re
from collections.abc import Callable

import pytest
from explorer_page import HOSTILE, IMAGE, MASK_PRESETS, SCRIPT, write_page
from site_charts import (
    Chart,
    charts,
    contrast_problems,
    controls,
    current,
    describe_difference,
    first_controls,
    fit_problems,
    look,
    page_overflow,
    restore,
    set_control,
    slider_value,
    walk,
)
from site_server import DESKTOP, PAGES, PHONE, SCREENSHOTS, open_page, serve, set_theme

pytestmark = pytest.mark.browser

# Pages whose charts have controls (test_every_chart_is_drawn_by_the_book_loader keeps it true).
EXPLORER_PAGES = [
    "chapters/01_why_not_rnns.html",
    "chapters/02_text_to_vectors.html",
    "chapters/03_positional_encoding.html",
    "chapters/04_self_attention.html",
    "chapters/05_multi_head_attention.html",
    "chapters/08_masking.html",
    "chapters/09_whole_transformer.html",
    "chapters/10_real_model.html",
]
DARK_BACKGROUND = 0.2  # relative luminance behind a chart in the dark theme at most
MIN_CONTRAST = 4.5  # WCAG AA for text


# ---------------------------------------------------------------------------------------------
# What each explorer must show in every state, beyond drawing at all


MASKS = re.compile(r"^Masks: which keys each query may see", re.MULTILINE)
CHOSEN_HEAD = re.compile(r"^The chosen head$", re.MULTILINE)
CROSS_ATTENTION = re.compile(r"^Cross-attention", re.MULTILINE)


def shape_problems(chart: Chart, state: dict) -> list[str]:
    """The mask explorer draws two S × S heatmaps (mask, weights); a self-attention explorer's
    heatmaps are square (T = S)."""
    grids = [(grid["rows"], grid["columns"]) for grid in state["grids"]]
    if MASKS.search(chart.titles):
        if len(grids) < 2 or len(set(grids)) != 1 or grids[0][0] != grids[0][1]:
            return [f"the mask explorer's heatmaps are {grids} (rows, columns), not two S × S"]
    elif CHOSEN_HEAD.search(chart.titles) and not CROSS_ATTENTION.search(chart.titles):
        if not grids or any(rows != columns for rows, columns in grids):
            return [f"self-attention heatmaps of {grids} (rows, columns), not T × T"]
    return []


# The theme's sticky headers would cover the top of a chart in its screenshot.
UNSTICK = "header, .bd-header-article, .skip-link { position: static !important; }"


def screenshot(page, name: str, width: int, theme: str) -> None:
    """Each explorer (a chart with controls) as the reader sees it now, to
    ``<name>.<width>px.<theme>.<n>.png`` (a whole page takes seconds; a chart a tenth)."""
    explorers = [chart for chart in charts(page) if chart.controls]
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for number, chart in enumerate(explorers, 1):
        path = SCREENSHOTS / f"{name}.{width}px.{theme}.{number}.png"
        page.locator(f"#{chart.id}").screenshot(path=path, animations="disabled", style=UNSTICK)


def _report(path: str, problems: list[str]) -> str:
    return f"{path}:\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------------------------------------
# The site: the charts as the notebooks drew them


@pytest.mark.parametrize("path", PAGES)
def test_every_chart_is_drawn_by_the_book_loader(visits, path):
    """Each chart is render.py's: its spec in a JSON script (never run), drawn by
    window.transformerTutorial (data-drawn, its Vega view in transformerTutorial.views), with a
    table of its values; and the page is in EXPLORER_PAGES exactly when a chart has controls."""
    page = visits(path).page
    found = page.evaluate(
        """() => siteCheck.list().map(chart => {
            const spec = document.getElementById(chart.id + '-spec');
            const element = document.getElementById(chart.id);
            return {
                id: chart.id, controls: chart.controls.length,
                spec: Boolean(spec && spec.type === 'application/json'),
                drawn: element.dataset.drawn === 'true',
                view: Boolean(window.transformerTutorial && transformerTutorial.views[chart.id]),
                table: Boolean(element.querySelector('details.tt-values')),
            };
        })"""
    )
    problems = [
        f"chart {chart['id']} has no {part}"
        for chart in found
        for part, missing in (
            ("spec script", not chart["spec"]),
            ("data-drawn", not chart["drawn"]),
            ("view in transformerTutorial.views", not chart["view"]),
            ("values table", not chart["table"]),
        )
        if missing
    ]
    explorers = sum(chart["controls"] > 0 for chart in found)
    if (explorers > 0) != (path in EXPLORER_PAGES):
        problems.append(f"{explorers} charts with controls: fix EXPLORER_PAGES")
    assert not problems, _report(path, problems)


@pytest.mark.parametrize("path", EXPLORER_PAGES)
def test_every_control_returns_to_the_first_drawing(visits, report, path):
    """Every control of every explorer forward and back, alone and in pairs, at 1280 px; the
    charts must fit the column for every menu choice (every preset)."""
    visit = visits(path)
    page = visit.page
    problems, steps = [], 0
    for chart in charts(page):
        problems += [f"{chart.name}: {p}" for p in fit_problems(page, chart)]
        problems += [f"{chart.name}: {p}" for p in contrast_problems(page, chart, MIN_CONTRAST)]
        if not chart.controls:
            continue
        result = walk(
            page,
            chart,
            shape_problems,
            at_each_preset=lambda chart=chart: fit_problems(page, chart),
        )
        steps += result.steps
        problems += [f"{chart.name}: {problem}" for problem in result.problems]
    report(f"{path}: {steps} drawings looked at, every control forward and back")
    screenshot(page, visit.name, DESKTOP["width"], "light")
    problems += visit.problems()
    assert not problems, _report(path, problems)


def fit_problems_for_every_preset(page, chart, page_problems=lambda: []) -> list[str]:
    """What does not fit in ``chart``'s first drawing and after each choice of each of its menus
    (the presets), with ``page_problems()`` checked after every choice too."""
    problems = [f"{chart.name}: {p}" for p in fit_problems(page, chart)]
    start = first_controls(page, chart)
    for control in (c for c in start if c.kind == "select"):
        for value in current(page, chart, control).others():
            set_control(page, chart, control, value)
            where = f"{chart.name}, {control.label} = {value!r}"
            problems += [f"{where}: {p}" for p in fit_problems(page, chart) + page_problems()]
        restore(page, chart, start)
    return problems


@pytest.mark.parametrize("path", PAGES)
def test_charts_fit_a_phone(phone_visits, path):
    """At 390 × 844 the page does not scroll sideways, and every chart fits the text column
    with all it draws, for its first drawing and for every choice of its menus (the presets);
    also in the dark theme (screenshots of both)."""
    visit = phone_visits(path)
    page = visit.page
    problems = []

    def fits() -> list[str]:
        overflow = page_overflow(page)
        return [overflow] if overflow else []

    problems += fits()
    for chart in charts(page):
        problems += fit_problems_for_every_preset(page, chart, fits)
    if path in EXPLORER_PAGES:
        screenshot(page, visit.name.split(".")[0], PHONE["width"], "light")
        set_theme(page, "dark")
        problems += [f"dark: {p}" for p in fits()]
        problems += [
            f"dark: {chart.name}: {p}" for chart in charts(page) for p in fit_problems(page, chart)
        ]
        screenshot(page, visit.name.split(".")[0], PHONE["width"], "dark")
        set_theme(page, "light")
    problems += visit.problems()
    assert not problems, _report(path, problems)


def dark_theme_problems(page, screenshot_name: str | None = None) -> list[str]:
    """With each explorer's controls moved, switch to the dark theme: every chart draws again on
    a dark background with readable text, its controls where they were; back in the light
    theme, with the controls back, each chart is its first drawing."""
    problems = []
    moved: dict[str, dict[str, str]] = {}
    for chart in charts(page):
        for control in chart.controls:
            others = current(page, chart, control).others()
            if others:
                set_control(page, chart, control, others[-1])
        moved[chart.id] = {c.name: c.value for c in controls(page, chart)}

    def check(theme: str) -> None:
        for chart in charts(page):
            kept = {c.name: c.value for c in controls(page, chart)}
            if kept != moved[chart.id]:
                problems.append(f"{theme}: {chart.name}: controls {moved[chart.id]} -> {kept}")
            state = look(page, chart)
            if state["error"] or not state["items"]:
                problems.append(f"{theme}: {chart.name}: drew nothing: {state['error']}")
            for problem in contrast_problems(page, chart, MIN_CONTRAST):
                problems.append(f"{theme}: {chart.name}: {problem}")

    for theme in ("dark", "light"):
        not_redrawn = set_theme(page, theme)
        problems += [f"{theme}: chart {id_} did not draw again" for id_ in not_redrawn]
        check(theme)
        if theme == "dark":
            for chart in charts(page):
                seen = page.evaluate("id => siteCheck.readability(id)", chart.id)
                if seen["luminance"] > DARK_BACKGROUND:
                    background = tuple(seen["background"][:3])
                    problems.append(f"dark: {chart.name} is on a light background rgb{background}")
            if screenshot_name:
                screenshot(page, screenshot_name, DESKTOP["width"], "dark")
    for chart in charts(page):
        restore(page, chart, first_controls(page, chart))
        state = look(page, chart)
        if not state["same"]:
            problems.append(f"light again: {chart.name}: {describe_difference(state)}")
    return problems


@pytest.mark.parametrize("path", EXPLORER_PAGES)
def test_charts_follow_the_dark_theme(visits, path):
    """Every chart follows the reader to the dark theme and back (see dark_theme_problems)."""
    visit = visits(path)
    problems = dark_theme_problems(visit.page, visit.name) + visit.problems()
    assert not problems, _report(path, problems)


# ---------------------------------------------------------------------------------------------
# Per-preset limits

MASKING = "chapters/08_masking.html"
# Chapters whose attention explorers mix models: the sentence menu's label says which model;
# a sentence of the model shows its layers and heads only. (layers, heads) by label.
REAL = (6, 12)  # all-MiniLM-L6-v2
MODEL_SIZES: dict[str, Callable[[str], tuple[int, int]]] = {
    "chapters/04_self_attention.html": lambda label: REAL if label.startswith("real") else (2, 2),
    "chapters/05_multi_head_attention.html": (
        lambda label: REAL if label.startswith("real") else (1, 4)
    ),
    "chapters/09_whole_transformer.html": lambda label: (2, 4),
    "chapters/10_real_model.html": lambda label: REAL,
}


def _named(chart: Chart, label: str):
    found = [control for control in chart.controls if control.label.startswith(label)]
    assert len(found) == 1, f"{chart.name}: {len(found)} controls labelled {label!r}"
    return found[0]


def _options(page, chart: Chart, name: str) -> list[tuple[str, str]]:
    """(value, text) of every option of the menu ``name``."""
    return page.evaluate(
        "([id, name]) => [...document.querySelectorAll(`#${id} select[name=${name}] option`)]"
        ".map(o => [o.value, o.text])",
        [chart.id, name],
    )


def real_token_problems(page, chart: Chart, words: Callable[[str], int]) -> list[str]:
    """The mask explorer's "real tokens n" runs to the chosen sentence's number of ``words``
    (given its menu label); an n beyond a shorter sentence is lowered to its length."""
    start = first_controls(page, chart)
    menu, slider = _named(chart, "sentence"), _named(chart, "real tokens")
    labels = _options(page, chart, menu.name)
    problems = []
    try:
        for value, label in labels:
            set_control(page, chart, menu, value)
            limit = current(page, chart, slider)
            if limit.high != words(label):
                problems.append(f"{label!r}: n runs to {limit.high:g}, not {words(label)}")
            set_control(page, chart, limit, slider_value(limit.high))
            for other, other_label in labels:
                if other != value and words(other_label) < limit.high:
                    set_control(page, chart, menu, other)
                    now = current(page, chart, slider)
                    if float(now.value) > words(other_label) or now.high != words(other_label):
                        problems.append(
                            f"{label!r} at n = {limit.high:g}, then {other_label!r}: n = "
                            f"{now.value} of max {now.high:g} ({words(other_label)} words)"
                        )
                    set_control(page, chart, menu, value)
    finally:
        restore(page, chart, start)
    return problems


def model_size_problems(page, chart: Chart, size: Callable[[str], tuple[int, int]]) -> list[str]:
    """For each sentence of an attention explorer, the layer menu offers the ``size`` (layers,
    heads) of its model (given its menu label), the head slider runs to its heads, and the grid
    of all heads draws them."""
    start = first_controls(page, chart)
    menu = _named(chart, "sentence")
    problems = []
    try:
        for value, label in _options(page, chart, menu.name):
            set_control(page, chart, menu, value)
            layers, heads = size(label)
            offered = current(page, chart, _named(chart, "layer")).options
            head = current(page, chart, _named(chart, "head"))
            drawn = page.evaluate(
                "id => [...document.getElementById(id).querySelectorAll("
                "'g.role-title text, g.role-column-title text')]"
                ".filter(t => /^head \\d+$/.test(t.textContent)).length",
                chart.id,
            )
            if (len(offered), head.high, drawn) != (layers, heads, heads):
                problems.append(
                    f"{chart.name}: {label!r} of a {layers} × {heads} model: {len(offered)} "
                    f"layers offered, head slider to {head.high:g}, {drawn} heads drawn"
                )
    finally:
        restore(page, chart, start)
    return problems


def test_real_tokens_run_to_the_sentence_length(visits):
    """Chapter 8: "real tokens n" runs to the chosen sentence's length (its words)."""
    page = visits(MASKING).page
    (chart,) = [chart for chart in charts(page) if MASKS.search(chart.titles)]
    problems = real_token_problems(page, chart, lambda label: len(label.split()))
    assert not problems, _report(MASKING, problems)


@pytest.mark.parametrize("path", MODEL_SIZES)
def test_layers_and_heads_offered_are_the_models(visits, path):
    page = visits(path).page
    explorers = [chart for chart in charts(page) if CHOSEN_HEAD.search(chart.titles)]
    assert explorers, f"{path}: no attention explorer ('The chosen head')"
    problems = [
        p for chart in explorers for p in model_size_problems(page, chart, MODEL_SIZES[path])
    ]
    assert not problems, _report(path, problems)


# ---------------------------------------------------------------------------------------------
# The package's explorers now, on a page built at test time


@pytest.fixture(scope="module")
def package_page(browser, tmp_path_factory):
    """Every explorer as the package draws it now, fed HTML and script-closing text."""
    directory = tmp_path_factory.mktemp("explorers")
    path = write_page(directory)
    with serve(directory) as url:
        visit = open_page(browser, url, directory, path.name)
        yield visit
        visit.close()


def _pwned(page) -> bool:
    return page.evaluate("window.__pwned !== undefined")


def test_package_explorers_show_hostile_text_as_text(package_page):
    """Labels and tokens like ``</script><script>…``, ``<img onerror=…>`` and ``<b>bold</b> &
    co`` run nothing and make no element; each shows literally in the menus (labels), the
    charts' SVG text (cut with an ellipsis if long) and accessible names, the values tables
    and a hovered cell's tooltip."""
    page = package_page.page
    assert not _pwned(page), "a label or token ran as a script while the page loaded"
    seen = page.evaluate(
        """async () => {
            const charts = siteCheck.list().map(chart => document.getElementById(chart.id));
            const all = (selector, read) => charts.flatMap(
                chart => [...chart.querySelectorAll(selector)].map(read));
            const tables = [];
            for (const chart of charts) tables.push((await siteCheck.valuesText(chart.id)) || {});
            return {
                options: all('option', o => o.text),
                texts: all('svg text', t => t.textContent),
                labels: all('svg [aria-label]', node => node.getAttribute('aria-label')),
                tables: tables.map(table => table.text || ''),
                markup: document.querySelectorAll('main b, main img, main [onerror]').length
                    + tables.reduce((sum, table) => sum + (table.markup || 0), 0),
            };
        }"""
    )
    problems = []
    if seen["markup"]:
        problems.append(f"{seen['markup']} elements made from labels or tokens (b, img)")
    for text in HOSTILE:
        cut = text[:8]
        where = {
            "a menu option": any(text in option for option in seen["options"]),
            "SVG text": any(
                shown == text or (shown.startswith(cut) and shown.endswith("…"))
                for shown in seen["texts"]
            ),
            "an accessible name (aria-label)": any(text in label for label in seen["labels"]),
            "a values table": any(text in table for table in seen["tables"]),
        }
        problems += [f"{text!r} is not in {part}" for part, found in where.items() if not found]

    # A tooltip shows the token as text (vega-tooltip escapes it).
    cell = page.locator(f"svg [aria-label*='{IMAGE[:10]}']").first
    cell.scroll_into_view_if_needed()
    cell.hover()
    tooltip = page.locator("#vg-tooltip-element")
    tooltip.wait_for(state="visible")
    if tooltip.locator("img, b").count() or IMAGE[:10] not in tooltip.inner_text():
        problems.append(f"the tooltip over {IMAGE!r} shows {tooltip.inner_html()!r}")
    page.mouse.move(0, 0)
    if _pwned(page):
        problems.append("a label or token ran as a script")
    problems += package_page.problems()
    assert not problems, "\n".join(problems)
    assert SCRIPT in "".join(seen["tables"])  # the script-closing text survived whole


def test_package_explorers_return_to_their_first_drawing(package_page):
    """The package's explorers, now: every control forward and back, at 1280 px."""
    page = package_page.page
    problems = []
    for chart in charts(page):
        problems += [f"{chart.name}: {p}" for p in fit_problems(page, chart)]
        if chart.controls:
            result = walk(page, chart, shape_problems)
            problems += [f"{chart.name}: {problem}" for problem in result.problems]
    if _pwned(page):
        problems.append("a label or token ran as a script")
    problems += package_page.problems()
    assert not problems, "\n".join(problems)


def test_package_explorers_limit_their_controls_per_preset(package_page):
    """The mask explorer's n and the attention explorer's layers and heads follow the preset
    (explorer_page.hostile_explorers: a toy model of 2 × 2 beside a "real" one of 3 × 4)."""
    page = package_page.page
    found = {chart.name: chart for chart in charts(page)}
    (mask,) = [chart for chart in found.values() if MASKS.search(chart.titles)]
    (attention,) = [chart for chart in found.values() if CHOSEN_HEAD.search(chart.titles)]
    problems = real_token_problems(page, mask, lambda label: len(MASK_PRESETS[label]))
    problems += model_size_problems(
        page, attention, lambda label: (2, 2) if label.startswith("toy") else (3, 4)
    )
    assert not problems, "\n".join(problems)


def test_package_explorers_follow_the_dark_theme(package_page):
    problems = dark_theme_problems(package_page.page) + package_page.problems()
    assert not problems, "\n".join(problems)


def test_package_explorers_fit_a_phone(package_page):
    """The package's explorers, now, at 390 px: every chart fits for every preset."""
    page = package_page.page
    page.set_viewport_size(PHONE)
    problems = []
    try:
        overflow = page_overflow(page)
        problems += [overflow] if overflow else []
        for chart in charts(page):
            problems += fit_problems_for_every_preset(page, chart)
        screenshot(page, "package-explorers", PHONE["width"], "light")
    finally:
        page.set_viewport_size(DESKTOP)
    assert not problems, "\n".join(problems)
