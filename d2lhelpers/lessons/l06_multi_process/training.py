"""Notebook 06, part 2: data-parallel training on K worker processes against the cost model.

Weak scaling: every worker trains on its own `batch_per_worker` samples per step, so the ideal is
K times the samples per second of one worker. The model of a step (`predict_step_s`):

    t(K) = t(1) * max(1, K / cores) + T_ring(K, G),
    T_ring(K, G) = 2(K-1) alpha_link + 2(K-1) ceil(G/K) / beta_link   (0 for K = 1)

and K workers beat one in samples/s when K t(1) > t(K) (`break_even.break_even_step_s`).
"""

from __future__ import annotations

import dataclasses
import numbers
import statistics

import matplotlib.pyplot as plt

from d2lhelpers.collectives.algorithms import allreduce_time_s
from d2lhelpers.collectives.costs import AlphaBeta, Residual
from d2lhelpers.core.checks import require_count, require_processes, require_sweep
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    cores_phrase,
    format_bytes,
    format_rate,
    format_seconds,
    usable_cores,
)
from d2lhelpers.core.verdicts import Comparison, agreeing_digits, relative_noise
from d2lhelpers.lessons.l06_multi_process.allreduce import AllReduceJobResult
from d2lhelpers.lessons.l06_multi_process.jobs import (
    machine_defaults,
    require_seconds,
    require_workers,
    require_workers_memory,
    run_job,
)
from d2lhelpers.processes import mwms
from d2lhelpers.processes.progress import ProgressBoard
from d2lhelpers.processes.worker_memory import training_memory_bytes
from d2lhelpers.timing.benchmark import Measurement

BLOCKS = 10  # the step times are judged as this many blocks of consecutive steps
MAX_STEPS = 100_000  # a job of more steps would outlast any lesson: refused before it starts


