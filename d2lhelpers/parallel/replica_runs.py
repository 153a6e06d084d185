"""Replicas measured: inputs checked first, then the replicas timed beside one device.

The scheme is notebook 04's saved code (`parallel.replicas`); `run_replicas` takes the notebook's
own `replicas_in_one_graph`, so an edited cell changes what is measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from d2lhelpers.core.checks import require_measure_options, require_rate
from d2lhelpers.core.counts import mlp_bytes
from d2lhelpers.core.progress import Progress
from d2lhelpers.devices import Device, check_fits
from d2lhelpers.parallel import replicas
from d2lhelpers.parallel.model import (
    check_mlp_run,
    max_difference,
    mlp_setup,
    split_sizes,
)
from d2lhelpers.parallel.result import ParallelResult, measure_calls


def replica_bytes(width: int, hidden: int, batch: int, n_devices: int) -> int:
    """What one replica holds: the whole MLP, and the activations of its share of the batch."""
    return mlp_bytes(math.ceil(batch / n_devices), width, hidden)


def check_replicas(
    width: int, batch: int, n_devices: int, hidden: int | None = None
) -> tuple[int, list[Device]]:
    """Refuse, before anything is allocated, what cannot run: (hidden, devices).

    Whole numbers >= 1, at most the set-up devices, a request for every replica, and the memory
    of the one-device reference and of the replicas.
    """
    hidden, devices = check_mlp_run(width, batch, n_devices, hidden)
    if batch < n_devices:
        raise ValueError(
            f"a batch of {batch} requests leaves a replica idle on {n_devices} devices: choose "
            f"a batch of at least {n_devices}, or at most {batch} devices"
        )
    what = f"a {width}x{hidden} MLP replica on each of {n_devices} devices"
    check_fits(replica_bytes(width, hidden, batch, n_devices), devices, what)
    return hidden, devices


def run_replicas(
    width: int,
    batch: int,
    n_devices: int,
    hidden: int | None = None,
    progress: Progress | None = None,
    device_peak: float | None = None,
    in_one_graph: Callable | None = None,
    **measure_options,
) -> ParallelResult:
    """Serve `batch` requests with one MLP replica per device, timed beside one device.

    `in_one_graph(weights, device_names)` builds the replicas' tf.function (default: the saved
    `replicas_in_one_graph`). `hidden` defaults to 4 x `width`. Inputs that are wrong or do not
    fit are refused before anything is allocated; `progress(done, total, status)` follows the
    two measurements; `device_peak` (FLOP/s of one device) flags impossible rates.
    """
    require_rate("device_peak", device_peak)
    require_measure_options(measure_options)
    hidden, devices = check_replicas(width, batch, n_devices, hidden)
    build = in_one_graph or replicas.replicas_in_one_graph
    names, weights, x, flops, reference_run = mlp_setup(width, hidden, batch, devices)
    run = build(weights, names)
    label = f"replicas on {n_devices} device{'s' if n_devices > 1 else ''}"
    calls = [("one device", lambda: reference_run(x, weights), 1)]
    if n_devices > 1:  # one replica on one device is the reference itself
        calls.append((label, lambda: run(x), n_devices))
    timings = measure_calls(calls, flops, device_peak, progress, **measure_options)
    return ParallelResult(
        scheme="replicas",
        devices=names,
        kind=devices[0].kind,
        samples=batch,
        measurement=timings[-1],
        reference=timings[0],
        # The replica with the most rows sets the pace when the batch does not divide.
        ideal_speedup=batch / max(split_sizes(batch, n_devices)),
        max_error=max_difference(run(x), reference_run(x, weights)),
    )
