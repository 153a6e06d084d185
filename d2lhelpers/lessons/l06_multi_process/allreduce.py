"""Notebook 06, part 1: MWMS's ring all-reduce between worker processes, and its alpha-beta fit.

A job of K workers sweeps message sizes; at each, every worker times `repeats` all-reduces after
a warm-up and checks the sum exactly. The fit is t(S) = alpha + S / beta (`costs.AlphaBeta`).
"""

from __future__ import annotations

import dataclasses
import math

import matplotlib.pyplot as plt

from d2lhelpers.collectives.algorithms import allreduce_time_s
from d2lhelpers.collectives.costs import (
    FIT_METHOD,
    AlphaBeta,
    Residual,
    fit_alpha_beta,
    fit_noise_s,
)
from d2lhelpers.core.checks import require_count, require_sweep
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    BYTES_PER_FLOAT,
    format_bytes,
    format_rate,
    format_seconds,
    percent_beside,
    plural,
)
from d2lhelpers.core.verdicts import (
    NOISE_FLOOR,
    NOISY_CAUSES,
    NOISY_IQR,
    Spread,
    how_below_ideal,
    noise_of,
    noise_text,
    noisy_run,
    times_within,
)
from d2lhelpers.lessons.l06_multi_process.jobs import (
    machine_defaults,
    memory_table,
    require_seconds,
    require_workers,
    require_workers_memory,
    run_job,
)
from d2lhelpers.processes import mwms
from d2lhelpers.processes.group import OP_THREADS
from d2lhelpers.processes.progress import ProgressBoard
from d2lhelpers.processes.worker_main import memory_now
from d2lhelpers.processes.worker_memory import RING_COPIES, WORKER_BYTES, worker_memory_bytes


