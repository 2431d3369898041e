"""Show the package's own code in a chapter, so the code a reader reads is the code the tests run.

A chapter calls ``show(SelfAttention)``. The cell's output is that object's source, read from
the installed package at run time, with the file it comes from named and linked. nbval compares
the output with the committed one, so a shown listing can never drift from the tested code: an
edit to the package fails ``make nbval`` until the chapter is run again.

The link is relative (``../code/transformer_tutorial/model/attention.py#L-264``), so in JupyterLab
it opens the file itself. On the static site, :func:`write_source_pages` (run by the book's Sphinx
extension) writes a highlighted page for every module, with an anchor on every line, and
:func:`site_links` points the chapters' links at those pages.
"""

import html
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

__all__ = ["Source", "show", "site_links", "write_source_pages"]

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # .../code/transformer_tutorial
REPOSITORY_DIR = PACKAGE_DIR.parents[1]  # the book's repository: chapters/, code/, tests/
CHAPTER_TO_REPOSITORY = ".."  # a chapter notebook sits in chapters/, one level down
SITE_PAGE_SUFFIX = ".html"  # attention.py -> attention.py.html on the site


@dataclass(frozen=True)
class Source:
    """One object's source code, where it lives, and how a notebook displays it."""

    name: str  # what the reader knows it by: "SelfAttention", "MultiHeadAttention.forward"
    path: str  # from the repository's root: "code/transformer_tutorial/model/attention.py"
    first_line: int
    code: str

    @property
    def last_line(self) -> int:
        return self.first_line + self.code.count("\n")

    @property
    def caption(self) -> str:
        return f"{self.name}, from {self.path} (lines {self.first_line}-{self.last_line})"

    def __repr__(self) -> str:  # text/plain: what a terminal or a plain-text reader sees
        return f"# {self.caption}\n\n{self.code}"

    def _repr_html_(self) -> str:
        href = f"{CHAPTER_TO_REPOSITORY}/{self.path}#L-{self.first_line}"
        lines = f"lines {self.first_line}&ndash;{self.last_line}"
        code = highlight(self.code, PythonLexer(), HtmlFormatter(nowrap=True))
        return (
            '<div class="tt-source">'
            f'<p class="tt-source-name"><code>{html.escape(self.name)}</code> from '
            f'<a href="{html.escape(href)}">{html.escape(self.path)}</a>, {lines}</p>'
            f'<div class="highlight"><pre>{code}</pre></div></div>'
        )


def show(obj: object) -> Source:
    """The source of a function, class or method of the package, ready to display in a cell."""
    target = inspect.unwrap(obj)
    try:
        file = Path(inspect.getsourcefile(target)).resolve()
        lines, first_line = inspect.getsourcelines(target)
    except (TypeError, OSError) as error:
        raise TypeError(f"show() takes a function, class or method, got {obj!r}") from error
    if PACKAGE_DIR not in file.parents:
        raise ValueError(f"show() shows the book's own code; {target!r} comes from {file}")
    name = getattr(target, "__qualname__", getattr(target, "__name__", repr(target)))
    path = file.relative_to(REPOSITORY_DIR).as_posix()
    return Source(name, path, first_line, "".join(lines).rstrip("\n"))


# ---------------------------------------------------------------------------------------------
# The static site: one highlighted page per module
# ---------------------------------------------------------------------------------------------

_LINK = re.compile(r'href="((?:\.\./)+code/transformer_tutorial/[\w/]+\.py)(#L-\d+)?"')

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{path}</title>
<style>
body {{ margin: 0 auto; max-width: 60rem; padding: 1rem; font-family: system-ui, sans-serif;
  background: #ffffff; color: #1a1a1a; }}
a {{ color: #0b57a4; }}
h1 {{ font-size: 1.25rem; overflow-wrap: anywhere; }}
pre {{ font-size: 0.85rem; line-height: 1.45; overflow-x: auto; }}
a:has(> .linenos) {{ text-decoration: none; }}
:target {{ background: #fff3b0; }}
{light}
.highlight span.linenos {{ color: #595959; background: transparent; user-select: none; }}
@media (prefers-color-scheme: dark) {{
  body {{ background: #14181e; color: #e6e6e6; }}
  a {{ color: #8ab4f8; }}
  :target {{ background: #4a4000; }}
  {dark}
  .highlight span.linenos {{ color: #a0a0a0; background: transparent; }}
}}
</style>
</head>
<body>
<header>
<p><a href="{home}">The Transformer, from first principles</a> &rsaquo; the book's package</p>
<h1><code>{path}</code></h1>
<p>The code the chapters show and the tests check. Each line has an anchor, <code>#L-12</code>.</p>
</header>
<main>
{code}
</main>
</body>
</html>
"""


def _page(path: Path, depth: int) -> str:
    formatter = HtmlFormatter(linenos="inline", lineanchors="L", anchorlinenos=True)
    light = HtmlFormatter(style="default").get_style_defs(".highlight")
    dark = HtmlFormatter(style="github-dark").get_style_defs(".highlight")
    return PAGE.format(
        path=html.escape(path.relative_to(REPOSITORY_DIR).as_posix()),
        home="../" * depth + "index.html",
        light=light,
        dark=dark,
        code=highlight(path.read_text(encoding="utf-8"), PythonLexer(), formatter),
    )


def write_source_pages(site: Path) -> list[Path]:
    """A page ``<site>/code/transformer_tutorial/<module>.py.html`` for every module."""
    written = []
    for module in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = module.relative_to(REPOSITORY_DIR)
        target = Path(site) / relative.with_name(relative.name + SITE_PAGE_SUFFIX)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_page(module, depth=len(relative.parts) - 1), encoding="utf-8")
        written.append(target)
    return written


def site_links(page_html: str) -> str:
    """``page_html`` with links to package files pointed at their pages on the site."""

    def to_page(match: re.Match) -> str:
        return f'href="{match.group(1)}{SITE_PAGE_SUFFIX}{match.group(2) or ""}"'

    return _LINK.sub(to_page, page_html)
