"""A Sphinx extension with the built site's fixes, most of them found by the browser check.

Listed in ``_config.yml`` under ``sphinx.extra_extensions``.

1. Sphinx 7.4 writes every inline ``<script>`` twice (sphinx-doc/sphinx#13402, fixed in 8.2),
   so ``const THEBE_JS_URL`` is declared twice and every page logs a SyntaxError.
   The book must stay on Sphinx 7 (Jupyter Book 1.x), so duplicates are dropped here.
2. The Jupyter widgets manager (``embed-amd.js``) loads its icon fonts relative to the *page*
   (``chapters/@jupyter-widgets/html-manager/dist/*.woff2``): six 404s on every page with
   widget state (jupyter-widgets/ipywidgets#3658). On a page that loads the manager, a RequireJS
   ``paths`` entry, set before RequireJS loads, points the package at its CDN folder. (myst-nb
   loads the manager on exactly the pages whose notebook has saved widget state; the notebook
   runner saves state only for widget views the site displays, so today no page loads it.)
3. The theme's FontAwesome script watches every DOM change to replace icons. A Vega chart
   inserts thousands of SVG elements when a menu changes, and the watcher made a redraw take
   15-25 s instead of under 1 s on 2 cores. The page's icons are all present at load time,
   so the watcher is switched off (``observeMutations: false``).
4. The text cites author-year, "(Vaswani et al., 2017)", but the bibliography's default style
   labels entries "[VSP+17]". The ``book`` style labels them "Vaswani et al., 2017" too.
5. The repository URL is written once, in ``_config.yml`` (``repository.url``); pages read it as
   the MyST substitution ``{{ repository_url }}`` (the front page's ``git clone``).
6. Markup that axe-core flags, rewritten in each written page (:func:`accessible_markup`):
   a visible label that differs from the ``aria-label`` (the theme's search button, whose text
   "Search Ctrl+K" is not its label "Search"; the colour-mode button, whose icons carry their own
   titles; myst-nb's "Show code cell source" toggles, labelled "Toggle hidden content") and the
   bibliography, a ``role="list"`` whose entries have the deprecated ``doc-biblioentry`` role
   instead of ``listitem``.
7. Tables fit the text column where they can (slightly smaller type and padding); a table that
   still does not fit scrolls inside its own box, never the page (:data:`BOOK_CSS`).
"""

import json
import re
from pathlib import Path

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.application import Sphinx
from sphinx.config import Config

from transformer_tutorial.book.source import site_links, write_source_pages

__all__ = ["BOOK_CSS", "accessible_markup", "setup"]

WIDGET_MANAGER = "/@jupyter-widgets/html-manager@"  # in the URL of embed-amd.js
CSS_FILE = "transformer_tutorial.css"
BOOK_CSS = """\
/* transformer_tutorial.book.sphinx_fixes: tables fit the column where they can; one that does not
   scrolls inside its own box (pydata-sphinx-theme's .pst-scrollable-table-container). */
.bd-article table { font-size: 0.9em; }
.bd-article table th, .bd-article table td { padding: 0.5rem 0.375rem; }
.bd-article .pst-scrollable-table-container { max-width: 100%; overflow-x: auto; }
/* Display math wider than a phone's column (a parameter count, a LayerNorm by hand) scrolls in
   its own box too, instead of running past the column's edge. */
.bd-article div.math { max-width: 100%; overflow-x: auto; overflow-y: hidden; }
/* The theme gives outputs a light box in dark mode; the book's charts draw their own dark
   theme (widgets/explorer.js), so theirs stays transparent and keeps the column's width. */
html[data-theme="dark"] .bd-article div.cell_output div.text_html:has(> div.tt-chart) {
  background: transparent; padding: 0; color: var(--pst-color-text-base); }
/* Package source shown by book.source.show(): the theme's code colours, light and dark (myst-nb
   gives dark-mode outputs a light box; the listing keeps the page's background instead). */
.bd-article div.cell_output div.text_html:has(> div.tt-source),
html[data-theme="dark"] .bd-article div.cell_output div.text_html:has(> div.tt-source) {
  background: transparent; padding: 0; color: var(--pst-color-text-base); }
.tt-source-name { font-size: 0.85em; margin: 0 0 0.25rem; }
.tt-source .highlight pre { margin: 0; }
"""

