"""Notebook 07: each layout's latency-throughput curve in steady state, the saturation point found
in it, beside the layout's measured capacity and its cost model.

The offered load rises as fractions of the layout's measured capacity until two load points are
saturated (throughput below the offered load beyond the noise, the queue growing), extending past
the given fractions when needed (up to `MAX_LOAD`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections.abc import Callable

import matplotlib.pyplot as plt
import tensorflow as tf

from d2lhelpers.core.concurrency import at_once_here
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    cores_phrase,
    device_names,
    format_rate,
    format_seconds,
    ratio_beside,
    usable_cores,
)
from d2lhelpers.core.verdicts import (
    UNTESTED,
    Spread,
    beats_ideal,
    compare,
    higher_or_lower,
    impossible,
    model_test,
    noise_of,
    rates_as_judged,
    ratio_noise,
    relative_noise,
    with_noise,
)
from d2lhelpers.lessons.l07_serving.plots import COLOURS
from d2lhelpers.lessons.l07_serving.points import (
    POINT_COLUMNS,
    Capacity,
    LoadPoint,
    Window,
    above_reach_words,
    capacities_against_sweep,
    measure_capacity,
    reach_label,
    reach_of,
    ready_engines,
    run_point,
    served_above,
    server_rate,
    setup_run,
)
from d2lhelpers.parallel.tensor_parallel import allreduce_sum
from d2lhelpers.serving.config import LAYOUTS, SPLIT_LAYOUTS, ModelConfig
from d2lhelpers.serving.engines import ServingCode
from d2lhelpers.timing.benchmark import Measurement, measure
from d2lhelpers.timing.peaks import device_peak_rate

DEFAULT_LOADS = (0.4, 0.8, 1.2, 1.6)  # fractions of the measured capacity
MAX_LOAD = 4.0
EXTEND = 1.5  # the next load past the given ones, while fewer than two points saturated


def allreduce_time(names: list[str], rows: int, width: int) -> Measurement:
    """One all-reduce of a [rows, width] block over `names` (tensor parallel pays 2 a layer)."""
    parts = []
    for name in names:
        with tf.device(name):
            parts.append(tf.random.stateless_normal((rows, width), seed=(0, 1)))
    run = tf.function(lambda *xs: allreduce_sum(xs, names))
    return measure(lambda: run(*parts), f"all-reduce of {rows}x{width}", budget_s=0.3)


def model_terms(one: Capacity, n: int, layers: int, reduce: dict, at_once: int, prompt_len: int):
    """Each layout's modelled server: (decoding step, prefill) as Spreads in seconds, its slots
    and its servers, from one device's measured steps (d1 with S1 slots, p1) and the measured
    all-reduces, the seed's model: compute / devices + communication.

    n devices do n devices' work `at_once` at a time (a CPU's devices share its cores); tensor
    parallel adds 2 all-reduces per layer; a pipeline of n stages and m microbatches takes the
    longer of its work and its bubble, (m + n - 1) stage times (GPipe); replicas in lock step
    decode like replicas but every prefill holds all of them.
    """
    d1, p1, s1 = one.decode[0], one.prefill[0], one.slots[0]
    work = n / at_once

    def term(*parts):
        """(seconds, relative noise) parts summed: the band in seconds is their noises' sum."""
        return Spread(sum(t for t, _ in parts), sum(t * r for t, r in parts))

    rd, rp = relative_noise(d1), relative_noise(p1)
    a_d, a_p = reduce["decode"], reduce["prefill"]
    m = min(n, prompt_len)
    return {
        "replicas": (term((d1.median * work, rd)), term((p1.median * work, rp)), s1, n),
        "replicas in lock step": (term((d1.median * work, rd)), term((p1.median, rp)), n * s1, 1),
        "tensor parallel": (
            term((n * d1.median / at_once, rd), (2 * layers * a_d.median, relative_noise(a_d))),
            term((p1.median / at_once, rp), (2 * layers * a_p.median, relative_noise(a_p))),
            n * s1,
            1,
        ),
        "pipeline": (
            term((max(n * d1.median / at_once, (2 * n - 1) * d1.median / n), rd)),
            term((max(p1.median / at_once, (m + n - 1) * p1.median / (m * n)), rp)),
            n * s1,
            1,
        ),
    }


def capacity_model(one: Capacity, n: int, layers: int, reduce: dict, at_once: int, prompt_len: int):
    """Each layout's tokens/s from its modelled server (`model_terms`): one server's rate as a
    capacity's (`server_rate`: the rate's band is its time's), times its servers."""
    return {
        name: server_rate(one.n_out, (p.median, p.iqr), (d.median, d.iqr), slots).scaled(servers)
        for name, (d, p, slots, servers) in model_terms(
            one, n, layers, reduce, at_once, prompt_len
        ).items()
    }


