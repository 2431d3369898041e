"""The built site as a reader sees it: headless Chromium opens each page of ``_build/html``.

Run after ``make book`` (``make browser`` runs ``pytest -m browser``). The site is served on
127.0.0.1 from a thread of this test session. The pages load MathJax, RequireJS, the Jupyter
widgets manager and Vega from CDNs, which the test machines cannot reach: every CDN request is
answered from the npm packages pinned in ``tests/browser/package.json`` (``npm ci --prefix
tests/browser``), so the browser runs the same files a reader's browser fetches. A CDN request
with no local copy fails the test with its URL; any other off-host request is logged and
aborted.

Each page must load without console errors or failed requests, render all its math with
MathJax, load every image, and (chapter pages) draw their interactive Vega explorers, which must
redraw when their controls change and show the text they are given as text, never as markup.
Each page, with the local images it shows, must stay light enough for a slow connection.
Screenshots go to ``_build/screenshots/``.
"""

import base64
import hashlib
import json
import math
import mimetypes
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from functools import cache, partial
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote, urlsplit

import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Locator,
    Page,
    Request,
    Response,
    Route,
    sync_playwright,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from transformer_tutorial.positional_encoding import sinusoidal_encoding
from transformer_tutorial.widgets.positional import DECIMALS

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
NODE_MODULES = ROOT / "tests" / "browser" / "node_modules"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 15_000

# Every page of the book (test_every_page_is_checked keeps this list complete), and whether it
# shows math. Each page gets the load, math and image checks; a new chapter is one more line.
PAGES = {
    "chapters/index.html": True,
    "chapters/01_why_not_rnns.html": True,
    "chapters/02_text_to_vectors.html": True,
    "chapters/03_positional_encoding.html": True,
    "chapters/04_self_attention.html": True,
    "chapters/05_multi_head_attention.html": True,
    "chapters/06_add_norm.html": True,
    "chapters/07_feed_forward.html": True,
    "chapters/08_masking.html": True,
    "chapters/09_whole_transformer.html": True,
    "chapters/10_real_model.html": True,
    "chapters/bibliography.html": False,
}
# Pages with the positional-encoding explorer; a later explorer gets tests of its own.
EXPLORER_PAGES = ["chapters/03_positional_encoding.html"]

# CDN requests the pages make, answered from tests/browser/node_modules.
# jsDelivr: https://cdn.jsdelivr.net/npm/<package>@<version>/<file>, where a URL without a file
# (Altair's "vega@6?noext", which RequireJS requests as "vega@6?noext.js") means the file below.
JSDELIVR = "https://cdn.jsdelivr.net/npm/"
JSDELIVR_PACKAGES = {
    "mathjax": None,  # only with a file: .../mathjax@3/es5/tex-mml-chtml.js, fonts, extensions
    "@jupyter-widgets/html-manager": None,  # .../dist/embed-amd.js and its font files
    "vega": "build/vega.min.js",
    "vega-lite": "build/vega-lite.min.js",
    "vega-embed": "build/vega-embed.min.js",
}
# Other CDNs: URL prefix -> (npm package, version the URL names, {file in URL: file in package}).
# cdnjs's require.min.js is its own minified build of RequireJS; npm ships only require.js.
OTHER_CDN_FILES = {
    "https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.4/": (
        "requirejs",
        "2.3.4",
        {"require.min.js": "require.js"},
    ),
}
CDN_HOSTS = {"cdn.jsdelivr.net", "cdnjs.cloudflare.com", "unpkg.com"}
CONTENT_TYPES = {".js": "application/javascript", ".woff": "font/woff", ".woff2": "font/woff2"}

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


# ---------------------------------------------------------------------------------------------
# CDN -> node_modules


