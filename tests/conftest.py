"""Fixtures of the browser checks (``pytest -m browser``): Chromium, the built site on loopback,
and each page opened once per viewport and shared by the tests that check it.

The tests that share a page leave it as they found it, or say in their docstring what they
change: every control a test moves goes back to where the page opened (the explorers' own
tests check that this gives the first drawing back), and a theme switched to dark is switched
back to light.
"""

from pathlib import Path

import pytest
from site_server import CHROMIUM, DESKTOP, NODE_MODULES, PHONE, SITE, Visit, chromium, open_page
from site_server import serve as serve_directory


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
    with chromium() as opened:
        yield opened


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"{SITE} has no built site: run `make book` first")
    return SITE


@pytest.fixture(scope="session")
def site_url(site):
    with serve_directory(site) as url:
        yield url


def _opener(browser, site_url, site, viewport):
    opened: dict[str, Visit] = {}

    def visit(path: str) -> Visit:
        if path not in opened:
            opened[path] = open_page(browser, site_url, site, path, viewport)
        return opened[path]

    return visit, opened


@pytest.fixture(scope="session")
def visits(browser, site_url, site):
    """Each page at 1280 × 900, opened once and shared by every test of it."""
    visit, opened = _opener(browser, site_url, site, DESKTOP)
    yield visit
    for page in opened.values():
        page.close()


@pytest.fixture(scope="session")
def phone_visits(browser, site_url, site):
    """Each page at a phone's 390 × 844, opened once and shared by every test of it."""
    visit, opened = _opener(browser, site_url, site, PHONE)
    yield visit
    for page in opened.values():
        page.close()


# Lines the browser checks report whether they pass or fail (page weights...), printed at the end.
_REPORT = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def report(request):
    """``report(line)``: print ``line`` in the summary at the end of the run."""
    return request.config.stash.setdefault(_REPORT, []).append


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(_REPORT, [])
    if lines:
        terminalreporter.write_sep("-", "browser check")
        for line in lines:
            terminalreporter.write_line(line)
