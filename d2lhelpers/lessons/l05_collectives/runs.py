"""What notebook 05's measured runs share: checked measure options, steps reported as progress."""

from __future__ import annotations

import numbers
from collections.abc import Callable

from d2lhelpers.admission import require_count
from d2lhelpers.devices import select_devices, setup_devices

MEASURE_COUNTS = ("warmup", "min_runs", "max_runs", "number")
# A ring of logical CPUs reduces at about 1 GB/s of message (0.9-1.35 GB/s probed on 2 cores):
# a cautious rate for estimates made before anything is measured.
ESTIMATE_RATE_BYTES_PER_S = 0.5e9
ESTIMATE_CALL_S = 2e-3  # a call's start-up on a loaded machine (about 1 ms probed)


def allreduce_devices(n_devices, what: str) -> list:
    """The first `n_devices` set-up devices (None: all), refused if one: it would move nothing."""
    count = len(setup_devices())
    n = count if n_devices is None else require_count("n_devices", n_devices, 1)
    if n == 1:
        fix = (
            f"choose n_devices from 2 to {count}"
            if count > 1
            else "only 1 device is set up: run d2l.setup_devices(2) first, in a new kernel"
        )
        raise ValueError(f"an all-reduce on one device moves nothing, so {what}: {fix}")
    return select_devices(n)


def measure_options_checked(options: dict, budget_s: float = 1.0) -> dict:
    """`options` for `measure`, checked now (before anything is allocated), `budget_s` default."""
    options = {"budget_s": budget_s, **options}
    for name, value in options.items():
        if name in MEASURE_COUNTS:
            require_count(name, value, 0 if name == "warmup" else 1)
        elif name == "budget_s":
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"budget_s must be a number of seconds, got {value!r}")
            if not 0 < value <= 600:
                raise ValueError(f"budget_s must be above 0 and at most 600 s, got {value}")
        else:
            allowed = ", ".join((*MEASURE_COUNTS, "budget_s"))
            raise TypeError(f"unknown measure option {name!r}: choose from {allowed}")
    if (
        "min_runs" in options
        and "max_runs" in options
        and options["max_runs"] < options["min_runs"]
    ):
        raise ValueError(
            f"max_runs ({options['max_runs']}) is below min_runs ({options['min_runs']})"
        )
    return options


MIN_RUNS_PER_TURN = 3  # each turn of `measure_interleaved` needs a median of its own


def turn_options(options: dict, rounds: int) -> dict:
    """`measure` options for one turn of `rounds`: the time budget shared out among the turns."""
    turn = {**options, "budget_s": options["budget_s"] / rounds}
    turn.setdefault("min_runs", MIN_RUNS_PER_TURN)
    return turn


def measure_estimate_s(call_s: float, options: dict) -> float:
    """About how long `measure` takes for a call of `call_s` with these options (an upper guess).

    Warm-up and one calibration call, then timed blocks of at least 10 ms until the budget is
    spent (at least `min_runs` of them, 3 when the budget runs out first).
    """
    block = max(0.01, call_s)
    runs = max(options.get("min_runs", 5), 3)
    return (options.get("warmup", 1) + 1) * call_s + max(options["budget_s"], runs * block)


class Steps:
    """The steps of one run, reported as `progress(done, total, status)` after every repeat."""

    def __init__(self, progress: Callable | None, total: int):
        self.progress, self.total, self.done = progress, total, 0

    def report(self, status: str) -> None:
        if self.progress is not None:
            self.progress(self.done, self.total, status)

    def repeats(self, what: str) -> Callable[[int], None]:
        """An `on_repeat` for `measure`: 'measuring <what> (step 3 of 8), repeat 7'."""
        step = f"step {self.done + 1} of {self.total}"
        return lambda repeat: self.report(f"measuring {what} ({step}), repeat {repeat}")

    def finished(self, what: str) -> None:
        self.done += 1
        self.report(f"done: {what}" if self.done < self.total else "finished")