def _window_noise(point: LoadPoint) -> float:
    """The window's throughput noise, relative; 0 for a window that made no tokens (its ratio is
    0 whatever the noise, and 0 x an infinite relative noise is not a number)."""
    return relative_noise(point.throughput) if point.throughput.median > 0 else 0.0


@dataclasses.dataclass
class LayoutSweep:
    """One layout: its measured capacity, its model, and one load point per offered load."""

    layout: str
    capacity: Capacity
    model: Spread
    points: list[LoadPoint]
    terms: tuple[Spread, Spread] | None = None  # the model's (decoding step, prefill), seconds

    def latency_trend(self) -> str:
        """Read 111: median latency from each load to the next, read by its 95% intervals: where
        it rose beyond both, and where it fell beyond both (queueing theory expects a rise; a
        fall is named, not explained). Pairs with an interval the data cannot bound, or an
        unfinished median, are not read."""
        rose, fell, unread = 0, [], 0
        for a, b in itertools.pairwise(self.points):
            la, lb = a.latency(50), b.latency(50)
            bounded = all(
                x.enough and x.low is not None and math.isfinite(x.value) for x in (la, lb)
            )
            if not bounded:
                unread += 1
            elif lb.low > la.high:
                rose += 1
            elif lb.high < la.low:
                fell.append(
                    f"{a.offered:.0f} -> {b.offered:.0f} requests/s offered "
                    f"({format_seconds(la.value)} -> {format_seconds(lb.value)})"
                )
        steps = len(self.points) - 1
        if steps < 1:
            return ""
        said = (
            f"{self.layout}: from each load to the next ({steps} step{'s' if steps > 1 else ''}), "
            f"median latency rose beyond both 95% intervals in {rose} of them"
        )
        if unread:
            said += f", {unread} not read (an interval the window's requests cannot bound)"
        if fell:
            said += (
                f", and fell beyond them at {', '.join(fell)}: against queueing theory's "
                "expectation, so not read as a trend (why is not measured: each window is one "
                "draw of arrivals, and one disturbed window reads slow)"
            )
        return said

    def term_misses(self) -> list[str]:
        """Read 110: the model's step and prefill each against the measured ones (every
        server's median, averaged, with their noise), beyond both noises: a capacity that
        matched as a whole can rest on terms that missed in opposite directions."""
        if self.terms is None:
            return []
        missed = []
        for word, model, runs in [
            ("decoding step", self.terms[0], self.capacity.decode),
            ("prefill", self.terms[1], self.capacity.prefill),
        ]:
            measured = Spread(
                statistics.mean(m.median for m in runs), statistics.mean(noise_of(m) for m in runs)
            )
            c = compare(measured, model)
            if c.measurable:
                missed.append(
                    f"{word} {format_seconds(measured.median)} against the model's "
                    f"{format_seconds(model.median)} ({measured.median / model.median - 1:+.0%}, "
                    f"beyond both noises, ±{c.noise / model.median:.0%})"
                )
        return missed

    @property
    def saturated(self) -> list[LoadPoint]:
        return [p for p in self.points if p.saturated]

    @property
    def saturation_point(self) -> LoadPoint | None:
        """The saturated point of highest throughput: the most this layout sustained once its
        curve had bent (past it, a server's own overhead can make throughput fall)."""
        found = self.saturated
        return max(found, key=lambda p: p.throughput.median) if found else None

    def capacity_measured_low(self) -> str | None:
        """Why the capacity is not a result, when the saturated window's engines made more
        tokens per busy second than the capacity assumes, beyond its noise: its steps, timed
        with every slot busy, were timed slow."""
        found = self.served_above_beyond()
        if found is not None:  # read 66: a window served more than its steps allow
            above = found[0]
            return (
                f"{self.layout}: its measured capacity is not a result: a window ({_at(above)}) "
                f"served {with_noise(above.throughput, 'tok/s')}"
                f", above it beyond both noises, so its steps were "
                "timed slow (the machine was busier then, or the steps ran at a different speed: "
                "hypotheses, not measured), and every reading against the capacity below is a "
                "rough bound"
            )
        point = self.saturation_point
        found = point and self._tokens_per_busy_second(point)
        if not found or found[0] - found[1] <= 1:
            return None
        ratio, band = found
        return (
            f"{self.layout}: its measured capacity is not a result: in its saturated window "
            f"({_at(point)}) its engines made {ratio:.2f}x ± {band:.2f} the tokens per busy "
            "second that the capacity assumes, so its steps were timed slow (the machine was "
            "busier then, or the steps ran at a different speed: hypotheses, not measured), and "
            "every reading against the capacity below is a rough bound"
        )

    def sentences(self, doubt: str | None = None) -> list[str]:
        """The capacity against the model, then the saturation against the capacity. `doubt`
        (from the sweep: the capacity above what the devices computing at once allow) or
        `capacity_measured_low` puts the capacity aside: nothing is read against it."""
        name, cap = self.layout, self.capacity.tokens_per_s
        low = self.capacity_measured_low() or doubt
        said = (
            [low]
            if low
            else [higher_or_lower(cap, self.model, f"{name}: its measured capacity", "its model")]
        )
        said += [line for line in [self.above_capacity()] if line]
        point = self.saturation_point
        if point is None:
            top = self.points[-1].offered / self.capacity.requests_per_s
            unsure = sum(p.saturated_word == "can't tell" for p in self.points)
            said.append(
                f"{name}: no load up to {top:.2f}x its measured capacity saturated it beyond the "
                + (
                    f"noise: at {unsure} load(s) its queue grew while its throughput stayed "
                    "within the noise of the arrivals (the requests that arrived × their tokens) "
                    "(can't tell)"
                    if unsure
                    else "noise: the capacity measured from its steps is too low for how it served"
                )
            )
            return said
        saturation = point.throughput
        reading = higher_or_lower(saturation, cap, f"{name}: saturation", "its measured capacity")
        found = served_above(name, saturation, cap, _at(point))
        if low:  # the yardstick is not a result: no verdict is read against it
            reading = (
                f"{name}: saturation is {saturation.median / cap.median:.2f}x its measured "
                "capacity, which is not a result here (above), so it is not read as matching or "
                "missing it"
            )
        elif found and found[1]:  # above what every slot busy allows, beyond the noise
            reading = impossible(reading)
        elif found:  # read 78: above 1 within the noise, as a share above 1 is everywhere
            reading += ", and above 1: not a result"
        said.append(f"{reading}; {busy_and_idle(point)}{self.per_busy_second(point, low)}")
        return said

    def per_busy_second(self, point: LoadPoint, low: bool = False) -> str:
        """The rest of saturation / capacity, measured: tokens per busy engine-second against
        what the capacity assumes, from the window's own decoding steps and how full their slots
        were (saturation / capacity = busy share x this ratio, up to the window's edges). With
        the capacity not a result (`low`), it reads how the steps were timed, not a result."""
        decodes = point.calls_in_window("decode")
        fill = point.slot_fill(self.capacity.slots[0])
        found = self._tokens_per_busy_second(point)
        if not decodes or found is None or fill is None:
            return ""
        ratio, band = found
        parts = (
            f"the window's ±{_window_noise(point):.0%} x {ratio_beside(ratio)} + the "
            f"capacity's ±{relative_noise(self.capacity.tokens_per_s):.0%}"
        )  # the band's parts, so that it can be rebuilt (read 58)
        timed = statistics.median(m.median for m in self.capacity.decode)
        where = (
            "within the noise of 1x" + (", above it: not a result" if ratio > 1 else "")
            if abs(ratio - 1) <= band  # read 76: more than the capacity allows, unflagged
            else ("more beyond the noise" if ratio > 1 else "fewer beyond the noise")
        )
        if _busy_overfull(point):  # its busy engine-seconds are not a result either
            where += "; the busy share it divides by is above 100%, so this is not a result"
        elif low:  # read 74: read against a capacity set aside as not a result
            where += (
                "; the capacity is not a result here, so this reads how its steps were timed, "
                "not a result"
            )
        return (
            f"; per busy engine-second it made {ratio_beside(ratio)}x ± {band:.2f} ({parts}) "
            "the tokens "
            f"its capacity assumes ({where}): "
            f"its decoding steps took {format_seconds(statistics.median(decodes))} in the window "
            f"against {format_seconds(timed)} timed with every slot busy, and "
            + (
                f"{fill:.0%} of their slots held a sequence"
                if round(fill, 3) <= 1  # an overshoot that rounds away is a window edge
                else f"their slots' count came out {fill:.1%}, above the 100% possible: not a "
                "result (a hypothesis: a window edge counts a step's tokens without the step)"
            )
        )

    def _tokens_per_busy_second(self, point: LoadPoint) -> tuple[float, float] | None:
        """Tokens per busy engine-second in `point`'s window over what the capacity assumes,
        with the band `higher_or_lower` gives saturation / capacity (both noises over the
        capacity: the window's throughput noise, the capacity's), so that the two readings of
        one window cannot disagree on their band (read 56: 0.41x "within the noise" beside
        0.42x "fewer beyond it"); None when no engine was busy."""
        if point.busy_s <= 0:
            return None
        cap = self.capacity.tokens_per_s
        ratio = point.tokens / point.busy_s / (cap.median / len(self.capacity.slots))
        made = Spread(ratio, ratio * _window_noise(point))
        return ratio, compare(made, Spread(1.0, relative_noise(cap))).noise

    def heaviest_gain(self) -> str:
        """From the second-heaviest load to the heaviest: the arrivals' gain against the
        throughput's, each with both loads' noise (past saturation, throughput falls behind)."""
        if len(self.points) < 2:
            return f"{self.layout}: one load only, so no gain to compare"
        a, b = self.points[-2:]
        arrived = _gain(a.arrival_rate, b.arrival_rate)
        made = _gain(a.throughput, b.throughput)
        reading = higher_or_lower(made, arrived, "throughput's gain", "the arrivals' gain")
        start, end = b.queue_growth
        return (
            f"{self.layout}, from its second-heaviest load to its heaviest: the arrivals rose "
            f"x{arrived.median:.2f} ± {arrived.iqr:.2f} and throughput x{made.median:.2f} ± "
            f"{made.iqr:.2f}; {reading}; the queue over the heaviest window: {start} -> {end}"
        )

    def above_capacity(self) -> str | None:
        """The highest point's sentence when it served above the measured capacity within the
        noise (beyond it, `flags` says it is impossible)."""
        top = max(self.points, key=lambda p: p.throughput.median, default=None)
        found = top and served_above(
            self.layout, top.throughput, self.capacity.tokens_per_s, _at(top)
        )
        return found[0] if found and not found[1] else None

    def served_above_beyond(self) -> tuple[LoadPoint, str] | None:
        """The highest-throughput point that served more than the measured capacity beyond both
        noises, with its flag, if any: then the capacity, not the serving, was measured wrong."""
        cap = self.capacity.tokens_per_s
        for point in sorted(self.points, key=lambda p: -p.throughput.median):
            found = served_above(self.layout, point.throughput, cap, _at(point))
            # the tokens were counted; the capacity is a model of them (read 71: the window's
            # own steps ran faster than timed, so serving above it was possible, not impossible)
            if found and found[1]:
                return point, (
                    f"{self.layout} served {format_rate(point.throughput.median, 'tokens/s')} "
                    f"{_at(point)}, above its capacity {format_rate(cap.median, 'tokens/s')} "
                    "beyond both noises: the capacity, from steps timed apart from that window, "
                    "is not a result (they were timed slow), and nothing is read against it"
                )
        return None

    def flags(self) -> list[str]:
        """Any load point that stalled (no tokens in its window); and any, saturated or not, that
        served more than the measured capacity beyond the noise: the first, from the highest
        throughput."""
        stalls = [line for p in self.points if (line := p.stalled(self.layout))]
        found = self.served_above_beyond()
        return [found[1], *stalls] if found else stalls


