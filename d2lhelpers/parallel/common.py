"""What the three ways of spreading one model over devices share: the model, the split, the result.

The schemes live one per module, as in picotron: `replicas` (a whole model per device),
`tensor_parallel` (every weight matrix cut into slices) and `pipeline_parallel` (the layers cut
into stages). Each is checked against the same model run on one device, and each measured run
returns a `ParallelRun`: its time and throughput beside the one-device time and the speedup
reachable here, with a verdict computed from the times and their noise.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import tensorflow as tf

from d2lhelpers.core.checks import require_counts
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    cores_phrase,
    device_name,
    format_seconds,
    usable_cores,
)
from d2lhelpers.core.verdicts import beats_ideal, faster_or_slower, impossible, noise_of
from d2lhelpers.devices import Device
from d2lhelpers.timing.benchmark import Measurement

MATCH_TOLERANCE = 1e-3  # outputs are ~1: float32 sums in another order differ by ~1e-6


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

    @property
    def width(self) -> int:
        return int(self.w1.shape[0])

    @property
    def hidden(self) -> int:
        return int(self.w1.shape[1])

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


def communication_note(kind: str) -> str:
    """What handing a tensor from one device to another really is on these devices (say it once)."""
    if kind == "logical CPU":
        return (
            "Communication here is a memory hand-over inside one process: logical CPU devices "
            "share the host's memory, so no bytes cross a link and it costs a few µs. Between real "
            "GPUs the same step is a copy over NVLink or PCIe, and it costs time per byte."
        )
    if kind == "virtual GPU":
        return (
            "Communication here is a copy inside one GPU's memory: virtual GPUs share one chip, "
            "so no bytes cross NVLink or PCIe, and they also share its compute."
        )
    return (
        "Communication here is a real copy between GPUs over the link that joins them (NVLink "
        "or PCIe: `nvidia-smi topo -m` says which)."
    )


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class ParallelRun(Reported):
    """One measured run of a scheme on `devices`, beside the same work on `devices[0]` alone."""

    scheme: str
    devices: list[str]
    kind: str
    samples: int  # rows (requests) that one run processes
    measurement: Measurement  # the scheme on all its devices
    reference: Measurement  # the same model and batch on one device
    ideal_speedup: float  # what the split would reach if hand-overs and sharing cost nothing
    max_error: float  # largest |scheme output - one-device output|
    cores: int = dataclasses.field(default_factory=usable_cores)  # this process's, at run time

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @property
    def time(self) -> float:
        return self.measurement.median

    @property
    def reference_time(self) -> float:
        return self.reference.median

    @property
    def throughput(self) -> float:
        """Samples per second on all the devices together."""
        return self.samples / self.time

    @property
    def reference_throughput(self) -> float:
        return self.samples / self.reference_time

    @property
    def speedup(self) -> float:
        return self.reference_time / self.time

    @property
    def speedup_noise(self) -> float:
        """How far the speedup could move if measured again (both times' noise, relative)."""
        relative = (
            noise_of(self.measurement) / self.time + noise_of(self.reference) / self.reference_time
        )
        return self.speedup * relative

    @property
    def core_limited(self) -> bool:
        """Logical CPU devices on fewer cores: at most `cores` of them compute at once."""
        return self.kind == "logical CPU" and self.n_devices > self.cores

    @property
    def reachable_speedup(self) -> float:
        """The ideal for this split, capped by the cores that can compute at once."""
        return min(self.ideal_speedup, self.cores) if self.core_limited else self.ideal_speedup

    @property
    def matches(self) -> bool:
        return self.max_error <= MATCH_TOLERANCE

    @property
    def beats_reachable(self) -> bool:
        reachable = self.reachable_speedup
        ideal_time = self.reference_time / reachable
        return beats_ideal(self.measurement, ideal_time, noise_of(self.reference) / reachable)

    @property
    def label(self) -> str:
        plural = "s" if self.n_devices > 1 else ""
        return f"{self.scheme} on {self.n_devices} {self.kind} device{plural}"

    @property
    def trusted(self) -> bool:
        return not (self.beats_reachable or not self.matches)

    @property
    def verdict(self) -> str:
        """One computed sentence: faster, slower or no measurable difference; the reachable."""
        if not self.trusted:
            return f"{self.label}: flagged, not a result (see the warning)"
        outcome = faster_or_slower(self.measurement, self.reference, self.label, "one device")
        return f"{outcome}; reachable here: {self.reachable_speedup:.2f}x"

    def flags(self) -> list[str]:
        found = []
        if self.beats_reachable:
            found.append(
                impossible(
                    f"{self.label} at {self.speedup:.2f}x one device is above the "
                    f"{self.reachable_speedup:.2f}x reachable here beyond the noise"
                )
            )
        if not self.matches:
            found.append(
                f"{self.label} differs from the one-device output by up to {self.max_error:.1e}: "
                "the split computed something else"
            )
        for m in (self.measurement, self.reference):
            found += [f"{m.label}: {w}" for w in m.warnings]
        return found

    def details(self) -> list[str]:
        """Facts of this run beyond the times (what was split, what was counted)."""
        lines = [f"largest difference from the one-device output: {self.max_error:.1e}"]
        if self.core_limited:
            lines.append(
                f"{self.n_devices} logical devices on {cores_phrase(self.cores)}: at most "
                f"{self.cores} compute at once, so {self.cores}x is the most reachable here"
            )
        if self.kind == "virtual GPU" and self.n_devices > 1:
            lines.append(
                f"{self.n_devices} virtual GPUs share one chip's compute: the reachable speedup "
                "assumes separate chips, so it is an upper bound here"
            )
        return lines

    def rows(self) -> list[tuple]:
        reachable_time = self.reference_time / self.reachable_speedup
        return [
            ("one device", self.reference_time, self.reference_throughput, 1.0),
            (self.label, self.time, self.throughput, self.speedup),
            (
                "reachable here (hand-overs free)",
                reachable_time,
                self.samples / reachable_time,
                self.reachable_speedup,
            ),
        ]

    def tables(self) -> list[Table]:
        rows = [
            (name, format_seconds(t), f"{rate:,.0f}", f"{speedup:.2f}x")
            for name, t, rate, speedup in self.rows()
        ]
        return [
            Table(
                f"{self.scheme}: a batch of {self.samples} rows",
                ("run", "time per batch", "samples/s", "speedup vs one device"),
                rows,
                [self.verdict, *self.details()],
                self.flags(),
            )
        ]
