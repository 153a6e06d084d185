"""Notebook 07's measuring pieces: a layout's capacity from its timed steps, and one timed load
read in its steady-state window (`LoadPoint`).

Capacity: a request takes one prefill (p) and n_out - 1 decoding steps, sharing each step (d)
with the other slots of its server (S), so a server busy all the time makes
n_out / (p + (n_out - 1) d / S) tokens per second; a layout's capacity is the sum over its
servers, their steps timed while all of them step at once (one thread each, as they serve).
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np

from d2lhelpers.core import checks
from d2lhelpers.core.concurrency import at_once_here
from d2lhelpers.core.units import (
    cores_phrase,
    enough_digits,
    format_rate,
    format_seconds,
    plural,
    printed_value,
    ratio_beside,
    usable_cores,
)
from d2lhelpers.core.verdicts import (
    Spread,
    compare,
    impossible,
    noise_of,
    noise_text,
    parts_between_runs,
    printed_comparison,
    rates_as_judged,
    with_noise,
)
from d2lhelpers.devices import check_fits, select_devices, setup_devices
from d2lhelpers.serving.config import ModelConfig, bytes_per_device, decoder_config
from d2lhelpers.serving.engines import Engine, ServingCode, build_engines
from d2lhelpers.serving.load import LoadLog, serve_load
from d2lhelpers.serving.requests import make_requests
from d2lhelpers.serving.steady import Percentile, percentile, rate_in_window
from d2lhelpers.timing.benchmark import Measurement, measure
from d2lhelpers.tracing.timeline import busy_seconds, merged_intervals

MAX_SLOTS = 256
STEP_BUDGET_S = 0.3  # measuring one step's time, per engine


@dataclasses.dataclass(frozen=True)
class Window:
    """A timed load's phases: warm-up (left out), the measured window, then the drain."""

    warmup_s: float = 0.15
    measure_s: float = 0.5
    drain_s: float = 0.2

    def __post_init__(self):
        for name in ("warmup_s", "measure_s", "drain_s"):
            checks.require_rate(f"window {name}", getattr(self, name), allow_none=False)

    @property
    def end_s(self) -> float:
        return self.warmup_s + self.measure_s


def setup_run(n_devices, width, layers, prompt_len, n_out, window=None, code=None, least=2):
    """What every serving experiment starts with: the model's config, `n_devices` devices (at
    least `least`), its window, and its code (the saved modules', unless the notebook gave its)."""
    config = decoder_config(width, layers, prompt_len, n_out)
    devices = select_devices(checks.require_count("devices", n_devices, least))
    return config, devices, window or Window(), code or ServingCode()


def check_layout_fits(layout: str, config: ModelConfig, devices, slots: int) -> None:
    """Refuse, before allocating, a layout whose weights and KV cache would not fit."""
    checks.require_count("sequences in flight (slots)", slots, 1, MAX_SLOTS)
    needed = bytes_per_device(layout, config, len(devices), slots)
    what = f"{layout} with {slots} sequences of {config.max_len} tokens"
    check_fits(needed, devices if layout != "one device" else devices[:1], what)


def ready_engines(layout, config, devices, slots_per_device, code, prompt_len, microbatches=None):
    """The layout's engines, checked to fit, built and traced (before any clock starts)."""
    slots = slots_per_device * (microbatches or len(devices))
    check_layout_fits(layout, config, devices, slots)
    engines = build_engines(layout, config, devices, slots_per_device, code, 0, microbatches)
    for engine in engines:
        engine.warm(prompt_len)
    return engines


def server_rate(n_out: int, prefill: tuple, decode: tuple, slots: int) -> Spread:
    """One server's tokens/s, n_out / (prefill + (n_out - 1) x step / slots), from `prefill` and
    `decode` as (seconds, noise in seconds): a rate's band is its time's, the parts' noises in
    seconds over that time (read 62: relative noises added, as for a product, overstated it)."""
    time = prefill[0] + (n_out - 1) * decode[0] / slots
    band = prefill[1] + (n_out - 1) * decode[1] / slots
    rate = n_out / time
    return Spread(rate, rate * band / time)


