"""The "type any sentence" box on the built site: the book's encoder run in the reader's browser.

``views/explorers/typed.js``, which ``book/browser_model.py`` adds to every page with a
placeholder (chapters 4 and 10), loads ONNX Runtime Web and the exported encoder
(``_static/encoder/``) only when the reader clicks, runs it on the typed text and draws the
page's own attention and apple explorers for it. Here headless Chromium (``site_server.py``
answers the jsDelivr requests from ``tests/browser/node_modules``):

- nothing large is requested before the click, and the button says what the click downloads;
- ``transformerTutorial.encode(text)`` gives the tokens of the Python tokenizer, and attention
  weights and vectors within the manifest's tolerance of the book's PyTorch model
  (``BrowserEncoder``); the apple explorer's path is ``shift_record``'s, within the same;
- both typed explorers follow their controls forward and back (and the word menu), at 1280 and
  390 px, in the light and the dark theme, and axe-core finds no serious issue in the box;
- text too long for the model gives a message, and text that is HTML is shown as text.

The time to the first result and to each further 20-token sentence are measured and reported
(``report``), not asserted.
"""

import json
import math
import time

import numpy as np
import pytest
import torch
from site_charts import (
    Chart,
    charts,
    contrast_problems,
    describe_difference,
    first_controls,
    fit_problems,
    look,
    page_overflow,
    restore,
    walk,
)
from site_server import DESKTOP, NODE_MODULES, PHONE, SCREENSHOTS, open_page, set_theme
from test_site_explorers import DARK_BACKGROUND, MIN_CONTRAST, UNSTICK, shape_problems

from transformer_tutorial.book.browser_model import MANIFEST_FILE, BrowserEncoder
from transformer_tutorial.model.checkpoint import load_pretrained
from transformer_tutorial.studies.real_model import (
    FRUIT_ANCHORS,
    TECHNOLOGY_ANCHORS,
    shift_record,
)

pytestmark = pytest.mark.browser

REAL_MODEL = "chapters/10_real_model.html"
SELF_ATTENTION = "chapters/04_self_attention.html"
BOX = ".tt-typed"
TYPED_CHART = "vega-7e"  # typed.js's chart ids: vega-7e + a (attention) or b (apple) + count
RUN_TIMEOUT_MS = 180_000  # the first run downloads 38 MB (from localhost here) and compiles
SENTENCES = [
    "The cat sat on the mat because it was tired",
    "I ate an apple and a banana for lunch",
    "Un café crème, s'il vous plaît! Tokenizers split [MASK] and unbelievably long words",
]
# 18 word pieces between [CLS] and [SEP]: 20 tokens (the timing's sentence)
TWENTY_TOKENS = (
    "the quick brown fox jumps over the lazy dog while my apple laptop installs a long update"
)
TOO_LONG = "word " * 600  # 602 tokens; the model has 512 positions
HOSTILE = "</script><img src=x onerror=alert(1)> apple <b>pie</b>"
ORT_FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
HEAVY = ("encoder.int8.onnx", "vocab.txt", "anchors.json", "wordpiece.js", "onnxruntime-web")


@pytest.fixture(scope="module")
def manifest(site) -> dict:
    return json.loads((site / "_static" / "encoder" / MANIFEST_FILE).read_text())


@pytest.fixture(scope="module")
def encoder():
    return load_pretrained()


@pytest.fixture(scope="module")
def pages(browser, site_url, site):
    """``pages(path, viewport)``: the page opened once in this module (its own context: the
    model the box loads stays out of the pages other test files share)."""
    opened = {}

    def visit(path: str, viewport: dict = DESKTOP):
        key = (path, viewport["width"])
        if key not in opened:
            opened[key] = open_page(browser, site_url, site, path, viewport)
        return opened[key]

    yield visit
    for page in opened.values():
        page.close()


