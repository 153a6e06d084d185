"""The experiments' work: matmul chains no optimiser can merge, one chain per device in one graph.

The seed's `[tf.linalg.matmul(x, x) for _ in range(50)]` asks for 50 identical products; Grappler
merges identical ops, so one runs and the rate looks 50x too high. A chain `y <- y @ x` makes each
product depend on the one before: every one must run, and none can start early.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import tensorflow as tf

from d2lhelpers.benchmark import Measurement, measure
from d2lhelpers.devices import Device, check_fits, select_devices

BYTES_PER_FLOAT = 4

# One tf.function per (devices, chain length) is the design, not an accident: keep TensorFlow's
# "excessive retracing" advice about it out of the learners' outputs.
tf.get_logger().addFilter(
    lambda record: "triggered tf.function retracing" not in record.getMessage()
)


def random_matrix(size: int, device: Device | str, seed: int = 0) -> tf.Tensor:
    """A `size` x `size` float32 matrix on `device`, scaled so that its powers stay finite."""
    with tf.device(_name(device)):
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


def chain_flops(size: int, n: int) -> int:
    """Floating-point operations of `n` size x size matmuls (a multiply and an add per term)."""
    return 2 * size**3 * n


def chain_bytes(size: int) -> int:
    """Memory one chain holds at once on its device: x, the running product and the next one."""
    return 3 * size * size * BYTES_PER_FLOAT


def chains_in_one_graph(devices: Sequence[Device | str], n: int) -> Callable:
    """One tf.function with one `n`-matmul chain per device; call it with one matrix per device.

    The chains share no data, so TensorFlow's dependency tracker runs them at the same time: no
    thread is written here. Separate eager calls on CPU devices would run one after the other.
    """
    return _chains_in_one_graph(tuple(_name(d) for d in devices), n)


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


@dataclasses.dataclass
class ConcurrencyResult:
    """Time of one chain per device, on 1, 2, ... devices at once (ideal: flat)."""

    size: int
    n_matmuls: int
    kind: str
    measurements: list[Measurement]

    @property
    def device_counts(self) -> list[int]:
        return list(range(1, len(self.measurements) + 1))

    @property
    def times(self) -> list[float]:
        return [m.median for m in self.measurements]

    @property
    def slowdowns(self) -> list[float]:
        """Time on k devices / time on one: the ideal is 1.0 for every k."""
        return [t / self.times[0] for t in self.times]

    @property
    def speedups(self) -> list[float]:
        """Work done per second relative to one device: the ideal is k."""
        return [k / s for k, s in zip(self.device_counts, self.slowdowns, strict=True)]

    def table(self) -> str:
        rows = ["devices  time       vs one device (ideal 1.00)  speedup (ideal = devices)"]
        for k, m, slow, speed in zip(
            self.device_counts, self.measurements, self.slowdowns, self.speedups, strict=True
        ):
            rows.append(f"{k:7d}  {m.median * 1e3:7.1f} ms  {slow:26.2f}  {speed:9.2f}")
        return "\n".join(rows)


def concurrency_sweep(
    size: int,
    n_matmuls: int,
    max_devices: int,
    progress: Callable[[int, int], None] | None = None,
    device_peak: float | None = None,
    **measure_options,
) -> ConcurrencyResult:
    """Run one chain per device on 1, 2, ..., `max_devices` devices at once, each timed.

    Refuses sizes that do not fit before allocating anything. `progress(done, total)` is called
    after each device count. With `device_peak` (FLOP/s of one device), k devices' combined rate
    is flagged when above k times that.
    """
    if size < 1 or n_matmuls < 1:
        raise ValueError(f"size and n_matmuls must be at least 1, got {size} and {n_matmuls}")
    devices = select_devices(max_devices)
    what = f"a {size}x{size} chain on each of {max_devices} devices"
    check_fits(chain_bytes(size), devices, what)
    xs = [random_matrix(size, d, seed=i) for i, d in enumerate(devices)]
    measurements = []
    for k in range(1, max_devices + 1):
        run = chains_in_one_graph(devices[:k], n_matmuls)
        label = f"{k} chain{'s' if k > 1 else ''} on {k} device{'s' if k > 1 else ''}"
        measurements.append(
            measure(
                lambda run=run, k=k: run(*xs[:k]),
                label,
                flops=k * chain_flops(size, n_matmuls),
                peak=k * device_peak if device_peak else None,
                **measure_options,
            )
        )
        if progress:
            progress(k, max_devices)
    return ConcurrencyResult(size, n_matmuls, devices[0].kind, measurements)


def _name(device: Device | str) -> str:
    return device if isinstance(device, str) else device.name


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
    names, join_name = tuple(_name(d) for d in devices), _name(join)

    @tf.function
    def run(x, weights):
        parts = []
        for name, (w1, w2) in zip(names, weights, strict=True):
            with tf.device(name), tf.control_dependencies(parts[-1:] if one_at_a_time else []):
                parts.append(tf.linalg.matmul(tf.nn.relu(tf.linalg.matmul(x, w1)), w2))
        with tf.device(join_name):
            return tf.add_n(parts)

    return run
