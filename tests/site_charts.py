"""Reading and driving the book's charts in a page, as a reader would (for the browser checks).

A chart is the element ``<div id="vega-<hash>">`` that render.py writes; ``window.siteCheck``
(``tests/browser/site_check.js``, added to every page the checks open) reads it in the page.
Controls are set through their DOM inputs: a menu or a slider gets a new value and the input and
change events a reader's browser sends; a radio button or a checkbox is clicked.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations

from playwright.sync_api import Page

# A chart's SVG may be this much taller than what it draws: Vega's padding (5 px a side) and
# its estimate of text extents (rotated labels measured with their label limit) leave 25 to 50
# px. A chart of a fixed height shows several hundred for its shorter presets.
DEAD_SPACE_PX = 60
TOLERANCE_PX = 1  # sub-pixel rounding of boxes


@dataclass(frozen=True)
class Control:
    label: str  # what the reader reads beside it, e.g. "sentence"
    name: str  # the Vega parameter it sets
    kind: str  # select, range, radio, checkbox (or other: not driven)
    value: str  # as the DOM has it: "3", "0.9", "left", "true"
    options: tuple[str, ...] = ()  # select/radio values a reader can pick now
    low: float = 0.0  # range
    high: float = 0.0
    step: float = 1.0

    @classmethod
    def read(cls, control: dict) -> "Control":
        options = tuple(o["value"] for o in control.get("options", ()) if o["enabled"])
        return cls(
            label=control["label"],
            name=control["name"],
            kind=control["kind"],
            value=str(control["value"]),
            options=options,
            low=control.get("min", 0.0),
            high=control.get("max", 0.0),
            step=control.get("step", 1.0),
        )

    def others(self) -> list[str]:
        """Values to visit other than the current one: every option of a menu or radio group,
        the other state of a checkbox, and for a slider its ends, its middle and both
        neighbours of the current value."""
        if self.kind in ("select", "radio"):
            return [value for value in self.options if value != self.value]
        if self.kind == "checkbox":
            return ["false" if self.value == "true" else "true"]
        if self.kind != "range":
            return []
        steps = round((self.high - self.low) / self.step)
        here = round((float(self.value) - self.low) / self.step)
        stops = sorted({0, steps, steps // 2, here - 1, here + 1} - {here})
        return [slider_value(self.low + stop * self.step) for stop in stops if 0 <= stop <= steps]


def slider_value(value: float) -> str:
    """A slider value as the DOM writes it: ``3``, ``0.95``."""
    text = f"{round(value, 10):.10f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


@dataclass(frozen=True)
class Chart:
    id: str
    titles: str  # every title it shows, one a line
    controls: tuple[Control, ...]

    @property
    def name(self) -> str:
        return self.titles.split("\n")[-1][:60] or self.id  # the chart's own title comes last


def charts(page: Page) -> list[Chart]:
    """The page's charts in document order, with their controls as they are now."""
    return [
        Chart(chart["id"], chart["titles"], tuple(Control.read(c) for c in chart["controls"]))
        for chart in page.evaluate("siteCheck.list()")
    ]


def controls(page: Page, chart: Chart) -> list[Control]:
    return [Control.read(c) for c in page.evaluate("id => siteCheck.controls(id)", chart.id)]


def first_controls(page: Page, chart: Chart) -> list[Control]:
    """The controls as the page opened (recorded with the first drawing)."""
    first = page.evaluate("id => siteCheck.firstDrawing(id)", chart.id)
    assert first, f"{chart.name}: no first drawing was recorded"
    return [Control.read(c) for c in first["controls"]]


def settle(page: Page, chart: Chart) -> None:
    page.evaluate("id => siteCheck.settle(id)", chart.id)


def set_control(page: Page, chart: Chart, control: Control, value: str) -> None:
    """Set ``control`` to ``value`` as a reader would, and wait for the chart to redraw."""
    if control.kind in ("select", "range"):
        page.evaluate(
            "([id, name, value]) => siteCheck.setControl(id, name, value)",
            [chart.id, control.name, value],
        )
    elif control.kind == "radio":
        page.locator(
            f"#{chart.id} .vega-bindings input[type=radio][name='{control.name}'][value='{value}']"
        ).click()
    elif control.kind == "checkbox":
        box = page.locator(
            f"#{chart.id} .vega-bindings input[type=checkbox][name='{control.name}']"
        )
        if str(box.is_checked()).lower() != value:
            box.click()
    settle(page, chart)


def current(page: Page, chart: Chart, control: Control) -> Control:
    """``control`` as it is now (a menu's options may narrow with another control)."""
    return {c.name: c for c in controls(page, chart)}[control.name]


def restore(page: Page, chart: Chart, wanted: list[Control]) -> None:
    """Put every control back to its value in ``wanted``, first to last (a menu first: it may
    narrow the sliders after it)."""
    for control in wanted:
        now = current(page, chart, control)
        if now.value != control.value:
            set_control(page, chart, now, control.value)


def look(page: Page, chart: Chart) -> dict:
    """The drawing now: ``same`` as the first drawing, ``difference``, ``items``, ``grids``..."""
    return page.evaluate("id => siteCheck.look(id)", chart.id)


def drawing_problems(state: dict) -> list[str]:
    """What is wrong with a drawing on its own: an error, nothing drawn, a broken heatmap."""
    if state["error"]:
        return [f"shows an error: {state['error']}"]
    if state["items"] == 0:
        return ["draws nothing (no marks)"]
    return [
        f"a heatmap of {grid['cells']} cells in {grid['rows']} rows × {grid['columns']} columns"
        for grid in state["grids"]
        if grid["cells"] != grid["rows"] * grid["columns"]
    ]