@dataclasses.dataclass
class AllReduceJobResult(Reported):
    """All-reduce times per size on `n_workers` MWMS workers, and the alpha-beta fit."""

    n_workers: int
    sizes: list[int]
    worker_medians_s: list[list[float]]  # [worker][size]
    sums_correct: list[bool]
    workers: list[dict]  # each worker's whole result (memory included)
    start_s: float
    wall_s: float
    where: str = "loopback"  # what joins the workers: loopback, or the link of `tools/hosts.py`
    worker_iqrs_s: list[list[float]] = dataclasses.field(default_factory=list)  # [worker][size]
    # this process's peak RSS when the job ended (read 69: read again when shown, it had grown)
    kernel_peak_rss_bytes: int | None = None
    op_threads: int = OP_THREADS  # each worker's intra-op threads, as its group began it

    def plot(self, ax=None):
        """`plot_allreduce_job` of this job."""
        return plot_allreduce_job(self, ax)

    @property
    def noises(self) -> list[Spread | None]:
        """Per size, the slowest worker's median and IQR: how far its time could move (None for
        a run recorded before workers sent their IQRs)."""
        if not self.worker_iqrs_s:
            return [None] * len(self.sizes)
        found = []
        for i, t in enumerate(self.times):
            slowest = max(range(self.n_workers), key=lambda k: self.worker_medians_s[k][i])
            found.append(Spread(t, self.worker_iqrs_s[slowest][i]) if t > 0 else None)
        return found

    @property
    def times(self) -> list[float]:
        """Per size, the slowest worker's median: the all-reduce is done when all are done."""
        return [max(column) for column in zip(*self.worker_medians_s, strict=True)]

    @property
    def fitted(self) -> AlphaBeta:
        """Least squares on relative error over every size (`fit_alpha_beta`)."""
        return fit_alpha_beta(self.sizes, self.times)

    @property
    def two_point(self) -> AlphaBeta:
        """alpha from the smallest size alone, beta from the largest less alpha."""
        if not self.times[-1] > self.times[0]:  # time did not grow with size: all latency
            return AlphaBeta(self.times[0], math.inf)
        return AlphaBeta.from_measurements(self.times[0], self.sizes[-1], self.times[-1])

    @property
    def link(self) -> AlphaBeta:
        """Per-link values of the fit, by the ring's count: alpha = 2(n-1) alpha_link and
        S / beta = 2(n-1)/n S / beta_link, as `collectives.allreduce_time_s('ring', ...)` wants."""
        if self.n_workers < 2:
            raise ValueError("one worker all-reduces with nobody: no link to measure")
        return self.fitted.ring_link(self.n_workers)

    def _below_smallest(self) -> dict[int, str]:
        """Index -> "beyond" or "inside": a larger size below the smallest's time by more than
        the noise floor, beyond both noises or inside them. Notebook 05 reads a size below
        alpha by the same rule (`how_below_ideal`): within the floor a size is read."""
        spreads = [
            Spread(t, 0.0) if n is None else n for t, n in zip(self.times, self.noises, strict=True)
        ]
        first = spreads[0]
        found = {
            i: how_below_ideal(s, first.median, noise_of(first)) for i, s in enumerate(spreads)
        }
        return {i: how for i, how in found.items() if i and how}

    def below_smallest(self) -> list[str]:
        """A larger message all-reduced faster than the smallest beyond both noises: below the
        latency the smallest sets, which the model cannot give, so its residual is not read (as
        notebook 05 reads a size below alpha; read 66: 6.45 ms at 64 KiB, 8.21 ms at 4 KiB)."""
        return [
            f"{format_bytes(self.sizes[i])} took {format_seconds(self.times[i])}, less than the "
            f"{format_bytes(self.sizes[0])} all-reduce's {format_seconds(self.times[0])} beyond "
            "both noises: below the latency the smallest size sets, which alpha + S / beta cannot "
            f"give, so its residual is not read as the model's ({NOISY_CAUSES})"
            for i, how in self._below_smallest().items()
            if how == "beyond"
        ]

    def faster_than_smallest_within(self) -> str:
        """'; 16.0 KiB took less than ...' for larger sizes faster than the smallest by more than
        the floor, within both noises (beyond them, `below_smallest` flags them): the two-point
        alpha is the smallest's time, so they sit below it, and its residuals there say more
        about its noise than the model (read 68: -13% to -20% beside a 4 KiB time at ±70%)."""
        faster = [
            format_bytes(self.sizes[i])
            for i, how in self._below_smallest().items()
            if how == "inside"
        ]
        if not faster:
            return ""
        noise = self.noises[0]
        spread = "" if noise is None else f", which spread {noise_text(noise)}"
        return (
            f"; {', '.join(faster)} took less than this alpha by more than {NOISE_FLOOR:.0%}, "
            f"within both noises: it is one size's time{spread}, a rough value, and its "
            "residuals at those sizes are not read as the model's"
        )

    def fit_reading(self) -> str | None:
        """Read 129: where the fit misses a size beyond that size's noise plus the fit's own
        band there (`fit_band_s`), as notebook 05 reads its residuals; None for a run that kept
        no noise. Sizes below the smallest beyond the floor are not read (`_below_smallest`)."""
        if None in self.noises:
            return None
        fit, below = self.fitted, self._below_smallest()
        misses, read, skipped, edge = [], 0, [], None
        for i, (size, t, noise) in enumerate(zip(self.sizes, self.times, self.noises, strict=True)):
            if i in below:
                skipped.append(format_bytes(size))
                continue
            read += 1
            predicted = fit.predict(size)
            band = noise_of(noise) + self.fit_band_s(lambda f, size=size: f.predict(size))
            # read 167: '+18%' beside its '±6%' read within: the band that made it so, printed
            if abs(t - predicted) > noise_of(noise) and (
                edge is None or abs(t - predicted) / band > edge[0]
            ):
                edge = (abs(t - predicted) / band, size, t, predicted, band)
            if abs(t - predicted) > band:
                misses.append(
                    f"{format_bytes(size)} ({t / predicted - 1:+.0%}, beyond "
                    f"±{format_seconds(band)})"
                )
        lead = "the fit against each size's time, beyond its noise plus the fit's own band there"
        # read 147: '5 sizes read' of 7, which two unsaid; read 165: that the fit used them
        left = (
            f" ({' and '.join(skipped)} not read: faster than the smallest size, "
            f"{format_bytes(self.sizes[0])}, by more than {NOISE_FLOOR:.0%}; the "
            f"{FIT_METHOD} fit still takes {'them' if len(skipped) > 1 else 'it'} in, and so "
            "do the cells that use its alpha and beta)"
            if skipped
            else ""
        )
        if not misses:
            near = ""
            if edge is not None:  # past its own noise, within the fit's band too
                _, size, t, predicted, band = edge
                shown = times_within(t, predicted, band)
                near = (
                    f"; past its own noise but within that band, nearest its edge: "
                    f"{format_bytes(size)}, {shown[0]} against the fit's {shown[1]}, within "
                    f"±{shown[2]}"
                )
            return f"{lead}: within it at all {read} sizes read{left}{near}"
        within = read - len(misses)
        return f"{lead}: misses at {', '.join(misses)}; within it at the other {within}{left}"

    def fit_band_s(self, value) -> float | None:
        """How far `value(fit)` (seconds) could move with each size's time moved by its noise
        (`costs.fit_noise_s`); None for a run that kept no noise."""
        if None in self.noises:
            return None
        return fit_noise_s(self.sizes, self.times, [noise_of(n) for n in self.noises], value)

    @property
    def alpha_band_s(self) -> float | None:
        """alpha's band: the fit's prediction at 0 bytes, moved by the sizes' noises."""
        return self.fit_band_s(lambda fit: fit.alpha_s)

    def ring_time_s(self, n_workers: int, nbytes: int) -> tuple[float, float | None]:
        """The model's ring all-reduce of `nbytes` on `n_workers`, from this fit's per-link
        alpha and beta, and its band (None for a run that kept no noise)."""

        def ring(fit: AlphaBeta) -> float:
            link = fit.ring_link(self.n_workers)
            return allreduce_time_s("ring", n_workers, nbytes, link.alpha_s, link.beta_bytes_per_s)

        return ring(self.fitted), self.fit_band_s(ring)

    @property
    def verdict(self) -> str:
        fit = self.fitted
        if not all(self.sums_correct):
            wrong = [i for i, ok in enumerate(self.sums_correct) if not ok]
            return f"the all-reduce's sums were WRONG on worker(s) {wrong}: its times mean nothing"
        alpha = alpha_text(fit.alpha_s, self.alpha_band_s)
        return (
            f"all-reduce between {self.n_workers} processes: alpha = {alpha} per call, "
            f"beta = {_rate(fit.beta_bytes_per_s)}; "
            "the sums were exact on every worker"
        )

    def tables(self) -> list[Table]:
        fit, two = self.fitted, self.two_point
        columns = ["size", *(f"worker {k}" for k in range(self.n_workers))]
        columns += ["all-reduce", "noise", "fit (resid.)", "two points (resid.)"]
        rows = []
        for i, (size, noise) in enumerate(zip(self.sizes, self.noises, strict=True)):
            t = self.times[i]
            said = [Residual(size, t, m.predict(size)) for m in (fit, two)]
            models = [f"{format_seconds(r.predicted_s)} ({r.relative:+.0%})" for r in said]
            each = [format_seconds(w[i]) for w in self.worker_medians_s]
            spread = "-" if noise is None else noise_text(noise)
            rows.append((format_bytes(size), *each, format_seconds(t), spread, *models))
        alpha = alpha_text(fit.alpha_s, self.alpha_band_s)
        verdicts = [
            f"{FIT_METHOD}: alpha = {alpha}, beta = {_rate(fit.beta_bytes_per_s)} "
            "(alpha's band: each size's time moved by its noise alone, the fit's alpha moved "
            "half that, root of the sum of squares)",
            f"two points: alpha = {format_seconds(two.alpha_s)} ({format_bytes(self.sizes[0])} "
            f"alone), beta = {_rate(two.beta_bytes_per_s)} ({format_bytes(self.sizes[-1])})"
            + self.faster_than_smallest_within(),
            f"cluster start {self.start_s:.1f} s, job {self.wall_s:.1f} s",
        ]
        reading = self.fit_reading()
        if reading is not None:
            verdicts.insert(2, reading)
        if self.n_workers > 1:
            link = self.link
            verdicts.append(
                f"per link (ring of {self.n_workers}): alpha_link = "
                f"{format_seconds(link.alpha_s)}, beta_link = {_rate(link.beta_bytes_per_s)}"
                + (
                    "; on loopback a 'link' is gRPC through the kernel, which runs on the cores "
                    "that compute (expected, not measured here): no rate is set for it to read "
                    "beta against (notebook 02 times raw "
                    "TCP on it; whether its rate moves with the compute is a hypothesis not "
                    "tested here; the two-host rows below read beta against a link's set rate)"
                    if self.where == "loopback"
                    else ""
                )
            )
        noisy = [
            f"{format_bytes(size)} ({percent_beside(noise.iqr / noise.median, NOISY_IQR)})"
            for size, noise in zip(self.sizes, self.noises, strict=True)
            if noise is not None and noisy_run(noise)
        ]  # as every measurement's table says it (read 54: ±33-39% printed with no word)
        flags = (
            [
                f"noisy: the slowest worker's IQR is above {NOISY_IQR:.0%} of its median at "
                f"{', '.join(noisy)}; {NOISY_CAUSES}"
            ]
            if noisy
            else []
        )
        flags += self.below_smallest()
        if not all(self.sums_correct):
            flags.append(self.verdict)
        else:  # worker k sends (k+1) x base; each checks the total it got against n(n+1)/2 x base
            verdicts.append("the sums were exact on every worker (each checked what it got)")
        title = (
            f"MultiWorkerMirroredStrategy all-reduce (RING), {self.n_workers} worker processes "
            f"on {self.where}, {plural(self.op_threads, 'op thread')} each"
        )
        return [
            Table(title, columns, rows, verdicts, flags),
            memory_table(
                self.workers,
                self.kernel_peak_rss_bytes,
                self.n_workers * worker_memory_bytes(max(self.sizes)),
            ),
        ]


