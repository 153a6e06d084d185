"""What runs inside one worker process of a MultiWorkerMirroredStrategy job, and what it costs.

Each worker is told a TF_CONFIG that names every worker (127.0.0.1:PORT on loopback, real hosts
on a real cluster) and its own index. It builds `tf.distribute.MultiWorkerMirroredStrategy` with
RING collectives and a per-collective timeout, then runs one of the two targets below:

- `allreduce_worker`: sums a float32 vector of S bytes over the K workers (the ring: reduce-
  scatter, then all-gather), for several S, and returns the median time of each.
- `training_worker`: data parallel. Every worker holds the same model, computes the gradient
  g_k of its own shard (batch b), the ring sums them, and each applies the same update
  w <- w - lr * sum_k g_k, with the loss divided by the global batch K*b (so the sum is the
  gradient of the mean): the weights stay identical on every worker.

Both are started by name: `TARGETS` lists every "module:function" string the package hands to a
`WorkerGroup` (a test resolves each). On real machines the same target runs under
`python -m d2lhelpers.processes.mwms TARGET 'ARGS_JSON'` (`main`) with a TF_CONFIG naming real hosts
(`real_cluster_tf_config`); a launcher's timeouts and restarts then replace the group's.

Caveats: TF's gRPC servers listen on 0.0.0.0:PORT whatever TF_CONFIG says; MWMS's constructor
waits for the whole cluster with no timeout of its own, so workers are always subprocesses under
a group's timeouts; MWMS ignores SIGTERM, hence a short grace (`GRACE_S`) before SIGKILL.

Measured (TF 2.21, 2 CPU cores, 1 op thread per worker): a worker peaks at ~0.75-0.8 GiB RSS
(~0.4 GiB PSS: TF's shared libraries are counted again in every RSS) and grows by ~7x the
largest message during a ring all-reduce over gRPC. `worker_memory_bytes` is that model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shlex
import signal
import statistics
import sys
import time

from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import BYTES_PER_FLOAT, KiB, MiB
from d2lhelpers.processes.worker_main import WorkerContext

COLLECTIVE_TIMEOUT_S = 10.0  # one collective waiting longer than this fails: a dead peer
GRACE_S = 0.3  # MWMS ignores SIGTERM: SIGKILL follows soon
FEATURES = 64  # inputs of the training model
DATA_BATCHES = 8  # each worker cycles through this many synthetic batches
WORKER_BYTES = 800 * MiB  # one idle TensorFlow worker's peak RSS (measured ~0.75 GiB)
RING_COPIES = 8  # a ring all-reduce over gRPC holds ~7x the message at its peak, plus the input
TRAINING_COPIES = 10  # weights, gradients, the ring's copies of the gradients
ALLREDUCE_ARGS = {"sizes": [4 * KiB, 256 * KiB, 4 * MiB, 16 * MiB], "repeats": 10, "warmup": 2}
TRAINING_ARGS = {
    "width": 256,
    "batch": 256,
    "steps": 100,
    "warmup": 5,
    "learning_rate": 0.02,
    "seed": 0,
}
ALLREDUCE_TARGET = "d2lhelpers.processes.mwms:allreduce_worker"
TRAINING_TARGET = "d2lhelpers.processes.mwms:training_worker"
TARGETS = (ALLREDUCE_TARGET, TRAINING_TARGET)


def parameter_count(width: int) -> int:
    """Dense(FEATURES -> width)-relu-Dense(width -> 1): weights and biases."""
    return FEATURES * width + width + width + 1


def worker_memory_bytes(message_bytes: int = 0) -> int:
    """One worker's peak memory: TensorFlow itself, plus a ring all-reduce of `message_bytes`."""
    return WORKER_BYTES + RING_COPIES * message_bytes


