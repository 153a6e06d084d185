"""Notebook 06's two panels: K worker processes (all-reduce sweep, then training with 1, 2, K
workers against the models), and killing one worker of replicas and of one group.

Both take the worker functions the notebook defined, run nothing until Run, admit every value
before any process starts, print nothing, and report each worker's progress. Their estimates
start from `timing.estimate` (a process's start, a trace) and add constants measured on a
2-core machine (`MWMS_START_S`, `ALPHA_S`, `BETA_BYTES_PER_S`, `FLOPS_PER_S`), scaled by the
usable cores when the workers outnumber them.
"""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt

from d2lhelpers.collectives.tf_allreduce import sizes_up_to
from d2lhelpers.core.checks import MEMORY_SHARE, available_memory_bytes
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import KiB, usable_cores
from d2lhelpers.lessons.l06_multi_process.allreduce import (
    AllReduceJobResult,
    check_allreduce,
    plot_allreduce_job,
    run_allreduce_job,
)
from d2lhelpers.lessons.l06_multi_process.failure import KILL_AFTER_S, WINDOW_S
from d2lhelpers.lessons.l06_multi_process.failure import WARMUP as DEMO_WARMUP
from d2lhelpers.lessons.l06_multi_process.jobs import machine_defaults, max_workers
from d2lhelpers.lessons.l06_multi_process.replicas_vs_group import (
    plot_replicas_vs_group,
    run_replicas_vs_group,
)
from d2lhelpers.lessons.l06_multi_process.training import (
    TrainingSweepResult,
    check_sweep,
    plot_training_sweep,
    run_training_sweep,
)
from d2lhelpers.processes import mwms
from d2lhelpers.processes.progress import ProgressBoard
from d2lhelpers.processes.worker_memory import RING_COPIES, WORKER_BYTES, parameter_count
from d2lhelpers.timing.estimate import PROCESS_START_S, TRACE_S, call_seconds
from d2lhelpers.ui.panel import Panel, slider

MWMS_START_S = 3.0  # after the import: MWMS's servers meet, Keras loads (2-4 s on 2 cores)
ALPHA_S, BETA_BYTES_PER_S = 3e-3, 3e8  # an all-reduce between two processes on loopback
FLOPS_PER_S = 2e10  # one op thread's training rate, small dense layers (15-30 GFLOP/s seen)
STEP_CALL_S = 1e-3  # one tf.function call under MWMS, beside its compute and all-reduce
WARMUP = 5
PEERS_FAIL_S = 2.0  # from a worker's death to its peers' errors on loopback (2.1 s seen)


@dataclasses.dataclass
class ClusterResult(Reported):
    """The panel's run: an all-reduce sweep and a training sweep that uses its fit."""

    job: AllReduceJobResult
    sweep: TrainingSweepResult

    @property
    def verdict(self) -> str:
        return f"{self.job.verdict}. {self.sweep.verdict}"

    def tables(self) -> list[Table]:
        """Both runs' tables, without their verdicts: this result's verdict holds both."""
        shown = {self.job.verdict, self.sweep.verdict}
        return [
            dataclasses.replace(table, verdicts=[v for v in table.verdicts if v not in shown])
            for table in self.job.tables() + self.sweep.tables()
        ]


def _admit(check, slider_name: str, *values) -> None:
    try:
        check(*values)
    except ValueError as error:
        raise ValueError(
            f"{error} (move the '{slider_name}' or 'worker processes' slider down)"
        ) from None


def _counts(n_workers: int) -> list[int]:
    return sorted({1, 2, n_workers})


def _slowdown(n_workers: int) -> float:
    return max(1.0, n_workers / usable_cores())


def cluster_start_s(n_workers: int) -> float:
    """Seconds until a job of `n_workers` is ready: each imports TensorFlow (together, sharing
    the cores), then MWMS brings them together."""
    return PROCESS_START_S * _slowdown(n_workers) + MWMS_START_S


def step_s(n_workers: int, width: int, batch: int = 256) -> float:
    """One training step: compute (forward and backward, 6 FLOPs per weight and sample), the
    call, and the all-reduce's latency when there is more than one worker."""
    compute = call_seconds(6 * parameter_count(width) * batch, FLOPS_PER_S)
    return (compute + STEP_CALL_S) * _slowdown(n_workers) + (ALPHA_S if n_workers > 1 else 0)


def cluster_estimate(n_workers: int, largest_kib: int, width: int, steps: int, repeats: int):
    """Expected seconds of a `cluster_panel` run: the all-reduce job, then one training job per
    worker count, each with its start and its tf.function's trace."""
    sizes = sizes_up_to(largest_kib * KiB)
    calls = repeats + 3  # the check, the warm-up, the timed calls
    allreduce = sum(calls * (ALPHA_S + 2 * s / BETA_BYTES_PER_S) for s in sizes)
    seconds = cluster_start_s(n_workers) + 2 * TRACE_S + allreduce * _slowdown(n_workers)
    for k in _counts(n_workers):
        seconds += cluster_start_s(k) + TRACE_S + (steps + WARMUP) * step_s(k, width)
    return seconds


