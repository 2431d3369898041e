"""The built site as a reader sees it: headless Chromium opens each page of ``_build/html``.

Run after ``make book`` (``make browser`` runs ``pytest -m browser``). The site is served on
127.0.0.1 from a thread of this test session. The pages load MathJax, RequireJS, the Jupyter
widgets manager and Vega from CDNs, which the test machines cannot reach: every CDN request is
answered from the npm packages pinned in ``tests/browser/package.json`` (``npm ci --prefix
tests/browser``), so the browser runs the same files a reader's browser fetches. A CDN request
with no local copy fails the test with its URL; any other off-host request is logged and
aborted.

Each page must load without console errors or failed requests, render all its math with
MathJax, load every image, and (chapter pages) draw the interactive Vega explorer, which must
redraw when its controls change. Screenshots go to ``_build/screenshots/``.
"""

import base64
import hashlib
import json
import mimetypes
import re
import threading
import time
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from functools import cache, partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

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
    "chapters/03_positional_encoding.html": True,
    "chapters/04_self_attention.html": True,
    "chapters/05_multi_head_attention.html": True,
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
    control = chart.locator(".vega-bindings .vega-bind").filter(has_text=name).locator(kind)
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
