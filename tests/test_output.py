"""A panel's figure carries its description: as plain text, and as the `alt` of the `<img>` that
JupyterLab shows; the image is the same PNG in both forms."""

import base64
import html
import re

import matplotlib
import pytest

from d2lhelpers.core.report import WARNING_ATTRIBUTES, WARNING_STYLE, Table
from d2lhelpers.ui import output

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)


def described_figure():
    figure, ax = plt.subplots(figsize=(2, 2))
    ax.plot([1, 2], [3, 4], label='time "measured" & <ideal>')
    ax.set(title="time per call", xlabel="devices", ylabel="ms")
    ax.legend()
    return figure


def test_the_image_entry_holds_the_png_its_words_and_an_img_with_alt():
    figure = described_figure()
    words = output.figure_text(figure)
    png = output.render_png(figure)
    entry = output.image_output(png, words)
    data = entry["data"]
    assert entry["output_type"] == "display_data"
    assert base64.b64decode(data["image/png"]) == png and data["text/plain"] == words
    (tag,) = re.findall(r"<img [^>]*>", data["text/html"])
    alt = re.search(r'alt="([^"]*)"', tag).group(1)
    assert html.unescape(alt) == words
    assert words.startswith("Figure: time per call, x: devices, y: ms")
    assert "lines: time" in words
    src = re.search(r'src="data:image/png;base64,([^"]+)"', tag).group(1)
    assert base64.b64decode(src) == png


def test_a_finished_runs_figure_goes_out_with_its_alt_text():
    figure = described_figure()
    words = output.figure_text(figure)
    png = output.render_png(figure)
    table = Table("t", ["a"], [[1]])
    image, shown = output.result_outputs(table, png, words)  # a Table has no verdict line
    assert f'alt="{html.escape(words, quote=True)}"' in image["data"]["text/html"]
    assert "<table>" in shown["data"]["text/html"]


@pytest.mark.parametrize("words", ['a "quoted" title', "x < y & z", "it's"])
def test_alt_text_cannot_break_out_of_its_attribute(words):
    tag = output.image_output(b"\x89PNG", words)["data"]["text/html"]
    assert tag.count('"') == 4  # alt="..." and src="...": nothing else unescaped
    assert "<" not in tag[1:] and html.unescape(re.search(r'alt="([^"]*)"', tag).group(1)) == words


def test_warnings_use_jupyterlabs_theme_colour_not_a_fixed_one():
    assert "var(--jp-error-color1" in WARNING_STYLE
    flagged = Table("t", ["a"], [[1]], flags=["a flag"])._repr_html_()
    assert WARNING_ATTRIBUTES in flagged and "#b00020" not in flagged
