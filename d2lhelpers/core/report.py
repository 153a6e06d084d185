"""How every result shows itself: `print(result)` gives text, JupyterLab renders an HTML table.

A result class returns one or more `Table`s from `tables()`; `Reported` turns them into `__str__`
and `_repr_html_`, so a notebook writes `result` (or `print(result)`) and never joins lines.
A table carries its verdicts (computed sentences) and its flags (why a number is not to be trusted)
beside the numbers, so a flagged number is never shown without its flag.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence

# Warning text in JupyterLab's own theme colour, so it follows the light or the dark theme. Of the
# theme's error and warning colours only --jp-error-color1 reaches WCAG AA's 4.5:1 as text in
# both (4.98:1 on the light theme's white, 5.13:1 on the dark theme's #111; the warn colours
# reach 3.8:1 at most on white): the browser test measures it in both themes. The fallback is
# for pages outside JupyterLab (the book, other notebook front ends): 5.6:1 on white.
WARNING_STYLE = "color: var(--jp-error-color1, #c62828)"
WARNING_ATTRIBUTES = f'class="d2l-warning" style="{WARNING_STYLE}"'  # the class: tests find them

CELL = 'style="padding: 0.15em 0.75em; text-align: left; white-space: nowrap"'


@dataclasses.dataclass
class Table:
    """Named columns of rows, then verdict lines, then flags (shown as warnings)."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence] = ()
    verdicts: Sequence[str] = ()
    flags: Sequence[str] = ()

    def __post_init__(self):
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"{self.title!r}: row {row!r} has not {len(self.columns)} cells")

    def __str__(self) -> str:
        cells = [[str(c) for c in self.columns]] + [[_text(c) for c in r] for r in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [self.title] if self.title else []
        if self.rows:
            for n, row in enumerate(cells):
                lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
                if n == 0:
                    lines.append("  ".join("-" * w for w in widths))
        lines += list(self.verdicts)
        lines += [f"WARNING: {flag}" for flag in self.flags]
        return "\n".join(line.rstrip() for line in lines)

    def _repr_html_(self) -> str:
        parts = [f"<p><b>{html.escape(self.title)}</b></p>"] if self.title else []
        if self.rows:
            # Cells padded and on lines of their own: columns never run together, in JupyterLab,
            # in the book, or when a page is read as text.
            head = "\n".join(f"<th {CELL}>{html.escape(str(c))}</th>" for c in self.columns)
            body = "\n".join(
                "<tr>\n"
                + "\n".join(f"<td {CELL}>{html.escape(_text(c))}</td>" for c in row)
                + "\n</tr>"
                for row in self.rows
            )
            parts.append(
                f"<table>\n<thead><tr>\n{head}\n</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"
            )
        parts += [f"<p>{html.escape(v)}</p>" for v in self.verdicts]
        parts += [
            f"<p {WARNING_ATTRIBUTES}><b>WARNING:</b> {html.escape(flag)}</p>"
            for flag in self.flags
        ]
        return "\n".join(parts)


def _text(cell) -> str:
    if isinstance(cell, float):
        return f"{cell:.3g}"
    return str(cell)


class Reported:
    """Mixin: define `tables()`; get `print(result)` and an HTML table in JupyterLab.

    A result's repr is its tables too: a dataclass would otherwise add a repr of its fields,
    which IPython's plain-text display (a console, nbconvert, nbval) prefers to `_repr_pretty_`.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__repr__" not in cls.__dict__:  # set before @dataclass runs, which then keeps it
            cls.__repr__ = Reported.__repr__

    def tables(self) -> list[Table]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return "\n\n".join(str(t) for t in self.tables())

    def _repr_html_(self) -> str:
        return "\n".join(t._repr_html_() for t in self.tables())

    def _repr_pretty_(self, printer, _cycle) -> None:
        """IPython's plain text (a console, nbval): the tables, not a dataclass's fields."""
        printer.text(str(self))
