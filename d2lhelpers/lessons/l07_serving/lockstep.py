"""Notebook 07: independent replicas against replicas in lock step, under the same load.

Independent: each replica is its own server loop in its own thread, with its own steps, and the
balancer sends each arriving request to the one with the fewest outstanding requests. Lock step:
one server loop and one tf.function step every replica together, so a prefill on one replica
holds the others, and each step waits for the slowest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from d2lhelpers.core import checks
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.verdicts import higher_or_lower, with_noise
from d2lhelpers.lessons.l07_serving.points import (
    POINT_COLUMNS,
    Capacity,
    LoadPoint,
    Window,
    capacities_against_sweep,
    measure_capacity,
    reach_label,
    reach_of,
    ready_engines,
    run_point,
    served_above,
    setup_run,
)
from d2lhelpers.serving.engines import ServingCode
from d2lhelpers.serving.steady import Percentile

MODES = ("replicas", "replicas in lock step")
WHOSE = {"replicas": "independent replicas'", "replicas in lock step": "lock step's"}


def lower_or_higher(a: Percentile, b: Percentile, a_name: str, b_name: str) -> str:
    """Two percentiles differ when their confidence intervals do not overlap."""
    if a.enough and b.enough and a.low is not None and b.low is not None:
        if a.high < b.low:
            return f"{a_name} is lower than {b_name} (their 95% intervals do not overlap)"
        if b.high < a.low:
            return f"{a_name} is higher than {b_name} (their 95% intervals do not overlap)"
        return f"no measurable difference between {a_name} and {b_name} (their intervals overlap)"
    return f"too few requests to compare {a_name} with {b_name}"


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class LockstepResult(Reported):
    """The same offered load on independent replicas and on replicas in lock step."""

    capacities: list[Capacity]
    points: list[LoadPoint]
    # the load sweep (`LoadSweepResult`), whose one-device capacity bounds what the independent
    # replicas can serve here: a capacity or window above it is not a result (read 79)
    sweep: object | None = None

    def above_the_sweep(self) -> dict[tuple[str, str], str]:
        """Each mode's capacity and window, where above what the devices computing at once allow
        (`LoadSweepResult.above_reach`), each with its sentence, keyed (mode, 'capacity' or
        'window'). Lock step's devices hold as many sequences each as the independent replicas',
        so one bound holds both (read 83: lock step's was printed above it, unflagged)."""
        sweep = self.sweep
        if sweep is None or not sweep.bounded_by_one_device(MODES[0]):
            return {}
        said = {}
        for mode, c, p in zip(MODES, self.capacities, self.points, strict=True):
            for name, value in [("capacity", c.tokens_per_s), ("window", p.throughput)]:
                if above := sweep.above_reach(value):
                    said[mode, name] = (
                        f"{WHOSE[mode]} {name}, {with_noise(value, 'tok/s')}, is, by the load "
                        f"sweep's bound, {above}"
                    )
        return said

    def within_the_sweep(self) -> str | None:
        """With the sweep, when no capacity or window lies above what the devices computing at
        once allow: the sentence saying each was read and none is (read 85: a silent pass read
        as 'not read'); None without the sweep, or when `above_the_sweep` has sentences."""
        sweep = self.sweep
        if sweep is None or not sweep.bounded_by_one_device(MODES[0]) or self.above_the_sweep():
            return None
        reach = reach_of(sweep)
        return (
            "each mode's capacity and window read against the load sweep's "
            f"{with_noise(reach, 'tok/s')} "
            f"({reach_label(sweep.at_once)}): none is above it"
        )

    def stalled(self) -> list[str]:
        return [
            line for mode, p in zip(MODES, self.points, strict=True) if (line := p.stalled(mode))
        ]

    def latencies(self, read: str, a_name: str) -> str:
        """`read` ('ttft' or 'latency') at the median, compared; not when a window stalled."""
        if self.stalled():
            return f"{a_name} not compared: a window made no tokens (see the flags)"
        a, b = (getattr(p, read)(50) for p in self.points)
        said = lower_or_higher(a, b, a_name, "lock step's")
        if " is higher than " in said:  # the opposite of what waiting for the slowest suggests
            said += (
                " (a hypothesis, not measured: the independent servers' threads compete for the "
                "cores and for Python's lock, which lock step's one loop does not)"
            )
        return said

    @property
    def verdict(self) -> str:
        ca, cb = self.capacities
        aside = [WHOSE[mode] for mode, name in self.above_the_sweep() if name == "capacity"]
        capacities = (
            f"their measured capacities not compared ({' and '.join(aside)} "
            f"{'is' if len(aside) == 1 else 'are'} not a result: see the notes)"
            if aside
            else higher_or_lower(
                ca.tokens_per_s, cb.tokens_per_s, "their measured capacity", "lock step's"
            )
        )
        return self.latencies("ttft", "independent replicas' median TTFT") + "; " + capacities

    def tables(self) -> list[Table]:
        # each point as every load point prints (arrivals and throughput with their noise)
        rows = [
            [mode, with_noise(c.tokens_per_s, "tok/s")] + p.row()
            for mode, c, p in zip(MODES, self.capacities, self.points, strict=True)
        ]
        columns = ["replicas", "capacity", *POINT_COLUMNS]
        notes = [self.latencies("latency", "independent median latency"), self.verdict]
        notes += [
            line
            for c, p in zip(self.capacities, self.points, strict=True)
            if (line := c.summed_note(p.throughput))
        ]
        notes += [
            f"{mode}'s capacity: {c.inputs_text()}"
            for mode, c in zip(MODES, self.capacities, strict=True)
        ]
        independent = self.capacities[0]
        if independent.at_once is not None and independent.at_once < len(independent.decode):
            notes.append(
                "lock step's capacity is bounded the same way: its one server steps every device "
                f"in one call, and only {independent.at_once} of them can compute at once here, "
                "so by the sweep's model (each device's step is core time that adds up: not "
                "traced) "
                "what this machine serves would not exceed what that many devices make alone, "
                "each holding as many sequences as it holds here "
                + (
                    "(the load sweep given to this run measured that: each capacity and window "
                    "above it is set aside below)"
                    if self.sweep is not None
                    else "(expected, not measured here: without the load sweep, this comparison "
                    "does not measure one device's capacity); a capacity printed above that is "
                    "the rough bound, not a measurement of more"
                )
            )
        against = capacities_against_sweep(self.sweep, [(MODES[0], independent.tokens_per_s)])
        notes += [against] if against else []  # read 129: this cell's yardstick, the sweep's
        notes += self.above_the_sweep().values()
        notes += [line for line in [self.within_the_sweep()] if line]
        flags = self.stalled() + [w for c in self.capacities for w in c.warnings]
        for mode, c, p in zip(MODES, self.capacities, self.points, strict=True):
            found = served_above(mode, p.throughput, c.tokens_per_s, f"at {p.offered:.0f} req/s")
            if found:
                (flags if found[1] else notes).append(found[0])
        title = "independent replicas and replicas in lock step"
        return [Table(title, columns, rows, notes, flags)]


def run_lockstep_comparison(
    n_devices: int = 2,
    load: float = 0.8,
    *,
    prompt_len: int = 8,
    n_out: int = 16,
    width: int = 64,
    layers: int = 2,
    slots_per_device: int = 4,
    window: Window | None = None,
    code: ServingCode | None = None,
    progress: Callable | None = None,
    sweep=None,
) -> LockstepResult:
    """Both modes at `load` x the independent replicas' measured capacity. With `sweep`
    (`run_load_sweep`'s result), a capacity or window of the independent replicas above what
    the devices computing at once allow is read as not a result."""
    config, devices, window, code = setup_run(
        n_devices, width, layers, prompt_len, n_out, window, code
    )
    checks.require_rate("load", load, allow_none=False)
    steps = Steps(progress, 2)
    capacities, points, rate = [], [], None
    for mode in MODES:
        engines = ready_engines(mode, config, devices, slots_per_device, code, prompt_len)
        capacities.append(measure_capacity(engines, prompt_len, n_out))
        rate = rate or load * capacities[0].requests_per_s
        points.append(run_point(engines, rate, config, n_out, window, code))
        steps.finish(mode)
    return LockstepResult(capacities, points, sweep)
