"""No dead ends on the built site: every internal link and anchor leads somewhere.

The tests marked ``site`` read ``_build/html`` (``make links`` runs them after ``make book``;
``make unit`` leaves them out). They parse every HTML file with the standard library and check
that every internal ``href``/``src`` (relative or root-relative; also a ``<meta>`` refresh)
names a file of the site, and that every ``#anchor`` names an ``id`` (or ``name``) on the page
it points to. External links are listed in ``_build/external-links.txt``, never fetched.
They also check that a page loads the Jupyter widget manager (about 4.5 MB with RequireJS) only
when it displays a widget. The checker itself is tested on a small site written by the tests.
"""

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

SITE = Path(__file__).resolve().parents[1] / "_build" / "html"
EXTERNAL_LINKS = SITE.parent / "external-links.txt"  # listed for a reader of the build, not fetched
LINK_ATTRIBUTES = ("href", "src", "action", "data", "poster")
WIDGET_MANAGER = "/@jupyter-widgets/html-manager@"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@dataclass
class Link:
    tag: str
    url: str

    def __str__(self) -> str:
        return f"<{self.tag} {self.url!r}>"


class ParsedPage(HTMLParser):
    """The anchors a page offers and the links it makes (attributes only, not script text)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: set[str] = set()
        self.links: list[Link] = []
        self.scripts: list[dict[str, str]] = []  # the attributes of each <script>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        self.anchors.update(values[name] for name in ("id", "name") if values.get(name))
        self.links += [Link(tag, values[name]) for name in LINK_ATTRIBUTES if name in values]
        self.links += [
            Link(tag, candidate.split()[0])
            for candidate in values.get("srcset", "").split(",")
            if candidate.strip()
        ]
        refresh = re.search(r"url=(\S+)", values.get("content", ""), re.IGNORECASE)
        if tag == "meta" and values.get("http-equiv", "").lower() == "refresh" and refresh:
            self.links.append(Link(tag, refresh[1].strip("'\"")))
        if tag == "script":
            self.scripts.append(values)


def parse(path: Path) -> ParsedPage:
    page = ParsedPage()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


@dataclass
class LinkReport:
    problems: list[str]  # "<page>: <link>: what is wrong"
    external: dict[str, set[str]]  # URL -> pages linking to it


def site_pages(root: Path) -> list[Path]:
    """The HTML pages under ``root``; ``_static`` holds the themes' Jinja templates, not pages."""
    return sorted(
        path for path in root.rglob("*.html") if "_static" not in path.relative_to(root).parts
    )


def check_links(root: Path) -> LinkReport:
    """Check every internal link of every page under ``root``."""
    root = root.resolve()
    pages = {path: parse(path) for path in site_pages(root)}
    report = LinkReport([], {})
    for path, page in pages.items():
        name = path.relative_to(root).as_posix()
        for link in page.links:
            url = urlsplit(link.url.strip())
            if url.scheme in ("javascript", "data", "blob", "about"):
                continue
            if url.scheme or url.netloc:
                report.external.setdefault(link.url, set()).add(name)
                continue
            if not url.path:
                target = path
            elif url.path.startswith("/"):
                target = root / unquote(url.path).lstrip("/")
            else:
                target = path.parent / unquote(url.path)
            target = target.resolve()
            if target.is_dir():
                target = target / "index.html"
            if target != root and root not in target.parents:
                report.problems.append(f"{name}: {link}: leads outside the site")
            elif not target.is_file():
                report.problems.append(f"{name}: {link}: no file {_relative(target, root)}")
            elif url.fragment and target.suffix == ".html":
                anchors = pages[target].anchors if target in pages else parse(target).anchors
                if unquote(url.fragment) not in anchors:
                    where = _relative(target, root)
                    report.problems.append(f"{name}: {link}: no id {url.fragment!r} in {where}")
    return report


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if root in path.parents else str(path)


# ---------------------------------------------------------------------------------------------
# The built site


@pytest.fixture(scope="module")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"{SITE} has no built site: run `make book` first")
    return SITE


