"""Notebook 06, multi-process: worker processes, MultiWorkerMirroredStrategy, failures.

In notebook order: the experiment, its result, its plot, its panel.
"""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib.pyplot as plt

from d2lhelpers.cluster import (
    allreduce_job,
    failure_demo,
    plot_allreduce_job,
    plot_training_sweep,
    training_sweep,
)
from d2lhelpers.panel import Panel, slider
from d2lhelpers.tf_allreduce import sizes_up_to


def cluster_panel() -> Panel:
    """Notebook 06: K worker processes: all-reduce sweep and data-parallel training vs models."""
    sliders = {
        "n_workers": slider("worker processes", 2, 1, 4),
        "largest_kib": slider("largest message (KiB)", 4096, 64, 16 * 1024, 64),
        "width": slider("model width", 256, 32, 1024, 32),
    }

    def experiment(n_workers, largest_kib, width, progress):
        counts = [k for k in (1, 2, 4) if k <= n_workers] or [1]
        total = n_workers + sum(counts)
        done, latest = set(), {}

        def report(index, info, stage):
            workers = info.get("workers", max(n_workers, 2))
            done.add((stage, workers, index))
            step = (
                f"{info['done']}/{info['of']} sizes"
                if "done" in info
                else (f"step {info['step']}/{info['of']}")
            )
            latest[index] = f"worker {index}: {stage} ({workers} workers) {step}"
            progress(min(len(done), total), total, "<br>".join(latest[i] for i in sorted(latest)))

        job = allreduce_job(
            max(n_workers, 2),
            sizes_up_to(largest_kib * 1024),
            progress=lambda i, info: report(i, info, "allreduce"),
        )
        print("\n".join(job.lines()), end="\n\n")
        sweep = training_sweep(
            counts, link=job.link, width=width, progress=lambda i, info: report(i, info, "training")
        )
        print("\n".join(sweep.lines()))
        return job, sweep

    def show(result):
        job, sweep = result
        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
        plot_allreduce_job(job, ax=left)
        plot_training_sweep(sweep, ax=right)
        figure.tight_layout()
        return figure

    return Panel(
        "Worker processes: all-reduce and data-parallel training", sliders, experiment, show
    )


def failure_panel() -> Panel:
    """Notebook 06: kill one worker of a replica set, or of one big group, and see what is lost."""

    sliders = {
        "n_workers": slider("worker processes", 2, 2, 4),
        "layout": widgets.ToggleButtons(
            options=["replicas", "group"], value="replicas", description="layout"
        ),
    }

    def experiment(n_workers, layout, progress):
        result = failure_demo(layout, n_workers=n_workers)
        print("\n".join(result.lines()))
        progress(1, 1)
        return result

    def show(result):
        # Capacity still working after the kill: the survivors' share of the workers.
        kept = 1 - result.lost_share
        figure, ax = plt.subplots(figsize=(6, 2.6))
        ax.barh(["still working", "lost"], [kept, 1 - kept], color=["tab:green", "tab:red"])
        ax.set(
            xlim=(0, 1),
            xlabel=f"share of {result.n_workers} workers' capacity",
            title=f"{result.layout}: one worker killed at step {result.killed_at_step}",
        )
        figure.tight_layout()
        return figure

    return Panel("Kill one worker", sliders, experiment, show)