def _gain(before: Spread, after: Spread) -> Spread:
    """after / before, its band the two relative noises summed (with the floor)."""
    ratio = after.median / before.median
    return Spread(ratio, ratio_noise(ratio, before, after))


def busy_and_idle(point: LoadPoint) -> str:
    """Where the engines' time in `point`'s window went: their steps, and the rest split by
    what their servers held and by their threads' CPU clocks."""
    no_request, between = point.idle_shares()
    ran = point.ran_between_steps()
    # the two parts in whole percents that add up to the printed total (read 95: 11% printed
    # as 10% + 0%)
    total = round(between * 100)
    part = None if ran is None else min(round(between * ran * 100), total)
    split = (
        "(not split: no gap between steps was logged)"
        if part is None
        else f"(their threads ran for {part}%: the loops' own Python and the steps' "
        f"inputs; and waited for {total - part}%: for a core, or for Python's lock, "
        "which the servers' threads share: read from the threads' CPU clocks)"
    )
    busy = f"its engines were inside a step for {point.engine_busy:.0%} of that window"
    if _busy_overfull(point):  # read 82: 101% printed as a result
        busy = (
            f"the engines' steps that ended in that window add up to {point.engine_busy:.0%} of "
            "it, above the 100% possible: not a result (a step that began before the window "
            "counts whole, as the window is cut by when steps end)"
        )
    return (
        f"{busy} (a step's "
        "time includes any wait for a core while it runs), their servers had no "
        f"request for {no_request:.0%} of it (waiting for arrivals), and had requests but no step "
        f"running for {total}% {split}"
    )


