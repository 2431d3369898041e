"""A Sphinx extension with the built site's fixes; the first three were found by the browser check.

Listed in ``_config.yml`` under ``sphinx.extra_extensions``.

1. Sphinx 7.4 writes every inline ``<script>`` twice (sphinx-doc/sphinx#13402, fixed in 8.2),
   so ``const THEBE_JS_URL`` is declared twice and every page logs a SyntaxError.
   The book must stay on Sphinx 7 (Jupyter Book 1.x), so duplicates are dropped here.
2. The Jupyter widgets manager (``embed-amd.js``) loads its icon fonts relative to the *page*
   (``chapters/@jupyter-widgets/html-manager/dist/*.woff2``): six 404s on every page with
   widget state (jupyter-widgets/ipywidgets#3658). A RequireJS ``paths`` entry, set before
   RequireJS loads, points the package at the same CDN folder the script comes from.
3. The theme's FontAwesome script watches every DOM change to replace icons. A Vega chart
   inserts thousands of SVG elements when a menu changes, and the watcher made a redraw take
   15-25 s instead of under 1 s on 2 cores. The page's icons are all present at load time,
   so the watcher is switched off (``observeMutations: false``).
4. The text cites author-year, "(Vaswani et al., 2017)", but the bibliography's default style
   labels entries "[VSP+17]". The ``book`` style labels them "Vaswani et al., 2017" too.
"""

import json

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.application import Sphinx

__all__ = ["setup"]


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


def _widget_fonts_from_the_cdn(app: Sphinx) -> None:
    for url in app.config.nb_ipywidgets_js:
        if "/@jupyter-widgets/html-manager@" in url:
            folder = url.split("/dist/", 1)[0]
            config = {"paths": {"@jupyter-widgets/html-manager": folder}}
            # RequireJS reads a global `require` object as its configuration when it loads;
            # priority 200 puts this before require.js (myst-nb adds it with priority 200+).
            app.add_js_file(None, body=f"var require = {json.dumps(config)};", priority=199)


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
    app.setup_extension("myst_nb")  # for nb_ipywidgets_js
    app.add_js_file(None, body="window.FontAwesomeConfig = {observeMutations: false};", priority=1)
    app.connect("builder-inited", _widget_fonts_from_the_cdn)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
