import ipywidgets as widgets
import matplotlib
import pytest

from d2lhelpers import panel as panels
from d2lhelpers.lessons.l01_two_devices import concurrency_panel, plot_concurrency
from d2lhelpers.workloads import ConcurrencyResult, Measurement, chain_bytes

matplotlib.use("Agg")


def output_text(panel) -> str:
    return "".join(o.get("text", "") for o in panel.output.outputs)


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
    panel.button.click()
    assert panel.result == 15 and seen == ["worker 0: step 1/2", True]
    assert not panel.button.disabled
    assert panel.status in panel.widget.children[-2].children  # shown beside Run
    assert (panel.progress.value, panel.progress.max) == (2, 2)


def test_panel_shows_errors_in_its_output_and_stays_usable():
    def experiment(n, progress):
        if n > 5:
            raise ValueError("too big")
        return n

    sliders = {"n": panels.slider("n", 9, 1, 10)}
    panel = panels.Panel("t", sliders, experiment, lambda result: None)
    assert panel.run() is None
    assert isinstance(panel.error, ValueError)
    assert not panel.button.disabled
    sliders["n"].value = 2
    assert panel.run() == 2 and panel.error is None


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
