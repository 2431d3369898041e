"""Tests for book/source.py: the listings the chapters show are the package's code, linked."""

import inspect
import json
import math
from pathlib import Path

import pytest

from transformer_tutorial.book.source import (
    PACKAGE_DIR,
    REPOSITORY_DIR,
    Source,
    show,
    site_links,
    write_source_pages,
)
from transformer_tutorial.model.attention import softmax
from transformer_tutorial.model.multi_head import MultiHeadAttention

CHAPTERS = REPOSITORY_DIR / "chapters"


@pytest.mark.parametrize("obj", [softmax, MultiHeadAttention, MultiHeadAttention.forward])
def test_show_gives_the_code_where_it_is_in_its_file(obj):
    source = show(obj)
    lines = (REPOSITORY_DIR / source.path).read_text().splitlines()
    shown = source.code.splitlines()
    assert lines[source.first_line - 1 : source.last_line] == shown
    assert source.code == inspect.getsource(obj).rstrip("\n")
    assert source.name == obj.__qualname__


def test_show_names_the_file_from_the_repository_root():
    source = show(MultiHeadAttention.forward)
    assert source.path == "code/transformer_tutorial/model/multi_head.py"
    assert repr(source).startswith("# MultiHeadAttention.forward, from " + source.path)


def test_the_link_works_from_a_chapter_notebook():
    html = show(softmax)._repr_html_()
    href = html.split('href="', 1)[1].split('"', 1)[0]
    path, anchor = href.split("#")
    assert (CHAPTERS / path).resolve() == (REPOSITORY_DIR / show(softmax).path).resolve()
    assert anchor == f"L-{show(softmax).first_line}"


def test_the_listing_is_escaped_html():
    source = Source("a<b", "code/transformer_tutorial/x.py", 1, 'x = "<script>&"')
    html = source._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html and "<code>a&lt;b</code>" in html


@pytest.mark.parametrize("obj", [3, "softmax", None])
def test_show_refuses_what_has_no_source(obj):
    with pytest.raises(TypeError, match="function, class or method"):
        show(obj)


@pytest.mark.parametrize("obj", [json.dumps, Path])
def test_show_refuses_code_from_outside_the_package(obj):
    with pytest.raises(ValueError, match="the book's own code"):
        show(obj)


def test_builtins_are_refused_too():
    with pytest.raises(TypeError):
        show(math.sqrt)


def test_every_module_gets_a_page_with_an_anchor_on_every_line(tmp_path):
    pages = write_source_pages(tmp_path)
    modules = sorted(PACKAGE_DIR.rglob("*.py"))
    assert len(pages) == len(modules)
    page = tmp_path / "code/transformer_tutorial/model/attention.py.html"
    assert page in pages
    text = page.read_text()
    count = len((PACKAGE_DIR / "model/attention.py").read_text().splitlines())
    assert f'id="L-{count}"' in text and f'id="L-{count + 1}"' not in text
    assert '<a href="../../../index.html">' in text  # back to the book from three levels down


def test_site_links_point_at_the_pages():
    html = '<a href="../code/transformer_tutorial/model/attention.py#L-38">x</a>'
    assert site_links(html) == (
        '<a href="../code/transformer_tutorial/model/attention.py.html#L-38">x</a>'
    )
    assert site_links(site_links(html)) == site_links(html)  # a fixed page stays as it is
    other = '<a href="https://example.org/x.py">y</a>'
    assert site_links(other) == other
