"""Why notebook 02 needs a real link: a "copy" between logical devices of one process.

`tf.identity` from one logical CPU device to another is expected to copy few or no bytes: its
time grows far less than the size (the receiver is, we expect, handed the sender's buffer). A
real copy of the same bytes in this machine's memory (NumPy) is timed beside it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from d2lhelpers.core.checks import require_sweep
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    BYTES_PER_FLOAT,
    GiB,
    MiB,
    format_bytes,
    format_rate,
    format_seconds,
)
from d2lhelpers.core.verdicts import NOISE_FLOOR, compare, noise_of, noise_text
from d2lhelpers.devices import check_fits, select_devices
from d2lhelpers.timing.benchmark import Measurement, measure
from d2lhelpers.tracing.timeline import device_label

MAX_LOCAL_COPY_BYTES = 4 * GiB


@dataclasses.dataclass
class LocalCopyResult(Reported):
    """`tf.identity` from one logical device to another of this process, at several sizes."""

    source: str
    destination: str
    sizes: list[int]  # bytes
    copies: list[Measurement]
    memcpy: Measurement  # a real copy of the largest size in this machine's memory (NumPy)

    @property
    def size_ratio(self) -> float:
        return self.sizes[-1] / self.sizes[0]

    @property
    def time_ratio(self) -> float:
        """Time of the largest over the smallest: about 1 when no bytes move."""
        return self.copies[-1].median / self.copies[0].median

    @property
    def time_ratio_noise(self) -> float:
        """`time_ratio`'s band: both times' noises over the smallest's, the band `compare`
        reads the two with (one rule for every verdict against 1; read 165)."""
        c = compare(self.copies[-1], self.copies[0])
        return c.noise / c.b

    @property
    def moved_no_bytes(self) -> bool:
        """The time grew far less than the size (below its square root, beyond the noise), and
        the largest copy was faster than a real copy of its bytes beyond both noises."""
        grew_little = self.time_ratio + self.time_ratio_noise < self.size_ratio**0.5
        return grew_little and compare(self.copies[-1], self.memcpy).a_faster

    @property
    def shrank(self) -> bool:
        """The largest faster than the smallest beyond the ratio's noise: more bytes cannot take
        less time, so the per-call cost moved between the sizes' runs."""
        return compare(self.copies[-1], self.copies[0]).a_faster

    @property
    def added_at_most_s(self) -> float:
        """The most time the largest can have added over the smallest within both runs' noise:
        the gap of the medians plus both noises (read 70: a median gap of 0 bounds nothing).
        When the two sizes' times cannot bound it (`shrank`), the largest's whole time and its
        noise (read 97: 'at most 0 B' from a gap just called not a result)."""
        small, large = self.copies[0], self.copies[-1]
        if self.shrank:
            return large.median + noise_of(large)
        return max(0.0, large.median - small.median + noise_of(large) + noise_of(small))

    @property
    def bytes_copied_at_most(self) -> float:
        """The bytes `added_at_most_s` could copy at the real copy's rate at the fast edge of its
        noise (read 98: its median rate bounded a little low): an upper bound on what moved."""
        memcpy = self.memcpy
        fastest = memcpy.median - noise_of(memcpy)
        rate = (memcpy.rate or 0.0) * memcpy.median / fastest if fastest > 0 else math.inf
        return self.added_at_most_s * rate

    @property
    def verdict(self) -> str:
        if self.moved_no_bytes:
            extra = self.sizes[-1] - self.sizes[0]
            at_most = self.bytes_copied_at_most
            spent = (
                "its whole time, at most "
                f"{format_seconds(self.added_at_most_s)} within its noise (the two sizes' times "
                "cannot bound it, as said)"
                if self.shrank
                else f"the time the largest added, at most {format_seconds(self.added_at_most_s)} "
                "within both runs' noise"
            )
            share = at_most / extra
            few = share < NOISE_FLOOR  # read 185: '(almost) none' beside a bound of 22.7%
            what = (
                ("(almost) none of the bytes were copied" if few else f"at most {share:.1%} of "
                 "the bytes were copied")
                + f": {spent}, would copy at most {format_bytes(at_most)} at the real copy's "
                f"rate (the fast edge of its noise), {share:.1%} of the {format_bytes(extra)} "
                "more it holds"
                + (f", under the {NOISE_FLOOR:.0%} floor every time here is read to" if few else "")
                + " (hypothesis: the receiver is handed the sender's buffer, so a hand-over's "
                "time is per-call cost, not bytes)"
            )  # fmt: skip
        else:
            what = (
                "the time grew with the bytes, or did not stay measurably below a real copy: "
                "this copy may really move them"
            )
        against = compare(self.copies[-1], self.memcpy)
        where = "within" if against.outcome == "no measurable difference" else "beyond"
        shrank = ""
        if self.shrank:  # read 96: 0.82x ± 0.12, unflagged
            shrank = (
                " (below 1.0, a hand-over of no bytes, beyond its noise: more bytes cannot take "
                "less time, so this ratio is not a result; the per-call cost moved between the "
                "sizes' runs, a hypothesis)"
            )
        return (
            f"{self.size_ratio:.0f}x the bytes took {self.time_ratio:.2f}x ± "
            f"{self.time_ratio_noise:.2f} the time{shrank}, and the largest took "
            f"{against.ratio:.2f}x a real copy's ({against.outcome}, {where} both runs' noise): "
            f"{what}"
        )

    def tables(self) -> list[Table]:
        src, dst = device_label(self.source), device_label(self.destination)
        rows = [
            [
                f"'copy' {src} -> {dst}",
                format_bytes(size),
                format_seconds(m.median),
                noise_text(m),
                "",
            ]
            for size, m in zip(self.sizes, self.copies, strict=True)
        ]
        rows.append(
            [
                "real copy in memory (NumPy)",
                format_bytes(self.sizes[-1]),
                format_seconds(self.memcpy.median),
                noise_text(self.memcpy),
                format_rate(self.memcpy.rate, "B/s"),
            ]
        )
        flags = [f"{m.label}: {w}" for m in [*self.copies, self.memcpy] for w in m.warnings]
        columns = ["what", "bytes", "time", "noise", "rate"]
        return [Table("A copy inside one process", columns, rows, [self.verdict], flags)]


