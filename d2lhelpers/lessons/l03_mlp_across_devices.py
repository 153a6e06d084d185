"""Notebook 03, the seed's MLP across devices: branches the scheduler runs at once.

The branched MLP itself is the notebook's saved code (`parallel.branches`). Here, in notebook
order: the experiment `run_mlp_branches`, its result, its estimate, its plot, its panel; the
experiment and the panel take the notebook's own `mlp_branches_in_one_graph`, so an edited cell
changes what they run.

The model is notebook 01's: k branches on k logical CPU devices take max(1, k / c) times one
branch on c usable cores, and all of them on one device, one after another, take k times one
branch. So the split's speedup is k / max(1, k / c) = min(k, c): 2 for 3 branches on 2 cores,
if the cores are shared in turns rather than in rounds (an assumption: the notebook's Try-it
measures that case). On separate GPUs it is k.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import tensorflow as tf

from d2lhelpers.core.checks import require_count
from d2lhelpers.core.concurrency import at_once_here, concurrency_model
from d2lhelpers.core.counts import mlp_bytes, mlp_flops
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    cores_phrase,
    format_rate,
    format_seconds,
    noise_percent,
    percent_beside,
    plural,
    rate_and_share,
    the_cores,
    usable_cores,
)
from d2lhelpers.core.verdicts import (
    UNTESTED,
    Comparison,
    against_limit,
    agreeing_digits,
    compare,
    faster_or_slower,
    impossible,
    noise_of,
    noisy_run,
    parts_between_runs,
    slower_cause,
    times_within,
    took_turns,
)
from d2lhelpers.devices import Device, check_fits, cpu, on_gpu, setup_devices
from d2lhelpers.parallel import branches as saved
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.timing.estimate import (
    CALL_S,
    DRAW_S,
    call_seconds,
    interleaved_seconds,
    trace_seconds,
)
from d2lhelpers.timing.interleaved import ROUNDS, measure_in_turns
from d2lhelpers.timing.peaks import (
    baseline_below_peak,
    baseline_chain,
    baseline_noise,
    baseline_not_kept,
    below_own_peak,
    device_peak_rate,
)
from d2lhelpers.tracing.timeline import (
    OpEvent,
    busy_intervals,
    busy_seconds,
    common_intervals,
    incomplete_reason,
    overlap_seconds,
    plot_timeline,
    trace,
)
from d2lhelpers.ui.panel import Panel, slider

MOSTLY_AT_ONCE = 0.5  # a traced share from which "not busy at once" is not the hypothesis named
MAX_WIDTH = 1 << 16  # rows, columns or hidden units: beyond, one matrix alone is gigabytes


def model_speedup(branches: int, cores: int, kind: str = "logical CPU") -> float | None:
    """Split vs one device: min(k, c) on logical CPUs, k on separate GPUs, None on virtual GPUs."""
    if kind == "logical CPU":
        return branches / concurrency_model(branches, cores)
    return float(branches) if kind == "GPU" else None


def _both_busy(rows, names) -> tuple[list, list[float], float]:
    """Each device's merged matmul intervals, their busy seconds, and how long the first two
    devices multiplied at the same time."""
    busy = [busy_intervals(rows, name, "matmul") for name in names]
    together = overlap_seconds(*busy[:2]) if len(busy) >= 2 else 0.0
    return busy, [busy_seconds(b) for b in busy], together


def overlap_sentence(rows: Sequence[OpEvent], devices: Sequence[Device | str]) -> str:
    """How long the branch devices multiplied at the same time in a trace, and what that means.

    On logical CPU devices with fewer usable cores than devices, ops 'at the same time' in a
    trace take turns on the cores: the trace shows them in flight at once, not computing at once.
    An incomplete trace (`Trace.incomplete`) gives its own sentence instead.
    """
    if incomplete_reason(rows):
        return incomplete_reason(rows)  # its missing rows would read as time apart
    names = [d if isinstance(d, str) else d.name for d in devices]
    busy, lengths, together = _both_busy(rows, names)
    sentence = (
        f"branch devices busy: {', '.join(format_seconds(s) for s in lengths)}; the first two "
        f"both at once for {format_seconds(together)}"
    )
    if len(busy) < 2:
        return sentence + " (one branch device: nothing can overlap)"
    shorter = min(lengths[:2])  # the first two's overlap is a share of the shorter of those two
    if shorter <= 0:  # review: not 'one branch device' where the second ran no matmul
        return sentence + " (one of the first two ran no matmul in this trace: nothing to overlap)"
    share = together / shorter
    cores = usable_cores()
    shared = not on_gpu() and cores < len(names)  # read 172: 'ideal 100%' bare on one core
    ideal = "100% where each branch device has a core of its own" if shared else "100%"
    sentence += f" = {share:.0%} of the shorter (ideal {ideal})"
    if share > 0:
        sentence += f": in this call the branches were in flight at the same time for {share:.0%}"
    else:
        sentence += ": in this call the branches ran one after the other"
    if share > 0 and shared:  # read 122: not beside 0%
        sentence += (
            f" (with {cores_phrase(cores)}, ops shown at the same time are expected to have "
            f"taken turns on {the_cores(cores)}, {took_turns('splitting', ' below')})"
        )
    return sentence


def baseline_sentences(result: BranchResult, baseline: dict) -> str:
    """The one-device run's rate and the split's against the usable cores' baseline (the one
    notebook 01 reads: measured once per run, or cached by an earlier run that was not busy), one
    line each. Neither is read when one device's measured peak is above the baseline beyond both
    noises: on logical CPUs (one thread each) one device can at best match it, so the baseline
    was measured low.

    `baseline` is `machine_baseline_rate()`: its 'noise' is its own relative spread.
    """
    runs = [(result.one_device, "one device"), (result.split, "split")]
    # only one device's peak is measured (the split's is that x k, a ceiling): it alone can show
    # the baseline low
    low = None if on_gpu() else baseline_below_peak(result.one_device, baseline, "one device's")
    if low:
        rates = ", ".join(f"{name} rate {format_rate(m.rate)}" for m, name in runs)
        return "\n".join(
            [f"{rates}: neither read against the baseline: {low}", *baseline_not_kept(baseline)]
        )
    lines = [baseline_sentence(m, baseline, name) for m, name in runs]
    return "\n".join(lines + baseline_not_kept(baseline))


def baseline_sentence(split: Measurement, baseline: dict, name: str = "split") -> str:
    """One run's rate (the split's, or `name`'s) against the usable cores' baseline, within both
    noises. Above it beyond the noise is a finding about threading: independent branches, one
    thread each, can get more from the cores than one chain split across them."""
    rate, whole = split.rate, baseline["flops_per_s"]
    own, base_noise = noise_of(split) / split.median, baseline_noise(baseline)
    relative = own + base_noise
    c = against_limit(rate, whole, relative)  # notebook 01's rule for a rate against it
    if not c.measurable and noisy_run(split):  # read 76: ±1.26 read as 'about as well'
        where = f"too noisy to check: {UNTESTED['noisy']}"
    elif not c.measurable:
        where = "no measurable difference"
    elif rate > whole and name == "split":
        where = (
            "measurably above it: its branches, one thread each, got more from these cores than "
            "TensorFlow's default threading on one chain (the baseline is a yardstick, not a "
            "ceiling; hypotheses: one matmul split across threads pays for the split, and a "
            "rate depends on the shapes, which the baseline's chain need not share)"
        )
    elif rate > whole:  # one thread above all the usable cores' threads: the baseline is off
        where = (
            "measurably above it, which one thread can at best roughly match: a check, not a "
            "result (the baseline may have been measured at a slower moment; "
            "d2l.machine_baseline_rate(refresh=True) measures it again)"
        )
    else:  # read 81: a busy run's own peak below a cached baseline says the same
        where = "measurably below it" + below_own_peak(
            split, baseline, why=", measured in this kernel now"
        )
    source = (
        " by an earlier run, read from the cache"
        if baseline.get("from_cache")
        else " by this run, in a separate process (not read from a cache)"
    )
    d = agreeing_digits(rate / whole, relative, c.measurable)  # read 142: 0.87 ±0.13 'below'
    return (
        f"{name} rate {format_rate(rate)} = {rate / whole:.{d}f} of the usable cores' baseline "
        f"{format_rate(whole)}{baseline_chain(baseline)} (measured "
        f"{baseline.get('measured_at', 'in this run')}{source}; "
        # the parts one digit past the total, so that they add up to it as printed
        # read 156: '±0.14 on the ratio' beside 0.44 read as a band around 0.44: it is the one
        # its gap to the baseline (1.00) is read against
        f"its gap to 1 read against ±{relative:.{d}f}: the run's {own:.{d - 1}%} + the "
        f"baseline's {base_noise:.{d - 1}%}): {where}"
    )


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class BranchResult(Reported):
    """The branched MLP on one device and with one branch per device, and the split run's trace."""

    branches: int
    one_device: Measurement
    split: Measurement
    trace: list  # timeline.Trace: the OpEvent rows of one split call
    kind: str = "logical CPU"
    cores: int = dataclasses.field(default_factory=usable_cores)

    @property
    def speedup(self) -> float:
        return self.one_device.median / self.split.median

    @property
    def speedup_noise(self) -> float:
        """The speedup's band: both times' noises over the split's time (`compare`'s band, as
        `ParallelResult.speedup_noise`), so it holds 1 exactly when the times do not differ."""
        return (noise_of(self.one_device) + noise_of(self.split)) / self.split.median

    @property
    def model(self) -> float | None:
        """The model's speedup of the split over one device (notebook 01's max(1, k/c))."""
        return model_speedup(self.branches, self.cores, self.kind)

    def against_model(self) -> Comparison | None:
        """The split's time against one device's time divided by the model's speedup."""
        if self.model is None:
            return None
        one = self.one_device
        want = one.median / self.model
        return Comparison(
            self.split.median, want, noise_of(self.split) + noise_of(one) / self.model
        )

    def _branch_devices(self) -> list[str]:
        """The devices with matmuls in the traced call, in order of first appearance."""
        return list(dict.fromkeys(r.device for r in self.trace if r.kind == "matmul"))

    def traced_busy(self) -> list[float] | None:
        """Every branch device's matmul busy seconds in the traced call; None when the trace
        cannot tell (incomplete, or fewer than two devices busy)."""
        return self._traced()[0]

    def traced_share(self) -> float | None:
        """How long the first two branch devices multiplied at the same time in the traced call,
        as a share of the shorter's busy time; None when the trace cannot tell."""
        lengths, together = self._traced()
        return None if lengths is None else together / min(lengths[:2])

    def _traced(self) -> tuple[list[float] | None, float]:
        """`traced_busy` and the first two devices' seconds at once, from one merge."""
        if incomplete_reason(self.trace):
            return None, 0.0
        busy, lengths, together = _both_busy(self.trace, self._branch_devices())
        return (lengths if len(busy) >= 2 and min(lengths) > 0 else None), together

    def _all_at_once(self) -> str:
        """Reads 129, 131: with more than two branches, how long all of them were in flight at
        once, and what that share means: never, rounds; more in flight than usable cores, not
        all computing at once (taking turns); a share between, a mix of the two."""
        busy = _both_busy(self.trace, self._branch_devices())[0]
        k = len(busy)
        if k < 3:
            return ""
        every = busy_seconds(functools.reduce(common_intervals, busy))
        share = every / min(map(busy_seconds, busy))
        said = f", and all {k} for {share:.0%} of the shortest"
        if every == 0:
            return said + (
                f" (never all {k} at once: at most {k - 1} in flight at a time, not all {k} "
                "taking turns on the cores; in rounds or staggered, which this share cannot tell)"
            )
        if self.kind == "logical CPU" and self.cores < k:
            said += (
                f" (while all {k} were in flight, more than the {cores_phrase(self.cores)}, they "
                "were not all computing at once: taking turns"
            )
            said += (
                ")"
                if f"{share:.0%}" == "100%"
                else (f"; for the rest at most {k - 1} at a time: a mix of the two)")
            )
        return said

    def traced_at_once(self, share: float) -> str:
        """Reads 105, 107: branches in flight at once in the traced call; each branch device's
        busy time there against one branch's share of one device's time (its time / k, with its
        noise), on both sides; and the traced branches' span against the timed split: what a
        trace can say about 'each ran slower', and what it leaves to hypotheses."""
        lengths = self.traced_busy()
        k = len(lengths)
        alone = self.one_device.median / self.branches
        noise = noise_of(self.one_device) / self.branches
        slower = sum(t > alone + noise for t in lengths)
        below = sum(t < alone - noise for t in lengths)
        rows = [r for r in self.trace if r.kind == "matmul"]
        span = max(r.end_s for r in rows) - min(r.start_s for r in rows)
        pair = "the branches" if k == 2 else f"the first two of its {k} branch devices"
        said = (
            "one call of this run, traced after its timing (not another cell's trace), had "
            f"{pair} in flight at the same time for {share:.0%} of the shorter{self._all_at_once()}"
            f"; its {k} branch "
            f"devices were busy for {', '.join(format_seconds(t) for t in lengths)}, against "
            f"{format_seconds(alone)} ±{format_seconds(noise)} for one branch's share of one "
            f"device's time (its time / {self.branches}; one traced call has no noise of its own)"
        )
        if slower == k:
            together = (  # read 113: the share is of the first two only
                "at once, not one after the other"
                if k == 2
                else "the first two at once (the others' overlap with them is not measured here)"
            )
            return (
                f"{said}: each ran slower than that beyond its noise, {together} (why: a "
                "hypothesis, sharing the cores or the memory bandwidth)"
            )
        which = (
            f"{slower} of {k} ran slower than that beyond its noise"
            if slower
            else (
                "none ran slower than that beyond its noise, so the trace does not show them slowed"
            )
        )
        if below:
            which += (
                f"; {below} of {k} below it beyond its noise (that share also holds one "
                "device's call cost and join, which a branch's matmuls do not: not separated "
                "here)"
            )
        rest = (
            f"the traced call's branch matmuls spanned {format_seconds(span)} from the first's "
            f"start to the last's end, and the timed split's {format_seconds(self.split.median)} "
        )
        if self.split.median - noise_of(self.split) > span:
            rest += (
                "is longer beyond its noise, so the rest went outside the branches' matmuls, or "
                "the timed calls differ from the traced one (hypotheses: the join, the "
                "hand-overs, the per-call cost, the profiler; not separated here)"
            )
        else:
            rest += "is within its noise of that span or shorter"
        return f"{said}: {which}; {rest}"

    @property
    def verdict(self) -> str:
        outcome = faster_or_slower(
            self.split, self.one_device, "one branch per device", "all branches on one device"
        )
        c = self.against_model()
        if c is None:
            return outcome + " (virtual GPUs share one chip: no model is checked)"
        where = f"model speedup {self.model:.2f}x for {plural(self.branches, 'branch')}"
        if self.kind == "logical CPU":
            where += f" on {cores_phrase(self.cores)}"
        if c.a_faster:
            return f"{outcome}; faster than the {where}: impossible, see the warnings"
        noisy = noisy_run(self.one_device) or noisy_run(self.split)
        if c.a_slower:  # slower than all branches on one device too: not missing overlap
            serial = compare(self.split, self.one_device).a_slower
            beyond = " beyond both runs' noise, wide as it is" if noisy else ""
            share = self.traced_share()
            if share is not None and share >= MOSTLY_AT_ONCE and self.cores == 1:
                # one core: in flight together is taking turns on it (read 71), and the model
                # already counts that sharing, so what is left is not explained here
                cause = (
                    "one call of this run, traced after its timing, had the branches in flight "
                    f"at the same time for {share:.0%} of the shorter, on one core, so taking "
                    "turns on it (which the model already counts); what makes the split slower "
                    "than that is not measured here (hypotheses: the join, and switching between "
                    "the branches' ops)"
                )
            elif share is not None and share >= MOSTLY_AT_ONCE:
                # the trace rules out "not busy at once"; its busy times say whether each
                # branch ran slower than alone (read 105)
                cause = self.traced_at_once(share)
            else:
                # read 171: the share that kept the trace's reading out, said (the worked
                # answer promises that reading past it)
                traced = (  # review: no 'shows' where the trace could not be read
                    " (one call of this run, traced after its timing, cannot say: "
                    + (
                        "the trace is incomplete)"
                        if incomplete_reason(self.trace)
                        else "fewer than two of its branch devices ran a matmul in it)"
                    )
                    if share is None
                    else " (one call of this run, traced after its timing, not another cell's "
                    "trace, shows each branch's busy time and the join's; its first two branches "
                    f"were in flight together for {percent_beside(share, MOSTLY_AT_ONCE)} of the "
                    f"shorter's busy time, under the {MOSTLY_AT_ONCE:.0%} from which this "
                    "sentence reads the trace)"
                )
                cause = f"{slower_cause(self.cores, serial)}{traced}"  # read 174: its own trace
            return (
                f"{outcome}; measured speedup {self.speedup:.2f}x, slower than the {where}"
                f"{beyond} ({self._model_band('beyond')}): {cause}"
            )
        if noisy:
            return (
                f"{outcome}; too noisy to check the {where}: {UNTESTED['noisy']}, and the "
                f"split's time is within their noise of the model's ({self._model_band('within')})"
            )
        c = self.against_model()
        faster = (  # read 163: 5.7% below the model's time read as 'holds' bare
            "; its time below the model's, within the noise: not read as faster"
            if c is not None and c.a < c.b
            else ""
        )
        return (
            f"{outcome}; measured speedup {self.speedup:.2f}x: the {where} holds "
            f"({self._model_band('within')}{faster})"
        )

    def against_rerun(self, other: BranchResult) -> str:
        """This run against another run of the same experiment (the panel's, at the same
        sliders), part by part: one verdict alone is this run's, not the machine's (read 89)."""
        if (self.branches, self.split.work) != (other.branches, other.split.work):
            return "not the same experiment (branches or work differ), so not compared"
        return (
            f"speedup {self.speedup:.2f}x ±{self.speedup_noise:.2f} here, {other.speedup:.2f}x "
            f"±{other.speedup_noise:.2f} in the other run (each ± the band that tests it against "
            "1: both times' noises over the split's time, notebook 04's rule; not the speedup's "
            "own spread, which is wider away from 1); "
            + parts_between_runs(
                [
                    ("one device", self.one_device, other.one_device),
                    ("one branch per device", self.split, other.split),
                ],
                # read 132: agreeing within the noise shows no change, not the same machine;
                # read 133: a clause that reads after 'so' and after 'too noisy to tell whether'
                "the two verdicts can be read together",
            )
        )

    def _model_band(self, where: str) -> str:
        """The numbers the model verdict compares, with the band it uses: the split's noise plus
        the model time's (one device's noise divided by the model's speedup)."""
        c = self.against_model()
        a, b, noise = (  # read 166: '6.48 ms vs the model's 6.48 ms', said below it
            times_within(c.a, c.b, c.noise)
            if where == "within"
            else (format_seconds(x) for x in (c.a, c.b, c.noise))
        )
        return (
            f"{a} vs the model's {b}, {where} the noise of {noise}: the split's plus one "
            f"device's / {self.model:.2f}"
        )

    def tables(self) -> list[Table]:
        rows = [
            [
                m.label,
                format_seconds(m.median),
                format_seconds(m.iqr),
                format_rate(m.rate),
                f"{m.rate / m.best_peak:.2f} of {format_rate(m.best_peak)}{m.above_peak_within}"
                if m.best_peak
                else "-",
            ]
            for m in (self.one_device, self.split)
        ]
        if self.model is not None:
            ideal = self.one_device.median / self.model
            model = f"model: one device / {self.model:.2f}"
            # its band: one device's noise divided by the same speedup
            band = f"±{format_seconds(noise_of(self.one_device) / self.model)}"
            rows.append([model, format_seconds(ideal), band, "-", "-"])
        flags = [f"{m.label}: {w}" for m in (self.one_device, self.split) for w in m.warnings]
        c = self.against_model()
        if c is not None and c.a_faster:
            flags.append(impossible(f"a split {c.ratio:.2f}x the model's time"))
        title = f"the seed's MLP, {plural(self.branches, 'branch')}"
        # the split's peak: one device's measured peak x the devices that can compute at once
        columns = ["run", "time", "IQR", "rate", "rate / its peak"]
        notes = [self.verdict]
        one, split = self.one_device, self.split
        if one.best_peak and split.best_peak:
            k = round(split.best_peak / one.best_peak)
            ceiling, peak = (  # k x its digits print the split's (a peak measured again: not k x)
                rate_and_share(split.best_peak, k)
                if math.isclose(split.best_peak, k * one.best_peak)
                else (format_rate(split.best_peak), format_rate(one.best_peak))
            )
            notes.append(
                f"rate / its peak: one device's matmul peak, measured in this kernel "
                f"({peak}, noise {noise_percent(one.peak_noise)}), and for the split "
                f"that peak x {k} = {ceiling}, the devices that can compute at once"
            )
        return [Table(title, columns, rows, notes, flags)]


