"""Timing that waits for the devices: d2l's `Benchmark` printout, and a rigorous `measure`.

Both sync every device before starting and before stopping the clock, so work still queued on a
GPU is counted. `measure` warms up, repeats until the spread is small (or a time budget is
spent), keeps every raw time, and warns when a result cannot be true: a rate above the device's
measured peak means the work was deduplicated or the clock did not wait for it.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable

from d2lhelpers.units import format_rate, format_seconds

NOISY_IQR = 0.1  # IQR / median above this: too noisy to trust (pyperf, torch.utils.benchmark)
PEAK_TOLERANCE = 1.2  # a rate this far above the peak is impossible, not noise
MIN_BLOCK_S = 0.01  # a timed block at least this long keeps the ~40 µs sync+clock cost below 1%
MAX_NUMBER = 1000
MIN_RUNS_IN_BUDGET = 3  # even when the budget is spent, a median needs a few runs


def sync_devices() -> None:
    """Wait until every device has finished its queued work."""
    import tensorflow as tf

    tf.test.experimental.sync_devices()


class Benchmark:
    """Wall time of a `with` block, every device synced on enter and exit (d2l's printout).

    >>> with Benchmark('GPU1 time'):   # prints "GPU1 time: 0.0629 sec"
    ...     run(x)
    """

    def __init__(self, description: str = "Done", *, clock=time.perf_counter, sync=sync_devices):
        self.description, self.clock, self.sync = description, clock, sync
        self.elapsed: float | None = None

    def __enter__(self):
        self.sync()
        self._start = self.clock()
        return self

    def __exit__(self, *exc):
        self.sync()
        self.elapsed = self.clock() - self._start
        print(f"{self.description}: {self.elapsed:.4f} sec")


@dataclasses.dataclass
class Measurement:
    """Raw times of repeated runs, their median and IQR, and the rate when the work is known."""

    label: str
    times: list[float]
    work: float | None = None  # FLOPs or bytes done by one run
    unit: str = "FLOP/s"
    peak: float | None = None  # the device's measured peak, in `unit`
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def iqr(self) -> float:
        if len(self.times) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.times, n=4, method="inclusive")
        return q3 - q1

    @property
    def rate(self) -> float | None:
        return self.work / self.median if self.work is not None else None

    def __str__(self) -> str:
        text = f"{self.label}: {format_seconds(self.median)} (IQR {format_seconds(self.iqr)}, "
        text += f"{len(self.times)} runs)"
        if self.rate is not None:
            text += f", {format_rate(self.rate, self.unit)}"
            if self.peak:
                peak = format_rate(self.peak, self.unit)
                text += f" = {self.rate / self.peak:.2f} of the peak {peak}"
        return "\n".join([text] + [f"  WARNING: {w}" for w in self.warnings])


def measure(
    run: Callable[[], object],
    label: str = "run",
    *,
    flops: float | None = None,
    nbytes: float | None = None,
    peak: float | None = None,
    warmup: int = 1,
    min_runs: int = 5,
    max_runs: int = 50,
    budget_s: float = 2.0,
    number: int | None = None,
    on_repeat: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], None] = sync_devices,
) -> Measurement:
    """Time `run()` after `warmup` calls: `min_runs` at least, more until IQR/median <= 0.1,
    stopping early once the budget is spent (after 3 runs) or at `max_runs`.

    Each timed block calls `run()` `number` times and syncs once; with None, the number is chosen
    so that a block lasts about `MIN_BLOCK_S`, making the sync and clock overhead negligible (as
    torch.utils.benchmark and timeit do). Times are per call.

    Pass `flops` (or `nbytes`) done by one run to get a rate, and the device's `peak` in the same
    unit to have impossible rates flagged. `on_repeat(n)` is called after each timed block, so a
    panel can say "repeat 7" while a long measurement runs (and stop it by raising).
    """
    if flops is not None and nbytes is not None:
        raise ValueError("give flops or nbytes, not both")
    for _ in range(warmup):
        run()
    sync()
    if number is None:
        start = clock()
        run()
        sync()
        number = max(1, min(MAX_NUMBER, math.ceil(MIN_BLOCK_S / max(clock() - start, 1e-9))))
    times: list[float] = []
    began = clock()
    while len(times) < max_runs:
        start = clock()
        for _ in range(number):
            run()
        sync()
        end = clock()
        times.append((end - start) / number)
        if on_repeat is not None:
            on_repeat(len(times))
        so_far = Measurement(label, times)
        if len(times) >= min_runs and so_far.iqr <= NOISY_IQR * so_far.median:
            break
        if len(times) >= MIN_RUNS_IN_BUDGET and end - began > budget_s:
            break
    work, unit = (nbytes, "B/s") if nbytes is not None else (flops, "FLOP/s")
    result = Measurement(label, times, work, unit, peak)
    result.warnings = measurement_warnings(result)
    return result


def measurement_warnings(m: Measurement) -> list[str]:
    """What makes `m` untrustworthy: no time, noise above 10%, or a rate above the peak."""
    found = []
    if m.median <= 0:
        found.append("the clock measured no time at all: the run was not timed")
    elif m.iqr > NOISY_IQR * m.median:
        found.append(
            f"noisy: IQR is {m.iqr / m.median:.0%} of the median (above {NOISY_IQR:.0%}); "
            "something else is using this machine, or the runs are too short"
        )
    if m.rate is not None and m.peak and m.rate > PEAK_TOLERANCE * m.peak:
        found.append(
            f"{format_rate(m.rate, m.unit)} is {m.rate / m.peak:.1f}x the device's measured peak "
            f"({format_rate(m.peak, m.unit)}): impossible. The work was probably deduplicated "
            "(identical ops merged), or the clock stopped before the device finished"
        )
    return found


def compare_to_ideal(measured: float, ideal: float, label: str) -> str:
    """One line: a measured time beside its ideal, flagging a result better than the ideal.

    Beating the ideal by more than 10% is a timing bug (work skipped or not waited for), not a win.
    """
    ratio = measured / ideal
    line = f"{label}: {format_seconds(measured)}, ideal {format_seconds(ideal)}: {ratio:.2f}x ideal"
    if ratio < 0.9:
        line += "  WARNING: faster than the ideal, so something was not timed; do not trust it"
    return line
