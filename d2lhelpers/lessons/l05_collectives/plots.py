"""Notebook 05's figures: the all-reduces' costs against N, the sweep against the alpha-beta
model, and the panel's predictions beside TensorFlow's own (a run drawn round by round is
`AllreduceStepsResult.plot`, in `collectives.step_plots`)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from d2lhelpers.collectives.algorithms import ALGORITHMS, allreduce_costs
from d2lhelpers.collectives.costs import FIT_METHOD, bus_bandwidth_bound_s
from d2lhelpers.collectives.tf_allreduce import TINY_BYTES
from d2lhelpers.core.checks import require_count, require_sweep
from d2lhelpers.core.units import format_bytes, format_rate, format_seconds

MAX_RANKS = 4096  # the rounds-and-bytes plot's largest N


def plot_rounds_and_bytes(ns=range(2, 65), nbytes: int = 1 << 20, algorithms=("ring", "tree")):
    """Rounds, and bytes in units of the vector's size S, against the number of ranks N.

    Solid: bytes through the busiest link. Dashed: bytes that must cross one after another
    (the alpha-beta model's bandwidth term). They coincide for the ring, not for the tree.
    """
    if hasattr(ns, "__len__") and len(ns) > MAX_RANKS:
        raise ValueError(f"ns (ranks) lists {len(ns)} values, at most {MAX_RANKS} are drawn")
    ns = require_sweep("ns (ranks)", ns, 1, MAX_RANKS)
    nbytes = require_count("nbytes", nbytes, 1)
    if isinstance(algorithms, str) or not algorithms or set(algorithms) - set(ALGORITHMS):
        raise ValueError(f"algorithms must list some of {ALGORITHMS}, got {algorithms!r}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for algorithm in algorithms:
        costs = [allreduce_costs(algorithm, n, nbytes, element_bytes=1) for n in ns]
        (line,) = left.plot(ns, [c.rounds for c in costs], label=algorithm)
        colour = line.get_color()
        per_link = [c.bytes_per_link / nbytes for c in costs]
        in_sequence = [c.sequential_bytes / nbytes for c in costs]
        right.plot(ns, per_link, c=colour, label=f"{algorithm}: busiest link")
        right.plot(ns, in_sequence, "--", c=colour, label=f"{algorithm}: one after another")
    left.set(xlabel="ranks N", ylabel="rounds", ylim=(0, None), title="rounds (latency terms)")
    right.set(xlabel="ranks N", ylabel="bytes / S", ylim=(0, None))
    right.set_title("bytes (bandwidth terms)")
    for ax in (left, right):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_allreduce_sweep(result, ax=None):
    """Log-log: measured times, the alpha-beta prediction, and the bus-bandwidth lower bound."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    low, high = TINY_BYTES, result.sizes[-1]
    grid = [low * (high / low) ** (i / 60) for i in range(61)]
    ax.plot(grid, [result.model.predict(s) for s in grid], "-", c="tab:blue", label="predicted")
    if result.fitted is not None:
        fitted = [result.fitted.predict(s) for s in grid]
        ax.plot(grid, fitted, ":", c="tab:green", label=f"{FIT_METHOD}, every other size")
    if result.bus_bandwidth:
        bus = format_rate(result.bus_bandwidth, "B/s")
        bound = [result.bound_s(s) for s in grid]
        largest = format_bytes(result.sizes[-1])  # B is measured, not known: say from what
        label = f"bandwidth bound 2(n-1)/n·S/B, B = {bus} (from the {largest} run)"
        ax.plot(grid, bound, "--", c="gray", label=label)
    if result.copy.rate:
        ram = format_rate(result.copy.rate, "B/s")
        at_copy = [bus_bandwidth_bound_s(result.n_devices, s, result.copy.rate) for s in grid]
        label = f"2(n-1)/n·S at one device's copy rate ({ram})"
        ax.plot(grid, at_copy, "-.", c="tab:red", lw=1, label=label)
    ax.errorbar(
        result.sizes[:-1],
        result.times[:-1],
        yerr=[m.iqr / 2 for m in result.measurements[:-1]],
        fmt="o",
        c="tab:orange",
        label="measured (predicted sizes)",
    )
    ax.plot(
        [TINY_BYTES, high],
        [result.tiny.median, result.times[-1]],
        "s",
        c="black",
        label="measured (α and β from these)",
    )
    ax.set(xscale="log", yscale="log", xlabel="bytes per device", ylabel="time (s)")
    # The bound falls towards 0 at tiny sizes: show it only near the measurements.
    ax.set_ylim(bottom=min(result.tiny.median, *result.times) / 30)
    ax.set_title(f"TF all-reduce on {result.n_devices} {result.kind} devices")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.figure.tight_layout()
    return ax.figure


def plot_allreduce_model(result):
    """Bars: the model's time per algorithm, TF's measured time; the bound as a dashed line."""
    figure, ax = plt.subplots(figsize=(7, 3.2))
    names = [f"{a}\n({result.costs(a).rounds} rounds)" for a in result.predicted]
    times = list(result.predicted.values())
    ax.bar(names, times, color="tab:blue", label="α-β model (your α, β)")
    ax.axhline(
        result.bound, c="gray", ls="--", label=f"bandwidth bound {format_seconds(result.bound)}"
    )
    if result.measured is not None:
        ax.bar(
            ["TF measured"], [result.measured.median], color="tab:orange", label="TensorFlow, here"
        )
        times.append(result.measured.median)
    # A log scale keeps a bound a million times below the bars visible beside them.
    ax.set(ylabel="time (s)", yscale="log", title=f"all-reduce on {result.ranks} ranks")
    ax.set_ylim(min(result.bound, *times) / 3, max(times) * 3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.tight_layout()
    return figure
