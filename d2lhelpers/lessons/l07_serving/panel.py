"""Notebook 07's panel: a layout under a rising load, its latency-throughput curve and requests."""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib.pyplot as plt

from d2lhelpers.devices import on_gpu, setup_devices
from d2lhelpers.lessons.l07_serving.plots import plot_latency_throughput, plot_requests
from d2lhelpers.lessons.l07_serving.runs import SPLIT_LAYOUTS
from d2lhelpers.lessons.l07_serving.sweep import run_load_sweep
from d2lhelpers.ui.panel import Panel, slider


def serving_panel() -> Panel:
    """Layout, devices, offered load, model width, output length -> sweep up to that load."""
    count = len(setup_devices())
    width = 256 if on_gpu() else 64
    sliders = {
        "layout": widgets.ToggleButtons(
            options=list(SPLIT_LAYOUTS), value="replicas", description="layout"
        ),
        "n_devices": slider("devices", 2, 2, max(2, count)),
        "load_percent": slider("highest offered load (% of measured capacity)", 150, 20, 300, 10),
        "width": slider("model width", width, 16, 8 * width, 16),
        "n_out": slider("output length (tokens)", 16, 1, 48),
    }

    def experiment(layout, n_devices, load_percent, width, n_out, progress):
        top = load_percent / 100
        loads = [top * f for f in (0.25, 0.5, 0.75, 1.0)]
        return run_load_sweep(
            n_devices, [layout], loads, n_out=n_out, width=width, progress=progress
        )

    def show(sweep):
        figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
        plot_latency_throughput(sweep, ax=left)
        plot_requests(sweep.sweeps[0].runs[-1], ax=right)
        figure.tight_layout()
        return figure

    def estimate(layout, n_devices, load_percent, width, n_out):
        # each run serves 16 requests of 8 + n_out - 1 steps; ~0.5 ms a step at width 64 on a CPU
        steps = 4 * 16 * (8 + n_out - 1) / max(1, 4 * n_devices) * (width / 64) ** 2
        return 5 + steps * 0.5e-3 / max(0.2, min(1.0, load_percent / 100))

    return Panel(
        "Serving requests: a layout under a rising load", sliders, experiment, show, estimate
    )
