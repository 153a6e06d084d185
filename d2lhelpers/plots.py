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