def _busy_overfull(point: LoadPoint) -> bool:
    """Whether the engines' busy share prints above 100% (whole percent)."""
    return round(point.engine_busy, 2) > 1


def _at(point: LoadPoint) -> str:
    return f"at {point.offered:.0f} requests/s offered"


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class LoadSweepResult(Reported):
    """Each layout's curve, its saturation beside its measured capacity and its cost model."""

    n_devices: int
    at_once: int
    one_device: Capacity
    sweeps: list[LayoutSweep]
    step_flops: float  # of one device's decoding step, every slot busy
    peak: float  # the device's measured peak, FLOP/s
    # an earlier sweep (another cell's) whose capacities this one's are read against (read 133:
    # the panel's rerun and the sweep read one layout's saturation opposite ways, unsaid)
    earlier: LoadSweepResult | None = None
    config: ModelConfig | None = None  # the model it served (None: not recorded)

    @property
    def setup(self) -> tuple:
        """What a capacity depends on: the model, the devices, each device's slots and the
        tokens each request makes (`ServingRunResult.setup` too)."""
        return (self.config, self.n_devices, self.one_device.slots[0], self.one_device.n_out)

    def same_setup(self, other) -> bool:
        """Whether `other` served the same model on as many devices with as many slots and
        tokens each, so their capacities time the same work (unknown, not the same, where a
        model was not recorded)."""
        return self.config is not None and other.config is not None and self.setup == other.setup

    def plot(self, ax=None):
        """Latency against throughput per layout (`plot_latency_throughput`)."""
        return plot_latency_throughput(self, ax)

    @property
    def ideal(self) -> float:
        """n devices, each as fast as one device alone, no communication: n x one device."""
        return self.n_devices * self.one_device.tokens_per_s.median

    def above_reach(self, value: Spread) -> str:
        """'above R, the most N devices computing at once allow, beyond/within both noises' when
        `value` (tokens/s of a layout one device bounds) is above what the devices computing at
        once allow; else ''. One home for the sweep's, the failure's and lock step's readings."""
        reach = reach_of(self)
        c = compare(value, reach)
        if c.a <= c.b:
            return ""
        shown, bound = rates_as_judged(value, reach, "tok/s")  # each with its noise
        # Where the usual digits would read the other way, the value too, at these digits.
        usual = with_noise(reach, "tok/s")
        digits = "" if bound == usual else f" ({shown} against it)"
        if shown.partition(" ±")[0] == bound.partition(" ±")[0]:  # read 136: '3.2 ktok/s ...
            digits = f" ({ratio_beside(c.ratio)}x it)"  # above 3.2 ktok/s': the ratio says
        return (
            f"above {bound} ({reach_label(self.at_once)}), "
            f"{'beyond' if c.measurable else 'within'} both noises{digits}"
            + above_reach_words(c.measurable)
        )

    def _above_reach(self, s: LayoutSweep, point: LoadPoint) -> str:
        """'; but it is above ...: not a result' when a window of a layout one device bounds
        served more than the devices computing at once allow (read 79: 1.19x the one-core
        ceiling read 'no measurable difference' from a model equal to it); else ''."""
        above = self.bounded_by_one_device(s.layout) and self.above_reach(point.throughput)
        return f"; but it is {above}" if above else ""

    @property
    def reachable(self) -> float:
        """What the devices that can compute at once allow: at_once x one device."""
        return self.at_once * self.one_device.tokens_per_s.median

    def bounded_by_one_device(self, layout: str) -> bool:
        """Whether one device's capacity bounds `layout`'s: each of its servers steps as many
        sequences as one device does. A group steps every device's sequences at once, and a
        step's time depends on how many it holds (read 59: 8 against one device's 4), so one
        device's capacity is not its ceiling."""
        found = next((s for s in self.sweeps if s.layout == layout), None)
        one = self.one_device.slots[0]
        return found is not None and all(k == one for k in found.capacity.slots)

    def above_reachable(self) -> list[tuple[LayoutSweep, bool]]:
        """Layouts bounded by one device (`bounded_by_one_device`) whose measured capacity is
        above `reachable` (the ideal when every device can compute at once), each with whether
        it is beyond the noise of both capacities."""
        reach = reach_of(self)
        return [
            (s, compare(s.capacity.tokens_per_s, reach).measurable)
            for s in self.sweeps
            if self.bounded_by_one_device(s.layout)
            and s.capacity.tokens_per_s.median > reach.median
        ]

    def sentences(self, layout: str) -> list[str]:
        """`layout`'s sentences, its capacity set aside when `capacity_doubt` says so."""
        found = next(s for s in self.sweeps if s.layout == layout)
        return found.sentences(self.capacity_doubt(found))

    def capacity_doubt(self, sweep: LayoutSweep) -> str | None:
        """Why `sweep`'s capacity is not a result, if it is not: timed slow against its own
        window (`capacity_measured_low`), or above what the devices computing at once allow,
        within the noise or beyond it (read 68: 1.26x the ideal was read against its model)."""
        low = sweep.capacity_measured_low()
        if low:
            return low
        above = dict((s.layout, beyond) for s, beyond in self.above_reachable())
        if sweep.layout not in above:
            return None
        cap = sweep.capacity.tokens_per_s
        reach = reach_of(self)
        # read 166: '3.9 ktok/s ±8%, is 1.14x 3.4 ktok/s ±5% ... within the noise': the digits
        shown, bound = rates_as_judged(cap, reach, "tok/s")
        return (
            f"{sweep.layout}: its measured capacity, {shown}, is "
            f"{ratio_beside(cap.median / reach.median)}x {bound} "
            f"({reach_label(self.at_once)}), above it "
            + ("beyond both noises" if above[sweep.layout] else "within the noise")
            + above_reach_words(above[sweep.layout])
            + ", and every reading against the capacity below is a rough bound"
        )

    def unbounded_note(self) -> str:
        """Which layouts `reachable` does not bound, and why; '' when it bounds them all."""
        others = [s for s in self.sweeps if not self.bounded_by_one_device(s.layout)]
        if not others:
            return ""
        held = ", ".join(f"{s.layout} {max(s.capacity.slots)}" for s in others)
        return (
            f"; it bounds only layouts whose steps hold one device's {self.one_device.slots[0]} "
            f"sequences: a group's step holds every device's ({held}), and a step's time may "
            "depend on how many it holds (one device's step at 4 to 32 sequences is timed in the "
            "pipeline's cell below; this bound is not re-derived from it), so those are not read "
            "against it"
        )

    @property
    def compute_share(self) -> float:
        """How much of one device's decoding step its arithmetic explains at the measured peak."""
        return self.step_flops / self.peak / self.one_device.decode[0].median

    def regime(self) -> str:
        one = self.one_device.tokens_per_s.median
        tests = {
            s.layout: "timed slow"
            if self.capacity_doubt(s)
            else model_test(s.capacity.tokens_per_s, s.model, one)
            for s in self.sweeps
        }
        # read 110: a whole that held on terms that missed beyond their noise did not hold
        cancelled = {
            s.layout: found
            for s in self.sweeps
            if tests[s.layout] == "held" and (found := s.term_misses())
        }
        tests.update(dict.fromkeys(cancelled, "terms missed"))
        held = [name for name, t in tests.items() if t == "held"]
        missed = [name for name, t in tests.items() if t == "missed"]
        step = format_seconds(self.one_device.decode[0].median)
        flops, peak = format_rate(self.step_flops, "FLOP"), format_rate(self.peak)
        noise = getattr(self.peak, "noise", None)  # a MeasuredPeak carries its runs' spread
        peak += f" (IQR {noise:.0%} of it)" if noise is not None else ""
        text = (
            # one decimal below 10%: "1%" for 0.52% read as a rounding error (read 72)
            f"Arithmetic at the measured peak explains "
            f"{self.compute_share:.{1 if self.compute_share < 0.1 else 0}%} of one device's "
            f"{step} decoding step (timed with its {self.one_device.slots[0]} slots busy, as the "
            f"capacities are; {flops} per step at one device's measured matmul peak, {peak}). "
        )
        if self.at_once > 1:
            text += (
                "The cost model divides that step's time among the devices as if it were all "
                "arithmetic, so it is expected to hold where this share is large (a hypothesis: "
                "that the rest of a step, not traced here, does not divide among the devices; "
                "launching small ops is the candidate)."
            )
        else:  # nothing to divide: the share cannot decide whether the model holds
            text += (
                "The cost model divides a step's time among the devices that compute at once; "
                "here only one can, so it divides nothing: each layout's model is every "
                "device's steps taken one at a time, plus, for tensor parallel, its measured "
                "all-reduces (the pipeline's bubble is covered by taking turns, and the model "
                "has no term for its hand-overs), whatever that share."
            )
        if held:
            termwise = all(s.terms is not None for s in self.sweeps if s.layout in held)
            text += f" It held, within the noise, for {' and '.join(held)} " + (
                "(the capacity as a whole, and its step and prefill each within both noises of "
                "the model's)"
                if termwise
                else "(the capacity as a whole: its step and prefill terms are not tested one by "
                "one, and could miss in opposite directions)"
            )
            text += f"; not for {' and '.join(missed)}." if missed else "."
        elif missed:
            text += f" It held for no layout tested here (missed: {' and '.join(missed)}" + (
                f"; terms missed: {' and '.join(cancelled)})." if cancelled else ")."
            )
        for name, found in cancelled.items():  # read 110: 'held' on errors that cancelled
            text += (
                f" For {name} the capacity as a whole matched the model within the noise, but "
                f"its terms missed: {'; '.join(found)}, so the model did not hold there: the "
                "whole matched despite them (the miss inside the whole's noise, or offset by "
                "the other term: not separated here)."
            )
        slow = [name for name, t in tests.items() if t == "timed slow"]
        if slow:
            text += (
                f" Not tested for {' and '.join(slow)}: its capacity is not a result (see above)."
            )
            for s in self.sweeps:  # what the served tokens say instead (read 55: unsaid)
                point = s.saturation_point
                if s.layout in slow and point is not None:
                    reading = higher_or_lower(
                        point.throughput, s.model, f"{s.layout}'s saturation", "its model"
                    )
                    text += f" Instead, {reading} (a rough reading: a window, not a capacity)"
                    text += self._above_reach(s, point) + "."
        for word, why in UNTESTED.items():  # agreeing with the model could not have failed
            names = [name for name, t in tests.items() if t == word]
            if names:
                # the spread that made it untestable: the model's for a noisy yardstick (read
                # 143: 'more than 10%' beside the capacity's 8.1%), else the capacity's own
                whose = "model" if word == "noisy yardstick" else "capacity"
                spreads = ", ".join(
                    f"{s.layout}'s {whose} IQR {x.iqr / x.median:.1%} of it"
                    for s in self.sweeps
                    if s.layout in names
                    and (x := s.model if whose == "model" else s.capacity.tokens_per_s).median > 0
                )
                if whose == "model":
                    spreads += " (scaled from one device's timing)"
                text += (
                    f" Too noisy to test for {' and '.join(names)}: {why} ({spreads}; one "
                    "device's capacity "
                    "is the no-model outcome; if the machine was busy, run it again when it is "
                    "quiet)."
                )
        return text

    def flags(self) -> list[str]:
        found = []
        d1 = self.one_device.decode[0]
        if beats_ideal(d1, self.step_flops / self.peak):
            found.append(impossible("one device's step computes faster than the measured peak"))
        for s, beyond in self.above_reachable():
            if beyond:  # read 120: against a model's bound, not a physical one: not 'impossible'
                found.append(
                    f"{s.layout}'s capacity is above {reach_label(self.at_once)}, beyond both "
                    "noises" + above_reach_words(True)
                )
        for s in self.sweeps:
            found += s.flags()
            found += s.capacity.warnings
        return found

    @property
    def verdict(self) -> str:
        done = [s for s in self.sweeps if s.saturation_point is not None]
        if not done:
            unsure = [
                s.layout
                for s in self.sweeps
                if any(p.saturated_word == "can't tell" for p in s.points)
            ]
            if unsure:
                return (
                    f"no layout saturated beyond the noise; for {' and '.join(unsure)} a queue "
                    "grew while throughput stayed within the noise of the arrivals (the requests "
                    "that arrived × their tokens) (can't tell): a longer window (more requests per "
                    "point) could tell (expected, not measured here)"
                )
            return "no layout saturated in this sweep: raise the highest offered load"
        best = max(done, key=lambda s: s.saturation_point.throughput.median)
        top = best.saturation_point.throughput
        if len(self.sweeps) == 1:  # nothing to rank against
            return f"{best.layout} saturated at {format_rate(top.median, 'tokens/s')}"
        text = f"{best.layout} saturated highest, at {format_rate(top.median, 'tokens/s')}"
        close = [
            s.layout
            for s in done
            if s is not best and not compare(s.saturation_point.throughput, top).measurable
        ]
        if close:
            text += f"; {' and '.join(close)} not measurably lower, so this ranking may not repeat"
        return text

    def tables(self) -> list[Table]:
        rows = []
        for s in self.sweeps:
            point = s.saturation_point
            sat = point.throughput.median if point else None
            cap, cap_noise = s.capacity.tokens_per_s.median, relative_noise(s.capacity.tokens_per_s)
            rows.append(
                [
                    s.layout,
                    s.capacity.steps_text("decode"),
                    s.capacity.steps_text("prefill"),
                    f"{format_rate(cap, 'tok/s')} ±{cap_noise:.0%}"
                    + (" (not a result)" if self.capacity_doubt(s) else ""),
                    f"{format_rate(s.model.median, 'tok/s')} ±{relative_noise(s.model):.0%}",
                    format_rate(sat, "tok/s") if sat else "not reached",
                    "-"
                    if not sat
                    else f"{sat / cap:.2f}"
                    + (
                        " (not read)"
                        if self.capacity_doubt(s)
                        # read 82: above 1 in the table, 'not a result' only in the sentence
                        else " (above 1: not a result)"
                        if round(sat / cap, 2) > 1
                        else ""
                    ),
                ]
            )
        columns = [
            "layout",
            "decoding step (each server)",
            "prefill (each server)",
            "capacity (their sum)",
            "model",
            "saturation",
            "saturation / capacity",
        ]
        ideal = format_rate(self.ideal, "tokens/s")
        lines = [line for s in self.sweeps for line in self.sentences(s.layout)]
        ideal_line = (  # read 109: one device at its own slots, not at a group's
            f"ideal ({self.n_devices} x one device at its {self.one_device.slots[0]} slots, no "
            f"communication): {ideal}"
        )
        if self.at_once < self.n_devices:  # devices that share cores cannot all compute at once
            reachable = format_rate(self.reachable, "tokens/s")
            ideal_line += (
                f"; by a model, not reachable here: {self.at_once} of the {self.n_devices} "
                f"devices can compute at once on {cores_phrase(usable_cores())}, so "
                f"{self.at_once}x one device, {reachable}, is the most by a model (each device's "
                "step is core time "
                f"that adds up on the shared cores; not traced){self.unbounded_note()}"
            )
            for s, beyond in self.above_reachable():
                cap = s.capacity.tokens_per_s
                ideal_line += (
                    f"; {s.layout}'s capacity, {format_rate(cap.median, 'tok/s')} "
                    f"±{relative_noise(cap):.0%}, is above it "
                    + ("beyond the noise (see the warning)" if beyond else "within the noise")
                )
        else:  # read 156: 'ideal' beside the groups' 8-slot rows read as their ceiling too
            ideal_line += self.unbounded_note()
        lines += [ideal_line, self.regime()]
        if self.earlier is not None and self.same_setup(self.earlier):  # else: other work
            capacities = [(s.layout, s.capacity.tokens_per_s) for s in self.sweeps]
            against = capacities_against_sweep(self.earlier, capacities)
            lines += [against] if against else []
        points = [[s.layout, *p.row()] for s in self.sweeps for p in s.points]
        return [
            Table(
                "each layout: capacity, model and saturation", columns, rows, lines, self.flags()
            ),
            Table(
                "each load point, in its window",
                ["layout", *POINT_COLUMNS],
                points,
                [line for s in self.sweeps if (line := s.latency_trend())],
            ),
        ]