def run_box(page, text: str) -> dict:
    """Type ``text`` in the page's box and click its button; wait for the result (or the error)
    and for its charts to draw. Returns the status, the error and the seconds it took."""
    box = page.locator(BOX).first
    box.locator("input[type=text]").fill(text)
    started = time.perf_counter()
    box.locator("button").click()
    page.wait_for_function(
        """box => !box.querySelector('button').disabled
            && (box.querySelector('.tt-typed-status').textContent.startsWith('Ran')
                || !box.querySelector('.tt-typed-error').hidden)""",
        arg=box.element_handle(),
        timeout=RUN_TIMEOUT_MS,
    )
    seconds = time.perf_counter() - started
    page.wait_for_function("() => siteCheck.allDrawn()")
    page.evaluate("siteCheck.recordFirstDrawings()")
    error = box.locator(".tt-typed-error")
    return {
        "status": box.locator(".tt-typed-status").text_content(),
        "error": error.text_content() if error.is_visible() else None,
        "seconds": seconds,
    }


def typed_charts(page) -> list[Chart]:
    return [chart for chart in charts(page) if chart.id.startswith(TYPED_CHART)]


def encode(page, text: str) -> dict:
    return page.evaluate("text => transformerTutorial.encode(text)", text)


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB"


# ---------------------------------------------------------------------------------------------
# Before the click


def test_nothing_large_loads_before_the_click(pages, manifest):
    """The page loads typed.js and manifest.json (for the button's label) and nothing else of
    the model; the button names the download: the model and vocabulary from the manifest, and
    ONNX Runtime Web, whose files typed.js counts as the pinned package has them."""
    visit = pages(REAL_MODEL)
    loaded = [url for url in visit.transferred if any(name in url for name in HEAVY)]
    assert not loaded, f"loaded before any click: {loaded}"
    assert any(url.split("?")[0].endswith("/manifest.json") for url in visit.transferred)
    files = manifest["files"]
    model = files["encoder.int8.onnx"]["bytes"] + files["vocab.txt"]["bytes"]
    runtime = sum(
        (NODE_MODULES / "onnxruntime-web" / "dist" / name).stat().st_size for name in ORT_FILES
    )
    assert visit.page.evaluate("transformerTutorial.typed.runtimeBytes") == runtime
    label = visit.page.locator(f"{BOX} button").first.text_content()
    assert _megabytes(model) in label and _megabytes(runtime) in label, label
    version = json.loads((NODE_MODULES / "onnxruntime-web" / "package.json").read_text())["version"]
    assert visit.page.evaluate("transformerTutorial.typed.version") == version
    problems = visit.problems()
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# The numbers: the browser's model against the book's PyTorch model