def _satisfies(version: str, spec: str) -> bool:
    """Does an installed ``version`` (``1.2.3``) match a CDN ``spec``: ``3``, ``6.4.1``,
    ``5.0.x``, ``^6.0.3`` or ``~1.0.4``? Anything else is not understood, so it does not."""
    try:
        have = tuple(int(part) for part in version.split(".")[:3])
        if spec[:1] in "^~":
            want = tuple(int(part) for part in spec[1:].split("."))
            same = 1 if spec[0] == "^" else 2
            return have[:same] == want[:same] and have >= want
        parts = spec.split(".")
        return len(parts) <= 3 and all(
            part in ("x", "*") or int(part) == number
            for part, number in zip(parts, have, strict=False)
        )
    except ValueError:
        return False


def _installed_version(package: str) -> str:
    return json.loads((NODE_MODULES / package / "package.json").read_text())["version"]


def _package_file(package: str, relative: str) -> Path | None:
    """The file at ``relative`` inside an installed package, or None (never outside it)."""
    directory = (NODE_MODULES / package).resolve()
    path = (directory / relative).resolve()
    if directory not in path.parents or not path.is_file():
        return None
    return path


def local_file(url: str) -> tuple[Path | None, str]:
    """The npm file that answers a CDN ``url``, or None and the reason there is none."""
    for prefix, (package, version, files) in OTHER_CDN_FILES.items():
        if url.startswith(prefix):
            if _installed_version(package) != version:
                return None, f"{package} {_installed_version(package)} installed, URL has {version}"
            name = urlsplit(url).path.rsplit("/", 1)[-1]
            if name not in files:
                return None, f"no local file for {name!r} of {package}"
            return _package_file(package, files[name]), f"{package}/{files[name]}"
    if not url.startswith(JSDELIVR):
        return None, "no local copy: not jsDelivr, nor a file in OTHER_CDN_FILES"
    match = re.fullmatch(
        r"(?P<package>(?:@[^/@?]+/)?[^/@?]+)@(?P<spec>[^/?]+)(?P<file>/[^?]*)?(?P<query>\?.*)?",
        url.removeprefix(JSDELIVR),
    )
    if match is None or match["package"] not in JSDELIVR_PACKAGES:
        return None, "package not in JSDELIVR_PACKAGES (add it and to tests/browser/package.json)"
    package, spec = match["package"], match["spec"]
    if not _satisfies(_installed_version(package), spec):
        return None, f"{package} {_installed_version(package)} installed, URL asks for {spec}"
    relative = (match["file"] or "").lstrip("/") or JSDELIVR_PACKAGES[package]
    if not relative:
        return None, f"URL names no file and {package} has no default file here"
    path = _package_file(package, relative)
    return path, f"{package}/{relative}" if path else f"{package} has no file {relative}"


@cache
def _read(path: Path) -> bytes:
    return path.read_bytes()


def _content_type(path: Path) -> str:
    return CONTENT_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "text/plain"


def _drop_unmatched_integrity(html: str, notes: list[str]) -> str:
    """Remove ``integrity`` from a CDN ``<script>`` whose local copy has another hash.

    Subresource integrity pins the CDN's exact bytes (myst-nb pins cdnjs's minified
    require.js); the npm file is the same program in other bytes, so Chromium would refuse it.
    Nothing else of the page is changed.
    """

    def relax(tag: re.Match[str]) -> str:
        text = tag[0]
        src = re.search(r'\ssrc="([^"]+)"', text)
        integrity = re.search(r'\sintegrity="(sha256|sha384|sha512)-([^"]+)"', text)
        if src is None or integrity is None:
            return text
        path, _ = local_file(src[1])
        if path is None:
            return text  # the request itself will fail the test, naming the URL
        digest = base64.b64encode(hashlib.new(integrity[1], _read(path)).digest()).decode()
        if digest == integrity[2]:
            return text
        notes.append(f"integrity of {src[1]} dropped: local copy {path.name} has other bytes")
        return text.replace(integrity[0], "")

    return re.sub(r"<script\b[^>]*>", relax, html)