def describe_difference(state: dict) -> str:
    difference = state["difference"]
    if not difference:
        return "identical"
    return (
        f"SVG differs from character {difference['at']} (length {difference['length']}, first "
        f"{difference['firstLength']}):\n      first: …{difference['first']}…\n"
        f"      now:   …{difference['now']}…"
    )


def fit_problems(page: Page, chart: Chart) -> list[str]:
    """How the chart does not fit: beyond the text column, drawn outside its own SVG (cut off),
    or an SVG much taller than its drawing."""
    fit = page.evaluate("id => siteCheck.fit(id)", chart.id)
    svg, content, column = fit["svg"], fit["content"], fit["column"]
    if svg is None:
        return ["no SVG"]
    problems = [f"scrolls sideways: {wide}" for wide in fit["wide"]]
    for name, box in (("chart", fit["chart"]), ("SVG", svg)):
        if (
            box["left"] < column["left"] - TOLERANCE_PX
            or box["right"] > column["right"] + TOLERANCE_PX
        ):
            problems.append(
                f"{name} spans x = {box['left']:.0f}..{box['right']:.0f}, the text column "
                f"{column['left']:.0f}..{column['right']:.0f}"
            )
    if content is None:
        return [*problems, "SVG draws nothing"]
    outside = {
        side: round(abs(content[side] - svg[side]))
        for side, beyond in (
            ("left", content["left"] < svg["left"] - TOLERANCE_PX),
            ("top", content["top"] < svg["top"] - TOLERANCE_PX),
            ("right", content["right"] > svg["right"] + TOLERANCE_PX),
            ("bottom", content["bottom"] > svg["bottom"] + TOLERANCE_PX),
        )
        if beyond
    }
    if outside:
        problems.append(f"drawn outside its SVG (cut off), px beyond each side: {outside}")
    dead = svg["height"] - content["height"]
    if dead > DEAD_SPACE_PX:
        problems.append(
            f"SVG {svg['height']:.0f} px tall for {content['height']:.0f} px of drawing "
            f"({dead:.0f} px of dead space)"
        )
    return problems


def page_overflow(page: Page) -> str | None:
    width = page.evaluate("siteCheck.pageWidth()")
    if width["scrollWidth"] > width["innerWidth"]:
        return f"the page scrolls sideways: {width['scrollWidth']} px wide in {width['innerWidth']}"
    return None


@dataclass
class Walk:
    """What went wrong driving one chart's controls forward and back."""

    chart: Chart
    steps: int = 0  # drawings looked at
    problems: list[str] = field(default_factory=list)


def walk(
    page: Page,
    chart: Chart,
    check: Callable[[Chart, dict], list[str]] | None = None,
    at_each_preset: Callable[[], list[str]] | None = None,
) -> Walk:
    """Drive every control of ``chart`` through its values, returning to the first value after
    each; then every pair of controls (one value each, both changed, then both back). Every
    drawing must draw (``drawing_problems``, and ``check`` for this chart); every return must
    give the first drawing exactly. ``at_each_preset`` runs after each menu option is drawn."""
    result = Walk(chart)
    start = first_controls(page, chart)
    driven = [control for control in start if control.kind != "other"]

    def visit(where: str) -> dict:
        state = look(page, chart)
        result.steps += 1
        problems = drawing_problems(state) + (check(chart, state) if check else [])
        result.problems += [f"{where}: {problem}" for problem in problems]
        return state

    def back(where: str) -> None:
        restore(page, chart, start)
        state = visit(f"back to the start after {where}")
        if not state["same"]:
            result.problems.append(f"back to the start after {where}: {describe_difference(state)}")

    back("opening (and any earlier test)")  # an earlier test may have left it elsewhere
    for control in driven:
        for value in current(page, chart, control).others():
            where = f"{control.label} = {value!r}"
            set_control(page, chart, control, value)
            visit(where)
            if at_each_preset and control.kind == "select":
                result.problems += [f"{where}: {p}" for p in at_each_preset()]
            back(where)
    for one, other in combinations([c for c in driven if c.others()], 2):
        one_value = _pick(current(page, chart, one))
        set_control(page, chart, one, one_value)
        other_value = _pick(current(page, chart, other))
        if other_value is None:  # the first choice left the other control no other value
            back(f"{one.label} = {one_value!r}")
            continue
        set_control(page, chart, other, other_value)
        where = f"{one.label} = {one_value!r} and {other.label} = {other_value!r}"
        visit(where)
        set_control(page, chart, one, one.value)
        visit(f"{where}, then {one.label} back")
        back(where)
    return result


def _pick(control: Control) -> str | None:
    """One value other than the current: the last option, or the slider's far end."""
    others = control.others()
    if not others:
        return None
    if control.kind == "range":
        return max(others, key=lambda value: abs(float(value) - float(control.value)))
    return others[-1]


def contrast_problems(page: Page, chart: Chart, minimum: float = 4.5) -> list[str]:
    seen = page.evaluate("id => siteCheck.readability(id)", chart.id)
    worst = seen["worst"]
    if worst is None or math.isclose(worst["ratio"], 0):
        return [] if worst is None else [f"text {worst['text']!r} is invisible"]
    if worst["ratio"] < minimum:
        return [
            f"text {worst['text']!r} in {worst['fill']} has contrast {worst['ratio']:.2f} "
            f"(at least {minimum}) on rgb{tuple(seen['background'][:3])}"
        ]
    return []
