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

from d2lhelpers.benchmark import measure
from d2lhelpers.devices import Device, check_fits, select_devices
from d2lhelpers.parallelism import (
    MLPWeights,
    ParallelRun,
    communication_note,
    device_name,
    input_batch,
    max_difference,
    mlp,
    mlp_bytes,
    mlp_flops,
    mlp_weights,
    offsets,
    place,
    require_positive,
    split_sizes,
)


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
    return _replicas_in_one_graph(tuple(device_name(d) for d in devices))


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


def _replica_bytes(width: int, hidden: int, batch: int, n_devices: int) -> int:
    return mlp_bytes(math.ceil(batch / n_devices), width, hidden)


def run_replicas(
    width: int,
    batch: int,
    n_devices: int,
    hidden: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    device_peak: float | None = None,
    **measure_options,
) -> ParallelRun:
    """Serve `batch` requests with one MLP replica per device, timed beside one device.

    `hidden` defaults to 4 x `width`. Sizes that do not fit are refused before anything is
    allocated. `progress(done, total)` follows the two measurements; `device_peak` (FLOP/s of one
    device) flags impossible rates.
    """
    return replica_sweep(
        width, batch, n_devices, hidden, progress, device_peak, (n_devices,), **measure_options
    )[0]


def replica_sweep(
    width: int,
    batch: int,
    max_devices: int,
    hidden: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    device_peak: float | None = None,
    counts: Sequence[int] | None = None,
    **measure_options,
) -> list[ParallelRun]:
    """Throughput vs device count: the same `batch` served by 1, 2, ... `max_devices` replicas.

    The batch is fixed, so each replica gets batch / N rows and the ideal time falls as 1/N
    (throughput rises as N). The one-device reference is measured once and shared by every run;
    `counts` chooses device counts other than 1 .. `max_devices`.
    """
    require_positive(width=width, batch=batch, max_devices=max_devices)
    hidden = 4 * width if hidden is None else hidden
    require_positive(hidden=hidden)
    devices = select_devices(max_devices)
    counts = list(counts or range(1, max_devices + 1))
    if not all(1 <= k <= max_devices for k in counts):
        raise ValueError(f"device counts must lie in 1 .. {max_devices}, got {counts}")
    split_sizes(batch, max(counts), "requests")  # refuse before allocating
    check_fits(mlp_bytes(batch, width, hidden), devices[:1], "the one-device reference")
    what = f"a {width}x{hidden} MLP replica on each of {max_devices} devices"
    fewest = min((k for k in counts if k > 1), default=1)  # the most rows on each device
    check_fits(_replica_bytes(width, hidden, batch, fewest), devices, what)

    weights = mlp_weights(width, hidden, devices[0])
    x = input_batch(batch, width, devices[0])
    flops = mlp_flops(batch, width, hidden)
    reference_run = replicas_in_one_graph(devices[:1])
    reference_args = ([x], [weights])
    expected = reference_run(*reference_args)[0]
    reference = measure(
        lambda: reference_run(*reference_args),
        "replicas on 1 device",
        flops=flops,
        peak=device_peak,
        **measure_options,
    )
    total = len(counts) + 1
    if progress:
        progress(1, total)
    runs = []
    for done, k in enumerate(counts, start=2):
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
                **measure_options,
            )
        runs.append(
            ParallelRun(
                scheme="replicas",
                devices=[d.name for d in chosen],
                kind=chosen[0].kind,
                samples=batch,
                measurement=measurement,
                reference=reference,
                # The replica with the most rows sets the pace when the batch does not divide.
                ideal_speedup=batch / max(split_sizes(batch, k)),
                max_error=max_difference(run(*args), expected),
                communication=communication_note(chosen[0].kind)
                + " Replicas do not communicate at all, so this does not matter to them.",
            )
        )
        if progress:
            progress(done, total)
    return runs