def _reference(encoder, text: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    encoding = encoder.tokenizer.encode(text)
    with torch.no_grad():
        attention, hidden = BrowserEncoder(encoder.model)(torch.tensor([encoding.ids]))
    return encoding.tokens, attention.numpy(), hidden.numpy()


def _cosines(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Cosine similarity of matching rows (the last axis)."""
    dot = (ours * theirs).sum(-1)
    return dot / (np.linalg.norm(ours, axis=-1) * np.linalg.norm(theirs, axis=-1))


def test_encode_matches_the_python_model(pages, encoder, manifest, report):
    """Tokens and IDs exactly the Python tokenizer's; every attention weight within the
    manifest's bound of the PyTorch model's, and every token's last-layer vector at least at its
    cosine (the other layers too). Also measures the first run and further 20-token runs."""
    visit = pages(REAL_MODEL)
    first = run_box(visit.page, SENTENCES[0])
    assert first["error"] is None, first["error"]
    tolerance = manifest["tolerance"]
    problems = []
    for text in [*SENTENCES, TWENTY_TOKENS]:
        result = encode(visit.page, text)
        tokens, attention, hidden = _reference(encoder, text)
        assert result["tokens"] == tokens, f"{text!r}: tokens {result['tokens']} != {tokens}"
        assert result["ids"] == encoder.tokenizer.encode(text).ids
        ours_attention, ours_hidden = np.array(result["attention"]), np.array(result["hidden"])
        assert ours_attention.shape == attention.shape and ours_hidden.shape == hidden.shape
        error = float(np.abs(ours_attention - attention).max())
        if error > tolerance["max_attention_error"]:
            problems.append(f"{text!r}: an attention weight is {error:.4f} off")
        cosine = float(_cosines(ours_hidden, hidden).min())  # every layer, every token
        if cosine < tolerance["min_last_layer_cosine"]:
            problems.append(f"{text!r}: a token's vector is at cosine {cosine:.5f}")
    assert not problems, "\n".join(problems)

    assert len(encoder.tokenizer.encode(TWENTY_TOKENS).ids) == 20
    seconds = visit.page.evaluate(
        """async text => {
            const times = [];
            for (let i = 0; i < 5; i++) {
                const start = performance.now();
                await transformerTutorial.encode(text + ' ' + 'abcde'[i]);
                times.push((performance.now() - start) / 1000);
            }
            return times;
        }""",
        TWENTY_TOKENS.rsplit(" ", 1)[0],  # 19 tokens + one letter: 20, a new sentence each time
    )
    load = visit.page.evaluate("transformerTutorial.typed.timings.loadMs") / 1000
    report(
        f"typed box: first result {first['seconds']:.1f} s after the click (loading {load:.1f} s); "
        f"then 20-token sentences in " + ", ".join(f"{s * 1000:.0f}" for s in seconds) + " ms"
    )


def test_apple_path_is_shift_records(pages, encoder, manifest, site):
    """The typed apple explorer's path is chapter 10's ``shift_record`` for the same sentence and
    word: each point within the angle that the manifest's cosine allows (the anchors are the
    PyTorch model's in both), plus the 0.001 rounding of the page's data."""
    visit = pages(REAL_MODEL)
    text = SENTENCES[1]
    result = run_box(visit.page, text)
    assert result["error"] is None, result["error"]
    spec = visit.page.evaluate(
        """() => JSON.parse(document.querySelector(
            '.tt-typed .tt-typed-apple script[type="application/json"]').textContent)"""
    )
    rows = next(rows for rows in spec["datasets"].values() if rows and "step" in rows[0])
    path = np.array([[row["x"], row["y"]] for row in sorted(rows, key=lambda row: row["step"])])
    groups = {"fruit": FRUIT_ANCHORS, "technology": TECHNOLOGY_ANCHORS}
    anchors = encoder.anchor_vectors([*FRUIT_ANCHORS, *TECHNOLOGY_ANCHORS])
    record = shift_record(encoder, text, "apple", anchors, groups)
    bound = math.acos(manifest["tolerance"]["min_last_layer_cosine"]) + 0.001
    error = float(np.abs(path - record.trajectory).max())
    assert path.shape == record.trajectory.shape
    assert error <= bound, f"the path is {error:.4f} from shift_record's (bound {bound:.4f})"


# ---------------------------------------------------------------------------------------------
# The explorers, driven


def _axe_box(page) -> list[str]:
    """axe-core's critical and serious findings inside the box."""
    if not page.evaluate("Boolean(window.axe)"):
        page.add_script_tag(content=(NODE_MODULES / "axe-core" / "axe.min.js").read_text())
    found = page.evaluate(
        """async () => {
            const results = await axe.run('.tt-typed', {resultTypes: ['violations']});
            return results.violations.filter(v => ['critical', 'serious'].includes(v.impact))
                .map(v => `${v.impact} ${v.id} (${v.help}) on `
                    + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(' | '));
        }"""
    )
    return found


def _screenshot(page, name: str) -> None:
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.locator(BOX).first.screenshot(
        path=SCREENSHOTS / name, animations="disabled", style=UNSTICK
    )


def _word_menu_problems(page) -> list[str]:
    """Another word in the box's menu: the apple explorer redraws for it (its title names the
    word); back to the first word, the first drawing again."""
    menu = page.locator(f"{BOX} select.tt-typed-word-menu").first
    options = menu.locator("option").all_text_contents()
    if len(options) < 2:
        return [f"the word menu offers {options}"]
    start = menu.input_value()
    (apple,) = [chart for chart in typed_charts(page) if chart.id.startswith(TYPED_CHART + "b")]
    problems = []
    other = next(str(i) for i in range(len(options)) if str(i) != start)
    for value in (other, start):
        menu.select_option(value)
        page.wait_for_function(
            "id => (document.getElementById(id) || {dataset: {}}).dataset.drawn === 'true'",
            arg=apple.id,
        )
        word = options[int(value)].split(" (")[0]
        state = look(page, apple)
        titles = page.evaluate(
            "id => [...document.getElementById(id).querySelectorAll('g.role-title text')]"
            ".map(t => t.textContent).join(' ')",
            apple.id,
        )
        if f"'{word}'" not in titles:
            problems.append(f"word {word!r}: the apple explorer's titles say {titles!r}")
        if value == other and state["same"]:
            problems.append(f"word {word!r}: the apple explorer did not change")
        if value == start and not state["same"]:
            problems.append(f"back to {word!r}: {describe_difference(state)}")
    return problems


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280px", "390px"])
def test_typed_explorers_follow_their_controls(pages, viewport):
    """Both typed explorers: every control forward and back (site_charts.walk), the word menu
    forward and back; they fit the column; in the dark theme they draw again, readable, with
    their controls kept, and axe-core finds nothing serious in the box in either theme."""
    visit = pages(REAL_MODEL, viewport)
    page = visit.page
    result = run_box(page, SENTENCES[1])
    assert result["error"] is None, result["error"]
    found = typed_charts(page)
    assert len(found) == 2, f"typed charts: {[chart.id for chart in found]}"
    problems = []
    overflow = page_overflow(page)
    problems += [overflow] if overflow else []
    for chart in found:
        problems += [f"{chart.name}: {p}" for p in fit_problems(page, chart)]
        problems += [f"{chart.name}: {p}" for p in contrast_problems(page, chart, MIN_CONTRAST)]
        walked = walk(page, chart, shape_problems)
        problems += [f"{chart.name}: {p}" for p in walked.problems]
    problems += _word_menu_problems(page)
    problems += [f"light: axe: {line}" for line in _axe_box(page)]
    _screenshot(page, f"typed.{viewport['width']}px.light.png")

    # Dark: move the controls, switch, and every typed chart draws again, controls kept.
    moved = {}
    for chart in found:
        for control in chart.controls:
            others = control.others()
            if others:
                page.evaluate(
                    "([id, name, value]) => siteCheck.setControl(id, name, value)",
                    [chart.id, control.name, others[-1]],
                )
                page.evaluate("id => siteCheck.settle(id)", chart.id)
        moved[chart.id] = {c.name: c.value for c in typed_charts_by_id(page)[chart.id].controls}
    not_redrawn = set_theme(page, "dark")
    problems += [f"dark: chart {id_} did not draw again" for id_ in not_redrawn]
    for chart in typed_charts(page):
        kept = {c.name: c.value for c in chart.controls}
        if kept != moved[chart.id]:
            problems.append(f"dark: {chart.name}: controls {moved[chart.id]} -> {kept}")
        seen = page.evaluate("id => siteCheck.readability(id)", chart.id)
        if seen["luminance"] > DARK_BACKGROUND:
            problems.append(f"dark: {chart.name} is on a light background")
        problems += [
            f"dark: {chart.name}: {p}" for p in contrast_problems(page, chart, MIN_CONTRAST)
        ]
        problems += [f"dark: {chart.name}: {p}" for p in fit_problems(page, chart)]
    problems += [f"dark: axe: {line}" for line in _axe_box(page)]
    _screenshot(page, f"typed.{viewport['width']}px.dark.png")
    set_theme(page, "light")
    for chart in typed_charts(page):
        restore(page, chart, first_controls(page, chart))
        state = look(page, chart)
        if not state["same"]:
            problems.append(f"light again: {chart.name}: {describe_difference(state)}")
    problems += visit.problems()
    assert not problems, "\n".join(problems)


def typed_charts_by_id(page) -> dict[str, Chart]:
    return {chart.id: chart for chart in typed_charts(page)}


def test_the_box_reuses_chapter_4s_explorers(pages):
    """Chapter 4's attention explorer mixes a toy model with the real one: the typed copy offers
    the real model's 6 layers and 12 heads, and both typed explorers follow their controls."""
    visit = pages(SELF_ATTENTION)
    page = visit.page
    result = run_box(page, "She baked an apple pie because it was cold")
    assert result["error"] is None, result["error"]
    found = typed_charts(page)
    assert len(found) == 2, f"typed charts: {[chart.id for chart in found]}"
    attention = next(chart for chart in found if chart.id.startswith(TYPED_CHART + "a"))
    layer = next(control for control in attention.controls if control.name == "layer")
    head = next(control for control in attention.controls if control.name == "head")
    assert len(layer.options) == 6 and head.high == 12, (layer, head)
    problems = []
    for chart in found:
        problems += [f"{chart.name}: {p}" for p in fit_problems(page, chart)]
        problems += [f"{chart.name}: {p}" for p in walk(page, chart, shape_problems).problems]
    problems += _word_menu_problems(page)
    problems += visit.problems()
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# What must never happen: a blank chart, or typed text run as markup


def test_too_long_text_gives_a_message(pages):
    """602 tokens: a message that names the limit, no chart; then a short sentence runs again."""
    visit = pages(REAL_MODEL)
    page = visit.page
    result = run_box(page, TOO_LONG)
    assert result["error"] and "512" in result["error"] and "602" in result["error"], result
    assert not typed_charts(page), "charts still shown beside the error"
    again = run_box(page, SENTENCES[0])
    assert again["error"] is None and len(typed_charts(page)) == 2, again
    problems = visit.problems()
    assert not problems, "\n".join(problems)


def test_hostile_text_is_shown_as_text(pages):
    """``</script><img onerror=…>`` typed in the box makes no element and runs nothing: the
    tokens line, the sentence menus and the charts show its characters."""
    visit = pages(REAL_MODEL)
    page = visit.page
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    result = run_box(page, HOSTILE)
    assert result["error"] is None, result["error"]
    box = page.locator(BOX).first
    assert box.locator("img, b, [onerror]").count() == 0, box.inner_html()[:500]
    assert not dialogs, f"typed text ran a script: {dialogs}"
    tokens = box.locator(".tt-typed-tokens").text_content()
    assert "< / script >" in tokens.replace(" · ", " "), tokens
    options = box.locator(".vega-bindings select option").all_text_contents()
    assert any(HOSTILE in option for option in options), options
    texts = box.locator("svg text").all_text_contents()
    assert {"<", "/", "script", ">"} <= set(texts), texts
    problems = visit.problems()
    assert not problems, "\n".join(problems)


def test_a_failed_download_gives_a_message(browser, site_url, site):
    """The model's download fails (offline): a message says so and that a click tries again;
    no chart. (A page of its own: the failed request is what this test is about.)"""
    visit = open_page(browser, site_url, site, REAL_MODEL)
    try:
        page = visit.page
        page.route("**/encoder.int8.onnx", lambda route: route.abort("internetdisconnected"))
        result = run_box(page, SENTENCES[0])
        assert result["error"], result
        assert "could not be loaded" in result["error"] and "try again" in result["error"], result
        assert not typed_charts(page), "a chart drawn without a model"
        assert page.locator(f"{BOX} [role=alert]").first.is_visible()
    finally:
        visit.close()
