"""Matplotlib figures: every measured curve drawn beside its ideal."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt

from d2lhelpers.workloads import ConcurrencyResult


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
        cores = os.cpu_count() or 1
        for ax in (left, right):
            ax.axvline(cores, c="tab:red", lw=1, ls=":", label=f"{cores} CPU cores")
    for ax in (left, right):
        ax.set_xticks(ks)
        ax.legend(fontsize=8, loc="lower right" if ax is right else "upper left")
    fig.suptitle(f"{result.kind} devices", fontsize=10)
    fig.tight_layout()
    return fig
