import base64
import io
import threading

import ipywidgets as widgets
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from d2lhelpers.core.counts import chain_bytes
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.lessons.l01_two_devices import (
    ConcurrencyResult,
    concurrency_panel,
    plot_concurrency,
)
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.ui import panel as panels

matplotlib.use("Agg")


def output_text(panel) -> str:
    return "".join(o.get("text", "") for o in panel.output.outputs)


class Squares(Reported):
    """A tiny result: a table, a verdict, and a plot with one marker per point."""

    def __init__(self, n):
        self.n = n
        self.verdict = f"{n} squares, none missing"

    def tables(self):
        rows = [[x, x * x] for x in range(self.n)]
        return [Table("squares", ["x", "x^2"], rows, [self.verdict, "another sentence"])]


def draw_squares(result):
    figure, ax = plt.subplots(figsize=(4, 3))
    ax.plot(range(result.n), [x * x for x in range(result.n)], "o-")
    return figure


def squares_panel(experiment=None, estimate=None):
    def default(n, progress):
        progress(1, 1, "squaring")
        return Squares(n)

    sliders = {"n": panels.slider("points", 5, 1, 50)}
    return panels.Panel("squares", sliders, experiment or default, draw_squares, estimate)


def ink(png: bytes) -> float:
    """The fraction of pixels that are not white."""
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    return float((pixels < 250).mean())


def test_panel_runs_with_slider_values_and_reports_progress():
    seen = []

    def experiment(a, b, progress):
        progress(1, 2, "worker 0: step 1/2")
        seen.append(panel.status.value)
        seen.append(panel.button.disabled)
        progress(2, 2)
        return a * b

    sliders = {"a": panels.slider("a", 3, 1, 10), "b": panels.slider("b", 4, 1, 10)}
    panel = panels.Panel("t", sliders, experiment, lambda result: None)
    assert isinstance(panel.widget, widgets.VBox)
    assert sliders["a"].continuous_update is False  # dragging runs nothing
    sliders["b"].value = 5
    panel.button.click()  # a background thread, as in the browser
    panel.wait(10)
    assert panel.result == 15 and seen == ["worker 0: step 1/2", True]
    assert not panel.button.disabled and panel.stop_button.disabled
    assert panel.status in panel.widget.children  # a line of its own under Run
    assert (panel.progress.value, panel.progress.max) == (2, 2)
    assert panel.status.value.startswith("done in")


def test_panel_shows_verdict_then_one_whole_figure_then_the_table():
    plt.close("all")  # figures other tests left open are not this panel's
    panel = squares_panel()
    panel.sliders["n"].value = 30
    assert isinstance(panel.run(), Squares)
    kinds = [o["output_type"] for o in panel.output.outputs]
    assert kinds == ["stream", "display_data", "display_data"]
    verdict, image, table = panel.output.outputs
    assert verdict["text"] == "30 squares, none missing\n"
    png = base64.b64decode(image["data"]["image/png"])
    assert png == panels.render_png(draw_squares(Squares(30)))  # what a headless render gives
    assert ink(png) > 0.02
    assert "<table>" in table["data"]["text/html"]
    everything = "".join(str(o) for o in panel.output.outputs)
    assert everything.count("30 squares, none missing") == 1, "the verdict is shown once"
    assert "another sentence" in table["data"]["text/html"]
    assert not plt.get_fignums(), "a figure was left for the inline backend to draw"
    assert panel.caption.value == "values: points 30"


def test_values_set_runs_a_case_and_puts_the_sliders_back():
    panel = squares_panel()
    panel.sliders["n"].value = 7
    with panel.values_set(n=3):
        assert panel.run().n == 3
    assert panel.values() == {"n": 7}
    with pytest.raises(KeyError, match="has no slider"):
        with panel.values_set(m=2):
            pass
    with pytest.raises(RuntimeError), panel.values_set(n=4):
        raise RuntimeError("a failed Try-it run")
    assert panel.values() == {"n": 7}


def test_render_png_is_a_complete_png_and_closes_the_figure():
    figure = draw_squares(Squares(10))
    png = panels.render_png(figure)
    assert png.startswith(b"\x89PNG") and png.endswith(b"IEND\xaeB`\x82")
    Image.open(io.BytesIO(png)).load()  # raises on a truncated image
    assert figure.number not in plt.get_fignums()


def test_a_run_replaces_the_output_in_one_assignment_and_greys_the_previous_one():
    changes, during = [], []

    def experiment(n, progress):
        during.append((panel.caption.value, panels.GREY in panel.output._dom_classes))
        progress(1, 1)
        return Squares(n)

    panel = squares_panel(experiment)
    panel.run()
    panel.output.observe(lambda change: changes.append(change), names="outputs")
    panel.sliders["n"].value = 7
    panel.run()
    assert len(changes) == 1, "the output was cleared or appended to, not replaced"
    assert during[0] == ("", False)  # nothing shown yet: nothing to grey
    caption, greyed = during[1]
    assert greyed and "previous run (values: points 5)" in caption and "points 7" in caption
    assert panels.GREY not in panel.output._dom_classes
    assert panel.caption.value == "values: points 7"


def test_panel_shows_errors_as_one_line_and_stays_usable():
    def experiment(n, progress):
        progress(1, 2, "half way")
        if n > 5:
            raise ValueError("too big:\n choose at most 5 with the slider 'n'")
        return n

    sliders = {"n": panels.slider("n", 9, 1, 10)}
    panel = panels.Panel("t", sliders, experiment, lambda result: None)
    assert panel.run() is None
    assert isinstance(panel.error, ValueError)
    assert (
        output_text(panel) == "Error: ValueError: too big: choose at most 5 with the slider 'n'\n"
    )
    assert panel.progress.value == 0, "the bar was not reset after the error"
    assert not panel.button.disabled
    sliders["n"].value = 2
    assert panel.run() == 2 and panel.error is None
    assert panel.progress.value == panel.progress.max


