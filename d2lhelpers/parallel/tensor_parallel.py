"""Tensor parallelism, Megatron-style: every weight matrix cut into N slices, one per device.

Column-parallel linear: Y = XW + b, where W is split along its second dimension (columns) into
    W_0 .. W_{N-1} and b likewise. Device k computes Y_k = X W_k + b_k, a block of Y's columns;
    X must be on every device, and joining the blocks is an all-gather.
Row-parallel linear: Y = XW + b, where W is split along its first dimension (rows) and X along
    its second. Device k computes the partial product X_k W_k, and Y = sum_k X_k W_k + b needs an
    all-reduce: every device ends with the sum of everyone's part.
MLP block: Y = relu(X W1 + b1) W2 + b2, with W1 split by columns and W2 by rows. Device k computes
    H_k = relu(X W1_k + b1_k) alone (relu acts element by element), and H_k is exactly the slice
    of H that the rows of W2_k multiply, so Y = sum_k H_k W2_k + b2: ONE all-reduce per MLP block
    in the forward pass, and no communication between the two matmuls.
    # ref: Shoeybi et al., Megatron-LM (arXiv:1909.08053), section 3, figure 3a.

What is counted: all-reduces in one forward pass, read from the traced graph. An MLP block has
one; a transformer layer has two (after attention and after the MLP) — the seed's "about twice
per layer" — and training adds two more in the backward pass. Widths that N does not divide are
cut into uneven slices (10 columns on 4 devices: 3, 3, 2, 2); the widest slice sets the pace.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

import tensorflow as tf

from d2lhelpers.core.checks import require_counts, require_measure_options, require_rate
from d2lhelpers.core.counts import mlp_bytes, mlp_flops
from d2lhelpers.core.progress import Progress, Steps
from d2lhelpers.core.units import BYTES_PER_FLOAT, device_name, device_names
from d2lhelpers.devices import Device, check_fits, select_devices
from d2lhelpers.parallel.common import (
    MLPWeights,
    ParallelRun,
    input_batch,
    max_difference,
    mlp,
    mlp_weights,
    on_one_device,
    place,
    split_sizes,
)
from d2lhelpers.timing.benchmark import measure

ALLREDUCE_SCOPE = "allreduce"


def split(tensor: tf.Tensor, axis: int, devices: Sequence[Device | str]) -> list[tf.Tensor]:
    """`tensor` cut along `axis` into len(devices) near-equal slices, slice k on device k."""
    what = "columns" if axis in (-1, tensor.shape.rank - 1) else "rows"
    sizes = split_sizes(int(tensor.shape[axis]), len(devices), what)
    # Cut where the tensor is, then copy only each slice: no device holds the whole.
    parts = tf.split(tensor, sizes, axis=axis)
    return [place(part, device) for part, device in zip(parts, devices, strict=True)]


def allreduce_sum(
    parts: Sequence[tf.Tensor], devices: Sequence[Device | str], bias: tf.Tensor | None = None
) -> list[tf.Tensor]:
    """Every device ends with sum(parts) (+ bias, added once): the seed's all-reduce, as TF ops.

    The running sum travels device 0 -> 1 -> ... -> N-1, each adding its own part (N-1
    hand-overs); then the total is handed to the other N-1 devices: 2(N-1) hand-overs, as the Go
    program counts. Plain adds and copies, so it cannot deadlock (raw collective ops in one
    tf.function can without ordering tokens).
    """
    names = device_names(devices)
    with tf.name_scope(ALLREDUCE_SCOPE):
        total = parts[0]
        for name, part in zip(names[1:], parts[1:], strict=True):
            with tf.device(name):
                total = total + part
        with tf.device(names[-1]):
            total = total if bias is None else total + bias
        return [place(total, name) for name in names[:-1]] + [total]


def all_gather(parts: Sequence[tf.Tensor], devices: Sequence[Device | str]) -> list[tf.Tensor]:
    """Every device ends with the column blocks `parts` joined in order."""
    copies = []
    with tf.name_scope("all_gather"):
        for device in devices:
            with tf.device(device_name(device)):
                copies.append(tf.concat(list(parts), axis=-1))
    return copies


def column_parallel_linear(
    x: tf.Tensor, weights: Sequence[tf.Tensor], biases: Sequence[tf.Tensor], devices
) -> list[tf.Tensor]:
    """Y_k = X W_k + b_k on device k: the column blocks of Y, with no communication."""
    blocks = []
    for w, b, device in zip(weights, biases, devices, strict=True):
        with tf.device(device_name(device)):
            blocks.append(tf.linalg.matmul(x, w) + b)
    return blocks


def row_parallel_linear(
    x_parts: Sequence[tf.Tensor], weights: Sequence[tf.Tensor], bias: tf.Tensor, devices
) -> list[tf.Tensor]:
    """Y = sum_k X_k W_k + b, on every device: partial products, then one all-reduce."""
    partials = []
    for x, w, device in zip(x_parts, weights, devices, strict=True):
        with tf.device(device_name(device)):
            partials.append(tf.linalg.matmul(x, w))
    return allreduce_sum(partials, devices, bias)


class MLPShards(NamedTuple):
    """Device k's slices of the MLP: W1[:, cols_k], b1[cols_k], W2[cols_k, :]; b2 on the last."""

    w1: list
    b1: list
    w2: list
    b2: tf.Tensor


