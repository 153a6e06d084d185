"""Steady state read from a timed load: a fixed window, rates with their noise, percentiles with
how many requests they come from and a confidence interval.

The window leaves out the warm-up (the servers filling) and the drain (no more arrivals). A rate
in the window is its total over the window's length; the window is cut into `BATCHES` equal
sub-windows (batch means), and the 95% confidence half-width of their mean (Student's t with
`BATCHES` - 1 degrees of freedom) is its noise: the window's rate is their mean, so its noise is
that of a mean of `BATCHES` readings, not the spread of one (their IQR, used until 2026-12-02,
was about 1.6 times as wide as this interval for normal readings). A percentile of N values is
given with the distribution-free interval of order statistics (the binomial count of values
below it); where N is too small for the interval to have an upper end, the largest value is given
as "max of N".
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

from d2lhelpers.core.units import format_seconds
from d2lhelpers.core.verdicts import Spread

BATCHES = 8  # sub-windows of a window (batch means): enough readings for a spread
CONFIDENCE = 0.95
# Student's t, 0.975 quantile, for BATCHES - 1 degrees of freedom (any t table); a KeyError
# here means BATCHES changed without its quantile
T_95 = {7: 2.365}[BATCHES - 1]


def rate_in_window(events: Sequence[tuple[float, float]], start: float, end: float) -> Spread:
    """Sum of `amount` per second over (time, amount) events in [start, end), batch by batch."""
    width = (end - start) / BATCHES
    sums = [0.0] * BATCHES
    for t, amount in events:
        if start <= t < end:
            sums[min(BATCHES - 1, int((t - start) / width))] += amount
    # the rate is the window's total over its length, the mean of the sub-windows' rates (a
    # bursty load can leave some empty, so their median would not be); its noise is that mean's
    # confidence half-width (as a Spread's `iqr`: the band every verdict reads)
    rates = [s / width for s in sums]
    half = T_95 * statistics.stdev(rates) / math.sqrt(BATCHES)
    return Spread(sum(sums) / (end - start), half)


def binomial_cdfs(n: int, p: float) -> list[float]:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, p), 0 < p < 1."""
    logs = [
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
        for k in range(n + 1)
    ]
    total, cdfs = 0.0, []
    for x in logs:
        total += math.exp(x)
        cdfs.append(min(1.0, total))
    return cdfs


@dataclasses.dataclass(frozen=True)
class Percentile:
    """The q-th percentile of n values, its confidence interval (None: unbounded), or the max."""

    q: float
    n: int
    value: float
    low: float | None
    high: float | None

    @property
    def enough(self) -> bool:
        """Whether n values bound the percentile's interval from above."""
        return self.high is not None

    def __str__(self) -> str:
        if self.n == 0:
            return "-"
        if not self.enough:
            return f"max {_time(self.value)} of {self.n} (too few for p{self.q:g})"
        low = "?" if self.low is None else _time(self.low)
        return f"{_time(self.value)} [{low}, {_time(self.high)}] of {self.n}"


def _time(seconds: float) -> str:
    return "unfinished" if math.isinf(seconds) else format_seconds(seconds)


def percentile(values: Sequence[float], q: float, confidence: float = CONFIDENCE) -> Percentile:
    """The q-th percentile (0-100) of `values` (inf: unfinished) with its order-statistic interval.

    Ranks l < u (1-based) bracket it with P(l <= B < u) >= confidence, B ~ Binomial(n, q/100)
    the count of values below the true percentile; no u <= n means the data cannot bound it.
    """
    xs, n, p = sorted(values), len(values), q / 100
    if n == 0:
        return Percentile(q, 0, math.nan, None, None)
    value = xs[min(n - 1, max(0, math.ceil(p * n) - 1))]
    tail, cdfs = (1 - confidence) / 2, binomial_cdfs(n, p)
    lows = [j for j in range(1, n + 1) if cdfs[j - 1] <= tail]
    highs = [j for j in range(1, n + 1) if cdfs[j - 1] >= 1 - tail]
    low = xs[lows[-1] - 1] if lows else None
    high = xs[highs[0] - 1] if highs else None
    if high is None:
        value = xs[-1]  # shown as "max of n"
    return Percentile(q, n, value, low, high)