def run_load_sweep(
    n_devices: int = 2,
    layouts=SPLIT_LAYOUTS,
    loads=DEFAULT_LOADS,
    *,
    extend: bool = True,
    prompt_len: int = 8,
    n_out: int = 16,
    width: int = 64,
    layers: int = 2,
    slots_per_device: int = 4,
    window: Window | None = None,
    code: ServingCode | None = None,
    progress: Callable | None = None,
) -> LoadSweepResult:
    """Each layout at rising offered loads (fractions of its measured capacity), in steady state."""
    config, devices, window, code = setup_run(
        n_devices, width, layers, prompt_len, n_out, window, code
    )
    names = device_names(devices)
    loads = [float(x) for x in loads]
    if not loads or any(not 0 < x <= MAX_LOAD for x in loads):
        raise ValueError(f"offered loads must be fractions of capacity in (0, {MAX_LOAD:g}]")
    layouts = list(layouts)
    for name in layouts:
        if name not in LAYOUTS:
            raise ValueError(f"layouts must be among {LAYOUTS}, got {name!r}")
    steps = Steps(progress, len(layouts) * (len(loads) + 1) + 1)
    one = ready_engines("one device", config, devices, slots_per_device, code, prompt_len)
    one_device = measure_capacity(one, prompt_len, n_out)
    reduce = {
        "decode": allreduce_time(names, slots_per_device * n_devices, width),
        "prefill": allreduce_time(names, prompt_len, width),
    }
    at_once = at_once_here(n_devices, devices[0].kind)
    model = capacity_model(one_device, n_devices, layers, reduce, at_once, prompt_len)
    terms = model_terms(one_device, n_devices, layers, reduce, at_once, prompt_len)
    steps.finish("one device's steps and the all-reduce")
    sweeps = []
    for name in layouts:
        engines = ready_engines(name, config, devices, slots_per_device, code, prompt_len)
        capacity = measure_capacity(engines, prompt_len, n_out)
        steps.finish(f"{name}: its steps")
        todo, points = list(loads), []
        while todo and sum(p.saturated for p in points) < 2:
            fraction = todo.pop(0)
            steps.say(f"{name}: load {fraction:.2f}x its capacity")
            rate = fraction * capacity.requests_per_s
            points.append(run_point(engines, rate, config, n_out, window, code))
            steps.finish(f"{name} at {fraction:.2f}x")
            if extend and not todo and sum(p.saturated for p in points) < 2:
                if fraction * EXTEND <= MAX_LOAD:
                    todo.append(fraction * EXTEND)
                    steps.total += 1
        sweeps.append(LayoutSweep(name, capacity, model[name], points, terms[name][:2]))
    flops = slots_per_device * config.flops_per_token(config.max_len)
    peak = device_peak_rate(devices[0])  # a float that carries its noise
    return LoadSweepResult(n_devices, at_once, one_device, sweeps, flops, peak, config=config)


