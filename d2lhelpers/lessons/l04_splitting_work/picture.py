"""The seed's picture of the three schemes, redrawn (notebook 04's first figure)."""

from __future__ import annotations

import matplotlib.pyplot as plt


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
            ((0.4, 0.5), (0.6, 0.5), "<->", "all-reduce per\nsplit MLP")
        ],
        "Pipeline parallel: layers split": [
            ((0.4, 0.5), (0.6, 0.5), "->", "hand over at\nthe boundary")
        ],
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