# ---------------------------------------------------------------------------------------------
# Fixtures: the site on loopback, Chromium, one visit per page


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"{SITE} has no built site: run `make book` first")
    return SITE


@pytest.fixture(scope="session")
def site_url(site):
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.is_file():
        pytest.fail(
            f"{CHROMIUM} is missing: install chromium (apt-get install chromium; .ci/run does)"
        )
    if not NODE_MODULES.is_dir():
        pytest.fail(
            f"{NODE_MODULES} is missing: run `npm ci --prefix tests/browser` (make browser)"
        )
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@dataclass
class Visit:
    """One page opened in a fresh browser context, and everything that went wrong loading it."""

    name: str
    page: Page
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    unmapped_cdn: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # off-host, not a CDN: aborted, logged
    served: dict[str, str] = field(default_factory=dict)  # CDN URL -> npm file
    notes: list[str] = field(default_factory=list)
    not_ready: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return [
            *self.not_ready,
            *(f"CDN request with no local copy: {url}" for url in self.unmapped_cdn),
            *(f"console error: {text}" for text in self.console_errors),
            *(f"page error: {text}" for text in self.page_errors),
            *(f"failed request: {text}" for text in self.failed_requests),
        ]

    def log(self) -> str:
        lines = [f"{self.name}:"]
        lines += [f"  served {url} <- node_modules/{file}" for url, file in self.served.items()]
        lines += [f"  blocked off-host request {url}" for url in self.blocked]
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)


def _open(browser: Browser, site_url: str, path: str) -> Visit:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    context.set_default_timeout(TIMEOUT_MS)
    visit = Visit(name=Path(path).stem, page=context.new_page())
    aborted: set[str] = set()
    http_errors: set[str] = set()

    def off_host(route: Route) -> None:
        url = route.request.url
        path, source = local_file(url)
        if path is not None:
            visit.served[url] = source
            headers = {"content-type": _content_type(path), "access-control-allow-origin": "*"}
            route.fulfill(status=200, body=_read(path), headers=headers)
            return
        aborted.add(url)
        if urlsplit(url).hostname in CDN_HOSTS:
            visit.unmapped_cdn.append(f"{url} ({source})")
        else:
            visit.blocked.append(url)
        route.abort("blockedbyclient")

    def site_page(route: Route) -> None:
        response = route.fetch()
        body = _drop_unmatched_integrity(response.text(), visit.notes)
        route.fulfill(response=response, body=body)

    context.route(lambda url: not url.startswith(site_url), off_host)
    context.route(lambda url: url.startswith(site_url) and url.endswith(".html"), site_page)

    def console(message: ConsoleMessage) -> None:
        # "Failed to load resource" repeats a failed request, which is reported as one below.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            where = message.location or {}
            at = f"{where.get('url', '?')}:{where.get('lineNumber', '?')}"
            visit.console_errors.append(f"{message.text} ({at})")

    def request_failed(request: Request) -> None:
        # Requests aborted above are reported as such; an HTTP error is reported with its status.
        if request.url not in aborted and request.url not in http_errors:
            visit.failed_requests.append(f"{request.url}: {request.failure}")

    def response(answer: Response) -> None:
        if answer.status >= 400:
            http_errors.add(answer.url)
            visit.failed_requests.append(f"{answer.url}: HTTP {answer.status}")

    page = visit.page
    page.on("console", console)
    page.on("pageerror", lambda error: visit.page_errors.append(str(error)))
    page.on("requestfailed", request_failed)
    page.on("response", response)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        page.goto(site_url + path, wait_until="load")
    except Exception:
        context.close()
        raise
    _settle(visit)
    return visit


