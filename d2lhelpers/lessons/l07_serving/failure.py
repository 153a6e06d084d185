"""Notebook 07: one device lost while each layout is overloaded, its throughput before and after.

Offered more than its capacity, a layout should serve at its capacity (the before-window's share
of the measured capacity says how close it came), so the throughput measured in a
window before the loss and in one after it compares the capacities: for replicas, the seed's
claim that a failure "removes only that capacity" predicts after / before = (n - 1) / n. A group
(tensor parallel, pipeline) loses every sequence in flight with the device; here it is rebuilt
on the survivors, which pauses it for re-placing the weights and building and warming new
tf.functions (the pause is measured); replicas need no rebuild: each survivor keeps its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from d2lhelpers.core.concurrency import at_once_here
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import format_seconds, percent_beside
from d2lhelpers.core.verdicts import (
    NOISE_FLOOR,
    NOISY_IQR,
    UNTESTED,
    Spread,
    agreeing_digits,
    compare,
    higher_or_lower,
    model_test,
    noise_of,
    noisy_run,
    numbered,
    rates_as_judged,
    relative_noise,
    with_noise,
)
from d2lhelpers.lessons.l07_serving.plots import plot_requests
from d2lhelpers.lessons.l07_serving.points import (
    Window,
    above_reach_words,
    capacities_against_sweep,
    measure_capacity,
    reach_label,
    reach_of,
    ready_engines,
    run_point,
    setup_run,
)
from d2lhelpers.serving.config import SPLIT_LAYOUTS
from d2lhelpers.serving.engines import ServingCode
from d2lhelpers.serving.load import LoadLog
from d2lhelpers.serving.steady import rate_in_window

OVERLOAD = 1.5  # offered load, as a multiple of the layout's measured capacity
SETTLE_S = 0.05  # after the loss (and any rebuild), before the window after it starts
REBUILD_ALLOWANCE_S = 1.0  # more arrivals for a group: its rebuild traces two tf.functions


@dataclasses.dataclass
class Failover:
    """One layout's run with a device lost: its windows before and after the loss."""

    layout: str
    n_devices: int
    log: LoadLog
    before: tuple[float, float]
    after: tuple[float, float]
    capacity: Spread | None = None  # tokens/s measured from its steps before the run
    at_once: int | None = None  # devices that can compute at the same time (None: all of them)
    capacity_inputs: str = ""  # the steps the capacity comes from (`Capacity.inputs_text`)
    capacity_warnings: list[str] = dataclasses.field(default_factory=list)  # their noisy ones
    # why a window (set_aside) or the capacity (capacity_aside) is not read: above what the
    # devices computing at once allow, from the sweep (`FailureResult`, read 74)
    set_aside: str = ""
    capacity_aside: str = ""
    slots_per_device: int = 0  # sequences each device's engine holds (0: not given)

    @property
    def model_allows_no_gain(self) -> bool:
        """Whether the model rules out more after the loss than before: replicas each computing
        on a device of its own, sharing nothing (a premise, not measured: the servers are threads
        of one process, sharing its lock and the host's cores). A group rebuilt on fewer devices
        drops its communication, and where devices share cores a survivor takes the lost one's
        share: the model allows both to serve more."""
        at_once = self.n_devices if self.at_once is None else self.at_once
        return self.layout == "replicas" and at_once >= self.n_devices

    def plot(self, ax=None):
        """Each request of the run, the window after the loss shaded (`plots.plot_requests`)."""
        return plot_requests(self.log, ax, window=self.after)

    @property
    def utilisation(self) -> float | None:
        """Throughput before the loss / measured capacity: how close the before-window came to
        serving at capacity, which the comparison with (n - 1) / n assumes."""
        return self.throughput_before.median / self.capacity.median if self.capacity else None

    def _throughput(self, span) -> Spread:
        return rate_in_window([(t, made) for t, made, _ in self.log.passes], *span)

    @property
    def throughput_before(self) -> Spread:
        return self._throughput(self.before)

    @property
    def throughput_after(self) -> Spread:
        return self._throughput(self.after)

    @property
    def ratio(self) -> float:
        return self.throughput_after.median / self.throughput_before.median

    @property
    def expected(self) -> float:
        """After / before if the loss removes one device's capacity: (n - 1) / n where the
        devices compute at once; min(n - 1, a) / min(n, a) where only a of them can (a loss
        of a device that waited for a core removes less)."""
        a = self.n_devices if self.at_once is None else self.at_once
        return min(self.n_devices - 1, a) / min(self.n_devices, a)

    @property
    def model(self) -> str:
        """The model's name as the sentences print it."""
        if self.at_once is None or self.at_once >= self.n_devices:
            return "(n - 1) / n"
        return f"min(n - 1, {self.at_once}) / min(n, {self.at_once})"

    @property
    def restarted(self) -> int:
        return sum(r.restarted > 0 for r in self.log.requests)

    @property
    def first_token_after(self) -> float | None:
        """Seconds from the end of the rebuild (or the loss) to the first token made after it;
        None when none was made before the run ended."""
        resumed = (self.log.failed_at_s or self.before[1]) + self.log.rebuild_s
        made = [t for t, n, _ in self.log.passes if t >= resumed and n > 0]
        return min(made) - resumed if made else None

    @property
    def served_below_capacity(self) -> bool:
        """Whether the window before the loss served measurably less than the measured capacity
        (both noises), when that capacity is read at all."""
        if not self.capacity or self.capacity_aside:
            return False
        served = compare(self.throughput_before, self.capacity)
        return served.measurable and served.a < served.b

    @property
    def test(self) -> str:
        """(n - 1) / n against this run: 'nothing after' when no token was made in the window
        after (the servers did not serve: not a reading of the model); 'below capacity' when
        the window before the loss served measurably less than the measured capacity (the model
        compares capacities, so it does not apply: checked first, as it explains more after
        than before, read 72); 'above before' when replicas each on a device of its own served
        more after the loss than before by more than the floor, which losing one cannot give
        (`model_allows_no_gain`); else `model_test`'s word against no loss."""
        before = self.throughput_before
        if self.throughput_after.median == 0:
            return "nothing after"
        if self.set_aside:
            return "set aside"
        if self.served_below_capacity:
            return "below capacity"
        if self.model_allows_no_gain and self.throughput_after.median > before.median * (
            1 + NOISE_FLOOR
        ):
            return "above before"  # by more than the floor: within it, "lost nothing" is read
        return model_test(self.throughput_after, before.scaled(self.expected), before.median)

    def _noisy_window(self, test: str) -> str:
        """Read 151: which window's ± made the test noisy, with the digits that show it above
        the limit (a printed '±10%' beside 'more than 10%')."""
        window = {"noisy": "after", "noisy yardstick": "before"}.get(test)
        if window is None:
            return ""
        m = self.throughput_after if window == "after" else self.throughput_before
        shown = percent_beside(m.iqr / m.median, NOISY_IQR)
        return f" (the window {window} the loss: ±{shown} of its rate, its ± as printed)"

    @property
    def _ratio_band(self) -> float:
        """after / before's band as `compare` reads after against before (the band every
        verdict here uses; read 165: the ratio's own spread, a second rule, read it before)."""
        c = compare(self.throughput_after, self.throughput_before)
        return c.noise / c.b

    @property
    def band_misses_model(self) -> bool:
        """Whether after differs from the model's share of before beyond both noises."""
        return compare(
            self.throughput_after, self.throughput_before.scaled(self.expected)
        ).measurable

    def sentence(self) -> str:
        before = self.throughput_before
        said = higher_or_lower(
            self.throughput_after,
            before.scaled(self.expected),
            f"{self.layout}: throughput after",
            f"{self.model} = {self.expected:.2f} x before",
        )
        test = self.test
        if test == "nothing after":
            first = self.first_token_after
            length = format_seconds(self.after[1] - self.after[0])
            said = (
                f"{self.layout}: made no tokens in the {length} window after the loss ("
                + (
                    f"its first token after it came {format_seconds(first)} after "
                    + ("its rebuild ended" if self.log.rebuild_s else "the loss")
                    if first is not None
                    else "none before the run ended"
                )
                + "): the servers did not serve in that window, so it reads nothing about "
                f"{self.model} = {self.expected:.2f}; not a result (run it again)"
            )
        elif test == "above before":
            band = self._ratio_band
            said = (
                f"{self.layout}: served {self.ratio:.2f}x ± {band:.2f} as much after the loss as "
                "before; the model, which has each replica compute on a device of its own and "
                "share nothing, allows no gain from a loss, so "
                + (
                    "this is not read as a result (see the warning)"
                    if self.ratio - band > 1
                    else (
                        f"its band holds no change but not {self.model} = {self.expected:.2f}: "
                        "more after the loss than the model allows, beyond the noise"
                        if self.band_misses_model  # read 72: the noise was not the reason
                        else f"with this noise the windows cannot test {self.model} = "
                        f"{self.expected:.2f}"
                    )
                    + " (hypotheses, not measured: the machine's speed changed between them, or "
                    "the survivors took a share of what the replicas shared)"
                )
            )
        elif test in UNTESTED:
            said = (
                f"{self.layout}: after / before {self.ratio:.2f}: too noisy to test {self.model} = "
                f"{self.expected:.2f}: {UNTESTED[test]}{self._noisy_window(test)}"
            )
        elif test == "set aside":
            said = (
                f"{self.layout}: after / before {self.ratio:.2f}, not read against {self.model} "
                f"= {self.expected:.2f}: {self.set_aside}, not a result"
            )
        if self.capacity_aside:
            said += (
                f"; its measured capacity is not read either: {self.capacity_aside}, so the "
                "model's premise, the window before at capacity, is untested here"
            )
        elif self.utilisation is not None:
            before, capacity = self.throughput_before, self.capacity
            # the band `test` compares the two with (both noises over the capacity), so that
            # "below capacity" is read exactly when the band misses 1 (read 55: two rules)
            band = (noise_of(before) + noise_of(capacity)) / capacity.median
            # enough digits that the printed numbers show which side of 1 the band ends (read 65)
            d = agreeing_digits(self.utilisation, band, abs(self.utilisation - 1) > band)
            said += (
                # its parts one digit past the total, to add up to it as printed (read 166)
                f"; before the loss it served {self.utilisation:.{d}f}x ± {band:.{d}f} (the "
                f"window's ±{relative_noise(before):.{d - 1}%} x {self.utilisation:.{d}f} + the "
                f"capacity's ±{relative_noise(capacity):.{d - 1}%}) its "
                f"measured capacity ({with_noise(capacity, 'tok/s')}"
                f", from its steps just before"
                + (f": {self.capacity_inputs})" if self.capacity_inputs else ")")
            )
            if self.utilisation > 1 + band:  # more than its steps allow: the capacity ran low
                said += (
                    ", more than it beyond the noise: its capacity was measured low on this run, "
                    "so the share it served is a rough one"
                )
            elif self.utilisation > 1:  # above it, but inside both noises
                said += (  # a share above 100% is not a result, within the noise too (read 74)
                    ", not measurably more, and above 1: not a result (the capacity is a rough "
                    "bound here, not a ceiling)"
                )
            elif not self.served_below_capacity and (noisy_run(before) or noisy_run(capacity)):
                # read 169: '0.62x ± 0.62' and nothing said of the model's premise; review: the
                # window's own noise widens that band alike
                noisy = [
                    w for w, m in (("a window", before), ("a capacity", capacity)) if noisy_run(m)
                ]
                said += (
                    f", within the noise of it, from {' and '.join(noisy)} too noisy to tell "
                    "whether the window was at it: the model's premise is untested here"
                )
        if test == "below capacity":
            said += f", measurably less: {self.model} compares capacities, so it is not tested here"
        elif test == "set aside" and self.served_below_capacity:  # read 89: said either way
            said += (
                f", measurably less: {self.model} compares capacities, so it would not be tested "
                "here either"
            )
        if test == "missed" and self.expected < self.ratio <= 1:
            said += (
                "; less was lost than one device's share (a hypothesis, not measured: where the "
                "devices together served little more than one alone, as with steps that launch "
                "more than they compute, a device's share of the capacity is less than 1/n)"
            )
        if self.ratio > 1 and not self.model_allows_no_gain:
            said += (
                "; more after than before is possible here ("
                + (
                    "the group rebuilt on fewer devices has less communication"
                    if self.layout != "replicas"
                    else "the survivors take the lost device's share of the shared cores"
                )
                + ": a hypothesis, not measured)"
            )
        return said

    @property
    def outcome(self) -> str:
        """The verdict's words for this run's test."""
        c = compare(self.throughput_after, self.throughput_before.scaled(self.expected))
        model = self.model
        return {
            "held": f"as {model} predicts",
            "noisy": f"too noisy to test {model}",
            "noisy yardstick": f"too noisy to test {model}",
            "untestable": f"too noisy to test {model}",
            "below capacity": f"not at capacity before: {model} not tested",
            "nothing after": "no tokens in the window after: not a result",
            "set aside": "a window above what the devices allow: not a result",
            "above before": (
                f"more than {model}, no more than before within the noise"
                if self.band_misses_model and self.ratio - self._ratio_band <= 1
                else "more than before, which the model does not allow: not tested"
            ),
            "missed": f"less than {model}" if c.a < c.b else f"more than {model}",
        }[self.test]

    def row(self) -> list:
        pause = self.log.rebuild_s
        return [
            self.layout,
            # each with its noise, so that the bands in the sentences can be rebuilt (read 58)
            with_noise(self.throughput_before, "tok/s"),
            with_noise(self.throughput_after, "tok/s"),
            f"{self.ratio:.2f}",
            f"{self.expected:.2f}",
            self.restarted,
            format_seconds(pause) if pause else "none",
            f"{self.after[1] - self.after[0]:.2f} s",
        ]


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class FailureResult(Reported):
    """Each layout overloaded, one device lost mid-run: throughput before and after."""

    runs: list[Failover]
    at_once: int  # devices that can compute at the same time
    # the load sweep (`LoadSweepResult`) whose one-device capacity bounds what the devices
    # computing at once allow: a window or capacity above it is set aside in the table itself
    sweep: object | None = None

    def __post_init__(self):
        if self.sweep is not None:  # read 74: the table read a window the line under it set aside
            self.runs = [self._set_aside(r) for r in self.runs]

    def capacities_against_sweep(self) -> str:
        """Each layout's capacity timed here against the sweep's (read 91); '' without it."""
        return capacities_against_sweep(
            self.sweep, [(r.layout, r.capacity) for r in self.runs if r.capacity is not None]
        )

    @property
    def verdict(self) -> str:
        parts = [f"{r.layout} kept {r.ratio:.0%} ({r.outcome})" for r in self.runs]
        return "after losing one device: " + "; ".join(parts)

    def _readings(self, r: Failover, sweep) -> list[tuple[str, Spread, Spread, int | None]]:
        """(name, value, its ceiling, the devices the ceiling counts when it is not the whole
        sweep's) for each of `r`'s windows and its capacity, against what the devices computing
        at once allow; [] for a layout one device's capacity does not bound."""
        if not sweep.bounded_by_one_device(r.layout):
            if self._rebuilt_as_one_device(r, sweep) and r.throughput_after is not None:
                return [("after the loss", r.throughput_after, sweep.one_device.tokens_per_s, 1)]
            return []
        reach = reach_of(sweep)
        # after the loss one device fewer can compute (read 70: a survivor at 1.73x one
        # device's capacity went unflagged)
        survivors = min(sweep.at_once, r.n_devices - 1)
        after = reach_of(sweep, survivors)
        return [
            (name, value, most, k)
            for name, value, most, k in [
                ("before the loss", r.throughput_before, reach, None),
                ("capacity", r.capacity, reach, None),
                ("after the loss", r.throughput_after, after, survivors),
            ]
            if value is not None
        ]

    @staticmethod
    def _rebuilt_as_one_device(r: Failover, sweep) -> bool:
        """Read 149: a group rebuilt on its one survivor steps as many sequences as one device
        does in the sweep, so one device's capacity bounds its window after the loss."""
        return r.n_devices == 2 and r.slots_per_device == sweep.one_device.slots[0]

    @staticmethod
    def _where(it: str, c, why: bool = True) -> str:
        """Where a value sits against the ceiling `it`; with `why`, what that makes of it."""
        if c.a <= c.b:
            return f"not above {it}"
        where = (
            f"above {it} beyond both noises" if c.measurable else f"above {it}, within both noises"
        )
        return where + above_reach_words(c.measurable) if why else where

    def _set_aside(self, r: Failover) -> Failover:
        """`r` with the windows and capacity above what the devices allow named, so that its
        sentence does not read them (`Failover.set_aside`, `capacity_aside`)."""
        windows, capacity = [], ""
        for name, value, most, k in self._readings(r, self.sweep):
            c = compare(value, most)
            if c.a <= c.b:
                continue
            shown, bound = rates_as_judged(value, most, "tok/s")  # each with its noise
            it = f"{bound} from the sweep"
            it = it if k is None else f"{k}x one device's ({it})"
            where = self._where(it, c, why=False)  # the sentence says 'not a result'
            said = f"{shown}, {where}"
            if name == "capacity":
                capacity = said
            else:
                windows.append(f"its window {name}, {said}")
        return dataclasses.replace(r, set_aside="; ".join(windows), capacity_aside=capacity)

    def against_reachable(self, sweep=None) -> str:
        """Each layout's window before the loss and its capacity against what the devices that
        can compute at once allow, from the sweep's one-device capacity (`LoadSweepResult`;
        by default the sweep the run was given): a failure row above it is not read as a
        result (read 57: 1.2 ktok/s before the loss, beside a sweep that put one device's
        914.6 tok/s as the most)."""
        sweep = self.sweep if sweep is None else sweep
        reach = reach_of(sweep)
        ceiling = f"{with_noise(reach, 'tok/s')} ({reach_label(sweep.at_once)})"
        said = []
        for r in self.runs:
            readings = self._readings(r, sweep)
            if not sweep.bounded_by_one_device(r.layout):
                rebuilt = (
                    " (after the loss, rebuilt on one device, it holds as many as one device's "
                    "step: read below)"
                    if readings
                    else ""
                )
                said.append(
                    f"{r.layout}: not read against it before the loss or for its capacity (its "
                    "steps hold every device's sequences, one device's hold fewer, and a step's "
                    "time may depend on how many it holds: one device's step at 4 to 32 sequences "
                    "is timed in the pipeline's cell below, and this bound is not re-derived from "
                    f"it){rebuilt}"
                )
            for name, value, most, k in readings:
                c = compare(value, most)
                shown, bound = rates_as_judged(value, most, "tok/s")  # each with its noise
                if k is not None:
                    it = f"{k}x one device's ({bound})"
                else:  # the digits the ceiling above printed, or more where they would mislead
                    usual = with_noise(most, "tok/s")
                    it = "it" if bound == usual else f"it ({bound})"
                said.append(f"{r.layout} {name}: {shown}, {self._where(it, c)}")
                if name == "capacity" and c.a > c.b and r.utilisation is not None:
                    said.append(  # read 70: the share read the window against this capacity
                        f"so the share of its capacity {r.layout} served before the loss, in the "
                        + (
                            "table above, is not read either"
                            if self.sweep is None
                            else "table above, is not read (the table says so too)"
                        )
                    )
        return f"against {ceiling}: " + "; ".join(said)

    def flags(self) -> list[str]:
        """Replicas on devices of their own that served more after losing one than before,
        beyond the noise: against the model's premise, so not read (a group, or devices sharing
        cores, can: see `model_allows_no_gain`)."""
        causes = (
            "the window before the loss was not at capacity (the offered load did not keep every "
            "slot busy), so it measured the load, not what the devices could do",
            "restarted requests' tokens came in a burst inside the window after",
            "the survivors took a share of what every replica shared: the servers are threads of "
            "one process (one Python lock) on the host's cores, and notebook 06 shows a survivor "
            "speeding up once another worker stops",
        )
        listed = numbered(causes)
        noisy = [f"{r.layout}'s capacity, {w}" for r in self.runs for w in r.capacity_warnings]
        return noisy + [
            f"{r.layout} served {r.ratio:.2f}x as much after losing a device as before, beyond "
            "the noise, which the model (each replica on a device of its own, sharing nothing) "
            f"does not allow: not read as a result. Possible causes (hypotheses, not measured), "
            f"in order: {listed}"
            for r in self.runs
            if r.model_allows_no_gain
            and (c := compare(r.throughput_after, r.throughput_before)).measurable
            and c.a > c.b
        ]

    def _model_note(self) -> str:
        """Which model the rows read, and why: the devices that can compute at once decide."""
        n = max(r.n_devices for r in self.runs)
        if self.at_once >= n:
            return (
                f"model: (n - 1) / n, one device's share of the capacity: up to {n} devices can "
                "compute at once here (notebook 01's run shows whether they did)"
            )
        return (
            f"model: (n - 1) / n is expected where the devices compute at once (not tested "
            f"here); {self.at_once} can "
            # read 136: the share that remains, said as such ('removes at most ... of before'
            # read as the share lost)
            f"here (cores shared), so after a loss at least "
            f"min(n - 1, {self.at_once}) / min(n, {self.at_once}) of before remains"
        )

    def tables(self) -> list[Table]:
        columns = [
            "layout",
            "before",
            "after",
            "after / before",
            "model (after / before)",
            "restarted requests",
            "rebuild pause",
            "window after",
        ]
        model = " or ".join(dict.fromkeys(r.model for r in self.runs))
        notes = [r.sentence() for r in self.runs] + [
            "restarted: in flight or queued on the lost device, queued again from the prompt "
            "(an in-flight request's KV cache was there; a queued one had none to lose). Rebuild "
            "pause: re-placing the weights on the survivors and building and warming new "
            "tf.functions, during which the group serves nothing; "
            "replicas need none (both the package's design, `serving/load.py`, which its tests "
            "check; the pause is timed, not what happens inside it).",
            self._model_note()
            + "; a group's window after starts once its rebuild is done (the pause is not in "
            "it), and the requests it restarted are read again from their prompts there. The "
            "model assumes the window before served at capacity (its share is in each sentence "
            "above that reads its capacity; where the capacity is not read, that premise is "
            "untested).",
            # named as the sentences name it: min(n - 1, a) / min(n, a) where fewer compute
            # at once (read 73: the note named (n - 1) / n beside sentences that did not)
            f"each ± beside 'after is ...x {model} x before' is both windows' noises over the "
            f"model's after ({model} x before): the printed x times the after window's ± plus "
            "the before window's ±",
        ]
        against = self.capacities_against_sweep()
        if against:
            notes.append(against)
        rows = [r.row() for r in self.runs]
        title = "throughput before and after one device is lost"
        return [Table(title, columns, rows, notes, self.flags())]