def test_stop_ends_a_clicked_run_at_its_next_progress_report():
    started, reports = threading.Event(), []

    def experiment(n, progress):
        for step in range(1000):
            progress(step, 1000, f"step {step}")
            reports.append(step)
            started.set()
            threading.Event().wait(0.01)
        return Squares(n)

    panel = squares_panel()
    panel.run()  # something to keep showing
    shown = panel.output.outputs
    panel.experiment = experiment
    panel.button.click()
    assert started.wait(10)
    assert not panel.stop_button.disabled and panel.button.disabled
    panel.stop_button.click()
    panel.wait(10)
    assert panel.stopped and panel.result is None and panel.error is None
    assert len(reports) < 1000
    assert panel.progress.value == 0 and panel.status.value.startswith("stopped after")
    assert panel.output.outputs == shown
    assert "still showing the previous run (values: points 5)" in panel.caption.value
    assert not panel.button.disabled and panel.stop_button.disabled


def test_run_refuses_while_a_clicked_run_is_going():
    release = threading.Event()

    def experiment(n, progress):
        release.wait(10)
        return Squares(n)

    panel = squares_panel(experiment)
    panel.button.click()
    try:
        with pytest.raises(RuntimeError, match="still running from its Run button"):
            panel.run()
    finally:
        release.set()
        panel.wait(10)
    assert isinstance(panel.result, Squares)


def test_the_clock_moves_while_a_clicked_run_is_silent(monkeypatch):
    monkeypatch.setattr(panels, "HEARTBEAT_S", 0.05)
    ticks = []

    def experiment(n, progress):
        progress(0, 1, "one long step")
        for _ in range(40):
            threading.Event().wait(0.01)
            ticks.append(panel.clock.value)
        return Squares(n)

    panel = squares_panel(experiment, estimate=lambda n: 100.0)
    panel.button.click()
    panel.wait(10)
    assert any("s (expected: about 1.7 min)" in t for t in ticks), ticks
    assert panel.clock.value == "" and panel.status.value.startswith("done in")


def test_only_the_experiments_own_thread_is_stopped():
    """Progress reported from a helper thread (a worker's reader) must not die of Stop."""
    panel = squares_panel()
    panel._stop.set()
    panel._runner = threading.main_thread()
    errors = []

    def reader():
        try:
            panel._progress(1, 2, "worker 0: step 1")
        except panels.Stopped as error:
            errors.append(error)

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join()
    assert not errors and panel.status.value == "worker 0: step 1"
    with pytest.raises(panels.Stopped):
        panel._progress(2, 2, "main")


def test_estimate_is_shown_and_warns_before_a_long_run():
    panel = squares_panel(estimate=lambda n: 2.0 * n)
    assert panel.note.value == "expected to take about 10 s"
    panel.sliders["n"].value = 40
    assert "&#9888;" in panel.note.value and "about 80 s" in panel.note.value
    panel.sliders["n"].value = 50
    assert "1.7 min" in panel.note.value


def test_values_the_estimate_refuses_are_named_before_the_run():
    def estimate(n):
        if n > 20:
            raise ValueError("points: at most 20 fit")
        return 1.0

    panel = squares_panel(estimate=estimate)
    panel.sliders["n"].value = 21
    assert panel.note.value == "These values will be refused: points: at most 20 fit"


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.2, "under 1 s"), (12.4, "about 12 s"), (210, "about 3.5 min")]
)
def test_about_rounds_a_duration_for_planning(seconds, text):
    assert panels.about(seconds) == text


def test_concurrency_panel_end_to_end(devices):
    panel = concurrency_panel()
    assert panel.sliders["max_devices"].max == len(devices)
    assert panel.sliders["size"].value == 512  # CPU defaults
    panel.sliders["size"].value, panel.sliders["n_matmuls"].value = 64, 2
    panel.sliders["max_devices"].value = 2
    panel.run()
    assert panel.error is None, panel.error
    assert panel.result.device_counts == [1, 2]


def test_concurrency_panel_oversize_is_refused_in_the_panel(devices, monkeypatch):
    panel = concurrency_panel()
    monkeypatch.setattr("d2lhelpers.devices._host_available_bytes", lambda: 10 * 2**20)
    panel.sliders["size"].value = 2048
    panel.run()
    assert isinstance(panel.error, ValueError) and "is free" in str(panel.error)


def test_largest_size_that_fits_halves_until_it_fits(devices, monkeypatch):
    monkeypatch.setattr("d2lhelpers.devices._host_available_bytes", lambda: 100 * 2**20)
    # 4 devices x 3 buffers x 4 bytes x size^2 <= 80 MiB  ->  size 1024 is the largest power
    assert panels.largest_size_that_fits(chain_bytes, devices, 8192) == 1024


@pytest.mark.parametrize("kind", ["logical CPU", "GPU"])
def test_plot_concurrency_draws_measured_and_ideal(kind):
    ms = [Measurement(f"{k}", [t] * 3) for k, t in [(1, 1.0), (2, 1.0), (3, 1.5), (4, 2.0)]]
    figure = plot_concurrency(ConcurrencyResult(512, 20, kind, ms))
    left, right = figure.axes
    labels = [line.get_label() for line in left.lines + right.lines]
    assert (
        "ideal: same as one device" in labels and "ideal: one more device, one more chain" in labels
    )
    assert right.lines[0].get_ydata().tolist() == [1.0, 2.0, 2.0, 2.0]
    assert any("CPU cores" in label for label in labels) == (kind == "logical CPU")