def run_mlp_branches(
    batch: int,
    width: int,
    hidden: int,
    branches: int,
    progress: Callable[..., None] | None = None,
    in_one_graph: Callable | None = None,
    **measure_options,
) -> BranchResult:
    """Time the seed's MLP, its branches all on one device and one per device, in turns; trace.

    `in_one_graph(device_names, join, one_at_a_time)` builds the branched MLP's tf.function
    (default: the saved `mlp_branches_in_one_graph`). The join runs on the CPU (`d2l.cpu()`);
    the branches on the other set-up devices. Bad values and sizes that do not fit are refused
    before anything is built.
    """
    batch = require_count("batch (the 'batch size' slider)", batch, 1, MAX_WIDTH)
    width = require_count("width", width, 1, MAX_WIDTH)
    hidden = require_count("hidden (the 'hidden width' slider)", hidden, 1, MAX_WIDTH)
    join = cpu()
    others = [d for d in setup_devices() if d.name != join.name]
    branches = require_count(
        "branches (the 'branches' slider: devices besides the joining CPU)",
        branches,
        1,
        len(others),
    )
    if branches > hidden:
        raise ValueError(
            f"{branches} branches cannot split {hidden} hidden units: choose "
            f"hidden (the 'hidden width' slider) of at least {branches}"
        )
    devices = others[:branches]
    check_fits(
        mlp_bytes(batch, width, hidden),
        devices,
        f"a {batch}x{width} MLP with {hidden} hidden units (the 'batch size' and "
        "'hidden width' sliders)",
    )
    steps = Steps(progress, ROUNDS + 1)  # the rounds of timing, then the trace
    steps.say("building the model")
    x = tf.random.stateless_normal((batch, width), seed=(0, 1))
    weights = saved.branch_weights(width, hidden, branches)
    flops = mlp_flops(batch, width, hidden)
    build = in_one_graph or saved.mlp_branches_in_one_graph
    names = [d.name for d in devices]
    together = build([names[0]] * branches, join.name, one_at_a_time=True)
    split = build(names, join.name)
    peak = device_peak_rate(devices[0])
    # At most min(k, c) logical CPU devices compute at once: above that rate is impossible.
    at_once = at_once_here(branches, devices[0].kind)
    together_peak = at_once * peak
    # In turns (`measure_in_turns`): a load that changes between rounds slows both alike.
    timed = measure_in_turns(
        [
            (lambda: together(x, weights), "all branches on one device, one after another",
             {"flops": flops, "peak": peak}),
            (lambda: split(x, weights), f"one branch per device ({branches})",
             {"flops": flops, "peak": together_peak}),
        ],
        steps,
        ROUNDS,
        **measure_options,
    )  # fmt: skip
    steps.say("tracing one call of the split model")
    rows = trace(split, x, weights)
    steps.finish("the trace")
    kind = devices[0].kind
    return BranchResult(branches, timed[0], timed[1], rows, kind)


