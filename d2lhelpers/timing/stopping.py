"""Where `measure` stops, and how far past its fewest runs this machine's measurements went.

`measure` stops after `min_runs` blocks once their spread is small, and otherwise goes on to its
cap: `max_runs`, or the first block past its time budget. On a quiet machine nearly every measure
stops at the fewest; on a small or busy one, short blocks are often noisy and run to the cap,
which takes up to `cap / min_runs` times longer (probed on 2 cores: 10 ms blocks, 3 runs or 50).
Each measure records where between the two it stopped; an estimate expects the recent mean.
This process's record only: a worker process's measures are not in it.
"""

from __future__ import annotations

import math
from collections import deque

from d2lhelpers.core.checks import require_count

MIN_RUNS_IN_BUDGET = 3  # even when the budget is spent, a median needs a few runs
RECENT = 64  # the measures an estimate learns from: the machine changes, old ones say less

_past_fewest: deque[float] = deque(maxlen=RECENT)


def run_counts(block_s: float, min_runs: int, max_runs: int, budget_s: float) -> tuple[int, int]:
    """(fewest, most) blocks of `block_s` seconds one `measure` runs with these options: the
    fewest when the first `min_runs` agree, the most when no run agrees (its cap)."""
    within_budget = math.floor(budget_s / block_s) + 1 if block_s > 0 else max_runs
    most = min(max_runs, max(MIN_RUNS_IN_BUDGET, within_budget))
    return min(min_runs, most), most


def record(runs: int, fewest: int, most: int) -> None:
    """Note one measure's stop: 0 at its fewest runs, 1 at its cap."""
    require_count("runs", runs)
    if most > fewest:
        _past_fewest.append(min(max((runs - fewest) / (most - fewest), 0.0), 1.0))


def share_past_fewest() -> float:
    """The mean of the recent measures' stops, 0 (all stopped at their fewest runs; also
    before any measure) to 1 (all ran to their cap)."""
    return sum(_past_fewest) / len(_past_fewest) if _past_fewest else 0.0


def expected_runs(fewest: int, most: int, share: float | None = None) -> float:
    """The blocks a measure is expected to run: `share` of the way from fewest to most
    (default: this machine's recent record)."""
    share = share_past_fewest() if share is None else share
    return fewest + share * (most - fewest)


def forget() -> None:
    """Clear the record (tests start from a quiet machine's)."""
    _past_fewest.clear()