@dataclasses.dataclass
class TrainingJobResult(Reported):
    """One data-parallel training job: each worker's step times, losses, final weights' hash."""

    n_workers: int
    width: int
    batch_per_worker: int
    workers: list[dict]
    start_s: float
    wall_s: float

    @property
    def step(self) -> Measurement:
        """The slowest worker's step times: a step ends when every worker has the sum."""
        slowest = max(self.workers, key=lambda w: statistics.median(w["step_s"]))
        return Measurement(f"{self.n_workers}-worker step", slowest["step_s"])

    @property
    def step_s(self) -> float:
        return self.step.median

    @property
    def per_sample(self) -> Measurement:
        """Seconds per sample over all workers, one 'run' per block of consecutive steps (their
        median): the spread of these blocks is the noise of the median step, not the spread of
        single steps, which a busy machine makes wide."""
        times = self.step.times
        size = max(1, len(times) // BLOCKS)
        blocks = [times[i : i + size] for i in range(0, len(times) - size + 1, size)]
        samples = self.n_workers * self.batch_per_worker
        return Measurement(
            f"{self.n_workers} workers", [statistics.median(b) / samples for b in blocks]
        )

    @property
    def throughput(self) -> float:
        """Samples per second over all workers: K * b / step."""
        return self.n_workers * self.batch_per_worker / self.step_s

    @property
    def gradient_bytes(self) -> int:
        return self.workers[0]["gradient_bytes"]

    @property
    def weights_identical(self) -> bool:
        return len({w["weights_sha256"] for w in self.workers}) == 1

    def tables(self) -> list[Table]:
        losses = self.workers[0]["losses"]
        rows = [
            ("workers x batch", f"{self.n_workers} x {self.batch_per_worker}"),
            ("gradients all-reduced per step", format_bytes(self.gradient_bytes)),
            ("step (slowest worker, median)", format_seconds(self.step_s)),
            ("throughput", format_rate(self.throughput, "samples/s")),
            ("loss on worker 0's shard", f"{losses[0]:.3f} -> {losses[-1]:.3f}"),
            ("weights identical on every worker", "yes" if self.weights_identical else "NO"),
            ("cluster start, job", f"{self.start_s:.1f} s, {self.wall_s:.1f} s"),
        ]
        flags = [] if self.weights_identical else ["the workers' weights differ: not in sync"]
        title = f"data-parallel training, Dense({self.width})-relu-Dense(1)"
        return [Table(title, ("", "value"), rows, flags=flags)]


def check_training(n_workers, width, batch_per_worker, steps, warmup, timeout_s, low=1) -> None:
    """Admission for a training job: counts, the process cap, and memory summed over workers."""
    n = require_workers("the training job", n_workers, low)
    width = require_count("width", width, 1)
    batch = require_count("batch_per_worker", batch_per_worker, 1)
    require_count("steps", steps, 1, MAX_STEPS)
    require_count("warmup", warmup, 0, MAX_STEPS)
    require_seconds("timeout_s", timeout_s)
    base, per_unit = training_memory_bytes(0, batch), training_memory_bytes(1, batch)

    def largest(per_worker: float) -> str:
        fit = int((per_worker - base) // (per_unit - base))
        return f"the widest model that fits with {n} workers has width {fit}"

    require_workers_memory(
        f"training Dense({width})", n, training_memory_bytes(width, batch), largest
    )


def run_training(
    n_workers: int = 2,
    width: int = 256,
    batch_per_worker: int = 256,
    steps: int | None = None,
    timeout_s: float = 60.0,
    progress=None,
    warmup: int = 5,
    learning_rate: float = 0.02,
    seed: int = 0,
    board: ProgressBoard | None = None,
    worker=mwms.training_worker,
    **group_options,
) -> TrainingJobResult:
    """Data-parallel SGD of Dense(width)-relu-Dense(1) on `n_workers` MWMS workers.

    `worker` is the function each worker runs (the notebook passes its own `training_worker`);
    `group_options` (`hosts`, `launch`) place the workers elsewhere than loopback.

    Every worker trains on its own `batch_per_worker` samples per step (synthetic, made from
    `seed` and its index). `steps` defaults to `machine_defaults()`. Refused before any process
    starts if a value is out of range or does not fit. `progress(done, total, status)` with a
    status per worker. Raises `WorkerError` naming the worker that failed; every process has
    ended when this returns or raises.
    """
    steps = machine_defaults().steps if steps is None else steps
    check_training(n_workers, width, batch_per_worker, steps, warmup, timeout_s)
    if not isinstance(learning_rate, numbers.Real) or not learning_rate > 0:
        raise ValueError(f"learning_rate must be a number above 0, got {learning_rate!r}")
    if board is None:
        board = ProgressBoard(progress, n_workers * (warmup + steps))
    board.stage("training", n_workers, warmup + steps)
    args = dict(
        batch=batch_per_worker,
        width=width,
        steps=steps,
        warmup=warmup,
        seed=seed,
        learning_rate=learning_rate,
    )
    results, start, wall = run_job(worker, n_workers, args, timeout_s, board, **group_options)
    return TrainingJobResult(n_workers, width, batch_per_worker, results, start, wall)


def predict_step_s(
    n_workers: int,
    one_worker_step_s: float,
    gradient_bytes: int,
    link: AlphaBeta,
    cores: int | None = None,
) -> float:
    """The model of a data-parallel step on K workers (the module's docstring).

    t(1): the measured step of one worker, all compute (it all-reduces with nobody). Each worker
    computes the same b samples, so compute stays t(1) until the workers outnumber the cores and
    must share them. G: the gradient bytes; alpha_link, beta_link from an all-reduce sweep
    (`AllReduceJob.link`). No overlap of compute and communication is assumed.
    """
    cores = usable_cores() if cores is None else cores
    compute = one_worker_step_s * max(1.0, n_workers / cores)
    if n_workers == 1:
        return compute
    ring = allreduce_time_s("ring", n_workers, gradient_bytes, link.alpha_s, link.beta_bytes_per_s)
    return compute + ring


def per_sample_comparison(job: TrainingJobResult, one: TrainingJobResult) -> Comparison:
    """K workers' time per sample against one worker's: the tables' median steps (so that the
    ratio is the tables' samples/s ratio), each with its blocks' relative noise (the tables' ±),
    the band their sum in seconds per sample."""
    a = job.step_s / (job.n_workers * job.batch_per_worker)
    b = one.step_s / (one.n_workers * one.batch_per_worker)
    noise = a * relative_noise(job.per_sample) + b * relative_noise(one.per_sample)
    return Comparison(a, b, noise)


def scaling_outcome(job: TrainingJobResult, one: TrainingJobResult) -> str:
    """'win', 'lose' or 'tie': K workers against one in samples/s, beyond the noise or not."""
    c = per_sample_comparison(job, one)
    return "win" if c.a_faster else "lose" if c.a_slower else "tie"


def scaling_sentence(job: TrainingJobResult, one: TrainingJobResult) -> str:
    """K workers against one, in samples/s, from this run's step times and their noise."""
    c = per_sample_comparison(job, one)
    k = job.n_workers
    gain = 1 / c.ratio  # the tables' samples/s ratio
    # read 156: '±20%' beside tables' ±8% and ±5% could not be rebuilt: its parts printed
    mine, theirs = relative_noise(job.per_sample), relative_noise(one.per_sample)
    band = (
        f"±{c.noise / c.b:.0%} of one worker's time per sample: both runs' noise, {k} workers' "
        f"±{mine:.1%} x {c.ratio:.2f} + one worker's ±{theirs:.1%}"
    )
    if c.a_faster:
        return f"{k} workers: {gain:.2f}x the samples/s of one worker (ideal {k}x; beyond {band})"
    if c.a_slower:
        return (
            f"{k} workers: fewer samples/s than one worker ({1 / gain:.2f}x the time per sample; "
            f"beyond {band})"
        )
    return (
        f"{k} workers: no measurable difference in samples/s from one worker ({gain:.2f}x, "
        f"within {band})"
    )


def _gap_and_band(c: Comparison) -> tuple[str, str]:
    """('-19.4%', '±19.3%'): a step's gap from the model's and the band it is read against,
    relative to the model's, with the decimals at which the digits show the verdict (read 159:
    '-19% ... outside (±19%)')."""
    d = agreeing_digits(c.a / c.b, c.noise / c.b, c.measurable) - 2
    return f"{c.a / c.b - 1:+.{d}%}", f"±{c.noise / c.b:.{d}%}"


def link_of(link, allreduce):
    """The link a training sweep's model uses: `link`, or the fit of `allreduce` (an
    `AllReduceJobResult`); refused when both are given and disagree."""
    if allreduce is None:
        return link
    if link is None:
        return allreduce.link
    if allreduce.n_workers < 2 or link != allreduce.link:
        raise ValueError("`link` is not this all-reduce job's fit: pass the job it came from")
    return link


@dataclasses.dataclass
class TrainingSweepResult(Reported):
    """Training jobs on 1, 2, ... workers beside the cost model's step times (if `link`).

    With `allreduce`, the job whose fit `link` is, the model's all-reduce carries that fit's band
    (`AllReduceJobResult.ring_time_s`) and a step outside it is read as the model missing."""

    jobs: list[TrainingJobResult]
    link: AlphaBeta | None
    cores: int = dataclasses.field(default_factory=usable_cores)
    allreduce: AllReduceJobResult | None = None

    def __post_init__(self):
        self.link = link_of(self.link, self.allreduce)

    def plot(self, ax=None):
        """`plot_training_sweep` of this sweep."""
        return plot_training_sweep(self, ax)

    @property
    def one(self) -> TrainingJobResult | None:
        return next((j for j in self.jobs if j.n_workers == 1), None)

    def predicted_s(self, job: TrainingJobResult) -> float | None:
        if self.link is None or self.one is None:
            return None
        return predict_step_s(
            job.n_workers, self.one.step_s, job.gradient_bytes, self.link, self.cores
        )

    @property
    def verdict(self) -> str:
        one = self.one
        if one is None:
            return ""
        return "; ".join(scaling_sentence(job, one) for job in self.jobs if job is not one)

    def ring_band_s(self, job: TrainingJobResult) -> float | None:
        """How far the model's all-reduce for `job` could move with the fit's inputs (None
        without the all-reduce job, or for a run that kept no noise)."""
        if self.allreduce is None or job.n_workers < 2:
            return None
        return self.allreduce.ring_time_s(job.n_workers, job.gradient_bytes)[1]

    def _against_model(self, job: TrainingJobResult):
        """(comparison, its noise, the fit's band, the compute, the step's noise) of `job`'s
        step against the model's; None where there is no model to read (one worker)."""
        predicted, one = self.predicted_s(job), self.one
        if predicted is None or job is one:
            return None
        compute = one.step_s * max(1.0, job.n_workers / self.cores)
        step_noise = job.step_s * relative_noise(job.per_sample)
        band = self.ring_band_s(job)
        noise = step_noise + compute * relative_noise(one.per_sample) + (band or 0.0)
        return Comparison(job.step_s, predicted, noise), noise, band, compute, step_noise

    def model_misses(self, job: TrainingJobResult) -> str | None:
        """The measured step's gap from the model's ('-19.4%'), as `model_sentence` prints it,
        where the model misses it (beyond the noise with the fit's band counted); else None."""
        found = self._against_model(job)
        if found is None or found[2] is None or not found[0].measurable:
            return None
        return _gap_and_band(found[0])[0]

    def model_sentence(self, job: TrainingJobResult) -> str | None:
        """The measured step against the model's, beyond the noise of both step times and the
        alpha-beta fit's band or not (the model inherits one worker's step noise and the fit's
        band; without the all-reduce job the fit's band is unknown and a gap is not read)."""
        found = self._against_model(job)
        if found is None:
            return None
        c, noise, band, compute, step_noise = found
        predicted = c.b
        # read 174: '(±10%)' after 'the fit's band' read as the fit's own; it is the sum
        counted = "the step times' noise" + (
            "" if band is None else " plus the all-reduce fit's band"
        )
        said = (
            f"{job.n_workers} workers: measured step {format_seconds(job.step_s)}, the model's "
            f"{format_seconds(predicted)}"
        )
        shown, spread = _gap_and_band(c)
        if not c.measurable:
            return f"{said}: within {counted} ({spread} in all)"
        gap = f"{shown} from the model"
        if band is None:  # read 102: the fit's band, printed two cells later, covered a -14%
            said += (
                f": {gap}, outside the noise of the step times ({spread}), but the "
                "alpha-beta fit's own band is not counted here (no all-reduce job given), so this "
                "is not read as the model missing"
            )
        else:  # read 103: with the fit's band counted, a gap beyond it is the model's miss
            said += (
                f": {gap}, outside {counted} ({spread} in all): the model "
                f"misses at {job.n_workers} workers (its step is "
                f"{'longer' if predicted > job.step_s else 'shorter'} than the measured one)"
            )
        ring = predicted - compute
        if job.step_s + step_noise < ring - (band or 0.0):  # read 95; beyond the noise (101)
            fit = "the fit's band not counted" if band is None else "and the fit's band"
            said += (
                f"; the step is shorter than the model's all-reduce alone "
                f"({format_seconds(ring)}) beyond the step's noise ({fit}), so it cannot hold "
                "that all-reduce as fitted: either the fitted all-reduce is off at this size, or "
                "the step's all-reduce costs less than the sweep's (hypotheses, not told apart "
                "here)"
            )
        return said

    def tables(self) -> list[Table]:
        first, one = self.jobs[0], self.one
        rows = []
        for job in self.jobs:
            predicted = self.predicted_s(job)
            losses = job.workers[0]["losses"]
            rows.append(
                (
                    job.n_workers,
                    format_seconds(job.step_s),
                    f"±{relative_noise(job.per_sample):.0%}",
                    "" if predicted is None else format_seconds(predicted),
                    ""
                    if predicted is None
                    else (
                        "its input"  # the model starts from one worker's step (read 72)
                        if job is one
                        else f"{Residual(0, job.step_s, predicted).relative:+.0%}"
                    ),
                    f"{job.throughput:,.0f}",
                    f"{job.throughput / one.throughput:.2f}x" if one else "",
                    f"{losses[0]:.2f} -> {losses[-1]:.2f}",
                    "yes" if job.weights_identical else "NO",
                )
            )
        verdicts = [self.verdict] if self.verdict else []
        verdicts.append(  # what the bands in the sentences below are built from (read 58)
            "noise: the spread of the median step over blocks of consecutive steps (their IQR "
            "over their median, at least the 5% floor); a comparison's band adds both jobs' noises"
        )
        for job in self.jobs:
            if job.n_workers > self.cores:
                verdicts.append(
                    f"{job.n_workers} workers on {cores_phrase(self.cores)}: they take turns on "
                    f"{'it' if self.cores == 1 else 'them'} (expected: the operating system's "
                    "scheduling; the model's max(1, K / cores))"
                )
        if one is not None and self.link is not None:
            for job in self.jobs:
                if job.n_workers > 1 and job.throughput < one.throughput:
                    ring = self.predicted_s(job) - one.step_s * max(1, job.n_workers / self.cores)
                    verdicts.append(
                        f"{job.n_workers} workers: the model puts the all-reduce at "
                        f"{format_seconds(ring)} per step, beside one worker's compute of "
                        f"{format_seconds(one.step_s)}"
                    )
        verdicts += [said for job in self.jobs if (said := self.model_sentence(job))]
        flags = [
            f"{job.n_workers} workers ended with different weights: not in sync"
            for job in self.jobs
            if not job.weights_identical
        ]
        title = (
            f"data-parallel training, Dense({first.width})-relu-Dense(1), batch "
            f"{first.batch_per_worker} per worker, {format_bytes(first.gradient_bytes)} of "
            f"gradients; {cores_phrase(self.cores)}"
        )
        columns = (
            "workers",
            "step",
            "noise",
            "predicted",
            "resid.",
            "samples/s",
            "vs 1 worker",
            "loss, worker 0",
            "same weights",
        )
        return [Table(title, columns, rows, verdicts, flags)]


def check_sweep(worker_counts, width, batch_per_worker, steps, warmup, timeout_s) -> list[int]:
    counts = require_sweep("worker_counts", worker_counts, 1)
    require_processes("the training sweep", max(counts))
    check_training(max(counts), width, batch_per_worker, steps, warmup, timeout_s)
    return counts


def run_training_sweep(
    worker_counts=(1, 2, 4),
    link: AlphaBeta | None = None,
    allreduce: AllReduceJobResult | None = None,
    progress=None,
    width: int = 256,
    batch_per_worker: int = 256,
    steps: int | None = None,
    warmup: int = 5,
    timeout_s: float = 60.0,
    board: ProgressBoard | None = None,
    **options,
) -> TrainingSweepResult:
    """One `run_training` per worker count, one after another (never two clusters at once),
    all admitted before the first starts. `progress(done, total, status)` over the whole sweep.
    The cost model uses `link`, or the fit of `allreduce` (an `AllReduceJobResult`), whose band it
    then counts."""
    link_of(link, allreduce)  # refused before any process starts
    steps = machine_defaults().steps if steps is None else steps
    counts = check_sweep(worker_counts, width, batch_per_worker, steps, warmup, timeout_s)
    if board is None:
        board = ProgressBoard(progress, sum(counts) * (warmup + steps))
    jobs = [
        run_training(
            n,
            width=width,
            batch_per_worker=batch_per_worker,
            steps=steps,
            warmup=warmup,
            timeout_s=timeout_s,
            board=board,
            **options,
        )
        for n in counts
    ]
    return TrainingSweepResult(jobs, link, allreduce=allreduce)


def plot_training_sweep(sweep: TrainingSweepResult, ax=None):
    """Samples per second against workers: measured, the cost model, and the ideal K * one."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.8))
    ks = [job.n_workers for job in sweep.jobs]
    ax.plot(ks, [job.throughput for job in sweep.jobs], "o-", label="measured")
    predicted = [sweep.predicted_s(job) for job in sweep.jobs]
    if None not in predicted:
        rates = [
            j.n_workers * j.batch_per_worker / p for j, p in zip(sweep.jobs, predicted, strict=True)
        ]
        ax.plot(ks, rates, "s--", label="cost model")
    one = sweep.one
    if one is not None:
        ax.plot(ks, [k * one.throughput for k in ks], ":", c="gray", label="ideal: K x one worker")
    ax.axvline(sweep.cores, c="tab:red", lw=1, ls=":", label=cores_phrase(sweep.cores))
    ax.set(xlabel="workers", ylabel="samples/s (all workers)", xticks=ks, ylim=(0, None))
    ax.set_title("data-parallel training under MultiWorkerMirroredStrategy")
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax.figure
