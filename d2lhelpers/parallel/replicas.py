"""Replicas: a whole copy of the model on every device, the requests shared out among them.

    Y_k = relu(X_k W1 + b1) W2 + b2   on device k, for k = 0 .. N-1,

where X is split along its first dimension (the batch) into X_0 .. X_{N-1}, each device holds all
of W1, b1, W2, b2, and Y is the row blocks Y_k in order. No device needs another's data: no
communication at all, so throughput can scale with N; the price is N copies of the weights.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import tensorflow as tf

from d2lhelpers.core.checks import (
    require_counts,
    require_measure_options,
    require_rate,
    require_sweep,
)
from d2lhelpers.core.counts import mlp_bytes, mlp_flops
from d2lhelpers.core.progress import Progress, Steps
from d2lhelpers.core.units import device_name, device_names
from d2lhelpers.devices import Device, check_fits, select_devices
from d2lhelpers.parallel.common import (
    MLPWeights,
    ParallelRun,
    input_batch,
    max_difference,
    mlp,
    mlp_weights,
    offsets,
    place,
    split_sizes,
)
from d2lhelpers.timing.benchmark import measure


def replicate(weights: MLPWeights, devices: Sequence[Device | str]) -> list[MLPWeights]:
    """One full copy of the weights on each device."""
    return [weights.to(device) for device in devices]


def shard_batch(x: tf.Tensor, devices: Sequence[Device | str]) -> list[tf.Tensor]:
    """The rows of `x` shared out as evenly as possible, block k on device k (the load balancer)."""
    sizes = split_sizes(int(x.shape[0]), len(devices), "requests")
    return [place(x[a:b], d) for (a, b), d in zip(offsets(sizes), devices, strict=True)]


def replicas_in_one_graph(devices: Sequence[Device | str]) -> Callable:
    """One tf.function running every replica on its own rows: call it with (shards, replicas).

    The replicas share no data, so the dependency tracker runs them at the same time.
    """
    return _replicas_in_one_graph(device_names(devices))


@functools.lru_cache(maxsize=16)
def _replicas_in_one_graph(names: tuple[str, ...]) -> Callable:
    @tf.function
    def run(shards, replicas):
        outputs = []
        for name, x, weights in zip(names, shards, replicas, strict=True):
            with tf.device(name):
                outputs.append(mlp(x, weights))
        return outputs

    return run


def replica_bytes(width: int, hidden: int, batch: int, n_devices: int) -> int:
    """What one replica holds: the whole MLP, and the activations of its share of the batch."""
    return mlp_bytes(math.ceil(batch / n_devices), width, hidden)


def check_replicas(
    width: int, batch: int, max_devices: int, hidden: int | None = None, counts=None
) -> tuple[int, list[Device], list[int]]:
    """Validate a replica run before anything is allocated: (hidden, devices, device counts).

    Types and sizes (whole numbers >= 1), the device counts (1 .. `max_devices`, each with at
    least one request), and the memory of the one-device reference and of the replicas.
    """
    require_counts(width=width, batch=batch, max_devices=max_devices)
    hidden = require_counts(hidden=4 * width if hidden is None else hidden)["hidden"]
    devices = select_devices(max_devices)
    counts = require_sweep(
        "device counts", range(1, max_devices + 1) if counts is None else counts, 1, max_devices
    )
    if batch < max(counts):
        raise ValueError(
            f"a batch of {batch} requests leaves a replica idle on {max(counts)} devices: choose "
            f"a batch of at least {max(counts)}, or at most {batch} devices"
        )
    check_fits(mlp_bytes(batch, width, hidden), devices[:1], "the one-device reference")
    fewest = min((k for k in counts if k > 1), default=1)  # the most rows on each device
    what = f"a {width}x{hidden} MLP replica on each of {max_devices} devices"
    check_fits(replica_bytes(width, hidden, batch, fewest), devices, what)
    return hidden, devices, counts


def run_replicas(
    width: int,
    batch: int,
    n_devices: int,
    hidden: int | None = None,
    progress: Progress | None = None,
    device_peak: float | None = None,
    **measure_options,
) -> ParallelRun:
    """Serve `batch` requests with one MLP replica per device, timed beside one device.

    `hidden` defaults to 4 x `width`. Inputs that are wrong or do not fit are refused before
    anything is allocated. `progress(done, total, status)` follows the two measurements, repeat
    by repeat; `device_peak` (FLOP/s of one device) flags impossible rates.
    """
    return replica_sweep(
        width, batch, n_devices, hidden, progress, device_peak, (n_devices,), **measure_options
    )[0]


def replica_sweep(
    width: int,
    batch: int,
    max_devices: int,
    hidden: int | None = None,
    progress: Progress | None = None,
    device_peak: float | None = None,
    counts: Sequence[int] | None = None,
    **measure_options,
) -> list[ParallelRun]:
    """Throughput vs device count: the same `batch` served by 1, 2, ... `max_devices` replicas.

    The batch is fixed, so each replica gets batch / N rows and the ideal time falls as 1/N
    (throughput rises as N). The one-device reference is measured once and shared by every run;
    `counts` chooses device counts other than 1 .. `max_devices`.
    """
    require_rate("device_peak", device_peak)
    require_measure_options(measure_options)
    hidden, devices, counts = check_replicas(width, batch, max_devices, hidden, counts)

    weights = mlp_weights(width, hidden, devices[0])
    x = input_batch(batch, width, devices[0])
    flops = mlp_flops(batch, width, hidden)
    reference_run = replicas_in_one_graph(devices[:1])
    reference_args = ([x], [weights])
    expected = reference_run(*reference_args)[0]
    steps = Steps(progress, sum(k > 1 for k in counts) + 1)
    on_repeat = steps.start("replicas on 1 device")
    reference = measure(
        lambda: reference_run(*reference_args),
        "replicas on 1 device",
        flops=flops,
        peak=device_peak,
        on_repeat=on_repeat,
        **measure_options,
    )
    steps.finish("replicas on 1 device")
    runs = []
    for k in counts:
        chosen = devices[:k]
        args = (shard_batch(x, chosen), replicate(weights, chosen))
        run = replicas_in_one_graph(chosen)
        label = f"replicas on {k} device{'s' if k > 1 else ''}"
        # One replica on one device is the reference itself: the same graph, measured once.
        if k == 1:
            measurement = reference
        else:
            measurement = measure(
                lambda run=run, args=args: run(*args),
                label,
                flops=flops,
                peak=k * device_peak if device_peak else None,
                on_repeat=steps.start(label),
                **measure_options,
            )
            steps.finish(label)
        runs.append(
            ParallelRun(
                scheme="replicas",
                devices=[device_name(d) for d in chosen],
                kind=chosen[0].kind,
                samples=batch,
                measurement=measurement,
                reference=reference,
                # The replica with the most rows sets the pace when the batch does not divide.
                ideal_speedup=batch / max(split_sizes(batch, k)),
                max_error=max_difference(run(*args), expected),
            )
        )
    return runs
