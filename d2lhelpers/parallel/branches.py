"""The seed's two-layer MLP with its hidden layer cut into branches, one branch per device.

Branch b holds W1[:, slice_b] and W2[slice_b, :]: the slices of hidden units are independent until
the output sums them, so TensorFlow's dependency tracker runs the branches at once and the join
waits for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from d2lhelpers.core.units import device_name
from d2lhelpers.devices import Device


def branch_weights(width: int, hidden: int, branches: int, seed: int = 0) -> list[tuple]:
    """Weights of a two-layer MLP whose hidden layer is cut into `branches` slices.

    Branch b holds W1[:, slice_b] and W2[slice_b, :]; the slices of hidden units are independent
    until the output sums them. Slices differ by at most one unit when `hidden` does not divide.
    """
    if not 1 <= branches <= hidden:
        raise ValueError(f"{branches} branches cannot split {hidden} hidden units")
    sizes = [hidden // branches + (b < hidden % branches) for b in range(branches)]
    weights = []
    for b, part in enumerate(sizes):
        w1 = tf.random.stateless_normal((width, part), seed=(seed, 2 * b)) / width**0.5
        w2 = tf.random.stateless_normal((part, width), seed=(seed, 2 * b + 1)) / hidden**0.5
        weights.append((w1, w2))
    return weights


def mlp_branches_in_one_graph(
    devices: Sequence[Device | str], join: Device | str, one_at_a_time: bool = False
) -> Callable:
    """The seed's picture: y = sum_b relu(x W1_b) W2_b, branch b on device b, the sum on `join`.

    Call it as `run(x, weights)`. The branches share only their input, so the dependency tracker
    runs them at once; the join waits for all of them. With `one_at_a_time`, each branch waits
    for the one before (a control dependency): what one device running one stream of work does.
    Logical CPU devices share one pool of op threads, so without it independent branches placed
    on the *same* logical device would still run at once, and "one device" would use every core.
    """
    names, join_name = tuple(device_name(d) for d in devices), device_name(join)

    @tf.function
    def run(x, weights):
        parts = []
        for name, (w1, w2) in zip(names, weights, strict=True):
            with tf.device(name), tf.control_dependencies(parts[-1:] if one_at_a_time else []):
                parts.append(tf.linalg.matmul(tf.nn.relu(tf.linalg.matmul(x, w1)), w2))
        with tf.device(join_name):
            return tf.add_n(parts)

    return run
