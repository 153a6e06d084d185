"""The experiments' work, and only the work: matmul chains, identical matmuls, the branched MLP.

The seed's `[tf.linalg.matmul(x, x) for _ in range(50)]` asks for 50 identical products; inside a
`tf.function` TensorFlow merges identical ops, so one runs and the rate looks 50x too high
(notebook 01 counts the executed ops and finds the optimisation that merges them). A chain
`y <- y @ x` makes each product depend on the one before: every one must run, none can start early.
The experiments that time this work live in the lessons (`d2lhelpers/lessons/`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import tensorflow as tf

from d2lhelpers.core.units import device_name
from d2lhelpers.devices import Device

# One tf.function per (devices, chain length) is the design, not an accident: keep TensorFlow's
# "excessive retracing" advice about it out of the learners' outputs.
tf.get_logger().addFilter(
    lambda record: "triggered tf.function retracing" not in record.getMessage()
)


def random_matrix(size: int, device: Device | str, seed: int = 0) -> tf.Tensor:
    """A `size` x `size` float32 matrix on `device`, scaled so that its powers stay finite."""
    with tf.device(device_name(device)):
        x = tf.random.stateless_normal((size, size), seed=(seed, 0))
        # Spectral radius about 1: a chain of products neither explodes nor vanishes.
        return x / size**0.5


def matmul_chain(x: tf.Tensor, n: int) -> tf.Tensor:
    """`n` matmuls, each needing the one before: y <- y @ x, starting from y = x."""
    y = x
    for _ in range(n):
        y = tf.linalg.matmul(y, x)
    return y


def identical_matmuls(x: tf.Tensor, n: int) -> list[tf.Tensor]:
    """The seed's workload: `n` copies of matmul(x, x). Inside a tf.function only one runs."""
    return [tf.linalg.matmul(x, x) for _ in range(n)]


def chains_in_one_graph(devices: Sequence[Device | str], n: int) -> Callable:
    """One tf.function with one `n`-matmul chain per device; call it with one matrix per device.

    The chains share no data, so TensorFlow's dependency tracker runs them at the same time: no
    thread is written here. Separate eager calls on CPU devices would run one after the other.
    """
    return _chains_in_one_graph(tuple(device_name(d) for d in devices), n)


@functools.lru_cache(maxsize=64)
def _chains_in_one_graph(names: tuple[str, ...], n: int) -> Callable:
    @tf.function
    def run(*xs):
        results = []
        for name, x in zip(names, xs, strict=True):
            with tf.device(name):
                results.append(matmul_chain(x, n))
        return results

    return run


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
