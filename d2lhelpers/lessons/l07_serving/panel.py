"""Notebook 07's panel: one layout under rising offered load, its curve and its heaviest run."""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib.pyplot as plt

from d2lhelpers.devices import on_gpu, setup_devices
from d2lhelpers.lessons.l07_serving.plots import plot_requests
from d2lhelpers.lessons.l07_serving.points import STEP_BUDGET_S, Window
from d2lhelpers.lessons.l07_serving.sweep import plot_latency_throughput, run_load_sweep
from d2lhelpers.serving.config import LAYOUTS, decoder_config
from d2lhelpers.serving.engines import ServingCode
from d2lhelpers.timing.estimate import TRACE_S, measure_seconds
from d2lhelpers.ui.panel import Panel, slider

FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of the highest offered load
PROMPT_LEN, LAYERS, SLOTS_PER_DEVICE = 8, 2, 4
LAUNCH_S = 1e-3  # a small decoding step on a CPU (launch-bound), the estimate's floor
GUESSED_RATE = 20e9  # FLOP/s of a CPU step's arithmetic, for the estimate only


def sweep_seconds(layout, n_devices, load_percent, width, n_out, window_ms) -> float:
    """The run's expected time: traces, the step measurements and each load point's window."""
    config = decoder_config(width, LAYERS, PROMPT_LEN, n_out)
    step = LAUNCH_S + SLOTS_PER_DEVICE * n_devices * config.flops_per_token() / GUESSED_RATE
    timing = 2 * measure_seconds(step, budget_s=STEP_BUDGET_S)
    engines = n_devices if layout == "replicas" else 1
    setup = 2 * TRACE_S * (1 + engines) + 2 * timing + 2 * TRACE_S + 2 * STEP_BUDGET_S
    window = Window(measure_s=window_ms / 1e3)
    points = sum(
        window.end_s + window.drain_s * (1.0 if f * load_percent >= 100 else 0.3) for f in FRACTIONS
    )
    return setup + points


def serving_panel(code: ServingCode | None = None, sweep=None) -> Panel:
    """Layout, devices, highest offered load, width, output length, window -> a steady-state sweep
    of that layout with the notebook's functions (`code`); with `sweep` (the notebook's load
    sweep), each run's capacities are read against that sweep's for the same layout."""
    count = len(setup_devices())
    width = 256 if on_gpu() else 64
    sliders = {
        "layout": widgets.Dropdown(options=list(LAYOUTS), value="replicas", description="layout"),
        "n_devices": slider("devices", 2, 2, max(2, count)),
        "load_percent": slider("highest offered load (% of measured capacity)", 150, 50, 300, 10),
        "width": slider("model width", width, 16, 8 * width, 16),
        "n_out": slider("output length (tokens)", 16, 2, 48),
        "window_ms": slider("measured window (ms)", 500, 200, 3000, 100),
    }

    def experiment(layout, n_devices, load_percent, width, n_out, window_ms, progress):
        loads = [load_percent / 100 * f for f in FRACTIONS]
        result = run_load_sweep(
            n_devices,
            [layout],
            loads,
            extend=False,
            n_out=n_out,
            width=width,
            prompt_len=PROMPT_LEN,
            layers=LAYERS,
            slots_per_device=SLOTS_PER_DEVICE,
            window=Window(measure_s=window_ms / 1e3),
            code=code,
            progress=progress,
        )
        result.earlier = sweep
        return result

    def show(result):
        figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
        plot_latency_throughput(result, ax=left)
        heaviest = result.sweeps[0].points[-1]
        plot_requests(heaviest.log, ax=right, window=heaviest.span)
        figure.tight_layout()
        return figure

    return Panel(
        "Serving requests: a layout under a rising load", sliders, experiment, show, sweep_seconds
    )