def graph_ops(branches: int) -> int:
    """Ops in the branched MLP's traced graph, about: 5 per branch, the join and its inputs."""
    return 5 * branches + 3


def estimate_seconds(batch, width, hidden, branches, peak, at_once) -> float:
    """Seconds `run_mlp_branches` takes, by `measure`'s own rules and this machine's record of them.

    One device runs the MLP at `peak` FLOP/s; the split runs `at_once` branches at the same
    time. Two graphs of about 5 ops per branch are built and traced, then each is measured, then
    the split is traced once (a warm-up call and the traced call; reading the trace grows with
    the graph, like tracing it).
    """
    one = max(call_seconds(mlp_flops(batch, width, hidden), peak), CALL_S)
    split = max(one / at_once, CALL_S)
    build = trace_seconds(graph_ops(branches))
    timed = interleaved_seconds(one, ROUNDS) + interleaved_seconds(split, ROUNDS)
    return timed + 2 * build + (2 * split + build)


def plot_branches(result: BranchResult):
    """Top: the timeline of one split call. Below: one device, the split and the model's time."""
    lanes = len({(r.device, r.lane) for r in result.trace})
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(10, 2.6 + 0.45 * lanes), height_ratios=[max(lanes, 2), 2]
    )
    plot_timeline(result.trace, f"one call, {plural(result.branches, 'branch')}", ax=top)
    labels = ["all on one device", f"one per device ({result.branches})"]
    runs = (result.one_device, result.split)
    times = [m.median * 1e3 for m in runs]
    quartiles = [
        statistics.quantiles(m.times, n=4, method="inclusive")
        if len(m.times) > 1
        else [m.median] * 3
        for m in runs
    ]
    errors = [
        [(m.median - q[0]) * 1e3 for m, q in zip(runs, quartiles, strict=True)],
        [(q[2] - m.median) * 1e3 for m, q in zip(runs, quartiles, strict=True)],
    ]
    bottom.barh(labels, times, xerr=errors, color=["tab:gray", "tab:blue"], height=0.5)
    if result.model is not None:
        ideal = times[0] / result.model
        bottom.axvline(ideal, c="tab:red", ls=":", label=f"model: one device / {result.model:.2f}")
        bottom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    bottom.invert_yaxis()
    bottom.set_xlim(left=0)
    bottom.set_xlabel("time per call (ms): median, whiskers from the first to the third quartile")
    fig.tight_layout()
    return fig