@pytest.mark.site
def test_every_internal_link_and_anchor_of_the_site_exists(site):
    report = check_links(site)
    listing = [
        f"{url}  ({len(pages)} pages, e.g. {min(pages)})" for url, pages in report.external.items()
    ]
    EXTERNAL_LINKS.write_text("".join(f"{line}\n" for line in sorted(listing)))
    assert report.problems == []


@pytest.mark.site
def test_every_chapter_page_is_checked(site):
    pages = {path.relative_to(site).as_posix() for path in site_pages(site)}
    chapters = Path(__file__).resolve().parents[1] / "chapters"
    expected = {f"chapters/{path.stem}.html" for path in chapters.glob("*.ipynb")}
    assert expected <= pages


@pytest.mark.site
def test_external_links_are_https(site):
    insecure = [url for url in check_links(site).external if url.startswith("http://")]
    assert insecure == []


@pytest.mark.site
def test_pages_load_the_widget_manager_only_to_show_widgets(site):
    """myst-nb loads it on every page whose notebook saved widget state; the notebook runner
    saves state only for displayed widget views (run `make notebooks` if this fails)."""
    wrong = []
    for path in site_pages(site):
        scripts = parse(path).scripts
        loads_manager = any(WIDGET_MANAGER in script.get("src", "") for script in scripts)
        has_state = any(script.get("type") == WIDGET_STATE for script in scripts)
        shows_widget = any(script.get("type") == WIDGET_VIEW for script in scripts)
        if (loads_manager, has_state) != (shows_widget, shows_widget):
            wrong.append(
                f"{path.relative_to(site)}: manager {loads_manager}, state {has_state},"
                f" widget shown {shows_widget}"
            )
    assert wrong == []


# ---------------------------------------------------------------------------------------------
# The checker, on a small site


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_checker_passes_a_site_whose_links_all_lead_somewhere(tmp_path):
    root = _write(
        tmp_path,
        {
            "index.html": '<meta http-equiv="refresh" content="0; url=docs/a.html">',
            "docs/a.html": """<h1 id="top">A</h1>
                <a href="#top">same page</a> <a href="#">top</a>
                <a href="b.html#part%20two">other page</a> <a href="/docs/b.html?v=1">root</a>
                <a href="../docs/">folder</a> <img src="../img/x.png" srcset="../img/x.png 2x">
                <script src="https://cdn.example.org/lib.js"></script>
                <a href="mailto:someone@example.org">mail</a> <a href="javascript:void(0)">js</a>
                <script>const html = '<a href="missing.html">';</script>""",
            "docs/b.html": '<h2 id="part two">B</h2><a name="old">',
            "docs/index.html": '<a href="b.html#old">named anchor</a>',
            "img/x.png": "",
            "_static/template.html": '<link href="{{ pathto(x) }}">',  # a theme's, not a page
        },
    )
    report = check_links(root)
    assert report.problems == []
    assert set(report.external) == {"https://cdn.example.org/lib.js", "mailto:someone@example.org"}


def test_the_checker_finds_missing_files_missing_anchors_and_links_out_of_the_site(tmp_path):
    root = _write(
        tmp_path,
        {
            "index.html": """<a href="#nowhere">a</a> <a href="gone.html">b</a>
                <a href="page.html#lost">c</a> <link rel="stylesheet" href="/static/x.css">
                <a href="../outside.html">d</a> <img src="page.html#fine" alt="">""",
            "page.html": '<p id="here">',
        },
    )
    assert check_links(root).problems == [
        "index.html: <a '#nowhere'>: no id 'nowhere' in index.html",
        "index.html: <a 'gone.html'>: no file gone.html",
        "index.html: <a 'page.html#lost'>: no id 'lost' in page.html",
        "index.html: <link '/static/x.css'>: no file static/x.css",
        "index.html: <a '../outside.html'>: leads outside the site",
        "index.html: <img 'page.html#fine'>: no id 'fine' in page.html",
    ]
