"""Notebook 02, compute and copy: a worker process computes, this process copies.

In notebook order: the experiment, its result, its plot, its panel.
"""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib.pyplot as plt

from d2lhelpers.compute_copy import compute_copy_experiment
from d2lhelpers.panel import Panel, slider
from d2lhelpers.timeline import plot_timeline


def compute_copy_panel() -> Panel:
    """Notebook 02: compute in a worker process, copy each result here; overlap on or off."""

    sliders = {
        "size": slider("matrix size", 512, 64, 2048, 64),
        "n_matmuls": slider("number of matmuls", 10, 1, 50),
        "overlap": widgets.Checkbox(value=True, description="overlap run and copy"),
    }

    def experiment(size, n_matmuls, overlap, progress):
        result = compute_copy_experiment(size, n_matmuls, overlap, progress, trace_overhead=False)
        print("\n".join(result.lines()))
        return result

    def show(result):
        figure, (bars, gantt) = plt.subplots(
            2, 1, figsize=(10, 6), gridspec_kw={"height_ratios": [1, 1.2]}
        )
        names = ["run", "copy", "one after the other"]
        times = [result.run.median, result.copy.median, result.sequential.median]
        if result.overlapped is not None:
            names.append("overlapped")
            times.append(result.overlapped.median)
        bars.barh(names, [t * 1e3 for t in times], color="tab:blue")
        bars.axvline(result.ideal_sequential * 1e3, c="gray", ls="--", label="ideal: run + copy")
        bars.axvline(
            result.ideal_overlapped * 1e3,
            c="tab:green",
            ls=":",
            label="ideal overlap: max(run, copy)",
        )
        bars.set(xlabel="time (ms)")
        bars.invert_yaxis()
        bars.legend(fontsize=8, loc="lower right")
        plot_timeline(result.rows, f"one traced call ({result.trace_source})", ax=gantt)
        figure.tight_layout()
        return figure

    return Panel("Compute in the worker, copy here", sliders, experiment, show)
