"""Timing that waits for the devices: d2l's `Benchmark` printout, and a rigorous `measure`.

Both sync every device before starting and before stopping the clock, so work still queued on a
GPU is counted. `measure` warms up, repeats until the spread is small (or a time budget is
spent), keeps every raw time, and warns when a result cannot be true. A rate is above the
device's measured peak only when it exceeds it by more than the noise of both (the rate's runs,
and the peak's own runs); such a rate first has the peak measured again (when the peak knows how:
a `MeasuredPeak`): if the fresh peak explains the rate, the peak had been measured low, and the
fresh peak is the one every later measurement uses; otherwise the possible causes are listed in
order (too noisy, peak measured low, work skipped or merged).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import statistics
import time
from collections.abc import Callable

from d2lhelpers.core.checks import require_count
from d2lhelpers.core.units import (
    enough_digits,
    format_rate,
    format_seconds,
    noise_percent,
    printed_value,
    rate_and_share,
    ratio_beside,
    ratio_past_noise,
)
from d2lhelpers.core.verdicts import (
    LIKELY_CAUSES,
    NOISY_IQR,
    above_limit,
    impossible,
    noisy_warning,
    relative_noise,
)
from d2lhelpers.timing import stopping
from d2lhelpers.timing.stopping import MIN_RUNS_IN_BUDGET

MIN_BLOCK_S = 0.01  # a timed block at least this long keeps the ~40 µs sync+clock cost below 1%
MAX_NUMBER = 1000
FAR_OUT = 3  # noise bands past the limit: Tukey's outer fence (3 IQRs), beyond any noisy run
TOO_SHORT_S = 1e-6  # a call faster than this did no device work (a TF op alone costs ~10 µs)


@dataclasses.dataclass
class PeakRecord:
    """One device's peak in this run: its best measured rate and its noise. `remeasure()`
    measures again and keeps the higher rate (a peak is a best rate; a peak measured while the
    machine was busy is low). The noise is the IQR / median of the runs that gave the kept rate,
    and once measured again, at least the gap between its measurements as a fraction of the best:
    one measurement's spread says nothing of how far the next may land (probed: 3% within one,
    +26% between two, on a loaded 2-core machine)."""

    rate: float
    noise: float = 0.0
    measure_again: Callable[[], tuple[float, float]] | None = None
    readings: list[float] = dataclasses.field(default_factory=list)

    def remeasure(self) -> None:
        if self.measure_again is None:
            return
        rate, noise = self.measure_again()
        self.readings = [*(self.readings or [self.rate]), rate]
        if rate > self.rate:
            self.rate, self.noise = rate, noise
        drift = (max(self.readings) - min(self.readings)) / max(self.readings)
        self.noise = max(self.noise, drift)


class MeasuredPeak(float):
    """A peak rate tied to its device's `PeakRecord`: one peak per device per run.

    It is a float everywhere (its value when it was handed out), so a model can compute with it;
    `measure` reads `current`, the record's newest rate, and its `noise`. When a rate comes out
    above it, `remeasure()` measures the record again, and every measurement after that, in any
    cell, compares with the new peak. `k * peak` is the peak of k devices computing at once.
    """

    def __new__(cls, record: PeakRecord | float, factor: float = 1.0):
        record = record if isinstance(record, PeakRecord) else PeakRecord(float(record))
        peak = super().__new__(cls, record.rate * factor)
        peak.record, peak.factor = record, factor
        return peak

    @property
    def current(self) -> float:
        return self.record.rate * self.factor

    @property
    def noise(self) -> float:
        return self.record.noise

    def remeasure(self) -> float | None:
        """The peak as measured again now (the record keeps the higher of its readings, which
        `current` gives), or None when it cannot be measured again."""
        if self.record.measure_again is None:
            return None
        self.record.remeasure()
        return self.record.readings[-1] * self.factor

    def __mul__(self, k):
        if not isinstance(k, numbers.Real):
            return NotImplemented
        return MeasuredPeak(self.record, self.factor * k)

    __rmul__ = __mul__

    def __reduce__(self):  # pickled or copied, it is the plain number (a re-measure stays here)
        return float, (float(self),)


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
    remeasured_peak: float | None = None  # the peak measured again because the rate exceeded it
    peak_noise: float = 0.0  # the peak's own noise: IQR / median of the runs that measured it
    remeasured_noise: float | None = None  # the peak's noise once measured again (later rates')
    peak_factor: float = 1.0  # k for `k * peak`: k devices' ceiling from one device's peak
    # The `MeasuredPeak` `measure` was given, if any: not a field (not serialized, and
    # `dataclasses.replace` drops it), so that a reading made later can use its newest rate
    peak_source = None

    def _rate_beside(self, shown: str, peak: float) -> str:
        """The rate with the decimals (1 to 4) at which it, over the peak as printed, gives the
        printed ratio `shown` (read 171: '1.7 TFLOP/s = 9.58 of the peak 172.3 GFLOP/s')."""
        number = shown.split()[0]
        decimals = len(number.partition(".")[2])
        printed_peak = printed_value(format_rate(peak, self.unit))  # a ceiling prints alike

        def rebuilds(d: int) -> bool:
            rate = printed_value(format_rate(self.rate, self.unit, d))
            return f"{rate / printed_peak:.{decimals}f}" == number

        return format_rate(self.rate, self.unit, enough_digits(rebuilds, 1, 4, past=1))

    def peak_words(self, peak: float) -> str:
        """'the peak 104.1 GFLOP/s', or for `k * peak` 'the ceiling 208.2 GFLOP/s (2 x the
        measured peak 104.1 GFLOP/s, ...)': a ceiling derived, not measured (read 105)."""
        if self.peak_factor == 1:
            return f"the peak {format_rate(peak, self.unit)}"
        said, one = rate_and_share(peak, self.peak_factor, self.unit)
        return (
            f"the ceiling {said} ({self.peak_factor:g} x the measured peak {one}: that many "
            "devices computing at once, each assumed as fast)"
        )

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

    @property
    def best_peak(self) -> float | None:
        """The larger of the peak given and the peak re-measured (a peak is a best rate)."""
        known = [p for p in (self.peak, self.remeasured_peak) if p]
        return max(known) if known else None

    @property
    def peak_now(self) -> float | None:
        """The peak as known now, for a reading made after this run: its `MeasuredPeak`'s
        `current` rate where that was measured again, higher, since (read 179: the higher one
        is used from then on); else `best_peak`. This run's own line keeps `best_peak`."""
        if self.peak_source is None:
            return self.best_peak
        return max(self.best_peak or 0.0, self.peak_source.current)

    @property
    def peak_noise_now(self) -> float:
        """The noise `peak_now` carries: its source's, once it is the newer (at least the gap
        between its readings), else this run's `peak_noise`."""
        if self.peak_source is None or self.peak_now == self.best_peak:
            return self.peak_noise
        return max(self.peak_noise, self.peak_source.noise)

    @property
    def rate_noise(self) -> float:
        """How far the rate could move if measured again, as a fraction: the times' noise plus
        the peak's own (`noise_of`: the runs' IQR, at least the noise floor)."""
        return relative_noise(self) + self.peak_noise

    @property
    def above_peak(self) -> bool:
        """Whether the rate exceeds the best known peak by more than the noise of both."""
        peak, rate = self.best_peak, self.rate
        return rate is not None and bool(peak) and above_limit(rate, peak, self.rate_noise)

    @property
    def above_peak_within(self) -> str:
        """' (above it by less than the noise of 96%: the rate's 5% + the peak's 91%, ...: not a
        result)' for a rate above the best
        known peak within both noises (beyond them, `measurement_warnings` flags it); else ''."""
        peak = self.best_peak
        if self.rate is None or not peak or self.rate <= peak or self.above_peak:
            return ""
        said = f" (above it by less than the noise of {self.rate_noise:.0%}"
        if self.peak_noise:  # its parts, so that the band rebuilds from the page (read 64)
            # the parts one digit past the total, so that they add up to it as printed (read
            # 161: 'the noise of 9%: the rate's 6% + the peak's 4%')
            said += f": the rate's {relative_noise(self):.1%} + the peak's {self.peak_noise:.1%}"
            if self.peak_noise > NOISY_IQR:
                said += ", a peak too noisy to judge a rate against"
        return said + ": not a result)"

    def __str__(self) -> str:
        text = f"{self.label}: {format_seconds(self.median)} (IQR {format_seconds(self.iqr)}, "
        text += f"{len(self.times)} runs)"
        if self.rate is not None:
            rate_text, tail = format_rate(self.rate, self.unit), ""
            peak_now = self.best_peak
            if peak_now:
                peak = self.peak_words(peak_now)
                again = (
                    f" (the best reading kept; measured again now: "
                    f"{format_rate(self.remeasured_peak, self.unit)}"
                    + (
                        f"; this rate is judged with the peak's noise before that, "
                        f"{self.peak_noise:.0%}, later rates with {self.remeasured_noise:.0%}: the "
                        "larger of the kept reading's spread and the gap between the readings)"
                        if self.remeasured_noise is not None
                        else ")"
                    )
                    if self.remeasured_peak
                    else ""
                )
                # Above 1, with the digits that set it apart from its noise's edge (read 116).
                ratio = self.rate / peak_now
                apart = ratio > 1 and not math.isclose(ratio, 1 + self.rate_noise, rel_tol=1e-6)
                shown = ratio_beside(ratio, 1 + self.rate_noise) if apart else f"{ratio:.2f}"
                rate_text = self._rate_beside(shown, peak_now)
                tail = f" = {shown} of {peak}{again}" + self.above_peak_within
                if self.above_peak:  # the headline itself says so, not only a warning (read 72)
                    tail += " (above it beyond the noise: not a result, see the warning)"
            text += f", {rate_text}{tail}"
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
    if not callable(run):
        raise TypeError(f"measure needs a function to call, got {run!r}")
    require_count("warmup", warmup, low=0)
    require_count("min_runs", min_runs)
    require_count("max_runs", max_runs)
    if number is not None:
        require_count("number", number, high=10**6)
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
    # Where it stopped, between its fewest runs and its cap, for the next estimate to expect.
    stopping.record(
        len(times),
        *stopping.run_counts(statistics.mean(times) * number, min_runs, max_runs, budget_s),
    )
    work, unit = (nbytes, "B/s") if nbytes is not None else (flops, "FLOP/s")
    measured = isinstance(peak, MeasuredPeak)
    result = Measurement(label, times, work, unit, peak.current if measured else peak)
    result.peak_noise = peak.noise if measured else 0.0
    result.peak_factor = peak.factor if measured else 1.0
    result.peak_source = peak if measured else None
    if result.above_peak and measured:
        # Before blaming the workload, check the yardstick: measure the peak again.
        # This result is judged with the noise it was measured against; the record's noise,
        # now at least the gap between its two readings, widens every later measurement's band.
        result.remeasured_peak = peak.remeasure()
        result.remeasured_noise = peak.noise
    result.warnings = measurement_warnings(result)
    return result


