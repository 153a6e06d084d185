"""Notebook 02's plot and panel: the times beside both ideals, and the two-process timeline."""

from __future__ import annotations

import ipywidgets as widgets

from d2lhelpers.lessons.l02_compute_copy.experiment import (
    estimate_compute_copy_s,
    run_compute_copy,
)
from d2lhelpers.lessons.l02_compute_copy.result import ComputeCopyResult, plot_compute_copy
from d2lhelpers.ui.panel import Panel, slider

WORK_BOUND = 10  # a call this many times one launch is mostly work: its rate is the work's


def rates_worth_keeping(result: ComputeCopyResult) -> dict:
    """The run's and the copy's rates, each only when its call took `WORK_BOUND` launches or
    more: a launch-bound call's "rate" (a 64² matmul, a 16 KiB copy) is its launch cost, and
    scaled up to the largest sliders it would promise days instead of minutes."""
    launch = result.launch.median
    kept = {}
    if result.run.median >= WORK_BOUND * launch:
        kept["flops_per_s"] = result.run.rate
    if result.copy.median >= WORK_BOUND * launch:
        kept["link_bytes_per_s"] = result.copy_rate
    return kept


def compute_copy_panel(chain_on=None, copy_to=None, run_and_copy=None, shown=None) -> Panel:
    """Notebook 02: the notebook's three functions, computing in a worker process and copying
    each result to a driver; overlap on or off. Each defaults to `processes.compute_copy`'s.
    `shown`: a `run_compute_copy` result of the cells above, shown as the panel's run if it was
    made at the sliders' values (`Panel.show_run`)."""
    functions = {"chain_on": chain_on, "copy_to": copy_to, "run_and_copy": run_and_copy}
    sliders = {
        "size": slider("matrix size", 512, 64, 2048, 64),
        "n_matmuls": slider("number of matmuls", 10, 1, 50),
        "overlap": widgets.Checkbox(value=True, description="overlap run and copy"),
    }
    measured = {}  # the last run's rates make the next estimate better than the guesses

    def experiment(progress, size, n_matmuls, overlap):
        result = run_compute_copy(size, n_matmuls, overlap, progress, **functions)
        measured.update(rates_worth_keeping(result))
        return result

    def estimate(size, n_matmuls, overlap):
        return estimate_compute_copy_s(size, n_matmuls, overlap, **measured)

    panel = Panel(
        "Compute in the worker, copy to the driver",
        sliders,
        experiment,
        plot_compute_copy,
        estimate,
    )
    if shown is not None:
        made = {"size": shown.size, "n_matmuls": shown.n_matmuls, "overlap": shown.overlap}
        if panel.show_run(shown, made):
            measured.update(rates_worth_keeping(shown))
    return panel
