"""Several TensorFlow processes as one cluster: MultiWorkerMirroredStrategy on loopback.

A job is a `WorkerGroup` of K worker processes, each told a TF_CONFIG that names every worker at
127.0.0.1:PORT and its own index. Each builds `tf.distribute.MultiWorkerMirroredStrategy` with
RING collectives and a per-collective timeout, then runs one of the two targets below:

- `allreduce_worker`: sums a float32 vector of S bytes over the K workers (the ring: reduce-
  scatter, then all-gather), for several S. The fit is t(S) = alpha + S / beta (`AlphaBeta`).
- `training_worker`: data parallel. Every worker holds the same model, computes the gradient
  g_k of its own shard (batch b), the ring sums them, and each applies the same update
  w <- w - lr * sum_k g_k, with the loss divided by the global batch K*b (so the sum is the
  gradient of the mean): the weights stay identical on every worker.

On real machines the same target runs with a TF_CONFIG that names real hosts (`main`, printed
by `real_cluster_tf_config`); there a launcher's timeouts and restarts replace the group's.
Caveats: TF's gRPC servers listen on 0.0.0.0:PORT whatever TF_CONFIG says; MWMS's constructor
waits for the whole cluster with no timeout of its own, so workers are always subprocesses under
the group's timeouts; MWMS ignores SIGTERM, hence the short grace before SIGKILL.

Measured (TF 2.21, 2 CPU cores, 1 op thread per worker, 2 workers): a cluster start costs 3-5 s
(TensorFlow's import in each worker); alpha ~ 2-3 ms per all-reduce, beta ~ 250-390 MB/s; each
worker peaks at ~0.75 GiB RSS idle (~0.45 GiB of it TF's shared libraries, counted again in
every process) and ~0.9 GiB after a 16 MiB all-reduce. Four workers on two cores take turns on
them: their steps are slower than two workers', and throughput falls. With a small model even
two workers can be slower than one: the all-reduce's alpha outweighs a sub-millisecond step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import resource
import shlex
import statistics
import sys
import tempfile
import time

from d2lhelpers.collectives import allreduce_time_s
from d2lhelpers.costs import AlphaBeta, fit_alpha_beta, replicas_vs_one_group
from d2lhelpers.units import format_bytes, format_rate, format_seconds, usable_cores
from d2lhelpers.worker_main import WorkerContext
from d2lhelpers.workers import WorkerError, WorkerGroup

KiB, MiB = 1024, 1024 * 1024
# Up to 16 MiB: the ring over gRPC holds ~7x the message in buffers at its peak (measured:
# +240 MB per worker at 32 MiB, where fresh pages also bend the line upwards).
DEFAULT_SIZES = (4 * KiB, 256 * KiB, 4 * MiB, 16 * MiB)
COLLECTIVE_TIMEOUT_S = 10.0  # one collective waiting longer than this fails: a dead peer
GRACE_S = 0.3  # MWMS ignores SIGTERM: SIGKILL follows soon
FEATURES = 64
CORES = usable_cores()
ALLREDUCE_ARGS = {"sizes": list(DEFAULT_SIZES), "repeats": 10, "warmup": 2}
TRAINING_ARGS = {
    "width": 256,
    "batch": 256,
    "steps": 100,
    "warmup": 5,
    "learning_rate": 0.02,
    "seed": 0,
}


# --- inside a worker ------------------------------------------------------------------------------


def _strategy(timeout_s: float):
    import tensorflow as tf

    # Set by WorkerGroup; on a real host TF's own defaults (all cores) apply.
    if "TF_NUM_INTRAOP_THREADS" in os.environ:
        tf.config.threading.set_intra_op_parallelism_threads(
            int(os.environ["TF_NUM_INTRAOP_THREADS"])
        )
        tf.config.threading.set_inter_op_parallelism_threads(
            int(os.environ["TF_NUM_INTEROP_THREADS"])
        )
    ring = tf.distribute.experimental.CommunicationImplementation.RING
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=ring, timeout_seconds=timeout_s
    )
    return tf, tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def _memory() -> dict:
    """This process's peak resident set, and its PSS now (shared library pages split)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KiB  # Linux: KiB
    pss = 0
    with contextlib.suppress(OSError):
        with open("/proc/self/smaps_rollup") as rollup:
            pss = next(int(line.split()[1]) * KiB for line in rollup if line.startswith("Pss:"))
    return {"peak_rss_bytes": peak, "pss_bytes": pss}


