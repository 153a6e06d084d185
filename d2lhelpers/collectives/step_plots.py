"""An all-reduce drawn round by round: ranks as circles, an arrow per message
(`AllreduceStepsResult.plot`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt

from d2lhelpers.core.checks import require_count

MAX_PANELS = 64  # rounds drawn at most: a 33-rank ring already needs 64

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


def plot_allreduce_steps(run, columns: int = 4):
    """One panel per round of `run` (an `AllreduceStepsResult`): ranks as circles, an arrow per
    message, labelled by chunk.

    Orange arrows add into the receiver's chunk (reduce phases); blue ones overwrite it (gather,
    broadcast). The ring's arrows say which chunk c travels; the tree and the seed send the whole
    vector, as each panel's title says.
    """
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
