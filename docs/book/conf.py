"""Sphinx configuration of the book (`make book`; docs/book/build.py passes `-c docs/book`).

The notebooks arrive already executed by build.py (MyST-NB executes nothing). Everything the pages
load is local: the theme's own assets, and MathJax from the `sphinx-mathjax-offline` package.
"""

project = "Multi-device parallelism, measured"
author = "d2lhelpers"
copyright = "d2lhelpers authors"

extensions = ["myst_nb", "sphinx-mathjax-offline"]  # the second puts MathJax in _static/mathjax
nb_execution_mode = "off"  # build.py has run every notebook, with the static-panel hook
nb_ipywidgets_js = {}  # no widget JavaScript from a CDN: build.py drops widget views
nb_merge_streams = True  # one block per cell for printed text, not one per print
myst_enable_extensions = ["colon_fence", "dollarmath", "amsmath"]
exclude_patterns = ["**/.ipynb_checkpoints", "_generated/*.json"]
suppress_warnings = ["mystnb.unknown_mime_type"]

html_theme = "sphinx_book_theme"
html_title = "Multi-device parallelism, measured"
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_show_sourcelink = False
html_theme_options = {
    "use_download_button": True,  # the executed .ipynb, downloaded from this site
    "use_fullscreen_button": False,
    "show_toc_level": 2,
    "navigation_with_keys": False,
}
# Light or dark as the reader's system prefers (the theme's toggle still switches); without it
# a first visit logs "invalid theme mode" to the console.
html_context = {"default_mode": "auto"}
