"""Notebook 01's panel: one chain per device on 1..N devices at once, and its plot."""

from __future__ import annotations

from collections.abc import Callable

import matplotlib.pyplot as plt

from d2lhelpers import workloads
from d2lhelpers.core.counts import chain_bytes
from d2lhelpers.core.units import cores_phrase, plural, usable_cores
from d2lhelpers.devices import on_gpu, setup_devices
from d2lhelpers.lessons.l01_two_devices.concurrency import (
    ConcurrencyResult,
    estimate_seconds,
    run_concurrency,
)
from d2lhelpers.timing.peaks import device_peak_rate
from d2lhelpers.ui.panel import Panel, largest_size_that_fits, slider


def plot_concurrency(result: ConcurrencyResult):
    """Time and speedup against the number of devices running at once, each with its ideal."""
    ks = result.device_counts
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    left.plot(ks, [t * 1e3 for t in result.times], "o-", ms=7, label="measured", zorder=3)
    left.axhline(result.times[0] * 1e3, ls="--", c="gray", label="ideal: same as one device")
    right.plot(ks, result.speedups, "o-", ms=7, label="measured", zorder=3)
    right.plot(ks, ks, "--", c="gray", label="ideal: one more device, one more chain")
    if result.kind == "logical CPU":
        left.plot(
            ks,
            [m * result.times[0] * 1e3 for m in result.model],
            ":",
            c="tab:red",
            label=f"model: max(1, k/{result.cores})",
        )
        right.plot(
            ks,
            [min(k, result.cores) for k in ks],
            ":",
            c="tab:red",
            label=f"model: min(k, {result.cores}), {cores_phrase(result.cores)}",
        )
    left.set(xlabel="devices running one chain each", ylabel="time (ms)")
    left.set_ylim(0, max(result.times) * 1e3 * 1.15)
    title = f"{plural(result.n_matmuls, 'matmul')} of {result.size}x{result.size} per device"
    left.set_title(title, fontsize=10)
    right.set(xlabel="devices", ylabel="work per second vs one device")
    right.set_ylim(0, max(ks[-1], max(result.speedups)) * 1.15)
    right.set_title("speedup", fontsize=10)
    for ax in (left, right):
        ax.set_xticks(ks)
        ax.set_xlim(0.5, ks[-1] + 0.5)  # one device: its point sits in the middle, not on an edge
        # Below the axes, never over a measured point.
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    fig.suptitle(f"{result.kind} devices", fontsize=10)
    fig.tight_layout()
    return fig


def concurrency_panel(
    chains_in_one_graph: Callable = workloads.chains_in_one_graph,
    random_matrix: Callable = workloads.random_matrix,
) -> Panel:
    """Notebook 01: one chain per device on 1..N devices at once, time and speedup vs model.

    It runs the `chains_in_one_graph` and `random_matrix` it is given: the notebook passes its
    own, so an edited cell changes what Run runs.
    """
    devices = setup_devices()
    default_size, cap, default_n = (4096, 8192, 50) if on_gpu() else (512, 2048, 20)
    largest = largest_size_that_fits(chain_bytes, devices, cap)
    sliders = {
        "size": slider("matrix size", min(default_size, largest), 64, largest, 64),
        "n_matmuls": slider("matmuls per chain", default_n, 1, 100),
        "max_devices": slider("devices (1 to all set up)", len(devices), 1, len(devices)),
    }
    peak = device_peak_rate(devices[0])

    def experiment(size, n_matmuls, max_devices, progress):
        return run_concurrency(
            size, n_matmuls, max_devices, progress, peak, chains_in_one_graph, random_matrix
        )

    def estimate(size, n_matmuls, max_devices):
        return estimate_seconds(size, n_matmuls, max_devices, peak, usable_cores(), devices[0].kind)

    return Panel(
        "One chain per device, all at once", sliders, experiment, plot_concurrency, estimate
    )
