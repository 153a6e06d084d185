"""Timing several runs in turns, so a machine that changes under them slows them all alike.

`measure_interleaved(runs, rounds)` `measure`s every run once per round, round after round, and
pools each run's times from all rounds into one `Measurement`. One after the other, a machine
that gets busier half-way would slow only the last runs, and their ratios would lie; in turns,
every run is spread over the same stretch of time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from d2lhelpers.core.progress import Steps
from d2lhelpers.timing.benchmark import Measurement, measure, measurement_warnings


def measure_interleaved(
    runs: Sequence[tuple[Callable[[], object], str, dict]],
    rounds: int = 3,
    on_round: Callable[[], None] | None = None,
    on_repeat: Callable[[int, str, int], None] | None = None,
    **measure_options,
) -> list[Measurement]:
    """Time several (run, label, rate options) in turns; return one pooled Measurement each.

    `on_round()` is called after each round; `on_repeat(round, label, repeat)` after each timed
    block (round counts from 1), so a progress bar can say what is being timed right now.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a whole number of at least 1, got {rounds!r}")
    parts: list[list[Measurement]] = [[] for _ in runs]
    for round_number in range(1, rounds + 1):
        for taken, (run, label, rate_options) in zip(parts, runs, strict=True):
            repeat = None
            if on_repeat is not None:
                repeat = lambda n, label=label, r=round_number: on_repeat(r, label, n)  # noqa: E731
            taken.append(measure(run, label, on_repeat=repeat, **rate_options, **measure_options))
        if on_round:
            on_round()
    pooled = []
    for taken in parts:
        first = taken[0]
        times = [t for m in taken for t in m.times]
        merged = Measurement(first.label, times, first.work, first.unit, first.peak)
        merged.peak_noise = max(m.peak_noise for m in taken)
        merged.peak_factor = first.peak_factor  # k devices' ceiling stays a ceiling, not "the peak"
        merged.peak_source = first.peak_source  # later readings use its newest rate
        again = [m for m in taken if m.remeasured_peak]
        if again:
            merged.remeasured_peak = max(m.remeasured_peak for m in again)
            merged.remeasured_noise = max(m.remeasured_noise or m.peak_noise for m in again)
        # The pooled times get measure's own checks (noisy, above the peak).
        merged.warnings = measurement_warnings(merged)
        pooled.append(merged)
    return pooled


ROUNDS = 2  # the turns a comparison of runs takes by default: enough to pool a drift, not to slow
MIN_RUNS_PER_TURN = 3  # each turn of `measure_interleaved` needs a median of its own
BUDGET_S = 2.0  # `measure`'s own default budget, shared out among the turns when none is given


def turn_options(options: dict, rounds: int) -> dict:
    """`measure` options for one turn of `rounds`: the time budget shared out among the turns."""
    turn = {**options, "budget_s": options.get("budget_s", BUDGET_S) / rounds}
    turn.setdefault("min_runs", MIN_RUNS_PER_TURN)
    return turn


def measure_in_turns(
    runs: Sequence[tuple[Callable[[], object], str, dict]],
    steps: Steps,
    rounds: int = ROUNDS,
    after_round: Callable[[], None] | None = None,
    **options,
) -> list[Measurement]:
    """`measure_interleaved` as every lesson runs it: `options`' budget shared out among the
    turns (`turn_options`), each round counted on `steps` once done (after `after_round()`),
    and each turn's repeats said on it ("measuring LABEL (round 1 of 2), repeat 3")."""

    def on_round() -> None:
        if after_round is not None:
            after_round()
        steps.finish(f"round {steps.done + 1} of {rounds}")

    return measure_interleaved(
        runs,
        rounds,
        on_round=on_round,
        on_repeat=lambda r, label, n: steps.say(  # each turn's first repeat always shows
            f"measuring {label} (round {r} of {rounds}), repeat {n}", force=n == 1
        ),
        **turn_options(options, rounds),
    )