# (what is fixed, pattern, replacement), applied to every page the build writes.
_MARKUP_FIXES = [
    (
        "theme search button: named by its visible text 'Search Ctrl+K'",
        re.compile(r'(<button class="btn search-button-field [^>]*?) aria-label="[^"]*"'),
        r"\1",
    ),
    (
        "theme colour-mode button: its icons are decorative, the button is 'Color mode'",
        re.compile(r'(<i class="theme-switch [^"]*" data-mode="\w+")\s+title="[^"]*"'),
        r'\1 aria-hidden="true"',
    ),
    (
        "myst-nb toggles: named by their visible text 'Show code cell source'",
        re.compile(r'<summary aria-label="Toggle hidden content">'),
        "<summary>",
    ),
    (
        "bibliography entries: items of their role='list'",
        re.compile(r'(<div class="citation" id="[^"]*") role="doc-biblioentry"'),
        r'\1 role="listitem"',
    ),
]


def accessible_markup(html: str) -> str:
    """``html`` with the theme's and myst-nb's markup that axe-core flags rewritten (fix 6)."""
    for _, pattern, replacement in _MARKUP_FIXES:
        html = pattern.sub(replacement, html)
    return html


def _drop_duplicate_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, unique = set(), []
    for script in scripts:
        key = (
            script.filename or "",
            script.priority,
            tuple(sorted((name, str(value)) for name, value in script.attributes.items())),
        )
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def _widget_fonts_from_the_cdn(app: Sphinx, pagename, templatename, context, doctree) -> None:
    for script in context.get("script_files", []):
        url = script.filename or ""
        if WIDGET_MANAGER in url:
            config = {"paths": {"@jupyter-widgets/html-manager": url.split("/dist/", 1)[0]}}
            # RequireJS reads a global `require` object as its configuration when it loads;
            # priority 199 puts this before require.js (myst-nb adds it with priority 200+).
            # Called during html-page-context, add_js_file adds to this page only.
            app.add_js_file(None, body=f"var require = {json.dumps(config)};", priority=199)
            return


def _repository_url_substitution(app: Sphinx, config: Config) -> None:
    url = config.html_theme_options.get("repository_url")
    if url:
        config.myst_substitutions = {**config.myst_substitutions, "repository_url": url}


def _add_stylesheet(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / CSS_FILE).write_text(BOOK_CSS)  # Sphinx copies static files without clearing
    app.add_css_file(CSS_FILE)


def _fix_written_pages(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    write_source_pages(Path(app.outdir))
    for path in Path(app.outdir).rglob("*.html"):  # idempotent: a fixed page stays as it is
        html = path.read_text(encoding="utf-8")
        if (fixed := site_links(accessible_markup(html))) != html:
            path.write_text(fixed, encoding="utf-8")


class AuthorYearLabels(BaseLabelStyle):
    """Labels as the text cites: "Okabe and Ito, 2008", "Vaswani et al., 2017"."""

    def format_labels(self, sorted_entries):
        for entry in sorted_entries:
            names = [person.last_names[0] for person in entry.persons.get("author", [])]
            if len(names) > 2:
                authors = f"{names[0]} et al."
            else:
                authors = " and ".join(names) or entry.fields.get("title", entry.key)
            yield f"{authors}, {entry.fields.get('year', 'n.d.')}".replace("{", "").replace("}", "")


class BookStyle(UnsrtStyle):
    default_label_style = AuthorYearLabels
    default_sorting_style = "author_year_title"


def setup(app: Sphinx) -> dict:
    register_plugin("pybtex.style.formatting", "book", BookStyle)
    app.setup_extension("myst_nb")  # for its configuration values (myst_substitutions)
    app.add_js_file(None, body="window.FontAwesomeConfig = {observeMutations: false};", priority=1)
    app.connect("config-inited", _repository_url_substitution)
    app.connect("builder-inited", _add_stylesheet)
    app.connect("html-page-context", _widget_fonts_from_the_cdn, priority=900)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=901)
    app.connect("build-finished", _fix_written_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