@dataclasses.dataclass
class Capacity:
    """A layout's measured steps (per server, all stepping at once) and the tokens/s they allow."""

    decode: list[Measurement]
    prefill: list[Measurement]
    slots: list[int]
    n_out: int
    at_once: int | None = None  # of these servers, how many can compute at once here

    def summed_note(self, served: Spread | None = None) -> str | None:
        """Why a sum of servers' capacities is a rough bound where fewer compute at once; with
        `served`, the window's throughput, whether that window refutes the bound its servers'
        own steps give (read 118: 2.3 ktok/s served beside a bound of 1.7)."""
        servers = len(self.decode)
        if self.at_once is None or self.at_once >= servers:
            return None
        said = (
            f"the capacity sums {servers} servers' steps, each timed in its own thread while the "
            f"others were timed too; on {cores_phrase(usable_cores())} only {self.at_once} can "
            "compute at once, so a server may have been timed while another waited for a core (a "
            "hypothesis, not traced), so the sum may overstate what this machine serves at once "
            "(the load sweep compares capacities with that ceiling)"
        )
        # read 112: where the servers' own steps already show it, say so in this cell
        fastest = max(self._server_rates(), key=lambda r: r.median).scaled(self.at_once)
        total = self.tokens_per_s
        if not compare(total, fastest).a_slower or total.median <= fastest.median:
            return said
        rate = with_noise(fastest, "tok/s")
        said = (
            f"{said}; here the sum, {with_noise(total, 'tok/s')}, is "
            f"above {self.at_once}x its fastest server's rate, {rate}, beyond both noises"
        )
        model = (
            f"the model that {self.at_once} server computes at a time, each as fast as the "
            "fastest did"
        )
        if served is not None and compare(served, fastest).a_slower:  # served above it
            shown, bound = rates_as_judged(served, fastest, "tok/s")
            return (
                f"{said}; but this window served {shown}, above {bound} "
                f"beyond both noises, which does not fit {model}: its premise fails here (a "
                "step timed beside another server's is not all core time: part of it was "
                "waiting, a hypothesis, not traced), so the sum is not shown to overstate what "
                "this machine serves: a rough bound, not a result"
            )
        # read 124: the fastest server's rate, timed beside the others, may itself understate
        # one server alone (the load sweep then served above it): no verdict from it
        return (
            f"{said}: by {model}, it would overstate what this machine serves; but that rate was "
            "timed while the other servers were timed too, so it may include waiting and "
            "understate one server alone (a hypothesis, not traced): these steps cannot tell, "
            "and the load sweep reads capacities against one device timed alone; a rough bound, "
            "not a result"
        )

    def _server_rates(self) -> list[Spread]:
        return [
            server_rate(self.n_out, (p.median, noise_of(p)), (d.median, noise_of(d)), s)
            for d, p, s in zip(self.decode, self.prefill, self.slots, strict=True)
        ]

    @property
    def tokens_per_s(self) -> Spread:
        """Summed over the servers: n_out / (prefill + (n_out - 1) x step / slots). A rate's
        band is its time's: the prefill's and the steps' noises (as `steps_text` prints them)
        in seconds, summed, over that time; the servers' bands add (read 62: relative noises
        added as for a product overstated it)."""
        rates = self._server_rates()
        return Spread(sum(r.median for r in rates), sum(r.iqr for r in rates))

    def steps_text(self, which: str) -> str:
        """Each server's 'decode' or 'prefill' time with its noise: what the capacity sums (a
        decoding step with the slots it steps at once)."""
        found = [with_noise(m) for m in getattr(self, which)]
        if which == "decode":
            found = [f"{text} for {s} slots" for text, s in zip(found, self.slots, strict=True)]
        return ", ".join(found)

    @property
    def warnings(self) -> list[str]:
        """Each noisy step's or prefill's warning, named, as every measurement's table flags it."""
        return [f"{m.label}: {w}" for m in (*self.decode, *self.prefill) for w in m.warnings]

    def inputs_text(self) -> str:
        """What the capacity is made of, to rebuild it and its band from the page."""
        return (
            f"{self.n_out} tokens / (prefill + {self.n_out - 1} x step / slots), summed over the "
            f"servers; step {self.steps_text('decode')}; prefill {self.steps_text('prefill')}"
        )

    @property
    def requests_per_s(self) -> float:
        return self.tokens_per_s.median / self.n_out