def allreduce_worker(context: WorkerContext) -> dict:
    """Time an all-reduce of each size: warm-up, then `repeats` timed calls, the same on every
    worker (a collective needs all of them: a time budget could end them at different counts)."""
    args = context.args
    tf, strategy = _strategy(args["timeout_s"])
    n = strategy.num_replicas_in_sync
    context.ready(replicas=n)
    sum_op = tf.distribute.ReduceOp.SUM

    def all_reduce(x):
        # identity: places the input on this replica's device, which the collective needs
        return tf.distribute.get_replica_context().all_reduce(sum_op, tf.identity(x))

    @tf.function
    def all_reduce_head(x):  # the whole sum is made; only its first element is fetched
        return strategy.run(all_reduce, args=(x,))[:1]

    @tf.function
    def sum_is_exact(x, base):  # worker k sends (k+1) * base: the sum is n(n+1)/2 * base
        total = strategy.run(all_reduce, args=(x,))
        return tf.reduce_all(tf.equal(total, base * (n * (n + 1) / 2)))

    medians, correct = [], True
    for done, nbytes in enumerate(args["sizes"], start=1):
        base = tf.cast(tf.range(nbytes // 4) % 7, tf.float32)  # small integers: exact sums
        x = base * (context.index + 1)
        correct &= bool(sum_is_exact(x, base))
        del base
        for _ in range(args["warmup"]):
            all_reduce_head(x).numpy()
        times = []
        for _ in range(args["repeats"]):
            began = time.perf_counter()
            all_reduce_head(x).numpy()  # returns once this worker holds the sum
            times.append(time.perf_counter() - began)
        medians.append(statistics.median(times))
        del x
        context.progress(done=done, of=len(args["sizes"]), nbytes=nbytes, median_s=medians[-1])
    return {"medians_s": medians, "sums_correct": correct, **_memory()}


def training_worker(context: WorkerContext) -> dict:
    """Data-parallel SGD on this worker's shard of synthetic data (see the module doc)."""
    import numpy as np

    args = context.args
    tf, strategy = _strategy(args["timeout_s"])
    import keras

    n, batch, seed = strategy.num_replicas_in_sync, args["batch"], args["seed"]
    context.ready(replicas=n)
    start_file = args.get("start_file")  # failure demo: independent jobs start together
    deadline = time.monotonic() + args["timeout_s"]
    while start_file and not os.path.exists(start_file) and time.monotonic() < deadline:
        time.sleep(0.02)
    # y = x . w_true + noise: w_true is one for all; each worker's x comes from its own seed.
    w_true = np.random.default_rng(seed).standard_normal((FEATURES, 1))
    rng = np.random.default_rng([seed, context.index])
    xs = rng.standard_normal((8, batch, FEATURES)).astype("float32")
    ys = (xs @ w_true + 0.1 * rng.standard_normal((8, batch, 1))).astype("float32")
    with strategy.scope():
        keras.utils.set_random_seed(seed)
        model = keras.Sequential(
            [
                keras.Input((FEATURES,)),
                keras.layers.Dense(args["width"], activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        optimizer = keras.optimizers.SGD(learning_rate=args["learning_rate"])

    @tf.function
    def train_step(x, y):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=n * batch)
            grads = tape.gradient(loss, model.trainable_variables)
            # Keras's optimizer sums the gradients over the workers (a ring all-reduce) first.
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss * n  # this worker's mean loss, before the update

        return strategy.run(replica_step, args=(x, y))

    total = args["warmup"] + args["steps"]
    report_every = max(1, total // 10)
    losses, times = [], []
    for step in range(total):
        began = time.perf_counter()
        loss = float(train_step(xs[step % 8], ys[step % 8]))  # a tf.function returns when done
        if step >= args["warmup"]:
            times.append(time.perf_counter() - began)
        losses.append(loss)
        if (step + 1) % report_every == 0 or step + 1 == total:
            context.progress(step=step + 1, of=total, loss=loss)
    weights = model.get_weights()
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes() for w in weights))
    return {
        "step_s": times,
        "losses": losses,
        "weights_sha256": digest.hexdigest(),
        "gradient_bytes": 4 * sum(int(w.size) for w in weights),
        **_memory(),
    }


# --- in the notebook's process ------------------------------------------------------------------


def _run_job(target, n_workers, args, timeout_s, progress):
    """One MWMS job: (per-worker results, seconds to start, seconds in all). Always cleaned up."""
    deadline = time.monotonic() + timeout_s
    began = time.monotonic()
    args = {**args, "timeout_s": args.get("timeout_s", COLLECTIVE_TIMEOUT_S)}
    with WorkerGroup(
        f"d2lhelpers.cluster:{target}",
        n_workers,
        args=args,
        tf_config_job="worker",
        ready_timeout=timeout_s,
        grace_s=GRACE_S,
    ) as group:
        started = time.monotonic() - began
        results = group.results(max(1.0, deadline - time.monotonic()), on_progress=progress)
    return results, started, time.monotonic() - began


def _memory_lines(results: list[dict]) -> list[str]:
    peak = sum(r["peak_rss_bytes"] for r in results)
    pss = sum(r["pss_bytes"] for r in results)
    this = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KiB
    return [
        f"memory: peak RSS summed over {len(results)} worker(s) {format_bytes(peak)}, plus this "
        f"process's {format_bytes(this)} = {format_bytes(peak + this)}",
        f"  (each RSS counts TF's shared libraries again; PSS, which splits them: "
        f"{format_bytes(pss)} over the workers)",
    ]


@dataclasses.dataclass
class AllReduceJob:
    """All-reduce times per size on `n_workers` MWMS workers, and the alpha-beta fit."""

    n_workers: int
    sizes: list[int]
    worker_medians_s: list[list[float]]  # [worker][size]
    sums_correct: list[bool]
    workers: list[dict]  # each worker's whole result (memory included)
    start_s: float
    wall_s: float

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
        hops = 2 * (self.n_workers - 1)
        fit = self.fitted
        return AlphaBeta(fit.alpha_s / hops, fit.beta_bytes_per_s * hops / self.n_workers)

    def lines(self) -> list[str]:
        fit, two = self.fitted, self.two_point
        out = [
            f"MultiWorkerMirroredStrategy all-reduce (RING), {self.n_workers} worker processes "
            f"on loopback, 1 op thread each; cluster start {self.start_s:.1f} s, job "
            f"{self.wall_s:.1f} s",
            f"sums correct on every worker: {'yes' if all(self.sums_correct) else 'NO'}",
            f"least squares: alpha = {format_seconds(fit.alpha_s)}, beta = "
            f"{_rate(fit.beta_bytes_per_s)}",
            f"two points: alpha = {format_seconds(two.alpha_s)} ({format_bytes(self.sizes[0])} "
            f"alone), beta = {_rate(two.beta_bytes_per_s)} ({format_bytes(self.sizes[-1])})",
            "      size "
            + "".join(f"  worker {k}" for k in range(self.n_workers))
            + "   all-reduce   fit (resid.)   two points (resid.)",
        ]
        for i, size in enumerate(self.sizes):
            row = "".join(f" {format_seconds(w[i]):>9}" for w in self.worker_medians_s)
            t = self.times[i]
            cells = [
                f"{format_seconds(m.predict(size)):>9} ({(t - m.predict(size)) / t:+4.0%})"
                for m in (fit, two)
            ]
            out.append(
                f"{format_bytes(size):>10} {row}    {format_seconds(t):>9}   " + "   ".join(cells)
            )
        if self.n_workers > 1:
            link = self.link
            out.append(
                f"per link (ring of {self.n_workers}): alpha_link = "
                f"{format_seconds(link.alpha_s)}, beta_link = {_rate(link.beta_bytes_per_s)}; on "
                "loopback a 'link' is gRPC through the kernel, on the cores that compute"
            )
        return out + _memory_lines(self.workers)


def _rate(bytes_per_s: float) -> str:
    return "unbounded" if math.isinf(bytes_per_s) else format_rate(bytes_per_s, "B/s")


def allreduce_job(
    n_workers: int = 2,
    sizes=DEFAULT_SIZES,
    repeats: int = 10,
    timeout_s: float = 60.0,
    progress=None,
    warmup: int = 2,
) -> AllReduceJob:
    """One job of `n_workers` MWMS workers timing an all-reduce of each size (bytes per worker).

    `progress(worker_index, info)` after each size on each worker. Raises `WorkerError` naming
    the worker that failed; every process has ended when this returns or raises.
    """
    sizes = sorted({int(s) for s in sizes})
    if len(sizes) < 2 or any(s < 4 or s % 4 for s in sizes):
        raise ValueError(f"need two or more different sizes, multiples of 4 bytes: got {sizes}")
    args = {"sizes": sizes, "repeats": repeats, "warmup": warmup}
    results, start, wall = _run_job("allreduce_worker", n_workers, args, timeout_s, progress)
    medians = [r["medians_s"] for r in results]
    correct = [r["sums_correct"] for r in results]
    return AllReduceJob(n_workers, sizes, medians, correct, results, start, wall)


def plot_allreduce_job(job: AllReduceJob, ax=None):
    """Log-log: each worker's medians, the all-reduce time, the two alpha-beta models."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    low, high = job.sizes[0], job.sizes[-1]
    grid = [low * (high / low) ** (i / 40) for i in range(41)]
    for model, style, label in (
        (job.fitted, "-", "least squares"),
        (job.two_point, ":", "two points"),
    ):
        ax.plot(grid, [model.predict(s) for s in grid], style, label=f"model, {label}")
    for k, medians in enumerate(job.worker_medians_s):
        ax.plot(job.sizes, medians, "x", ms=5, label=f"worker {k}")
    ax.plot(job.sizes, job.times, "o", c="black", mfc="none", label="measured (slowest worker)")
    ax.set(xscale="log", yscale="log", xlabel="bytes per worker", ylabel="time (s)")
    ax.set_title(f"MWMS ring all-reduce, {job.n_workers} processes on loopback")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.figure.tight_layout()
    return ax.figure


# --- data-parallel training -----------------------------------------------------------------------


@dataclasses.dataclass
class TrainingJob:
    """One data-parallel training job: each worker's step times, losses, final weights' hash."""

    n_workers: int
    width: int
    batch_per_worker: int
    workers: list[dict]
    start_s: float
    wall_s: float

    @property
    def step_s(self) -> float:
        """The slowest worker's median step: a step ends when every worker has the sum."""
        return max(statistics.median(w["step_s"]) for w in self.workers)

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

    def lines(self) -> list[str]:
        losses = self.workers[0]["losses"]
        out = [
            f"{self.n_workers} worker(s) x batch {self.batch_per_worker} (global "
            f"{self.n_workers * self.batch_per_worker}), Dense({self.width})-relu-Dense(1), "
            f"{format_bytes(self.gradient_bytes)} of gradients all-reduced per step",
            f"step {format_seconds(self.step_s)}, throughput "
            f"{format_rate(self.throughput, 'samples/s')}; cluster start {self.start_s:.1f} s, "
            f"job {self.wall_s:.1f} s",
            f"loss on worker 0's shard: {losses[0]:.3f} at the first step -> {losses[-1]:.3f} "
            f"after {len(losses)}",
            f"weights identical on every worker: {'yes' if self.weights_identical else 'NO'}",
        ]
        if self.n_workers > CORES:
            out.append(_OVERSUBSCRIBED.format(n=self.n_workers, cores=CORES))
        return out + _memory_lines(self.workers)


_OVERSUBSCRIBED = (
    "{n} workers on {cores} cores: they take turns on the cores, so more workers can be slower "
    "(each step waits for the slowest worker, and the all-reduce's copies need the same cores)"
)


def training_job(
    n_workers: int = 2,
    width: int = 256,
    batch_per_worker: int = 256,
    steps: int = 100,
    timeout_s: float = 60.0,
    progress=None,
    warmup: int = 5,
    learning_rate: float = 0.02,
    seed: int = 0,
) -> TrainingJob:
    """Data-parallel SGD of Dense(width)-relu-Dense(1) on `n_workers` MWMS workers.

    Weak scaling: every worker trains on its own `batch_per_worker` samples per step (synthetic,
    made from `seed` and its index), so the ideal is K times the samples per second of one.
    `progress(worker_index, info)` about ten times per worker. Raises `WorkerError` naming the
    worker that failed; every process has ended when this returns or raises.
    """
    args = dict(
        batch=batch_per_worker,
        width=width,
        steps=steps,
        warmup=warmup,
        seed=seed,
        learning_rate=learning_rate,
    )
    results, start, wall = _run_job("training_worker", n_workers, args, timeout_s, progress)
    return TrainingJob(n_workers, width, batch_per_worker, results, start, wall)


def predict_step_s(
    n_workers: int, one_worker_step_s: float, gradient_bytes: int, link: AlphaBeta, cores=CORES
) -> float:
    """The cost model of a data-parallel step on K workers, with b samples each:

        t(K) = t(1) * max(1, K / cores) + T_ring(K, G),
        T_ring(K, G) = 2(K-1) alpha_link + 2(K-1) ceil(G/K) / beta_link   (0 for K = 1)

    t(1): the measured step of one worker, all compute (it all-reduces with nobody). Each worker
    computes the same b samples, so compute stays t(1) until the workers outnumber the cores and
    must share them. G: the gradient bytes; alpha_link, beta_link from an all-reduce sweep
    (`AllReduceJob.link`). No overlap of compute and communication is assumed.
    """
    compute = one_worker_step_s * max(1.0, n_workers / cores)
    if n_workers == 1:
        return compute
    ring = allreduce_time_s("ring", n_workers, gradient_bytes, link.alpha_s, link.beta_bytes_per_s)
    return compute + ring


@dataclasses.dataclass
class TrainingSweep:
    """Training jobs on 1, 2, ... workers beside the cost model's step times (if `link`)."""

    jobs: list[TrainingJob]
    link: AlphaBeta | None

    def predicted_s(self, job: TrainingJob) -> float | None:
        one = next((j for j in self.jobs if j.n_workers == 1), None)
        if self.link is None or one is None:
            return None
        return predict_step_s(job.n_workers, one.step_s, job.gradient_bytes, self.link)

    def lines(self) -> list[str]:
        first = self.jobs[0]
        out = [
            f"data-parallel training, Dense({first.width})-relu-Dense(1), batch "
            f"{first.batch_per_worker} per worker, {format_bytes(first.gradient_bytes)} of "
            f"gradients; {CORES} CPU cores",
            f"{'workers':>7} {'step':>9} {'predicted':>11} {'resid.':>7} {'samples/s':>14} "
            f"{'vs 1 worker':>12}  {'loss, worker 0':15}  same weights",
        ]
        base = first.throughput if first.n_workers == 1 else None
        for job in self.jobs:
            predicted = self.predicted_s(job)
            guess = "" if predicted is None else format_seconds(predicted)
            resid = "" if predicted is None else f"{(job.step_s - predicted) / job.step_s:+.0%}"
            ratio = f"{job.throughput / base:.2f}x" if base else ""
            loss = job.workers[0]["losses"]
            out.append(
                f"{job.n_workers:7d} {format_seconds(job.step_s):>9} {guess:>11} {resid:>7} "
                f"{job.throughput:14,.0f} {ratio:>12}  {f'{loss[0]:.2f}->{loss[-1]:.2f}':15}  "
                f"{'yes' if job.weights_identical else 'NO'}"
            )
        for fewer, job in zip(self.jobs, self.jobs[1:], strict=False):
            if job.n_workers > CORES:
                out.append(_OVERSUBSCRIBED.format(n=job.n_workers, cores=CORES))
            elif job.throughput < fewer.throughput:
                out.append(
                    f"{job.n_workers} workers: fewer samples/s than {fewer.n_workers}, a step "
                    f"{format_seconds(job.step_s)} against {format_seconds(fewer.step_s)}: more "
                    "workers can be slower when the all-reduce every step waits for costs more "
                    "than the compute they share"
                )
        return out


def training_sweep(
    worker_counts=(1, 2, 4), link: AlphaBeta | None = None, progress=None, **job_options
) -> TrainingSweep:
    """One `training_job` per worker count, one after another (never two clusters at once).
    `progress(worker_index, info)` gets info['workers'] too."""
    jobs = []
    for n in worker_counts:
        report = (
            None if progress is None else (lambda i, info, n=n: progress(i, {**info, "workers": n}))
        )
        jobs.append(training_job(n, progress=report, **job_options))
    return TrainingSweep(jobs, link)


def plot_training_sweep(sweep: TrainingSweep, ax=None):
    """Samples per second against workers: measured, the cost model, and the ideal K * one."""
    import matplotlib.pyplot as plt

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
    one = sweep.jobs[0]
    if one.n_workers == 1:
        ax.plot(ks, [k * one.throughput for k in ks], ":", c="gray", label="ideal: K x one worker")
    ax.axvline(CORES, c="tab:red", lw=1, ls=":", label=f"{CORES} CPU cores")
    ax.set(xlabel="workers", ylabel="samples/s (all workers)", xticks=ks, ylim=(0, None))
    ax.set_title("data-parallel training under MultiWorkerMirroredStrategy")
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax.figure


# --- replicas vs one big group, with real processes (seed 004, "Try it" 3) ------------------------


@dataclasses.dataclass
class FailureDemo:
    """One worker killed mid-run: in a set of independent replicas, or in one big group."""

    layout: str  # "replicas" or "group"
    n_workers: int
    killed: int
    killed_at_step: int
    errors: list[str]  # one line per WorkerError, the killed worker's first
    error_after_s: list[float]  # from the kill to each error
    survivors: list[TrainingJob]  # replicas that finished
    wall_s: float

    @property
    def lost_share(self) -> float:
        """Share of the workers whose work did not finish: measured, from who survived."""
        return 1 - len(self.survivors) / self.n_workers

    def lines(self) -> list[str]:
        replicas = self.layout == "replicas"
        out = [
            f"{self.n_workers} replicas of one worker each: replica 0's worker killed"
            if replicas
            else f"one group of {self.n_workers} workers: worker {self.killed} killed"
        ]
        out[0] += f" (SIGKILL) at step {self.killed_at_step}"
        out += [
            f"  {t:.2f} s later: {e}" for e, t in zip(self.errors, self.error_after_s, strict=True)
        ]
        # What the model says one failure costs, beside what this run lost.
        model = replicas_vs_one_group(
            self.n_workers, 1, compute_ms=1.0, comm_ms_group=0.0, comm_ms_all=0.0
        )
        expected = model.replicas if replicas else model.one_group
        if replicas:
            rate = format_rate(sum(job.throughput for job in self.survivors), "samples/s")
            out.append(
                f"  the other {len(self.survivors)} replica(s) finished every step ({rate}): "
                f"lost {self.lost_share:.0%} of the workers' capacity "
                f"(model: {expected.lost_on_failure:.0%})"
            )
        else:
            out.append(
                f"  the job failed as a whole: lost {self.lost_share:.0%} of the workers' capacity "
                f"(model: {expected.lost_on_failure:.0%}); every step since the last checkpoint "
                "must run again"
            )
        return out + [f"  demo took {self.wall_s:.1f} s; every process has ended"]


def _error_line(error: WorkerError) -> str:
    """A WorkerError's first line, plus its exception's name and TF's reason where it has them."""
    lines = str(error).splitlines()
    names = [m.group(1) for m in map(_EXCEPTION_LINE.match, lines) if m]
    reasons = [line.strip() for line in lines if "aborted by" in line or "timed out" in line]
    # Each peer that passes the abort on prefixes it again: keep one.
    reasons = [re.sub(r"(Collective ops is aborted by: )+", r"\1", line) for line in reasons]
    return ": ".join(lines[:1] + names[-1:] + reasons[:1])


_EXCEPTION_LINE = re.compile(r"\s+(?:\w+\.)*(\w+(?:Error|Exception)): ")


def failure_demo(
    layout: str = "replicas",
    n_workers: int = 2,
    steps: int = 400,
    width: int = 64,
    batch_per_worker: int = 64,
    timeout_s: float = 30.0,
    collective_timeout_s: float = 5.0,
) -> FailureDemo:
    """Kill one worker once it has done about a tenth of its `steps`; report what is lost.

    'replicas': `n_workers` independent one-worker jobs (a start file lets them begin together);
    replica 0 is killed, the others finish. 'group': one job of `n_workers`; its last worker is
    killed; the others fail too, on the lost connection or at `collective_timeout_s` at the latest.
    """
    if layout not in ("replicas", "group"):
        raise ValueError(f"layout must be 'replicas' or 'group', got {layout!r}")
    began = time.monotonic()
    args = {
        **TRAINING_ARGS,
        "width": width,
        "batch": batch_per_worker,
        "steps": steps,
        "warmup": 0,
        "timeout_s": collective_timeout_s,
    }
    target = "d2lhelpers.cluster:training_worker"
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        args["start_file"] = os.path.join(folder, "start")
        sizes = [1] * n_workers if layout == "replicas" else [n_workers]
        groups = [
            stack.enter_context(
                WorkerGroup(
                    target,
                    size,
                    args=args,
                    tf_config_job="worker",
                    ready_timeout=timeout_s,
                    grace_s=GRACE_S,
                )
            )
            for size in sizes
        ]
        open(args["start_file"], "w").close()
        victim, killed = groups[0], sizes[0] - 1
        step = victim.wait_for_progress(timeout_s)[killed]["step"]
        victim.kill_worker(killed)
        killed_at, errors, after = time.monotonic(), [], []
        for _ in range(sizes[0]):  # each worker of the victim's job fails, none hangs
            try:
                victim.results(timeout=collective_timeout_s + 5)
            except WorkerError as error:
                errors.append(_error_line(error))
                after.append(time.monotonic() - killed_at)
        survivors = [
            TrainingJob(1, width, batch_per_worker, group.results(timeout_s), 0.0, 0.0)
            for group in groups[1:]
        ]
    wall = time.monotonic() - began
    return FailureDemo(layout, n_workers, killed, step, errors, after, survivors, wall)


# --- the same job on real machines ----------------------------------------------------------------


@dataclasses.dataclass
class RealCluster:
    """The TF_CONFIG and the command line for each host of a real cluster (printed, not run)."""

    hosts: list[str]
    configs: list[dict]
    commands: list[str]

    def lines(self) -> list[str]:
        out = []
        for host, command in zip(self.hosts, self.commands, strict=True):
            out += [f"# on {host.rsplit(':', 1)[0]}:", command]
        return out + [
            "# From here a launcher takes over: Kubernetes (Kubeflow's TFJob) or Vertex AI writes "
            "each worker's TF_CONFIG and starts, restarts and ends the processes (on Slurm, TF's "
            "SlurmClusterResolver); the worker code stays this one."
        ]


def real_cluster_tf_config(
    hosts, target: str = "allreduce_worker", args: dict | None = None
) -> RealCluster:
    """Per host 'name:port': the TF_CONFIG of task i of job 'worker', and the command that runs
    `target` of this module there: exactly what a loopback job's worker i runs, with its
    TF_CONFIG naming 127.0.0.1 (`workers.tf_config`) swapped for this one."""
    hosts = list(hosts)
    if target not in ("allreduce_worker", "training_worker"):
        raise ValueError(f"target must be allreduce_worker or training_worker, got {target!r}")
    defaults = ALLREDUCE_ARGS if target == "allreduce_worker" else TRAINING_ARGS
    args = {**defaults, "timeout_s": COLLECTIVE_TIMEOUT_S, **(args or {})}
    configs = [
        {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
        for i in range(len(hosts))
    ]
    commands = [
        f"TF_CONFIG={shlex.quote(json.dumps(c))} python -m d2lhelpers.cluster {target} "
        f"{shlex.quote(json.dumps(args))}"
        for c in configs
    ]
    return RealCluster(hosts, configs, commands)


def main(argv=None) -> int:
    """`TF_CONFIG=... python -m d2lhelpers.cluster TARGET 'ARGS_JSON'`: one worker, no parent;
    ready, progress and the result go to stdout as JSON lines, as under a WorkerGroup."""
    target, args = (sys.argv[1:] if argv is None else argv)[:2]
    config = json.loads(os.environ["TF_CONFIG"])
    ports = [int(address.rsplit(":", 1)[1]) for address in config["cluster"]["worker"]]
    context = WorkerContext(config["task"]["index"], ports, json.loads(args), sys.stdout)
    run = {"allreduce_worker": allreduce_worker, "training_worker": training_worker}[target]
    context.send("result", run(context))
    return 0


if __name__ == "__main__":
    sys.exit(main())
