"""Notebook 05's figures: the all-reduces drawn round by round, their costs against N, the
sweep against the alpha-beta model, and the panel's predictions beside TensorFlow's own."""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt

from d2lhelpers.collectives.algorithms import ALGORITHMS, allreduce_costs
from d2lhelpers.collectives.costs import bus_bandwidth_bound_s
from d2lhelpers.collectives.tf_allreduce import TINY_BYTES
from d2lhelpers.collectives.transfers import AllreduceStepsResult
from d2lhelpers.core.checks import require_count, require_sweep
from d2lhelpers.core.units import format_rate, format_seconds

MAX_PANELS = 64  # rounds drawn at most: a 33-rank ring already needs 64
MAX_RANKS = 4096  # the rounds-and-bytes plot's largest N

# Adding into the receiver's chunk, or overwriting it: the two kinds of step to tell apart.
PHASE_COLOURS = {
    "reduce-scatter": "tab:orange",
    "reduce": "tab:orange",
    "all-gather": "tab:blue",
    "broadcast": "tab:blue",
}


@dataclass(frozen=True)
class _Layout:
    positions: list[tuple[float, float]]
    limits: tuple[float, float, float, float]  # xmin, xmax, ymin, ymax
    bend: float  # arc3's rad: arrows bow to the sender's right by bend * length / 2


def _layout(algorithm: str, n: int, longest_hop: int) -> _Layout:
    """The ring on a circle (rank 0 on top, clockwise); the tree and the seed in a row.

    In a row, arrows travelling left bow above and arrows travelling right bow below, so the
    tree's combining (right to left) and its fan-out (left to right) never cross a rank.
    """
    if algorithm == "ring":
        angles = [math.pi / 2 - 2 * math.pi * r / n for r in range(n)]
        positions = [(math.cos(a), math.sin(a)) for a in angles]
        return _Layout(positions, (-1.45, 1.45, -1.45, 1.45), 0.2)
    half_height = 0.25 * longest_hop + 0.6  # the highest arc: bend * length / 2
    return _Layout(
        [(float(r), 0.0) for r in range(n)], (-0.6, n - 0.4, -half_height, half_height), 0.5
    )


def _label_position(x0, y0, x1, y1, bend: float, gap: float) -> tuple[float, float]:
    """Just beyond the apex of the bowed arrow from (x0, y0) to (x1, y1)."""
    dx, dy = x1 - x0, y1 - y0
    length = math.hypot(dx, dy)
    out = bend * length / 2 + gap
    return (x0 + x1) / 2 + out * dy / length, (y0 + y1) / 2 - out * dx / length


def _draw_ranks(ax, layout: _Layout, marker_size: float) -> None:
    xs, ys = zip(*layout.positions, strict=True)
    ax.scatter(xs, ys, s=marker_size, c="white", edgecolors="black", zorder=3)
    for r, (x, y) in enumerate(layout.positions):
        ax.text(x, y, str(r), ha="center", va="center", fontsize=7, zorder=4)
    xmin, xmax, ymin, ymax = layout.limits
    ax.set(xlim=(xmin, xmax), ylim=(ymin, ymax), aspect="equal")
    ax.axis("off")


def plot_allreduce_steps(run: AllreduceStepsResult, columns: int = 4):
    """One panel per round of `run`: ranks as circles, an arrow per message, labelled by chunk.

    Orange arrows add into the receiver's chunk (reduce phases); blue ones overwrite it (gather,
    broadcast). The ring's arrows say which chunk c travels; the tree and the seed send the whole
    vector, as each panel's title says.
    """
    if not isinstance(run, AllreduceStepsResult):
        raise TypeError(f"draw the result of ring_allreduce, tree_allreduce..., got {run!r:.80}")
    columns = require_count("columns", columns, 1, MAX_PANELS)
    n = run.costs.n_ranks
    steps = sorted({t.step for t in run.transfers})
    if len(steps) > MAX_PANELS:
        raise ValueError(
            f"{len(steps)} rounds to draw, at most {MAX_PANELS} are: choose fewer ranks "
            f"(a ring of {MAX_PANELS // 2 + 1} ranks has {MAX_PANELS} rounds)"
        )
    panels = max(len(steps), 1)
    columns = max(1, min(columns, panels))
    rows = -(-panels // columns)
    longest_hop = max((abs(t.sender - t.receiver) for t in run.transfers), default=1)
    layout = _layout(run.algorithm, n, longest_hop)
    xmin, xmax, ymin, ymax = layout.limits
    # At least 2.6 inches a panel; more for many ranks, so neighbours keep their room.
    panel_inches = max(2.6, (0.22 if run.algorithm == "ring" else 0.42) * n)
    inches_per_unit = panel_inches / (xmax - xmin)
    width, height = inches_per_unit * (xmax - xmin), inches_per_unit * (ymax - ymin) + 0.4
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[panels:]:
        fig.delaxes(ax)
    # Circles about as wide as the gap between neighbours, capped for few ranks.
    gap_units = 2 * math.sin(math.pi / n) if run.algorithm == "ring" else 1.0
    spacing_pt = 72 * inches_per_unit * gap_units
    marker_size = min(380.0, (0.6 * spacing_pt) ** 2)
    shrink = min(11.0, 0.32 * spacing_pt)
    if not steps:
        _draw_ranks(flat[0], layout, marker_size)
        flat[0].set_title("one rank: nothing to send", fontsize=9)
    for ax, step in zip(flat, steps, strict=False):
        _draw_ranks(ax, layout, marker_size)
        messages = [t for t in run.transfers if t.step == step]
        for t in messages:
            (x0, y0), (x1, y1) = layout.positions[t.sender], layout.positions[t.receiver]
            colour = PHASE_COLOURS[t.phase]
            style = dict(arrowstyle="-|>", color=colour, shrinkA=shrink, shrinkB=shrink)
            ax.annotate(
                "",
                xy=(x1, y1),
                xytext=(x0, y0),
                arrowprops=dict(**style, connectionstyle=f"arc3,rad={layout.bend}"),
            )
            if run.algorithm == "ring":
                at = _label_position(x0, y0, x1, y1, layout.bend, gap=0.14)
                ax.text(*at, f"c{t.chunk}", fontsize=7, color=colour, ha="center", va="center")
        what = "" if run.algorithm == "ring" else ", whole vectors"
        ax.set_title(f"step {step + 1}: {messages[0].phase}{what}", fontsize=9)
    fig.suptitle(
        f"{run.algorithm} all-reduce, {n} ranks: {run.costs.rounds} rounds, "
        f"{run.costs.messages} messages",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


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
        ax.plot(grid, fitted, ":", c="tab:green", label="least squares on every other size")
    if result.bus_bandwidth:
        bus = format_rate(result.bus_bandwidth, "B/s")
        bound = [result.bound_s(s) for s in grid]
        ax.plot(grid, bound, "--", c="gray", label=f"lower bound 2(n-1)/n·S/B, B = {bus}")
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
