"""Notebook 01, two devices, two jobs: independent chains on several devices at once.

In notebook order: the experiment, its result, its plot, its panel.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from d2lhelpers.devices import on_gpu, setup_devices
from d2lhelpers.panel import Panel, largest_size_that_fits, slider
from d2lhelpers.peaks import device_peak_rate
from d2lhelpers.units import usable_cores
from d2lhelpers.workloads import ConcurrencyResult, chain_bytes, concurrency_sweep


def plot_concurrency(result: ConcurrencyResult):
    """Time and speedup against the number of devices running at once, each with its ideal."""
    ks = result.device_counts
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(ks, [t * 1e3 for t in result.times], "o-", label="measured")
    left.axhline(result.times[0] * 1e3, ls="--", c="gray", label="ideal: same as one device")
    left.set(xlabel="devices running one chain each", ylabel="time (ms)", ylim=(0, None))
    left.set_title(f"{result.n_matmuls} matmuls of {result.size}x{result.size} per device")
    right.plot(ks, result.speedups, "o-", label="measured")
    right.plot(ks, ks, "--", c="gray", label="ideal: one more device, one more chain")
    right.set(xlabel="devices", ylabel="work per second vs one device", ylim=(0, None))
    right.set_title("speedup")
    if result.kind == "logical CPU":
        cores = usable_cores()
        for ax in (left, right):
            ax.axvline(cores, c="tab:red", lw=1, ls=":", label=f"{cores} CPU cores")
    for ax in (left, right):
        ax.set_xticks(ks)
        ax.legend(fontsize=8, loc="lower right" if ax is right else "upper left")
    fig.suptitle(f"{result.kind} devices", fontsize=10)
    fig.tight_layout()
    return fig


def concurrency_panel() -> Panel:
    """Notebook 01: one chain per device on 1..N devices at once, time and speedup vs ideal."""
    devices = setup_devices()
    default_size, cap, default_n = (4096, 8192, 50) if on_gpu() else (512, 2048, 20)
    sliders = {
        "size": slider(
            "matrix size", default_size, 64, largest_size_that_fits(chain_bytes, devices, cap), 64
        ),
        "n_matmuls": slider("matmuls per chain", default_n, 1, 100),
        "max_devices": slider("devices (1 to all set up)", len(devices), 1, len(devices)),
    }
    peak = device_peak_rate(devices[0])

    def experiment(size, n_matmuls, max_devices, progress):
        result = concurrency_sweep(size, n_matmuls, max_devices, progress, device_peak=peak)
        print(result.table())
        for m in result.measurements:
            for warning in m.warnings:
                print(f"WARNING ({m.label}): {warning}")
        return result

    return Panel("One chain per device, all at once", sliders, experiment, plot_concurrency)