def measure_capacity(engines: list[Engine], prompt_len: int, n_out: int, budget_s=STEP_BUDGET_S):
    """Each engine's decoding step (every slot busy) and prefill, timed in its own thread while
    the others are timed too (replicas step at once when they serve)."""
    found: dict[int, tuple[Measurement, Measurement]] = {}

    def time_steps(i: int, engine: Engine) -> None:
        cache, prompt = engine.cache, [1] * prompt_len
        tokens = np.ones(engine.slots, np.int32)
        positions = np.full(engine.slots, engine.config.max_len - 1, np.int32)
        options = {"budget_s": budget_s, "sync": lambda: None}  # .numpy() has synced
        d = measure(lambda: engine.decode(tokens, positions), f"{engine.name} step", **options)
        p = measure(lambda: engine.prefill(0, prompt), f"{engine.name} prefill", **options)
        engine.cache, engine.calls = cache, []
        found[i] = (d, p)

    threads = [threading.Thread(target=time_steps, args=(i, e)) for i, e in enumerate(engines)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pairs = [found[i] for i in range(len(engines))]
    at_once = at_once_here(len(engines), setup_devices()[0].kind)
    return Capacity(
        [d for d, _ in pairs], [p for _, p in pairs], [e.slots for e in engines], n_out, at_once
    )


@dataclasses.dataclass
class LoadPoint:
    """One timed load at an offered rate, read in its window [warm-up, warm-up + measure_s)."""

    log: LoadLog
    offered: float  # requests/s asked for
    window: Window
    n_out: int

    @property
    def span(self) -> tuple[float, float]:
        return self.window.warmup_s, self.window.end_s

    @property
    def in_window(self) -> list:
        """The requests that arrived in the window: the latencies come from them."""
        a, b = self.span
        return [r for r in self.log.requests if a <= r.arrival_s < b]

    @property
    def arrival_rate(self) -> Spread:
        return rate_in_window([(r.arrival_s, 1) for r in self.log.requests], *self.span)

    @property
    def offered_tokens(self) -> Spread:
        """Tokens/s the arrivals in the window asked for."""
        return self.arrival_rate.scaled(self.n_out)

    @property
    def throughput(self) -> Spread:
        """Tokens made per second in the window, by every server."""
        return rate_in_window([(t, made) for t, made, _ in self.log.passes], *self.span)

    def queued_at(self, t: float) -> int:
        """Requests that had arrived by `t` and not yet taken a slot."""
        return sum(
            r.arrival_s <= t and (r.started_s is None or r.started_s > t) for r in self.log.requests
        )

    @property
    def queue_growth(self) -> tuple[int, int]:
        return self.queued_at(self.span[0]), self.queued_at(self.span[1])

    @property
    def made_nothing(self) -> bool:
        """Requests arrived in the window and no token was made in it."""
        return self.tokens == 0 and bool(self.in_window)

    def stalled(self, name: str) -> str | None:
        """A flag when the window made nothing (`made_nothing`): the servers did not serve,
        whatever the load (a first call, a retrace, a process paused), so the window reads
        nothing about the layout. None when tokens were made."""
        if not self.made_nothing:
            return None
        a, b = self.span
        calls = [s for end, s, _ in self.log.engine_calls if end > a and end - s < b]
        longest = (
            f"its longest engine call overlapping the window took {format_seconds(max(calls))}"
            if calls
            else "no engine call overlapped the window"
        )
        return (
            f"{name} made no tokens in its {format_seconds(b - a)} window while "
            f"{len(self.in_window)} requests arrived at {self.offered:.0f} req/s offered "
            f"({longest}): the servers stalled, so this window is not a result about the "
            "layout (run it again)"
        )

    @property
    def saturated(self) -> bool:
        """Throughput stopped following the offered load (below it beyond the noise), and the
        queue grew over the window. Never for a window that made no tokens (`stalled`)."""
        if self.made_nothing:
            return False
        c = compare(self.throughput, self.offered_tokens)
        start, end = self.queue_growth
        return c.measurable and c.a < c.b and end > start

    @property
    def saturated_word(self) -> str:
        """yes; no; or can't tell: the queue grew while throughput stayed below the offered
        load, but within the noise."""
        if self.saturated:
            return "yes"
        if self.made_nothing:
            return "stalled (see flags)"
        start, end = self.queue_growth
        below = self.throughput.median < self.offered_tokens.median
        return "can't tell" if below and end > start else "no"

    @property
    def engine_busy(self) -> float:
        """Share of the window the engines spent in their steps (the rest: the loops, the
        balancer, waiting), averaged over the servers."""
        a, b = self.span
        return self.busy_s / ((b - a) * self.log.servers)

    def calls_in_window(self, kind: str) -> list[float]:
        """Seconds of each engine call of `kind` ('decode' or 'prefill') that ended in the
        window."""
        a, b = self.span
        return [s for end, s, k in self.log.engine_calls if a <= end < b and k == kind]

    def pending(self) -> dict[int | None, list[tuple[float, float]]]:
        """Per server, the intervals of the window in which it held a request (sent there, not
        yet finished): when its engine had work to step."""
        a, b = self.span
        spans: dict[int | None, list[tuple[float, float]]] = {}
        for r in self.log.requests:
            start, end = max(r.arrival_s, a), min(r.finished_s if r.done else b, b)
            if end > start:
                spans.setdefault(r.server, []).append((start, end))
        return {server: merged_intervals(s) for server, s in spans.items()}

    @property
    def pending_s(self) -> float:
        """Server-seconds in the window with a request at the server, every server's summed."""
        return sum(busy_seconds(s) for s in self.pending().values())

    def ran_between_steps(self) -> float | None:
        """Of the gaps between an engine's steps while its server held requests (in the
        window), the share its thread ran (the loop's Python, building the step's inputs); the
        rest it waited, for a core or for Python's lock. None without such gaps."""
        pending, ran, wall = self.pending(), 0.0, 0.0
        for end, seconds, on_cpu, server in self.log.engine_gaps:
            if any(a <= end - seconds and end <= b for a, b in pending.get(server, ())):
                ran, wall = ran + on_cpu, wall + seconds
        return min(ran / wall, 1.0) if wall > 0 else None

    def idle_shares(self) -> tuple[float, float]:
        """The window's engine time not spent in steps, as two shares of it: with no request
        at the server (waiting for arrivals), and with requests there but no step running."""
        a, b = self.span
        whole = (b - a) * self.log.servers
        return 1 - self.pending_s / whole, max(0.0, self.pending_s - self.busy_s) / whole

    @property
    def busy_s(self) -> float:
        """Engine-seconds spent in steps in the window, every server's summed."""
        return sum(self.calls_in_window("decode")) + sum(self.calls_in_window("prefill"))

    @property
    def tokens(self) -> float:
        """Tokens made in the window, by every server."""
        a, b = self.span
        return sum(made for t, made, _ in self.log.passes if a <= t < b)

    def slot_fill(self, slots: int) -> float | None:
        """Of the `slots` each decoding step computes, the share that held a sequence: decoding
        tokens (each prefill makes one token, the rest are decoded) over steps x slots."""
        steps = len(self.calls_in_window("decode"))
        decoded = self.tokens - len(self.calls_in_window("prefill"))
        return max(0.0, decoded) / (steps * slots) if steps else None

    def ttft(self, q: float) -> Percentile:
        return percentile([r.ttft_s for r in self.in_window], q)

    def latency(self, q: float) -> Percentile:
        return percentile([r.latency_s for r in self.in_window], q)

    def _shown(self, d: int) -> tuple[str, str]:
        """The arrivals and the throughput, each with its noise, `d` decimals past the usual."""
        arrived, made = self.arrival_rate, self.throughput
        return (
            f"{arrived.median:.{d}f} {noise_text(arrived, d)}",
            with_noise(made, "tok/s", d),
        )

    def _reads_below(self, d: int) -> bool:
        """The saturated column's comparison (`saturated`) rebuilt from the printed digits."""
        arrived, made = (text.split(" ±", 1) for text in self._shown(d))
        c = printed_comparison(
            (printed_value(made[0]), "±" + made[1]),
            (float(arrived[0]) * self.n_out, "±" + arrived[1]),
        )
        return c.measurable and c.a < c.b

    def row(self) -> list:
        start, end = self.queue_growth
        truth = compare(self.throughput, self.offered_tokens)
        below = truth.measurable and truth.a < truth.b
        # read 154: '258 ±22%' asked and '3.1 ktok/s ±5%' made read within the noise beside a
        # 'yes': the two columns get the decimals at which their digits give the column's verdict
        rebuilt = self.arrival_rate.median > 0 and self.throughput.median > 0
        d = enough_digits(lambda d: self._reads_below(d) == below, 0, 3, 3) if rebuilt else 0
        arrived, made = self._shown(d)
        return [
            f"{self.offered:.0f}",
            arrived,
            made,
            str(self.ttft(50)),
            str(self.latency(50)),
            str(self.latency(99)),
            f"{start} -> {end}",
            self.saturated_word,
        ]


POINT_COLUMNS = [
    "offered req/s",
    "arrived req/s",
    "throughput",
    "TTFT p50 [95% CI] of N",
    "latency p50",
    "latency p99",
    "queue",
    "saturated",
]


def run_point(engines, rate, config, n_out, window: Window, code: ServingCode, seed=0, **fail):
    """Serve a Poisson load of `rate` requests/s on built engines for the window's length."""
    checks.require_rate("offered load (requests/s)", rate, allow_none=False)
    prompt_len = config.max_len - n_out
    requests = make_requests(rate, window.end_s, prompt_len, n_out, config.vocab, seed)
    for engine in engines:
        engine.calls = []
    log = serve_load(engines, requests, code.server_loop, window.drain_s, **fail)
    return LoadPoint(log, rate, window, n_out)


def describe_step(m: Measurement) -> str:
    return f"{format_seconds(m.median)} (IQR {format_seconds(m.iqr)})"


def served_above(name: str, served: Spread, capacity: Spread, at: str) -> tuple[str, bool] | None:
    """A throughput above the capacity its steps allow with every slot busy: None when it is not
    above; else its sentence and whether it is beyond both noises (impossible, a flag) or within
    them (not impossible, but the capacity is then a rough bound on this run, and a reader is
    told). `at` says where it was served ("at 205 requests/s offered")."""
    if served.median <= capacity.median:
        return None
    c = compare(served, capacity)
    if c.measurable:
        return impossible(
            f"{name} served {format_rate(c.a, 'tokens/s')} {at}, above its capacity "
            f"{format_rate(c.b, 'tokens/s')} with every slot busy"
        ), True
    return (
        f"{name}: served {ratio_beside(c.ratio)}x its measured capacity ({at}), within the noise "
        f"(±{c.noise / c.b:.0%}): not measurably more than its steps timed with every slot busy "
        "allow, but above 1, so not a result: with a band that wide its capacity is a rough "
        "bound on this run, not a ceiling"  # read 76: a share above 1 within the noise, unflagged
    ), False


def above_reach_words(beyond: bool) -> str:
    """What a value above `reach_label`'s bound is (one home): within the noise, not a result
    above it; beyond both noises, a miss of the model as much as of the value (read 108: a
    lock step above it, one device re-timed unchanged, read as the capacity's fault alone)."""
    if not beyond:
        return ": not a result (above a bound within the noise is not a result above it)"
    return (
        ", which that model does not allow: either its premise fails here (a step is not all "
        "core time that adds up: part of it may be waiting that another server's step fills, "
        "or one call's cost may cover several devices), or one device's timing moved "
        "(hypotheses, not told apart here), so it is not read as a result against that model"
    )


def reach_of(sweep, devices: int | None = None) -> Spread:
    """The most `devices` (by default, those of the load sweep's that can compute at once) allow,
    each as fast as one device was when the sweep timed it: the bound `reach_label` names."""
    return sweep.one_device.tokens_per_s.scaled(sweep.at_once if devices is None else devices)


def reach_label(at_once: int) -> str:
    """What the sweep's bound on layouts one device bounds is (read 99: 'the most 2 devices
    computing at once allow' printed as a ceiling, beside one device timed 0.75x as long in a
    later cell): a model from one timing, not a measured ceiling."""
    return (
        f"{at_once}x one device's capacity as the sweep timed it: the most "
        f"{plural(at_once, 'device')} computing at once allow if each runs as fast as it did "
        "then, a model (one device's timing moves between cells)"
    )


def capacities_against_sweep(sweep, capacities: list[tuple[str, Spread]]) -> str:
    """Each (layout, capacity timed in this cell) against the load sweep's for that layout (the
    same timing, another cell): read 91, 5.6 ktok/s here beside the sweep's 2.6, beyond both
    noises and unsaid, while the sweep read its own against the model; read 129, lock step's
    cell timed the replicas slower than the sweep, unsaid. '' without the sweep."""
    layouts = getattr(sweep, "sweeps", [])  # none without a sweep, or on one device
    parts = []
    for layout, capacity in capacities:
        found = next((s for s in layouts if s.layout == layout), None)
        if found is not None:
            parts.append((layout, capacity, found.capacity.tokens_per_s))
    if not parts:
        return ""
    return "Capacities, this run's against the sweep's (the same timing, in another cell): " + (
        parts_between_runs(
            parts,
            # read 138: not 'each verdict holds for either cell': a verdict at its band's
            # edge can read differently against each cell's capacity
            "the cells' capacities can be read together (each verdict is still read against "
            "its own cell's)",
            other="the sweep",
            show=lambda v, e=0: format_rate(v, "tok/s", 1 + e),
            holds="each verdict read against a capacity holds for its own cell only, and "
            "neither capacity alone is the layout's",
        )
    )
