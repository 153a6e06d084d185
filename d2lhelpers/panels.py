"""The notebooks' slider panels: each wires sliders to one experiment and its plot.

The experiments themselves are plain functions in other modules; a panel only chooses slider
ranges that fit this machine (larger defaults on a GPU) and draws the result.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from d2lhelpers.benchmark import compare_to_ideal
from d2lhelpers.devices import cpu, setup_devices
from d2lhelpers.peaks import device_peak_rate
from d2lhelpers.plots import plot_concurrency
from d2lhelpers.timeline import plot_timeline
from d2lhelpers.widgets import Panel, largest_size_that_fits, slider
from d2lhelpers.workloads import chain_bytes, concurrency_sweep, mlp_branch_experiment


def on_gpu() -> bool:
    return setup_devices()[0].kind != "logical CPU"


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


def mlp_panel() -> Panel:
    """Notebook 03: the seed's MLP, branches on one device vs one per device, with its trace."""
    branch_devices = len(setup_devices()) - (1 if setup_devices()[0].name == cpu().name else 0)
    batch, width, hidden = (4096, 4096, 16384) if on_gpu() else (256, 512, 2048)
    sliders = {
        "batch": slider("batch size", batch, 16, 4 * batch, 16),
        "hidden": slider("hidden width", hidden, 128, 4 * hidden, 128),
        "branches": slider("branches (one per device)", min(2, branch_devices), 1, branch_devices),
    }

    def experiment(batch, hidden, branches, progress):
        result = mlp_branch_experiment(batch, width, hidden, branches, progress)
        print(result.one_device)
        print(result.split)
        ideal = result.one_device.median / branches
        print(compare_to_ideal(result.split.median, ideal, "one branch per device vs ideal"))
        return result

    def show(result):
        figure, ax = plt.subplots(figsize=(10, 1.4 + 0.5 * (result.branches + 2)))
        return plot_timeline(result.trace, f"one call, {result.branches} branches", ax=ax)

    return Panel("The seed's two-layer MLP, split into branches", sliders, experiment, show)