def alpha_text(alpha_s: float, band_s: float | None = None) -> str:
    """A fitted latency with its band, or why it is not resolved: the fit keeps alpha >= 0, so 0
    means the line through the times would start below zero; why, these times cannot say (reads
    100 and 101: 'below this link's noise' beside 2.76 ms on a faster link, and 'the line
    misfits' beside held-out residuals of 1%); a band that reaches 0: the noise hides it."""
    if alpha_s <= 0:
        return (
            "not resolved (the fit hit alpha = 0: a line through these times would start below "
            "zero; these sizes do not resolve a latency, whether it is small beside their times "
            "or a straight line does not describe them)"
        )
    if band_s is None:  # a run that kept no noise: the value alone, as it was recorded
        return format_seconds(alpha_s)
    said = f"{format_seconds(alpha_s)} ±{format_seconds(band_s)}"
    if band_s >= alpha_s:
        return f"{said}: not resolved (its band reaches 0: the times' noise hides the latency)"
    return said


def _rate(bytes_per_s: float) -> str:
    return "unbounded" if math.isinf(bytes_per_s) else format_rate(bytes_per_s, "B/s")


def check_allreduce(n_workers, sizes, repeats, warmup, timeout_s) -> tuple[int, list[int]]:
    """Admission for `run_allreduce_job`: counts, sizes, the process cap and memory."""
    n = require_workers("the all-reduce job", n_workers, low=2)
    sizes = sorted(set(require_sweep("sizes", sizes, low=BYTES_PER_FLOAT)))
    if len(sizes) < 2 or any(s % BYTES_PER_FLOAT for s in sizes):
        raise ValueError(f"need two or more different sizes, multiples of 4 bytes: got {sizes}")
    require_count("repeats", repeats, 2)  # a spread needs two times
    require_count("warmup", warmup, 0)
    require_seconds("timeout_s", timeout_s)

    def largest(per_worker: float) -> str:
        fit = int((per_worker - WORKER_BYTES) / RING_COPIES) // BYTES_PER_FLOAT * BYTES_PER_FLOAT
        return f"the largest message that fits with {n} workers is {format_bytes(fit)}"

    require_workers_memory(
        "an all-reduce job of messages up to " + format_bytes(sizes[-1]),
        n,
        worker_memory_bytes(sizes[-1]),
        largest,
    )
    return n, sizes


