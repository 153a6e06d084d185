"""The models the schemes split, and the one-device reference every split is checked against.

Two models: the MLP block y = relu(x W1 + b1) W2 + b2 (replicas and tensor parallelism) and a
stack of layers h <- relu(h W_l + b_l) (pipeline parallelism), with deterministic weights. The
schemes themselves are notebook 04's saved code (`replicas`, `tensor_parallel`,
`pipeline_parallel`): they cut these models with `split_sizes` and hand tensors to devices with
`place`; their runs (`*_runs`) time them beside `on_one_device` and compare the outputs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import tensorflow as tf

from d2lhelpers.core.checks import require_counts
from d2lhelpers.core.counts import mlp_bytes, mlp_flops
from d2lhelpers.core.units import device_name, device_names
from d2lhelpers.devices import Device, check_fits, select_devices

# Outputs are ~1, and float32 sums taken in another order differ by ~1e-6: a split that differs
# by more than this computed something else.
MATCH_TOLERANCE = 1e-3


def split_sizes(total: int, parts: int, what: str = "rows") -> list[int]:
    """Cut `total` into `parts` sizes differing by at most one, larger first: 10, 4 -> 3 3 2 2.

    Uneven shards let any width run on any device count; a part must not be empty, so `total`
    below `parts` is refused.
    """
    require_counts(parts=parts)
    if total < parts:
        raise ValueError(
            f"{total} {what} cannot be split into {parts} non-empty parts: choose at least "
            f"{parts} {what}, or fewer parts"
        )
    small, extra = divmod(total, parts)
    return [small + 1] * extra + [small] * (parts - extra)


def offsets(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(start, stop) of each part: [3, 3, 2] -> [(0, 3), (3, 6), (6, 8)]."""
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


def place(tensor: tf.Tensor, device: Device | str) -> tf.Tensor:
    """A copy of `tensor` on `device` (what a device holds is its own, as on a real GPU)."""
    with tf.device(device_name(device)):
        return tf.identity(tensor)


class MLPWeights(NamedTuple):
    """A two-layer MLP, y = relu(x W1 + b1) W2 + b2: W1 is width x hidden, W2 hidden x width.

    A NamedTuple, so that tf.function takes it as an argument (a nest of tensors).
    """

    w1: tf.Tensor
    b1: tf.Tensor
    w2: tf.Tensor
    b2: tf.Tensor

    def to(self, device: Device | str) -> MLPWeights:
        return MLPWeights(*(place(t, device) for t in self))


def mlp_weights(width: int, hidden: int, device: Device | str, seed: int = 0) -> MLPWeights:
    """Deterministic weights on `device` (stateless random: the same seed, the same model).

    Scaled so activations stay near 1 (He for W1, 1/sqrt(hidden) for W2); biases are not zero, so
    a scheme that adds a bias once per device instead of once in total is caught by the tests.
    """
    require_counts(width=width, hidden=hidden)
    with tf.device(device_name(device)):
        w1 = tf.random.stateless_normal((width, hidden), seed=(seed, 1)) * (2 / width) ** 0.5
        b1 = 0.1 * tf.random.stateless_normal((hidden,), seed=(seed, 2))
        w2 = tf.random.stateless_normal((hidden, width), seed=(seed, 3)) / hidden**0.5
        b2 = 0.1 * tf.random.stateless_normal((width,), seed=(seed, 4))
    return MLPWeights(w1, b1, w2, b2)


def input_batch(batch: int, width: int, device: Device | str, seed: int = 7) -> tf.Tensor:
    """`batch` requests of `width` features each, on `device`."""
    require_counts(batch=batch, width=width)
    with tf.device(device_name(device)):
        return tf.random.stateless_normal((batch, width), seed=(seed, 0))


def mlp(x: tf.Tensor, weights: MLPWeights) -> tf.Tensor:
    """The MLP on whichever device its inputs are: the one-device reference."""
    hidden = tf.nn.relu(tf.linalg.matmul(x, weights.w1) + weights.b1)
    return tf.linalg.matmul(hidden, weights.w2) + weights.b2


Layer = tuple[tf.Tensor, tf.Tensor]  # (W, b) of one layer of a stack


def stack_weights(width: int, n_layers: int, device: Device | str, seed: int = 0) -> list[Layer]:
    """`n_layers` width x width layers on `device`, He-scaled (activations stay ~1)."""
    require_counts(width=width, n_layers=n_layers)
    layers = []
    with tf.device(device_name(device)):
        for layer in range(n_layers):
            w = tf.random.stateless_normal((width, width), seed=(seed, 2 * layer))
            b = 0.1 * tf.random.stateless_normal((width,), seed=(seed, 2 * layer + 1))
            layers.append((w * (2 / width) ** 0.5, b))
    return layers


def dense_stack(x: tf.Tensor, layers: Sequence[Layer]) -> tf.Tensor:
    """x through every layer in turn, h <- relu(h W + b), on whichever device the ops are placed."""
    for w, b in layers:
        x = tf.nn.relu(tf.linalg.matmul(x, w) + b)
    return x


def on_one_device(function: Callable, device: Device | str) -> Callable:
    """`function` as a tf.function with every op on `device`: the reference a scheme must match."""
    return _on_one_device(function, device_name(device))


@functools.lru_cache(maxsize=32)
def _on_one_device(function: Callable, name: str) -> Callable:
    @tf.function
    def run(*args):
        with tf.device(name):
            return function(*args)

    return run


def max_difference(a: tf.Tensor | Sequence[tf.Tensor], b: tf.Tensor) -> float:
    """Largest |a - b|, with `a` given whole or as row blocks to be stacked in order."""
    if not isinstance(a, tf.Tensor):
        a = tf.concat([place(part, "/CPU:0") for part in a], axis=0)
    return float(tf.reduce_max(tf.abs(place(a, "/CPU:0") - place(b, "/CPU:0"))))


def check_mlp_run(
    width: int, batch: int, n_devices: int, hidden: int | None
) -> tuple[int, list[Device]]:
    """What every split MLP run checks first: its counts (hidden defaults to 4 x width), its
    devices, and that the one-device reference fits. Returns (hidden, devices)."""
    require_counts(width=width, batch=batch, n_devices=n_devices)
    hidden = require_counts(hidden=4 * width if hidden is None else hidden)["hidden"]
    devices = select_devices(n_devices)
    check_fits(mlp_bytes(batch, width, hidden), devices[:1], "the one-device reference")
    return hidden, devices


class MLPSetup(NamedTuple):
    """What a split MLP is timed beside: the devices' names, the weights and a batch on the
    first device, the FLOPs of one pass, and the one-device reference run."""

    names: list[str]
    weights: MLPWeights
    x: tf.Tensor
    flops: float
    reference_run: Callable


def mlp_setup(width: int, hidden: int, batch: int, devices: Sequence[Device]) -> MLPSetup:
    names = list(device_names(devices))
    weights = mlp_weights(width, hidden, names[0])
    x = input_batch(batch, width, names[0])
    reference = on_one_device(mlp, names[0])
    return MLPSetup(names, weights, x, mlp_flops(batch, width, hidden), reference)
