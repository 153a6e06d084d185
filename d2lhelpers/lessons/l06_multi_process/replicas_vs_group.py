"""Notebook 06's failure demo on both layouts in one run: a replica set, then one group, each
losing one worker a third of the way into the same time window (`failure.run_failure`).
"""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt

from d2lhelpers.core.report import Reported, Table
from d2lhelpers.lessons.l06_multi_process.failure import (
    COLLECTIVE_TIMEOUT_S,
    DEMO_BATCH,
    DEMO_WIDTH,
    JOB_TIMEOUT_S,
    KILL_AFTER_S,
    LAYOUTS,
    UNITS,
    WINDOW_S,
    WorkerLossResult,
    check_failure,
    plot_failure,
    run_failure,
)
from d2lhelpers.processes import mwms
from d2lhelpers.processes.progress import ProgressBoard


@dataclasses.dataclass
class ReplicasVsGroupResult(Reported):
    """The failure demo on both layouts, one after the other, with the same workers and window."""

    replicas: WorkerLossResult
    group: WorkerLossResult

    @property
    def verdict(self) -> str:
        return f"replicas: {self.replicas.verdict}; one group: {self.group.verdict}"

    def tables(self) -> list[Table]:
        demos = (self.replicas, self.group)
        rows = [
            (
                f"{d.n_workers} replicas"
                if d.layout == "replicas"
                else f"one group of {d.n_workers}",
                d.rate_words(after=False),
                d.rate_words(after=True),
                d.lost_words(),
                d.model_reading(),
                f"{sum(d.finished)} of {d.n_workers}",
            )
            for d in demos
        ]
        columns = ("layout", "steps/s before the loss, all workers", "after the loss, all workers")
        columns += ("lost (measured)", "lost (model)", "workers that finished")
        notes = [note for d in demos for note in d.notes()]
        wall = sum(d.wall_s for d in demos)
        notes.append(f"both demos took {wall:.1f} s; every process has ended")
        title = f"one worker {self.replicas.how}, in a replica set and in one group"
        title += self.replicas.step_words()  # both demos run one step (`run_replicas_vs_group`)
        errors = [
            (d.layout, f"{t:.2f} s", e)
            for d in demos
            for e, t in zip(d.errors, d.error_after_s, strict=True)
        ]
        return [
            Table(title, columns, rows, notes),
            Table("the errors, in the order seen", ("layout", "after the loss", "error"), errors),
        ]


def run_replicas_vs_group(
    n_workers: int = 2, progress=None, worker=mwms.training_worker, **options
) -> ReplicasVsGroupResult:
    """`run_failure` on a replica set, then on one group: both admitted before either starts."""
    for layout in LAYOUTS:
        check_failure(
            layout,
            n_workers,
            options.get("window_s", WINDOW_S),
            options.get("kill_after_s", KILL_AFTER_S),
            options.get("width", DEMO_WIDTH),
            options.get("batch_per_worker", DEMO_BATCH),
            options.get("timeout_s", JOB_TIMEOUT_S),
            options.get("collective_timeout_s", COLLECTIVE_TIMEOUT_S),
        )
    board = ProgressBoard(progress, 2 * n_workers * UNITS)
    demos = [
        run_failure(layout, n_workers, worker=worker, board=board, **options) for layout in LAYOUTS
    ]
    return ReplicasVsGroupResult(*demos)


def plot_replicas_vs_group(result: ReplicasVsGroupResult):
    """Both layouts side by side: steps per second before the loss, after it, and the model's."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 2.8))
    for demo, ax in zip((result.replicas, result.group), axes, strict=True):
        plot_failure(demo, ax=ax)
    figure.tight_layout()
    return figure
