"""The Sphinx extension's markup fixes, on the markup the theme and myst-nb write.

The snippets below are copied from a built page (pydata-sphinx-theme 0.17, sphinx-book-theme
1.3, myst-nb 1.4, docutils' citations). The built site itself is checked by axe-core in the
browser tests and by ``tests/test_site_links.py``.
"""

from transformer_tutorial.book.sphinx_fixes import accessible_markup

SEARCH = (
    '<button class="btn search-button-field search-button__button pst-js-only" title="Search"'
    ' aria-label="Search" data-bs-placement="bottom" data-bs-toggle="tooltip">'
    ' <span class="search-button__default-text">Search</span>'
)
THEME_SWITCH = (
    '<button class="btn btn-sm nav-link pst-navbar-icon theme-switch-button pst-js-only"'
    ' aria-label="Color mode" data-bs-title="Color mode">\n'
    '  <i class="theme-switch fa-solid fa-sun                fa-lg" data-mode="light"'
    ' title="Light"></i>\n'
    '  <i class="theme-switch fa-solid fa-moon               fa-lg" data-mode="dark"  title="Dark">'
    "</i>\n"
)
TOGGLE = (
    '<details class="admonition hide above-input">\n<summary aria-label="Toggle hidden content">\n'
    '<p class="collapsed admonition-title">Show code cell source</p>\n'
)
BIBLIOGRAPHY = (
    '<div role="list" class="citation-list">\n'
    '<div class="citation" id="id22" role="doc-biblioentry">\n'
    '<span class="label"><span class="fn-bracket">[</span>Vaswani et al., 2017'
)


def test_the_search_button_is_named_by_its_visible_text():
    fixed = accessible_markup(SEARCH)
    assert "aria-label" not in fixed
    assert fixed == SEARCH.replace(' aria-label="Search"', "")


def test_the_colour_mode_icons_are_decorative_and_the_button_keeps_its_name():
    fixed = accessible_markup(THEME_SWITCH)
    assert 'aria-label="Color mode"' in fixed
    assert " title=" not in fixed
    assert fixed.count('aria-hidden="true"') == 2


def test_myst_nb_toggles_are_named_by_their_visible_text():
    fixed = accessible_markup(TOGGLE)
    assert "<summary>\n<p" in fixed and "aria-label" not in fixed


def test_bibliography_entries_are_items_of_their_list():
    fixed = accessible_markup(BIBLIOGRAPHY)
    assert '<div class="citation" id="id22" role="listitem">' in fixed
    assert "doc-biblioentry" not in fixed


def test_fixes_leave_fixed_and_other_markup_alone():
    page = SEARCH + THEME_SWITCH + TOGGLE + BIBLIOGRAPHY
    fixed = accessible_markup(page)
    assert accessible_markup(fixed) == fixed  # build-finished may see a page twice
    other = '<button aria-label="Close" class="btn"><summary aria-label="Other">'
    assert accessible_markup(other) == other
