"""Notebook 03, the seed's MLP across devices: branches the scheduler runs at once.

In notebook order: the experiment, its result, its plot, its panel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import matplotlib.pyplot as plt
import tensorflow as tf

from d2lhelpers.benchmark import Measurement, compare_to_ideal, measure
from d2lhelpers.devices import check_fits, cpu, on_gpu, setup_devices
from d2lhelpers.panel import Panel, slider
from d2lhelpers.peaks import device_peak_rate
from d2lhelpers.timeline import plot_timeline, trace
from d2lhelpers.units import BYTES_PER_FLOAT
from d2lhelpers.workloads import branch_weights, mlp_branches_in_one_graph


@dataclasses.dataclass
class BranchResult:
    """The branched MLP on one device and with one branch per device, and the split run's trace."""

    branches: int
    one_device: Measurement
    split: Measurement
    trace: list  # timeline.OpEvent rows of one split call

    @property
    def speedup(self) -> float:
        return self.one_device.median / self.split.median


def mlp_branch_experiment(
    batch: int,
    width: int,
    hidden: int,
    branches: int,
    progress: Callable[[int, int], None] | None = None,
    **measure_options,
) -> BranchResult:
    """Time the seed's MLP with its branches all on one device, then one per device; trace it.

    The join runs on the CPU (`d2l.cpu()`); the branches on the other set-up devices.
    """
    join = cpu()
    others = [d for d in setup_devices() if d.name != join.name]
    if not 1 <= branches <= len(others):
        raise ValueError(
            f"{branches} branches asked for, but only {len(others)} devices are free "
            f"besides the CPU that joins them: choose 1 to {len(others)}"
        )
    devices = others[:branches]
    floats = batch * width + width * hidden * 2 + batch * hidden + batch * width
    check_fits(
        floats * BYTES_PER_FLOAT, devices, f"a {batch}x{width} MLP with {hidden} hidden units"
    )
    x = tf.random.stateless_normal((batch, width), seed=(0, 1))
    weights = branch_weights(width, hidden, branches)
    flops = 4 * batch * width * hidden
    together = mlp_branches_in_one_graph([devices[0]] * branches, join, one_at_a_time=True)
    split = mlp_branches_in_one_graph(devices, join)
    peak = device_peak_rate(devices[0])
    one = measure(
        lambda: together(x, weights),
        "all branches on one device, one after another",
        flops=flops,
        peak=peak,
        **measure_options,
    )
    if progress:
        progress(1, 3)
    apart = measure(
        lambda: split(x, weights),
        f"one branch per device ({branches})",
        flops=flops,
        peak=branches * peak,
        **measure_options,
    )
    if progress:
        progress(2, 3)
    rows = trace(split, x, weights)
    if progress:
        progress(3, 3)
    return BranchResult(branches, one, apart, rows)


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