def run_serving_failure(
    n_devices: int = 2,
    layouts=SPLIT_LAYOUTS,
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
) -> FailureResult:
    """Each layout at `OVERLOAD` x its capacity; the last device lost after the first window.
    With `sweep` (`run_load_sweep`'s result), a window or capacity above what the devices
    computing at once allow is set aside in the table, not read against the model."""
    config, devices, window, code = setup_run(
        n_devices, width, layers, prompt_len, n_out, window, code
    )
    steps = Steps(progress, len(list(layouts)))
    runs = []
    for name in layouts:
        engines = ready_engines(name, config, devices, slots_per_device, code, prompt_len)
        capacity = measure_capacity(engines, prompt_len, n_out)
        rate = OVERLOAD * capacity.requests_per_s

        def rebuild(name=name):
            return ready_engines(name, config, devices[:-1], slots_per_device, code, prompt_len)

        fail_at = window.end_s
        # arrivals for a second window after the loss, and for a group the time to rebuild it
        extra = 0.0 if name == "replicas" else REBUILD_ALLOWANCE_S
        longer = Window(window.warmup_s, 2 * window.measure_s + extra, window.drain_s)
        steps.say(f"{name}: overloaded, one device lost at {fail_at:.2f} s")
        point = run_point(
            engines, rate, config, n_out, longer, code, fail_at_s=fail_at, rebuild=rebuild
        )
        log = point.log
        resumed = (log.failed_at_s or fail_at) + log.rebuild_s + SETTLE_S
        end = longer.end_s
        after = (resumed, max(end, resumed + window.measure_s / 4))
        runs.append(
            Failover(
                name, n_devices, log, (window.warmup_s, fail_at), after,
                capacity.tokens_per_s, at_once_here(n_devices, devices[0].kind),
                capacity.inputs_text(), capacity.warnings, slots_per_device=slots_per_device,
            )
        )  # fmt: skip
        steps.finish(name)
    return FailureResult(runs, at_once_here(n_devices, devices[0].kind), sweep)
