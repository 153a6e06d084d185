"""The dependency graph TensorFlow traced for a function: what waits for what, and where.

Read from the traced graph itself, not drawn by hand: each op with its device and the ops whose
results it needs. Ops that only pass values along (Identity, NoOp, Const) are left out and their
edges joined through, so the picture shows the work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import matplotlib.pyplot as plt

PASS_THROUGH = {"Identity", "NoOp", "Const", "IdentityN"}


@dataclasses.dataclass(frozen=True)
class OpNode:
    """One op of the traced graph: `inputs` are the names of the ops it waits for."""

    name: str
    type: str
    device: str  # "CPU:1", "GPU:0", ... or "" where TensorFlow places it at run time
    inputs: tuple[str, ...]


def op_graph(fn: Callable, *args) -> list[OpNode]:
    """The ops of `fn`'s traced graph for these arguments, pass-through ops joined over."""
    graph = fn.get_concrete_function(*args).graph
    ops = {op.name: op for op in graph.get_operations()}

    def sources(name: str) -> tuple[str, ...]:
        """The real ops behind `name`: itself, or what a pass-through op forwards."""
        op = ops[name]
        if op.type not in PASS_THROUGH:
            return (name,)
        return tuple(s for tensor in op.inputs for s in sources(tensor.op.name))

    nodes = []
    for op in ops.values():
        if op.type in PASS_THROUGH:
            continue
        inputs: list[str] = []
        # Control inputs order work just as data does: they are dependencies too.
        for name in [t.op.name for t in op.inputs] + [c.name for c in op.control_inputs]:
            inputs += [s for s in sources(name) if s not in inputs]
        device = op.device.split("device:")[-1] if op.device else ""
        nodes.append(OpNode(op.name, op.type, device, tuple(inputs)))
    return nodes


def dependency_levels(nodes: list[OpNode]) -> dict[str, int]:
    """Each op's depth: 0 for inputs, else one more than the deepest op it waits for."""
    by_name = {n.name: n for n in nodes}
    depth: dict[str, int] = {}

    def level(name: str) -> int:
        if name not in depth:
            node = by_name[name]
            depth[name] = 1 + max((level(i) for i in node.inputs if i in by_name), default=-1)
        return depth[name]

    for node in nodes:
        level(node.name)
    return depth


def plot_op_graph(nodes: list[OpNode], title: str = "traced dependency graph"):
    """Ops left to right by depth, coloured by device; an arrow for every dependency."""
    depth = dependency_levels(nodes)
    devices = sorted({n.device for n in nodes})
    colours = {d: plt.cm.tab10(i) for i, d in enumerate(devices)}
    rows: dict[int, int] = {}
    where = {}
    for node in sorted(nodes, key=lambda n: (depth[n.name], n.device, n.name)):
        column = depth[node.name]
        where[node.name] = (column, -rows.get(column, 0))
        rows[column] = rows.get(column, 0) + 1
    fig, ax = plt.subplots(
        figsize=(1.6 * (max(depth.values()) + 1) + 2, 0.9 * max(rows.values()) + 1.5)
    )
    for node in nodes:
        for source in node.inputs:
            if source in where:
                ax.annotate(
                    "",
                    xy=where[node.name],
                    xytext=where[source],
                    arrowprops={"arrowstyle": "->", "color": "0.5", "shrinkA": 14, "shrinkB": 14},
                )
    for node in nodes:
        x, y = where[node.name]
        label = f"input {node.name}" if node.type == "Placeholder" else node.type
        ax.text(
            x,
            y,
            label,
            ha="center",
            va="center",
            fontsize=8,
            bbox={"boxstyle": "round", "fc": colours[node.device], "alpha": 0.35},
        )
    for device, colour in colours.items():
        ax.scatter([], [], color=colour, alpha=0.5, label=device or "placed at run time")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1), title="device")
    ax.set_xlim(-0.7, max(depth.values()) + 0.7)
    ax.set_ylim(-max(rows.values()) + 0.4, 0.6)
    ax.set_xlabel("depth: ops in one column wait for nothing in the same column")
    ax.set_yticks([])
    ax.set_title(title)
    fig.tight_layout()
    return fig