def shard_mlp(weights: MLPWeights, devices: Sequence[Device | str]) -> MLPShards:
    """W1 and b1 cut by columns, W2 by rows, with the same cut, so H_k meets W2_k's rows."""
    return MLPShards(
        split(weights.w1, 1, devices),
        split(weights.b1, 0, devices),
        split(weights.w2, 0, devices),
        place(weights.b2, devices[-1]),
    )


def tensor_parallel_mlp(
    x: tf.Tensor, shards: MLPShards, devices: Sequence[Device | str]
) -> list[tf.Tensor]:
    """Y = sum_k relu(X W1_k + b1_k) W2_k + b2, on every device (one all-reduce)."""
    hidden = column_parallel_linear(x, shards.w1, shards.b1, devices)
    hidden = [tf.nn.relu(h) for h in hidden]  # placed with their inputs, one per device
    return row_parallel_linear(hidden, shards.w2, shards.b2, devices)


def tensor_parallel_in_one_graph(devices: Sequence[Device | str]) -> Callable:
    """One tf.function for the tensor-parallel MLP: call it with (x, shards)."""
    return _tensor_parallel_in_one_graph(device_names(devices))


@functools.lru_cache(maxsize=16)
def _tensor_parallel_in_one_graph(names: tuple[str, ...]) -> Callable:
    @tf.function
    def run(x, shards):
        return tensor_parallel_mlp(x, shards, names)

    return run


def count_allreduces(graph: tf.Graph) -> int:
    """All-reduces in a traced graph: the `allreduce_sum` name scopes its ops sit in."""
    scope = re.compile(rf"^(.*?(?:^|/){ALLREDUCE_SCOPE}(?:_\d+)?)/")
    return len({m.group(1) for op in graph.get_operations() if (m := scope.match(op.name))})


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class TensorParallelRun(ParallelRun):
    """A measured tensor-parallel MLP: also its sizes, the slices' widths and its all-reduces."""

    width: int = 0
    hidden: int = 0
    shard_widths: list[int] = dataclasses.field(default_factory=list)
    allreduces: int = 0  # in one forward pass, counted in the traced graph

    def details(self) -> list[str]:
        split_line = (
            f"hidden width {self.hidden} cut into {self.shard_widths}; {self.allreduces} "
            f"all-reduce per forward pass (counted in the graph), of a {self.samples}x"
            f"{self.width} block, {2 * (self.n_devices - 1)} hand-overs each"
        )
        return [split_line, *super().details()]


def shard_bytes(width: int, hidden: int, batch: int, n_devices: int) -> int:
    """What one device holds: its slices of W1, b1, W2, b2, and x, H_k, its partial sum and Y."""
    slice_width = math.ceil(hidden / n_devices)
    weights = 2 * width * slice_width + slice_width + width
    activations = batch * (3 * width + slice_width)
    return BYTES_PER_FLOAT * (weights + activations)


def check_tensor_parallel(
    width: int, batch: int, n_devices: int, hidden: int | None = None
) -> tuple[int, list[Device], list[int]]:
    """Validate a tensor-parallel run before anything is allocated: (hidden, devices, slices)."""
    require_counts(width=width, batch=batch, n_devices=n_devices)
    hidden = require_counts(hidden=4 * width if hidden is None else hidden)["hidden"]
    devices = select_devices(n_devices)
    shard_widths = split_sizes(hidden, n_devices, "hidden columns")
    check_fits(mlp_bytes(batch, width, hidden), devices[:1], "the one-device reference")
    what = f"a 1/{n_devices} slice of a {width}x{hidden} MLP on each device"
    check_fits(shard_bytes(width, hidden, batch, n_devices), devices, what)
    return hidden, devices, shard_widths


def run_tensor_parallel(
    width: int,
    batch: int,
    n_devices: int,
    hidden: int | None = None,
    progress: Progress | None = None,
    device_peak: float | None = None,
    **measure_options,
) -> TensorParallelRun:
    """The MLP (width -> hidden -> width) split over `n_devices`, timed beside one device.

    `hidden` defaults to 4 x `width`; any hidden width >= n_devices works (uneven slices).
    Inputs that are wrong or do not fit are refused before anything is allocated.
    """
    require_rate("device_peak", device_peak)
    require_measure_options(measure_options)
    hidden, devices, shard_widths = check_tensor_parallel(width, batch, n_devices, hidden)

    weights = mlp_weights(width, hidden, devices[0])
    x = input_batch(batch, width, devices[0])
    flops = mlp_flops(batch, width, hidden)
    reference_run = on_one_device(mlp, devices[0])
    expected = reference_run(x, weights)
    steps = Steps(progress, 2)
    reference = measure(
        lambda: reference_run(x, weights),
        "one device",
        flops=flops,
        peak=device_peak,
        on_repeat=steps.start("one device"),
        **measure_options,
    )
    steps.finish("one device")
    shards = shard_mlp(weights, devices)
    run = tensor_parallel_in_one_graph(devices)
    label = f"tensor parallel on {n_devices}"
    measurement = measure(
        lambda: run(x, shards),
        label,
        flops=flops,
        peak=n_devices * device_peak if device_peak else None,
        on_repeat=steps.start(label),
        **measure_options,
    )
    steps.finish(label)
    outputs = run(x, shards)
    return TensorParallelRun(
        scheme="tensor parallel",
        devices=list(device_names(devices)),
        kind=devices[0].kind,
        samples=batch,
        measurement=measurement,
        reference=reference,
        ideal_speedup=hidden / max(shard_widths),
        max_error=max(max_difference(y, expected) for y in outputs),
        width=width,
        hidden=hidden,
        shard_widths=shard_widths,
        allreduces=count_allreduces(run.get_concrete_function(x, shards).graph),
    )