def measurement_warnings(m: Measurement) -> list[str]:
    """What makes `m` untrustworthy: no time, too short to be work, noise above 10%, or a rate
    above the peak beyond the noise of both (explained by a re-measured peak, or impossible with
    its causes in order)."""
    found = []
    noisy = m.median > 0 and m.iqr > NOISY_IQR * m.median
    if m.median <= 0:
        found.append("the clock measured no time at all: the run was not timed")
    elif m.median < TOO_SHORT_S:
        found.append(
            f"each call took {format_seconds(m.median)}: too short to be device work (one "
            "TensorFlow op alone takes about 10 µs); the function probably does nothing"
        )
    if noisy:
        found.append(noisy_warning(m))
    if m.rate is None or not m.peak or not above_limit(m.rate, m.peak, m.rate_noise):
        return found
    rate, first = format_rate(m.rate, m.unit), format_rate(m.peak, m.unit)
    past = ratio_past_noise(m.rate / m.peak, m.rate_noise)
    if m.remeasured_peak and not above_limit(m.rate, m.remeasured_peak, m.rate_noise):
        # Explained: blame the first peak only when the new one is higher beyond its noise.
        if above_limit(m.remeasured_peak, m.peak, m.peak_noise):
            found.append(
                f"the peak was measured low: {rate} is {past[0]} the device's measured peak "
                f"({first}), {past[1]}, but {m.rate / m.remeasured_peak:.2f}x the peak "
                f"measured again now ({format_rate(m.remeasured_peak, m.unit)}); the first peak "
                "was probably measured while the machine was busy (a hypothesis, not measured)"
            )
        return found
    again = (
        f", {format_rate(m.remeasured_peak, m.unit)} when measured again"
        if m.remeasured_peak
        else ""
    )
    causes = list(LIKELY_CAUSES)
    causes[0] += " (these runs were noisy)" if noisy else " (unlikely: these runs were not noisy)"
    if m.remeasured_peak:
        causes[1] += " (measured again, it still explains nothing)"
    causes[2] = (
        "the work was deduplicated (identical ops merged) or skipped, or the clock stopped "
        "before the device finished"
    )
    best = m.best_peak or m.peak
    beyond = (m.rate / best - 1) / max(m.rate_noise, 1e-9)
    if beyond > FAR_OUT:  # far beyond any noise: work not done comes first
        far = (  # read 130: the digits it is computed from, so a reader can redo it
            f"{causes[0]}, which cannot reach {m.rate / best:.2f}x the peak "
            f"{format_rate(best, m.unit)}: {beyond:.0f} times its noise "
            f"({noise_percent(m.rate_noise)}) above it"
        )
        causes = [causes[2], causes[1], far]
    else:  # a cause this run's own numbers speak against goes last, with why
        excluded = [not noisy, bool(m.remeasured_peak), False]
        causes = sorted(causes, key=lambda c: excluded[causes.index(c)])  # stable: in order
    found.append(
        impossible(
            f"{rate} is {past[0]} the device's measured peak ({first}{again}), {past[1]}",
            causes,
        )
    )
    return found
