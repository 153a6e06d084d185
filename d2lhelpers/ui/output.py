"""What a finished run shows in a panel: a whole PNG drawn once, the figure in words, and the
output entries (verdict, image, table) that replace a panel's output in one assignment.

The image goes out twice in one entry: as `image/png` with the words as `text/plain` (nbval, a
terminal, a book), and as `text/html`, an `<img>` whose `alt` holds the words. JupyterLab shows
the richest form, the HTML, so a screen reader reads the figure's description, not "image".
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io

import matplotlib.pyplot as plt

from d2lhelpers.core.report import Reported

DPI = 100


def render_png(figure) -> bytes:
    """The figure as complete PNG bytes, drawn once.

    It is taken out of pyplot's registry first, so nothing else (the inline backend's
    `flush_figures`, a `plt.close('all')` in a cell) can draw or close it meanwhile.
    """
    plt.close(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    return buffer.getvalue()


def about(seconds: float) -> str:
    """A duration as a learner plans with it: `under 1 s`, `about 12 s`, `about 3.5 min`."""
    if seconds < 1:
        return "under 1 s"
    if seconds < 90:
        return f"about {seconds:.0f} s"
    return f"about {seconds / 60:.1f} min"


def text_output(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text.rstrip("\n") + "\n"}


def figure_text(figure) -> str:
    """The figure in words (titles, axis labels, legend): its plain-text form and alt text."""
    parts = [figure.get_suptitle()] if hasattr(figure, "get_suptitle") else []
    for axes in figure.axes:
        bits = [axes.get_title() or axes.get_title(loc="left")]
        bits += [
            f"{axis}: {label}"
            for axis, label in (("x", axes.get_xlabel()), ("y", axes.get_ylabel()))
            if label
        ]
        legend = axes.get_legend()
        if legend is not None:
            bits.append("lines: " + ", ".join(t.get_text() for t in legend.get_texts()))
        parts.append(", ".join(b for b in bits if b))
    text = "; ".join(p for p in parts if p) or "a plot"
    return "Figure: " + " ".join(text.split())[:400]


def image_output(png: bytes, text: str = "<figure>") -> dict:
    """A PNG as one output entry: the image, its words as plain text, and both as an `<img>`."""
    encoded = base64.b64encode(png).decode("ascii")
    tag = f'<img alt="{html.escape(text, quote=True)}" src="data:image/png;base64,{encoded}">'
    data = {"image/png": encoded, "text/html": tag, "text/plain": text}
    return {"output_type": "display_data", "data": data, "metadata": {}}


def _html(obj, shown: str = "") -> dict:
    """A result as an HTML table (and text), without the verdict line already shown above it."""
    if isinstance(obj, Reported):
        tables = [
            dataclasses.replace(t, verdicts=[v for v in t.verdicts if v != shown])
            for t in obj.tables()
        ]
        html, text = "\n".join(t._repr_html_() for t in tables), "\n\n".join(map(str, tables))
    else:
        html, text = obj._repr_html_(), str(obj)
    data = {"text/html": html, "text/plain": text}
    return {"output_type": "display_data", "data": data, "metadata": {}}


def result_outputs(result, png: bytes | None, figure_words: str = "<figure>") -> list[dict]:
    """Output-area entries for a finished run: its verdict, its figure, then its table(s).

    The verdict is shown once: a table's copy of the same sentence is left out below it.
    """
    outputs = []
    verdict = str(getattr(result, "verdict", "") or "")
    if verdict:
        outputs.append(text_output(verdict))
    if png is not None:
        outputs.append(image_output(png, figure_words))
    parts = result if isinstance(result, (tuple, list)) else [result]
    outputs += [_html(part, verdict) for part in parts if hasattr(part, "_repr_html_")]
    return outputs