def local_copy_cost(
    sizes: Sequence[int] = (1 * MiB, 64 * MiB), **measure_options
) -> LocalCopyResult:
    """Time `tf.identity` of a tensor of each size (bytes) from set-up device 0 to device 1,
    inside one tf.function, and a real memory copy of the largest size for comparison."""
    sizes = sorted(require_sweep("sizes (bytes)", sizes, BYTES_PER_FLOAT, MAX_LOCAL_COPY_BYTES))
    source, destination = select_devices(2)
    check_fits(2 * sizes[-1], [source], "the local copy probe")
    measure_options = {"min_runs": 5, "budget_s": 0.5, **measure_options}

    @tf.function
    def copy(x):
        with tf.device(destination.name):
            return tf.identity(x)

    copies = []
    for size in sizes:
        with tf.device(source.name):
            x = tf.zeros([size // BYTES_PER_FLOAT])
        copies.append(
            measure(lambda x=x: copy(x), f"identity of {format_bytes(size)}", **measure_options)
        )
    array = np.ones(sizes[-1] // BYTES_PER_FLOAT, np.float32)
    target = np.empty_like(array)
    memcpy = measure(
        lambda: np.copyto(target, array),
        f"NumPy copy of {format_bytes(sizes[-1])}",
        nbytes=array.nbytes,
        sync=lambda: None,
        **measure_options,
    )
    return LocalCopyResult(source.name, destination.name, list(sizes), copies, memcpy)
