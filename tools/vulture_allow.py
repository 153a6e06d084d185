"""Names used by frameworks, not by our code: vulture counts them as used (tools/dead_code.py)."""

# ruff: noqa
_ipython_display_  # IPython calls it to display a Panel
_repr_html_  # JupyterLab calls it to render a result as a table
disabled  # ipywidgets trait set on the Run button