# What a page must finish before it is checked, as (description, JavaScript condition).
READY = [
    (
        "MathJax finished its first typeset",
        "() => !window.MathJax || !MathJax.startup || !MathJax.startup.promise"
        " || MathJax.startup.promise.then(() => true)",
    ),
    (
        "every Altair chart drew an <svg> (or its error message)",
        """() => [...document.querySelectorAll('script')]
            .filter(s => ['', 'text/javascript'].includes(s.type))
            .filter(s => s.textContent.includes('vegaEmbed('))
            .every(s => s.previousElementSibling
                        && s.previousElementSibling.querySelector('svg, canvas, .error'))""",
    ),
    (
        "every saved widget view was drawn",
        f"""() => [...document.querySelectorAll('script[type="{WIDGET_VIEW}"]')]
            .every(s => s.previousElementSibling
                        && s.previousElementSibling.classList.contains('widget-subarea')
                        && s.previousElementSibling.children.length > 0)""",
    ),
]


def _settle(visit: Visit) -> None:
    """Wait for each READY condition; one that times out becomes a problem of the visit."""
    for description, condition in READY:
        try:
            visit.page.wait_for_function(condition)
        except PlaywrightTimeoutError:
            visit.not_ready.append(f"not within {TIMEOUT_MS / 1000:.0f} s: {description}")


@pytest.fixture(scope="session")
def visits(browser, site_url):
    """Each page opened once, shared by the tests that only read it."""
    opened: dict[str, Visit] = {}

    def visit(path: str) -> Visit:
        if path not in opened:
            opened[path] = _open(browser, site_url, path)
            opened[path].page.screenshot(
                path=SCREENSHOTS / f"{Path(path).stem}.png", full_page=True
            )
        return opened[path]

    yield visit
    for opened_visit in opened.values():
        print(opened_visit.log())
        opened_visit.page.context.close()


@pytest.fixture(scope="session")
def driven(browser, site_url):
    """Each page opened once more, shared by the tests that drive its explorers' controls.

    Such a test changes each control from whatever value it finds there, so the tests sharing a
    page pass in any order; the page the reading tests share is left as it loaded.
    """
    opened: dict[str, Visit] = {}

    def visit(path: str) -> Visit:
        if path not in opened:
            opened[path] = _open(browser, site_url, path)
        return opened[path]

    yield visit
    for opened_visit in opened.values():
        print(opened_visit.log())
        opened_visit.page.context.close()


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
@pytest.mark.parametrize("path", EXPLORER_PAGES)
def test_explorer_renders(visits, path):
    chart = _explorer(visits(path).page)
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
@pytest.mark.parametrize("path", EXPLORER_PAGES)
def test_explorer_follows_its_controls(browser, site_url, path):
    visit = _open(browser, site_url, path)
    try:
        page = visit.page
        chart = _explorer(page)
        chart.scroll_into_view_if_needed()
        chart.screenshot(path=SCREENSHOTS / f"{visit.name}.explorer-before.png")

        # A wider model: twice the columns in the heatmap.
        d_model = 128
        assert _heatmap_cells(chart) != MAX_LEN * d_model, "the explorer starts at d_model 128"
        start = time.monotonic()
        _change(_control(chart, "d_model", "select"), d_model)
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
        pos_b = 37
        start = time.monotonic()
        _change(_control(chart, "position b", "input[type=range]"), pos_b)
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
        page.evaluate(
            "window.scrollTo(0, 0)"
        )  # sticky header and sidebars where a reader sees them
        page.screenshot(path=SCREENSHOTS / f"{visit.name}.after.png", full_page=True)
        problems = visit.problems()
        assert not problems, "\n".join(problems)
        assert seconds < REDRAW_SECONDS, (
            f"the explorer took {seconds:.1f} s to redraw for d_model {d_model}: too slow to use"
        )
    finally:
        print(visit.log())
        visit.page.context.close()


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
    """The one Vega chart on ``page`` that shows ``title`` (its own or a view's), once drawn."""
    charts = page.locator(".vega-embed").filter(
        has=page.locator("svg g.role-title", has_text=title)
    )
    try:
        charts.first.wait_for(state="visible")
    except PlaywrightTimeoutError:
        shown = page.locator(".vega-embed g.role-title").all_text_contents()
        pytest.fail(f"no Vega chart titled {title!r} drawn; chart titles: {shown}")
    assert charts.count() == 1, f"{charts.count()} Vega charts show a title {title!r}"
    return charts.first


