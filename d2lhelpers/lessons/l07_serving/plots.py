"""Notebook 07's pictures: latency against throughput per layout, and one run's requests."""

from __future__ import annotations

import matplotlib.pyplot as plt

from d2lhelpers.lessons.l07_serving.runs import ServingRun
from d2lhelpers.lessons.l07_serving.sweep import LoadSweep

COLOURS = {"replicas": "tab:green", "tensor parallel": "tab:blue", "pipeline": "tab:purple"}


def plot_latency_throughput(sweep: LoadSweep, ax=None):
    """p50 (solid) and p99 (dotted) latency against achieved throughput, one curve per layout."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.8))
    for s in sweep.sweeps:
        colour = COLOURS.get(s.layout, "tab:gray")
        points = sorted(
            (r.log.throughput, r.latency(50), r.latency(99))
            for r in s.runs
            if r.latency(50) is not None
        )
        xs = [p[0] for p in points]
        ax.plot(xs, [p[1] * 1e3 for p in points], "o-", c=colour, label=f"{s.layout} p50")
        ax.plot(xs, [p[2] * 1e3 for p in points], "^:", c=colour, label=f"{s.layout} p99")
        ax.axvline(s.model_capacity, c=colour, ls="--", lw=1, alpha=0.7)
    ax.axvline(sweep.ideal_capacity, c="black", ls="-.", lw=1, label="ideal (n x one device)")
    ax.set(
        xlabel="achieved throughput (generated tokens/s)",
        ylabel="latency (ms)",
        title=f"{sweep.n_devices} devices: latency vs throughput (dashed: each layout's model)",
    )
    ax.set_xlim(
        left=0,
        right=1.1
        * max(
            sweep.ideal_capacity,
            *(s.model_capacity for s in sweep.sweeps),
            *(s.saturation for s in sweep.sweeps),
        ),
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.figure.tight_layout()
    return ax.figure


def plot_requests(run: ServingRun, ax=None):
    """Each request as a bar: queued (grey), prefill (orange), decoding (blue); failed in red."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.6 + 0.18 * len(run.log.requests)))
    for r in run.log.requests:
        y = r.id
        if r.started_s is None:  # never served: refused after a failure, or out of time
            ax.plot([r.arrival_s], [y], "x", c="tab:red", ms=6)
            continue
        end = r.finished_s if r.finished_s is not None else run.log.wall_s
        start = r.started_s
        ax.barh(y, start - r.arrival_s, left=r.arrival_s, color="lightgray", height=0.8)
        if r.first_token_s is not None:
            ax.barh(y, r.first_token_s - start, left=start, color="tab:orange", height=0.8)
            ax.barh(y, end - r.first_token_s, left=r.first_token_s, color="tab:blue", height=0.8)
        if r.failed:
            ax.plot([end], [y], "x", c="tab:red", ms=6)
    if run.log.failed_at_s is not None:
        ax.axvline(run.log.failed_at_s, c="tab:red", ls="--", label="device lost")
        ax.legend(fontsize=8, loc="lower right")
    if run.log.queue:  # the queue over time, on its own axis at the right
        queue = ax.twinx()
        times, queued = (
            [0.0] + [t for t, _, _ in run.log.queue],
            [0] + [q for _, q, _ in run.log.queue],
        )
        queue.step(times, queued, where="post", c="black", lw=1, alpha=0.6)
        queue.set_ylabel("requests queued (line)")
        queue.set_ylim(bottom=0, top=max(1, *queued) * 1.1)
    ax.invert_yaxis()
    ax.set(
        xlabel="time since the first arrival (s)",
        ylabel="request",
        title=f"{run.log.layout}: queued (grey), prefill (orange), decoding (blue), failed (x)",
    )
    ax.figure.tight_layout()
    return ax.figure
