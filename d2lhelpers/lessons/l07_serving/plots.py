"""Notebook 07's pictures: each layout's colour, and one run's requests (the sweep draws its own
latency against throughput: `sweep.plot_latency_throughput`)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from d2lhelpers.serving.load import LoadLog

COLOURS = {
    "replicas": "tab:green",
    "replicas in lock step": "tab:olive",
    "tensor parallel": "tab:blue",
    "pipeline": "tab:purple",
}


def plot_requests(log: LoadLog, ax=None, window: tuple[float, float] | None = None):
    """Each request as a bar: queued (grey), prefill (orange), decoding (blue); the queue as a
    line; the measured window shaded; a lost device as a red line."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.5))
    for r in log.requests:
        if r.started_s is None:
            ax.plot([r.arrival_s], [r.id], "|", c="lightgray", ms=3)
            continue
        end = r.finished_s if r.finished_s is not None else log.wall_s
        first = r.first_token_s if r.first_token_s is not None else end
        ax.barh(r.id, r.started_s - r.arrival_s, left=r.arrival_s, color="lightgray", height=1)
        ax.barh(r.id, first - r.started_s, left=r.started_s, color="tab:orange", height=1)
        ax.barh(r.id, end - first, left=first, color="tab:blue", height=1)
    if window is not None:
        ax.axvspan(*window, color="tab:green", alpha=0.08, label="measured window")
    if log.failed_at_s is not None:
        ax.axvline(log.failed_at_s, c="tab:red", ls="--", label="device lost")
    if window is not None or log.failed_at_s is not None:
        ax.legend(fontsize=8, loc="lower right")
    times = sorted({r.arrival_s for r in log.requests} | {r.started_s or 0.0 for r in log.requests})
    queued = [
        sum(r.arrival_s <= t and (r.started_s is None or r.started_s > t) for r in log.requests)
        for t in times
    ]
    if times:
        queue = ax.twinx()
        queue.step(times, queued, where="post", c="black", lw=1, alpha=0.6)
        queue.set_ylabel("requests queued (line)")
        queue.set_ylim(bottom=0, top=max(1, *queued) * 1.1)
    ax.invert_yaxis()
    ax.set(
        xlabel="time since the start (s)",
        ylabel="request",
        title=f"{log.layout}: queued (grey), prefill (orange), decoding (blue)",
    )
    ax.figure.tight_layout()
    return ax.figure