def mlp_panel(in_one_graph: Callable | None = None) -> Panel:
    """Notebook 03: the seed's MLP, branches on one device vs one per device, with its trace.

    `in_one_graph`: the notebook's `mlp_branches_in_one_graph` (default: the saved one).
    """
    devices = setup_devices()
    branch_devices = len(devices) - (1 if devices[0].name == cpu().name else 0)
    batch, width, hidden = (4096, 4096, 16384) if on_gpu() else (256, 512, 2048)
    sliders = {
        "batch": slider("batch size", batch, 16, 4 * batch, 16),
        "hidden": slider("hidden width", hidden, 128, 4 * hidden, 128),
        "branches": slider("branches (one per device)", min(2, branch_devices), 1, branch_devices),
    }
    kind = devices[-1].kind

    def experiment(batch, hidden, branches, progress):
        return run_mlp_branches(batch, width, hidden, branches, progress, in_one_graph)

    def estimate(batch, hidden, branches):
        peak = device_peak_rate(devices[-1])
        at_once = at_once_here(branches, kind)
        return estimate_seconds(batch, width, hidden, branches, peak, at_once) + DRAW_S

    return Panel(
        "The seed's two-layer MLP, split into branches",
        sliders,
        experiment,
        plot_branches,
        estimate,
    )
