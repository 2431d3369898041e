"""Serving a built site to headless Chromium as a reader's browser would load it.

Used by the browser checks (``tests/test_site_*.py`` through ``tests/conftest.py``). A
directory (``_build/html``, or a page a test writes) is served on 127.0.0.1 from a thread of the
test session. Pages load MathJax, RequireJS, the Jupyter widgets manager, Vega and (on a click in
a "type any sentence" box) ONNX Runtime Web from CDNs, which the test machines cannot reach:
every CDN request is answered from the npm packages pinned in ``tests/browser/package.json``
(``npm ci --prefix tests/browser``), so the browser runs the same files a reader's browser
fetches. A CDN request with no local copy is a problem of the visit, naming its URL; any other
off-host request is logged and aborted.

:func:`open_page` opens one page in a fresh browser context and returns a :class:`Visit`: the
page, everything that went wrong loading it, and every byte it transferred.
"""

import base64
import hashlib
import json
import mimetypes
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Request,
    Response,
    Route,
    sync_playwright,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

ROOT = Path(__file__).resolve().parents[1]
# The built site; BOOK_SITE=<directory> checks another build (a copy, a CI artifact).
SITE = Path(os.environ.get("BOOK_SITE", ROOT / "_build" / "html"))
SCREENSHOTS = ROOT / "_build" / "screenshots"
BROWSER_DIR = ROOT / "tests" / "browser"
NODE_MODULES = BROWSER_DIR / "node_modules"
SITE_CHECK_JS = BROWSER_DIR / "site_check.js"  # window.siteCheck: reads and drives the charts
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
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}  # a common phone's CSS pixels (iPhone 12 to 15)

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
    # only after a click in a "type any sentence" box (typed.js): ort.wasm.min.js, then the
    # WebAssembly module and its loader, ort-wasm-simd-threaded.{mjs,wasm}
    "onnxruntime-web": "dist/ort.min.js",
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
CONTENT_TYPES = {
    ".js": "application/javascript",
    ".mjs": "application/javascript",  # a module script must come with a JavaScript type
    ".wasm": "application/wasm",  # WebAssembly.instantiateStreaming insists on it
    ".woff": "font/woff",
    ".woff2": "font/woff2",
}

# Every page of the book (test_every_page_is_checked keeps this list complete), and whether it
# shows math. Each page gets every page check; a new chapter is one more line.
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
    "chapters/appendix_a_math.html": True,
    "chapters/glossary.html": True,
    "chapters/bibliography.html": False,
}

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
CHART_ID = re.compile(r"vega-[0-9a-f]{16}")  # render.py names each chart's element so


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
# The server and the browser


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 from a thread; yields its URL (ending in ``/``)."""
    handler = partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless, driven by Playwright."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


# ---------------------------------------------------------------------------------------------
# One visit of one page


@dataclass
class Visit:
    """One page opened in a fresh browser context, and everything that went wrong loading it."""

    name: str  # the page's file name without .html, plus the viewport when not the desktop's
    path: str  # relative to the served directory
    page: Page
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    unmapped_cdn: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # off-host, not a CDN: aborted, logged
    served: dict[str, str] = field(default_factory=dict)  # CDN URL -> npm file
    transferred: dict[str, int] = field(default_factory=dict)  # URL -> bytes sent to the page
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

    def close(self) -> None:
        print(self.log())
        self.page.context.close()


def open_page(
    browser: Browser,
    base_url: str,
    root: Path,
    path: str,
    viewport: dict[str, int] = DESKTOP,
) -> Visit:
    """Open ``base_url + path`` (a file of ``root``) in a new context and wait for READY."""
    context = browser.new_context(viewport=viewport, service_workers="block")
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(path=SITE_CHECK_JS)
    stem = Path(path).stem + ("" if viewport == DESKTOP else f".{viewport['width']}px")
    visit = Visit(name=stem, path=path, page=context.new_page())
    aborted: set[str] = set()
    http_errors: set[str] = set()

    def off_host(route: Route) -> None:
        url = route.request.url
        file, source = local_file(url)
        if file is not None:
            visit.served[url] = source
            visit.transferred[url] = len(_read(file))
            headers = {"content-type": _content_type(file), "access-control-allow-origin": "*"}
            route.fulfill(status=200, body=_read(file), headers=headers)
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

    context.route(lambda url: not url.startswith(base_url), off_host)
    context.route(lambda url: url.startswith(base_url) and url.endswith(".html"), site_page)

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
        elif answer.url.startswith(base_url):
            file = root / unquote(urlsplit(answer.url).path.removeprefix(urlsplit(base_url).path))
            if file.is_file():  # a redirect (to a directory's index.html) sends no file
                visit.transferred[answer.url] = file.stat().st_size

    page = visit.page
    page.on("console", console)
    page.on("pageerror", lambda error: visit.page_errors.append(str(error)))
    page.on("requestfailed", request_failed)
    page.on("response", response)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        page.goto(base_url + path, wait_until="load")
        _settle(visit)
        page.evaluate("siteCheck.recordFirstDrawings()")
    except Exception:
        context.close()
        raise
    return visit


# What a page must finish before it is checked, as (description, JavaScript condition).
READY = [
    (
        "MathJax finished its first typeset",
        "() => !window.MathJax || !MathJax.startup || !MathJax.startup.promise"
        " || MathJax.startup.promise.then(() => true)",
    ),
    (
        "every chart drew (data-drawn) or showed why it could not",
        "() => siteCheck.allDrawn()",
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
    errors = visit.page.evaluate("siteCheck.chartErrors()")
    visit.not_ready += [f"chart {id_} shows an error: {text}" for id_, text in errors.items()]


# ---------------------------------------------------------------------------------------------
# The theme, as a reader switches it


def set_theme(page: Page, theme: str, timeout_ms: int = 30_000) -> list[str]:
    """Switch the page to the ``light`` or ``dark`` theme with its theme button (pydata-sphinx-
    theme cycles auto, light, dark), or, on a page without one, its ``data-theme``; wait until
    every chart has drawn again (a new Vega view, marked drawn). Returns the ids of the charts
    that did not (all of them on a page without the book's chart loader)."""
    page.evaluate("siteCheck.markViews()")
    button = page.locator(".theme-switch-button:visible").first
    for _ in range(3):
        if page.evaluate("document.documentElement.dataset.theme") == theme:
            break
        if button.count():
            button.click()
        else:
            page.evaluate("theme => { document.documentElement.dataset.theme = theme }", theme)
    page.mouse.move(0, page.viewport_size["height"] - 1)  # no tooltip left on the button
    current = page.evaluate("document.documentElement.dataset.theme")
    assert current == theme, f"the theme button did not give the {theme} theme: {current}"
    try:  # the theme fades its colours in: check them once they are there
        page.wait_for_function(
            "() => document.getAnimations().every(a => a.playState !== 'running')",
            timeout=5_000,
        )
    except PlaywrightTimeoutError:
        pass  # an endless animation: nothing to wait for
    if page.evaluate("!window.transformerTutorial"):
        return page.evaluate("siteCheck.notRedrawn()")
    try:
        page.wait_for_function("() => siteCheck.allRedrawn()", timeout=timeout_ms)
    except PlaywrightTimeoutError:
        pass
    return page.evaluate("siteCheck.notRedrawn()")