def plot_latency_throughput(sweep: LoadSweepResult, ax=None):
    """p50 latency against achieved throughput, one curve per layout; its capacity dashed,
    saturated points hollow (their latency keeps growing with the run: a lower bound)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.8))
    right = sweep.ideal
    for s in sweep.sweeps:
        colour = COLOURS.get(s.layout, "tab:gray")
        points = [
            (p.throughput.median, p.latency(50).value * 1e3, p.saturated)
            for p in s.points
            if p.latency(50).n and not math.isinf(p.latency(50).value)
        ]
        points.sort()
        ax.plot([x for x, _, _ in points], [y for _, y, _ in points], "-", c=colour, label=s.layout)
        for x, y, saturated in points:
            ax.plot([x], [y], "o", c=colour, mfc="white" if saturated else colour)
        ax.axvline(s.capacity.tokens_per_s.median, c=colour, ls="--", lw=1, alpha=0.7)
        right = max(right, s.capacity.tokens_per_s.median, *(x for x, _, _ in points))
    ax.axvline(sweep.ideal, c="black", ls="-.", lw=1, label="ideal (n x one device)")
    ax.set(
        xlabel="achieved throughput in the window (generated tokens/s)",
        ylabel="p50 latency (ms)",
        title=f"{sweep.n_devices} devices: latency vs throughput (dashed: measured capacity)",
        xlim=(0, 1.1 * right),
    )
    ax.set_yscale("log")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.figure.tight_layout()
    return ax.figure