def _view(chart: Locator, title: str | re.Pattern[str]) -> Locator:
    """The view of ``chart`` (a Vega scope: its marks, axes and title) titled ``title``."""
    heading = chart.page.locator("g.role-title, g.role-column-title", has_text=title)
    views = chart.locator("g.role-scope").filter(has=heading)
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
def test_attention_explorer_follows_its_controls(driven, path):
    explorer = ATTENTION_EXPLORERS[path]
    visit = driven(path)
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
def test_attention_explorer_shows_markup_as_text(driven):
    """A token like ``<b>cat</b>`` is text: shown with its brackets, never parsed as HTML."""
    visit = driven(SELF_ATTENTION)
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
    arrows = []
    for d in lines:
        points = [(float(x), float(y)) for x, y in re.findall(r"[ML]([-\d.e]+),([-\d.e]+)", d)]
        if len(points) >= 2 and near(points[0], static) and near(points[-1], context):
            arrows.append(points)
    assert len(arrows) == 1, f"{len(arrows)} lines from {static} to {context}: {lines}"
    return {"static": static, "context": context, "arrow": tuple(arrows[0])}


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
def test_apple_explorer_follows_its_menu(driven):
    visit = driven(SELF_ATTENTION)
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
def test_gradient_explorer_follows_its_slider(driven):
    """Every stop of the r slider draws its curves and its label, with r^T as Python has it."""
    visit = driven(WHY_NOT_RNNS)
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
# Page weight

PAGE_WEIGHT_LIMIT = 2_000_000  # bytes: a page's HTML plus the local images it shows


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


@pytest.mark.browser
@pytest.mark.parametrize("path", PAGES)
def test_page_weight(site, path):
    page = site / path
    html = page.stat().st_size
    images = _local_images(page)
    image_bytes = sum(image.stat().st_size for image in images)
    weight = f"HTML {html:,} B + {len(images)} images {image_bytes:,} B = {html + image_bytes:,} B"
    print(f"{path}: {weight}")
    assert html + image_bytes < PAGE_WEIGHT_LIMIT, f"{path} is too heavy: {weight}"


@pytest.mark.browser
@pytest.mark.parametrize("path", PAGES)
def test_charts_fit_the_text_column(visits, path):
    """A chart wider than the text column is cut off at its right edge (seen twice in
    screenshots: the apple explorer's bars, chapter 5's fourth head and legend)."""
    too_wide = visits(path).page.evaluate(
        """() => [...document.querySelectorAll('.vega-embed')].map(embed => {
            const svg = embed.querySelector('svg');
            const column = embed.closest('.cell_output') || embed.parentElement;
            return {id: embed.id, chart: svg ? svg.getBoundingClientRect().width : 0,
                    column: column.clientWidth};
        }).filter(size => size.chart > size.column + 1)"""
    )
    assert not too_wide, f"{path}: charts wider than the column: {too_wide}"


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
def test_neighbour_explorer_follows_its_menu(driven):
    visit = driven(TEXT_TO_VECTORS)
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
    r"S = (\d+) positions: n = (\d+) real tokens?, \d+ \[PAD\] on the (left|right); "
    r"causal mask (on|off)"
)


def _mask_state(chart: Locator) -> tuple[int, int, str, bool]:
    """(S, n, padding side, causal) as the explorer's title states them."""
    title = " ".join(chart.locator("g.role-title text").all_text_contents())
    state = MASK_STATE.search(title)
    assert state, f"the mask explorer's title does not say what it shows: {title!r}"
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
def test_mask_explorer_follows_its_controls(driven):
    visit = driven(MASKING)
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
def test_real_apple_explorer_follows_its_menu(driven, path):
    visit = driven(path)
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