def run_allreduce_job(
    n_workers: int = 2,
    sizes=None,
    repeats: int | None = None,
    timeout_s: float = 60.0,
    progress=None,
    warmup: int = 2,
    board: ProgressBoard | None = None,
    worker=mwms.allreduce_worker,
    where: str = "loopback",
    **group_options,
) -> AllReduceJobResult:
    """One job of `n_workers` MWMS workers timing an all-reduce of each size (bytes per worker).

    `worker` is the function each worker runs (the notebook passes its own `allreduce_worker`);
    `group_options` (`hosts`, `launch`) place the workers elsewhere than loopback (`where`).

    `sizes` and `repeats` default to `machine_defaults()`. Refused (ValueError/TypeError) before
    any process starts if a value is out of range or the workers would not fit in memory.
    `progress(done, total, status)` with a status per worker. Raises `WorkerError` naming the
    worker that failed; every process has ended when this returns or raises.
    """
    defaults = machine_defaults()
    sizes = defaults.sizes if sizes is None else sizes
    repeats = defaults.repeats if repeats is None else repeats
    n_workers, sizes = check_allreduce(n_workers, sizes, repeats, warmup, timeout_s)
    if board is None:
        board = ProgressBoard(progress, n_workers * len(sizes))
    board.stage("all-reduce", n_workers, len(sizes))
    args = {"sizes": sizes, "repeats": repeats, "warmup": warmup}
    results, start, wall = run_job(worker, n_workers, args, timeout_s, board, **group_options)
    medians = [r["medians_s"] for r in results]
    iqrs = [r["iqrs_s"] for r in results]
    correct = [r["sums_correct"] for r in results]
    return AllReduceJobResult(
        n_workers,
        sizes,
        medians,
        correct,
        results,
        start,
        wall,
        where,
        worker_iqrs_s=iqrs,
        kernel_peak_rss_bytes=memory_now()["peak_rss_bytes"],
        op_threads=group_options.get("intra_op_threads", OP_THREADS),
    )


def plot_allreduce_job(job: AllReduceJobResult, ax=None):
    """Log-log: each worker's medians, the all-reduce time, the two alpha-beta models."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    low, high = job.sizes[0], job.sizes[-1]
    grid = [low * (high / low) ** (i / 40) for i in range(41)]
    for model, style, label in (
        (job.fitted, "-", FIT_METHOD),
        (job.two_point, ":", "two points"),
    ):
        ax.plot(grid, [model.predict(s) for s in grid], style, label=f"model, {label}")
    for k, medians in enumerate(job.worker_medians_s):
        ax.plot(job.sizes, medians, "x", ms=5, label=f"worker {k}")
    ax.plot(job.sizes, job.times, "o", c="black", mfc="none", label="measured (slowest worker)")
    ax.set(xscale="log", yscale="log", xlabel="bytes per worker", ylabel="time (s)")
    ax.set_title(f"MWMS ring all-reduce, {job.n_workers} processes on {job.where}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.figure.tight_layout()
    return ax.figure
