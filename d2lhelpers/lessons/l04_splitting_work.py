"""Notebook 04, splitting work: replicas, tensor and pipeline parallel, and their costs.

In notebook order: the experiment, its result, its plot, its panel.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from d2lhelpers.costs import efficiency_table, tensor_parallel_speedup
from d2lhelpers.devices import on_gpu, setup_devices
from d2lhelpers.panel import Panel, slider
from d2lhelpers.pipeline_parallel import run_pipeline_parallel
from d2lhelpers.replicas import run_replicas
from d2lhelpers.tensor_parallel import run_tensor_parallel


def plot_three_schemes():
    """The seed's picture, redrawn: replicas, tensor parallel and pipeline parallel on 2 GPUs."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 2.8))
    boxes = {
        "Replicas: independent copies": [
            ((0.05, 0.4), "load\nbalancer", "tab:gray"),
            ((0.6, 0.7), "GPU 0\nwhole model", "tab:blue"),
            ((0.6, 0.1), "GPU 1\nwhole model", "tab:blue"),
        ],
        "Tensor parallel: every layer split": [
            ((0.05, 0.4), "GPU 0\nhalf of each layer", "tab:orange"),
            ((0.6, 0.4), "GPU 1\nhalf of each layer", "tab:orange"),
        ],
        "Pipeline parallel: layers split": [
            ((0.05, 0.4), "GPU 0\nlayers 1 to 40", "tab:green"),
            ((0.6, 0.4), "GPU 1\nlayers 41 to 80", "tab:green"),
        ],
    }
    arrows = {
        "Replicas: independent copies": [
            ((0.37, 0.5), (0.6, 0.78), "->", ""),
            ((0.37, 0.45), (0.6, 0.2), "->", ""),
        ],
        "Tensor parallel: every layer split": [
            ((0.4, 0.5), (0.6, 0.5), "<->", "exchange\nevery layer")
        ],
        "Pipeline parallel: layers split": [((0.4, 0.5), (0.6, 0.5), "->", "hand over\nonce")],
    }
    for ax, (title, items) in zip(axes, boxes.items(), strict=True):
        for (x, y), text, colour in items:
            ax.text(
                x,
                y + 0.08,
                text,
                fontsize=9,
                va="center",
                bbox={"boxstyle": "round", "fc": colour, "alpha": 0.25},
            )
        for start, end, style, label in arrows[title]:
            ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": style, "lw": 1.5})
            if label:
                ax.text((start[0] + end[0]) / 2, 0.72, label, ha="center", fontsize=8)
        ax.set(xlim=(0, 1), ylim=(0, 1), title=title)
        ax.axis("off")
    fig.tight_layout()
    return fig


def plot_speedup_model(curve: dict, seed_rows=()):
    """Tensor-parallel speedup vs device count from the cost model, against 1x and the ideal N."""
    ns, speedups = curve["devices"], curve["speedups"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(
        ns,
        speedups,
        "o-",
        label=f"model: {curve['compute_ms']:g} ms compute, "
        f"{curve['comm_ms']:g} ms communication per token",
    )
    ax.plot(ns, ns, "--", c="gray", label="ideal: N devices, N times faster")
    ax.axhline(1, c="tab:red", lw=1, label="1x: no faster than one GPU")
    for row in seed_rows:
        ax.scatter([row.n_devices], [row.speedup], s=80, facecolors="none", edgecolors="black")
        ax.annotate(
            f"seed: {row.n_devices} GPUs, {row.comm_ms:g} ms -> {row.speedup:.2f}x",
            (row.n_devices, row.speedup),
            xytext=(5, -12),
            textcoords="offset points",
            fontsize=7,
        )
    ax.set(xlabel="devices (N)", ylabel="speedup vs one device", ylim=(0, max(ns) * 0.6 + 1))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def speedup_model_panel() -> Panel:
    """Notebook 04: "when more GPUs make it slower", the cost model with the seed's rows."""
    sliders = {
        "compute_ms": slider("compute per token on 1 device (ms)", 40, 1, 200),
        "comm_ms": slider("communication per token (ms)", 6, 0, 100),
        "max_devices": slider("largest device count", 16, 2, 64),
    }

    def experiment(compute_ms, comm_ms, max_devices, progress):
        ns = list(range(1, max_devices + 1))
        # One device sends nothing; from two devices on, every token pays the communication.
        speedups = [tensor_parallel_speedup(compute_ms, n, comm_ms if n > 1 else 0) for n in ns]
        best = max(range(len(ns)), key=speedups.__getitem__)
        slower = [n for n, s in zip(ns, speedups, strict=True) if s < 1]
        print(f"best: {ns[best]} devices, {speedups[best]:.2f}x vs one device")
        print(f"slower than one device from N = {slower[0]}" if slower else "never slower than 1x")
        progress(1, 1)
        return {"devices": ns, "speedups": speedups, "compute_ms": compute_ms, "comm_ms": comm_ms}

    return Panel(
        "When more GPUs make it slower (cost model)",
        sliders,
        experiment,
        lambda curve: plot_speedup_model(curve, efficiency_table()),
    )


def parallelism_panel() -> Panel:
    """Notebook 04: replicas, tensor parallel and pipeline parallel, run for real, side by side."""
    count = len(setup_devices())
    width, batch = (4096, 4096) if on_gpu() else (256, 512)
    sliders = {
        "width": slider("model width", width, 32, 4 * width, 32),
        "batch": slider("batch", batch, 16, 4 * batch, 16),
        "microbatches": slider("pipeline microbatches", 8, 1, 32),
        "n_devices": slider("devices", min(2, count), 1, count),
    }

    def experiment(width, batch, microbatches, n_devices, progress):
        runs = []
        for done, run in enumerate(
            [
                lambda: run_replicas(width, batch, n_devices),
                lambda: run_tensor_parallel(width, batch, n_devices),
                lambda: run_pipeline_parallel(width, batch, microbatches, n_devices),
            ],
            start=1,
        ):
            runs.append(run())
            print(runs[-1], end="\n\n")
            progress(done, 3)
        return runs

    def show(runs):
        figure, ax = plt.subplots(figsize=(7, 3.2))
        names = [r.scheme for r in runs]
        ax.bar(names, [r.speedup for r in runs], color="tab:blue", label="measured speedup")
        ax.scatter(
            names,
            [r.ideal_speedup for r in runs],
            marker="_",
            s=900,
            c="black",
            label="ideal for this split",
            zorder=3,
        )
        ax.axhline(1, c="tab:red", lw=1, label="one device")
        ax.set(
            ylabel="speedup vs one device", title=f"{runs[0].kind} devices: {len(runs[0].devices)}"
        )
        ax.legend(fontsize=8)
        figure.tight_layout()
        return figure

    return Panel("Three ways to split one model, run for real", sliders, experiment, show)
