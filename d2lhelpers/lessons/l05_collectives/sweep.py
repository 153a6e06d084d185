"""Notebook 05: TensorFlow's all-reduce timed per message size, beside one device copying and
adding alone, and the two alpha-beta models made from the times.

The all-reduce is the function the notebook defined (`allreduce_in_one_graph`, saved into
`collectives/tf_collective.py`): the notebook passes its own, so an edited cell changes what
is timed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import tensorflow as tf

from d2lhelpers.collectives import tf_collective
from d2lhelpers.collectives.costs import AlphaBeta, fit_alpha_beta
from d2lhelpers.collectives.tf_allreduce import (
    ALLREDUCE_BUFFERS,
    DEFAULT_SIZES,
    TINY_BYTES,
    allreduce_devices,
    allreduce_inputs,
    allreduce_sizes,
    message_elements,
    require_message_fits,
)
from d2lhelpers.core.checks import require_count, require_measure_options
from d2lhelpers.core.heap import return_freed_memory
from d2lhelpers.core.progress import Progress, Steps
from d2lhelpers.core.units import device_name, format_bytes
from d2lhelpers.devices import Device
from d2lhelpers.lessons.l05_collectives.sweep_result import AllreduceSweepResult
from d2lhelpers.timing.interleaved import measure_in_turns


def local_copy_and_add(nbytes: int, device: Device | str) -> tuple[Callable, Callable]:
    """Two calls on one device, inputs bound: copy a tensor of `nbytes`, and add two of them.

    Timed, they give the RAM speed of one core: what a ring of logical CPUs moves data at, at
    best. The copy is a real one (`DeepCopy`; `tf.identity` would pass a pointer).
    """
    name = device_name(device)
    with tf.device(name):
        a, b = tf.random.stateless_uniform((2, message_elements(nbytes)), seed=(1, 2))

    @tf.function
    def copy(x):
        with tf.device(name):
            return tf.raw_ops.DeepCopy(x=x)

    @tf.function
    def add(x, y):
        with tf.device(name):
            return x + y

    return (lambda: copy(a)), (lambda: add(a, b))


def alpha_beta_models(
    sizes: Sequence[int], seconds: Sequence[float], tiny_s: float
) -> tuple[AlphaBeta, AlphaBeta | None, list[int]]:
    """The two ways the alpha-beta model is made to predict (sizes ascending, times per size).

    Two-point: alpha = `tiny_s` (a 4-byte all-reduce), beta from the largest size alone:
    S_max / (t_max - alpha); beta = inf when the largest took no longer than the tiny one.
    Held out: least squares (`fit_alpha_beta`) on every other size from the smallest, to
    predict the sizes between; (None, []) with fewer than 3 sizes.
    """
    if seconds[-1] > tiny_s:
        model = AlphaBeta.from_measurements(tiny_s, sizes[-1], seconds[-1])
    else:  # time did not grow with size: all of it is latency
        model = AlphaBeta(tiny_s, math.inf)
    if len(sizes) < 3:
        return model, None, []
    fit_sizes = list(sizes[::2])
    return model, fit_alpha_beta(fit_sizes, list(seconds[::2])), fit_sizes


def run_allreduce_sweep(
    n_devices: int | None = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    progress: Progress | None = None,
    rounds: int = 2,
    allreduce_in_one_graph: Callable = tf_collective.allreduce_in_one_graph,
    **measure_options,
) -> AllreduceSweepResult:
    """Time the all-reduce that `allreduce_in_one_graph(devices)` builds, for each size (bytes
    per device) on the first `n_devices` devices (None: all).

    Also a 4-byte all-reduce (alpha) and one device copying and adding the largest size, all
    timed in turns, `rounds` times (`measure_in_turns`): a load that changes meanwhile slows
    them alike. Checked before anything is allocated: 2 devices or more, two sizes or more, each
    a multiple of 4 bytes, all fitting in memory at once. `progress(done, total, status)` after
    every timed block; `measure_options` go to `measure` (budget_s shared among the rounds).
    """
    if not callable(allreduce_in_one_graph):
        raise TypeError(
            f"allreduce_in_one_graph must be a function, got {allreduce_in_one_graph!r}"
        )
    options = require_measure_options(measure_options, budget_s=1.0)
    rounds = require_count("rounds", rounds, 1, 20)
    devices = allreduce_devices(n_devices, "it has no bandwidth to measure")
    sizes = allreduce_sizes(sizes)
    kind = devices[0].kind
    what = f"an all-reduce of {format_bytes(sizes[-1])} on {len(devices)} devices"
    # Every size's inputs live at once, and one device copies and adds the largest.
    extra = sum(sizes[:-1]) + ALLREDUCE_BUFFERS * sizes[-1]
    require_message_fits(sizes[-1], devices, what, "size in sizes", extra_bytes=extra)
    steps = Steps(progress, rounds)
    run = allreduce_in_one_graph(devices)
    runs = []
    for nbytes in (TINY_BYTES, *sizes):
        xs = allreduce_inputs(nbytes, devices)
        label = f"all-reduce of {format_bytes(nbytes)} on {len(devices)} {kind} devices"
        runs.append((lambda xs=xs: run(*xs), label, {"nbytes": nbytes}))
    largest = format_bytes(sizes[-1])
    copy, add = local_copy_and_add(sizes[-1], devices[0])
    runs.append((copy, f"one device's copy of {largest}", {"nbytes": sizes[-1]}))
    runs.append((add, f"one device's add of {largest}", {"nbytes": sizes[-1]}))
    # each round gives back what its all-reduces freed (the next round's warm-up calls take
    # the pages again, untimed)
    tiny, *measurements, copied, added = measure_in_turns(
        runs, steps, rounds, return_freed_memory, **options
    )
    model, fitted, fit_sizes = alpha_beta_models(
        sizes, [m.median for m in measurements], tiny.median
    )
    return AllreduceSweepResult(
        len(devices), kind, sizes, measurements, tiny, copied, added, model, fitted, fit_sizes
    )