def training_memory_bytes(width: int, batch: int) -> int:
    """One training worker's peak memory: TensorFlow, the model's copies, data and activations."""
    model = TRAINING_COPIES * BYTES_PER_FLOAT * parameter_count(width)
    data = DATA_BATCHES * batch * (FEATURES + 1) * BYTES_PER_FLOAT
    activations = 4 * batch * width * BYTES_PER_FLOAT  # forward and backward, with slack
    return WORKER_BYTES + model + data + activations


# --- inside a worker ------------------------------------------------------------------------------


def strategy(timeout_s: float):
    """(tensorflow, a RING MultiWorkerMirroredStrategy whose collectives time out)."""
    import tensorflow as tf  # in the worker only: the notebook's kernel never builds MWMS

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


def memory_now() -> dict:
    """This process's peak resident set, and its PSS now (shared library pages split)."""
    import resource  # Linux only, as worker groups are (`require_linux`): not at import time

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
    tf, mwms = strategy(args["timeout_s"])
    n = mwms.num_replicas_in_sync
    context.ready(replicas=n)
    sum_op = tf.distribute.ReduceOp.SUM

    def allreduce(x):
        # identity: places the input on this replica's device, which the collective needs
        return tf.distribute.get_replica_context().all_reduce(sum_op, tf.identity(x))

    @tf.function
    def allreduce_head(x):  # the whole sum is made; only its first element is fetched
        return mwms.run(allreduce, args=(x,))[:1]

    @tf.function
    def sum_is_exact(x, base):  # worker k sends (k+1) * base: the sum is n(n+1)/2 * base
        total = mwms.run(allreduce, args=(x,))
        return tf.reduce_all(tf.equal(total, base * (n * (n + 1) / 2)))

    medians, correct, sizes = [], True, args["sizes"]
    for done, nbytes in enumerate(sizes, start=1):
        base = tf.cast(tf.range(nbytes // BYTES_PER_FLOAT) % 7, tf.float32)  # exact sums
        x = base * (context.index + 1)
        correct &= bool(sum_is_exact(x, base))
        del base
        for _ in range(args["warmup"]):
            allreduce_head(x).numpy()
        times = []
        for _ in range(args["repeats"]):
            began = time.perf_counter()
            allreduce_head(x).numpy()  # returns once this worker holds the sum
            times.append(time.perf_counter() - began)
        medians.append(statistics.median(times))
        del x
        context.progress(done=done, of=len(sizes), nbytes=nbytes, median_s=medians[-1])
    return {"medians_s": medians, "sums_correct": correct, **memory_now()}


def _wait_for_start_file(path: str | None, timeout_s: float) -> None:
    # The failure demo starts independent jobs together: each waits for the same file.
    deadline = time.monotonic() + timeout_s
    while path and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def training_worker(context: WorkerContext) -> dict:
    """Data-parallel SGD on this worker's shard of synthetic data (see the module doc).

    Progress every `report_every` steps (about ten reports by default): the step, its loss, its
    seconds and `at`, the monotonic clock when it ended (one clock for every process here).
    With `die_at_step` and `die_index`, that worker SIGKILLs itself right after reporting that
    step: a failure at an exact step, however short a step is and however late its parent hears.
    """
    import keras  # in the worker only
    import numpy as np

    args = context.args
    tf, mwms = strategy(args["timeout_s"])
    n, batch, seed = mwms.num_replicas_in_sync, args["batch"], args["seed"]
    context.ready(replicas=n)
    _wait_for_start_file(args.get("start_file"), args.get("start_timeout_s", args["timeout_s"]))
    # y = x . w_true + noise: w_true is one for all; each worker's x comes from its own seed.
    w_true = np.random.default_rng(seed).standard_normal((FEATURES, 1))
    rng = np.random.default_rng([seed, context.index])
    xs = rng.standard_normal((DATA_BATCHES, batch, FEATURES)).astype("float32")
    ys = (xs @ w_true + 0.1 * rng.standard_normal((DATA_BATCHES, batch, 1))).astype("float32")
    with mwms.scope():
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

        return mwms.run(replica_step, args=(x, y))

    total = args["warmup"] + args["steps"]
    report_every = args.get("report_every") or max(1, total // 10)
    losses, times = [], []
    for step in range(total):
        began = time.perf_counter()
        loss = float(train_step(xs[step % DATA_BATCHES], ys[step % DATA_BATCHES]))  # waits
        took = time.perf_counter() - began
        if step >= args["warmup"]:
            times.append(took)
        losses.append(loss)
        if (step + 1) % report_every == 0 or step + 1 == total:
            context.progress(step=step + 1, of=total, loss=loss, step_s=took, at=time.monotonic())
        if step + 1 == args.get("die_at_step") and context.index == args.get("die_index"):
            os.kill(os.getpid(), signal.SIGKILL)  # the failure demo: a worker dies mid-run
    weights = model.get_weights()
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes() for w in weights))
    return {
        "step_s": times,
        "losses": losses,
        "weights_sha256": digest.hexdigest(),
        "gradient_bytes": BYTES_PER_FLOAT * sum(int(w.size) for w in weights),
        **memory_now(),
    }


# --- the same workers on real machines ------------------------------------------------------------


@dataclasses.dataclass
class RealCluster(Reported):
    """The TF_CONFIG and the command line for each host of a real cluster (printed, not run)."""

    hosts: list[str]
    configs: list[dict]
    commands: list[str]

    def tables(self) -> list[Table]:
        rows = [
            (host.rsplit(":", 1)[0], command)
            for host, command in zip(self.hosts, self.commands, strict=True)
        ]
        launcher = (
            "From here a launcher takes over: Kubernetes (Kubeflow's TFJob) or Vertex AI writes "
            "each worker's TF_CONFIG and starts, restarts and ends the processes (on Slurm, TF's "
            "SlurmClusterResolver); the worker code stays this one."
        )
        return [Table("what each host runs", ("host", "command"), rows, verdicts=[launcher])]


def real_cluster_tf_config(
    hosts, target: str = "allreduce_worker", args: dict | None = None
) -> RealCluster:
    """Per host 'name:port': the TF_CONFIG of task i of job 'worker', and the command that runs
    `target` of this module there: exactly what a loopback job's worker i runs, with its
    TF_CONFIG naming 127.0.0.1 (`workers.tf_config`) swapped for this one."""
    hosts = list(hosts)
    if not hosts:
        raise ValueError("hosts must name at least one 'host:port'")
    defaults = {"allreduce_worker": ALLREDUCE_ARGS, "training_worker": TRAINING_ARGS}
    if target not in defaults:
        raise ValueError(f"target must be one of {sorted(defaults)}, got {target!r}")
    args = {**defaults[target], "timeout_s": COLLECTIVE_TIMEOUT_S, **(args or {})}
    configs = [
        {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
        for i in range(len(hosts))
    ]
    commands = [
        f"TF_CONFIG={shlex.quote(json.dumps(c))} python -m d2lhelpers.processes.mwms {target} "
        f"{shlex.quote(json.dumps(args))}"
        for c in configs
    ]
    return RealCluster(hosts, configs, commands)


def main(argv=None) -> int:
    """`TF_CONFIG=... python -m d2lhelpers.processes.mwms TARGET 'ARGS_JSON'`: one worker, no
    parent; ready, progress and the result go to stdout as JSON lines, as under a WorkerGroup."""
    target, args = (sys.argv[1:] if argv is None else argv)[:2]
    config = json.loads(os.environ["TF_CONFIG"])
    ports = [int(address.rsplit(":", 1)[1]) for address in config["cluster"]["worker"]]
    context = WorkerContext(config["task"]["index"], ports, json.loads(args), sys.stdout)
    run = {"allreduce_worker": allreduce_worker, "training_worker": training_worker}[target]
    context.send("result", run(context))
    return 0


if __name__ == "__main__":
    sys.exit(main())