def failure_estimate(n_workers: int) -> float:
    """Expected seconds of a `failure_panel` run: the replicas' one-worker jobs start one after
    another and train for the window; then the group starts and stops at the kill, once its
    peers have failed (`PEERS_FAIL_S`)."""
    replicas = n_workers * cluster_start_s(1) + DEMO_WARMUP * TRACE_S + WINDOW_S
    group = cluster_start_s(n_workers) + DEMO_WARMUP * TRACE_S + KILL_AFTER_S + PEERS_FAIL_S
    return replicas + group


def cluster_panel(
    allreduce_worker=mwms.allreduce_worker, training_worker=mwms.training_worker, shown=None
) -> Panel:
    """Notebook 06: K worker processes: all-reduce sweep and data-parallel training vs models,
    running the worker functions given (the notebook's own). `shown`: (all-reduce job, training
    sweep) of the cells above, shown as the panel's run if the panel would have made the same
    two at its sliders' values (`Panel.show_run`)."""
    defaults, cap = machine_defaults(), max_workers()
    high = max(2, min(4, cap))
    # The largest message that fits in memory with the most workers, up to 16 MiB.
    room = (MEMORY_SHARE * available_memory_bytes() / high - WORKER_BYTES) / RING_COPIES
    largest_kib = max(64, min(16 * 1024, int(room // KiB) // 64 * 64))
    sliders = {
        "n_workers": slider("worker processes", 2, 2, high),
        "largest_kib": slider(
            "largest message (KiB)",
            min(largest_kib, defaults.largest_message // KiB),
            64,
            largest_kib,
            64,
        ),
        "width": slider("model width", 256, 32, 1024, 32),
    }
    steps, repeats = defaults.steps, defaults.repeats

    def experiment(n_workers, largest_kib, width, progress):
        sizes, counts = sizes_up_to(largest_kib * KiB), _counts(n_workers)
        # Everything is admitted before anything starts; a refusal names the slider to move.
        _admit(check_allreduce, "largest message (KiB)", n_workers, sizes, repeats, 2, 60.0)
        _admit(check_sweep, "model width", counts, width, 256, steps, WARMUP, 60.0)
        total = n_workers * len(sizes) + sum(counts) * (steps + WARMUP)
        board = ProgressBoard(progress, total)
        job = run_allreduce_job(n_workers, sizes, repeats, board=board, worker=allreduce_worker)
        sweep = run_training_sweep(
            counts, allreduce=job, width=width, steps=steps, board=board, worker=training_worker
        )
        return ClusterResult(job, sweep)

    def show(result: ClusterResult):
        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
        plot_allreduce_job(result.job, ax=left)
        plot_training_sweep(result.sweep, ax=right)
        figure.tight_layout()
        return figure

    def estimate(n_workers, largest_kib, width):
        return cluster_estimate(n_workers, largest_kib, width, steps, repeats)

    panel = Panel(
        "Worker processes: all-reduce and data-parallel training",
        sliders,
        experiment,
        show,
        estimate,
    )
    if shown is not None:
        job, sweep = shown
        panel.show_run(ClusterResult(job, sweep), _made_at(job, sweep, steps))
    return panel


def _made_at(job: AllReduceJobResult, sweep: TrainingSweepResult, steps: int) -> dict | None:
    """The cluster panel's slider values that make this job and sweep, or None if none would
    (other sizes, worker counts, batch or steps than the panel's, or another link). The job's
    repeats are not kept in its result: a job of other repeats passes for the panel's."""
    values = {
        "n_workers": job.n_workers,
        "largest_kib": job.sizes[-1] // KiB,
        "width": sweep.jobs[0].width,
    }
    same = (
        job.sizes == sizes_up_to(job.sizes[-1])
        and [j.n_workers for j in sweep.jobs] == _counts(job.n_workers)
        and all(j.width == values["width"] and j.batch_per_worker == 256 for j in sweep.jobs)
        and all(len(w["step_s"]) == steps for j in sweep.jobs for w in j.workers)
        and sweep.link == job.link
    )
    return values if same else None


def failure_panel(training_worker=mwms.training_worker) -> Panel:
    """Notebook 06: kill one worker of a replica set, and of one big group, and see what each
    loses (both in one run), the workers running the training function given."""
    sliders = {"n_workers": slider("worker processes", 2, 2, max(2, min(4, max_workers())))}

    def experiment(n_workers, progress):
        return run_replicas_vs_group(n_workers, progress, worker=training_worker)

    return Panel(
        "Kill one worker: replicas, then one group",
        sliders,
        experiment,
        plot_replicas_vs_group,
        failure_estimate,
    )
