"""Pipeline parallelism measured: inputs checked first, then the pipeline timed three ways.

The scheme is notebook 04's saved code (`parallel.pipeline_parallel`, GPipe's microbatch
schedule); `run_pipeline_parallel` and `trace_pipeline` take the notebook's own
`pipeline_in_one_graph`, so an edited cell changes what is measured. The model is a stack of L
layers cut into p stages; X is cut into m microbatches. Activations are handed over once per
stage boundary per microbatch: (p-1) m hand-overs of a microbatch-sized block, far less than
tensor parallelism's all-reduces, but a stage waits for its first microbatch and idles after its
last: the bubble, (p-1)/(m+p-1) of the devices' time for equal stages.
# ref: Huang et al., GPipe (arXiv:1811.06965), section 2.2 and figure 2c.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from d2lhelpers.collectives.costs import pipeline_bubble_fraction, pipeline_step_time
from d2lhelpers.core.checks import require_counts, require_measure_options, require_rate
from d2lhelpers.core.progress import Progress
from d2lhelpers.core.units import (
    BYTES_PER_FLOAT,
    cores_phrase,
    device_name,
    device_names,
    enough_digits,
    format_seconds,
)
from d2lhelpers.core.verdicts import (
    LIKELY_CAUSES,
    UNTESTED,
    compare,
    fraction_flags,
    impossible,
    noise_of,
    noisy_run,
)
from d2lhelpers.devices import Device, check_fits, select_devices
from d2lhelpers.parallel import pipeline_parallel
from d2lhelpers.parallel.model import (
    dense_stack,
    input_batch,
    max_difference,
    on_one_device,
    split_sizes,
    stack_weights,
)
from d2lhelpers.parallel.result import REACHABLE_IS, ParallelResult, measure_calls
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.tracing.timeline import (
    OpEvent,
    busy_intervals,
    busy_seconds,
    overlap_seconds,
    trace,
)

MAX_LAYERS = 256
MAX_PIECES = 4096  # microbatches x layers: each is a matmul in the one traced graph
BUBBLE_CAUSES = (
    LIKELY_CAUSES[0],
    "the one-device run of the same microbatches was slow (all the layers' weights do not fit "
    "the caches that one stage's share fits), so the busy time was measured high",
    LIKELY_CAUSES[2],
)


def measured_bubble(step_time: float, busy_time: float, stages: int) -> float:
    """The share of the devices' time spent idle in one pipelined step, from timings.

    busy_time: the same microbatches through all layers on ONE device, one after the other — the
    work every device together must do (each microbatch meets each layer once). The p devices
    have p x step_time between them, so

        bubble = 1 - busy_time / (p x step_time).

    With p equal stages of time t per microbatch, GPipe takes step_time = (m+p-1) t and
    busy_time = m p t, so bubble = (p-1)/(m+p-1), the model's value. Measured, it also holds
    everything the model leaves out: hand-overs, uneven stages, and devices that are not really
    separate (p logical CPUs on c < p cores cannot all compute at once: the measured bubble
    cannot fall below 1 - c/p there). Below the model beyond its noise, or negative, the step or
    the busy time was mis-timed: `PipelineResult` flags it.
    """
    if step_time <= 0 or busy_time <= 0:
        raise ValueError(f"times must be positive, got {step_time} and {busy_time}")
    require_counts(stages=stages)
    return 1 - busy_time / (stages * step_time)


def bubble_floor(stages: int, microbatches: int, kind: str, cores: int) -> float:
    """The least bubble possible: GPipe's model, or 1 - cores/p for logical CPUs on fewer cores."""
    model = pipeline_bubble_fraction(stages, microbatches)
    if kind == "logical CPU" and stages > cores:
        return max(model, 1 - cores / stages)
    return model


def band_words(down: float, up: float, digits: int = 0) -> str:
    """'±27%', or '-27%/+17%' when a band's two sides differ at the printed digits."""
    down_s, up_s = (f"{100 * x:.{digits}f}%" for x in (down, up))
    return f"±{down_s}" if down_s == up_s else f"-{down_s}/+{up_s}"


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class PipelineResult(ParallelResult):
    """A measured pipeline: also its stages, microbatches, hand-overs and the bubble they leave."""

    width: int = 0
    stage_layers: list[int] = dataclasses.field(default_factory=list)
    microbatches: int = 1
    hand_overs: int = 0  # counted in the traced graph
    microbatched_reference: Measurement | None = None  # the microbatches on one device: busy time

    @property
    def stages(self) -> int:
        return len(self.stage_layers)

    @property
    def measured_bubble(self) -> float:
        return measured_bubble(self.time, self.microbatched_reference.median, self.stages)

    @property
    def model_bubble(self) -> float:
        """GPipe's (p-1)/(m+p-1) for equal stages, from the cost models."""
        return pipeline_bubble_fraction(self.stages, self.microbatches)

    @property
    def reachable_is(self) -> str:
        """The split's model with its schedule's idle time in it: the stages' layer times, the
        first microbatch through every layer, then the slowest stage pacing (read 156: '1.78x'
        beside 'hand-overs free' alone read as 2 devices less nothing)."""
        return (
            f"{REACHABLE_IS}; with the schedule's idle time, GPipe's bubble "
            f"{self.model_bubble:.1%} for equal stages"
        )

    @property
    def bubble_floor(self) -> float:
        return bubble_floor(self.stages, self.microbatches, self.kind, self.cores)

    @property
    def bubble_noise(self) -> float:
        """How far the measured bubble could move: down to the bubble of the step time less its
        noise and the busy time plus its own, (1 - b) (r_t + r_b) / (1 - r_t). So the bubble is
        above a level beyond its noise exactly when the step time is above that level's time
        beyond both noises, as `compare` reads two times (read 75: 54.55% ± 4.55% 'above' 50%
        beside times 6.55 and 5.96 ms that compare read as within the noise)."""
        r_t, r_b = self._relative_noises()
        if r_t >= 1:
            return float("inf")
        return (1 - self.measured_bubble) * (r_t + r_b) / (1 - r_t)

    @property
    def bubble_noise_up(self) -> float:
        """How far the bubble could move up: the step time plus its noise, the busy time less
        its own, (1 - b) (r_t + r_b) / (1 + r_t), narrower than `bubble_noise`. A level above the
        bubble by more than this is above it beyond the noise, as `compare` reads the two times
        (read 85: 27% '±27%' called 'within its noise' of 50%, whose time was beyond both)."""
        r_t, r_b = self._relative_noises()
        return (1 - self.measured_bubble) * (r_t + r_b) / (1 + r_t)

    def _relative_noises(self) -> tuple[float, float]:
        busy = self.microbatched_reference
        return noise_of(self.measurement) / self.time, noise_of(busy) / busy.median

    def within_bubble_noise(self, level: float) -> bool:
        """Whether `level` lies inside the bubble's band, down `bubble_noise`, up `_up`."""
        return (
            self.measured_bubble - self.bubble_noise
            <= level
            <= self.measured_bubble + self.bubble_noise_up
        )

    def against_rerun(self, other: ParallelResult) -> str:
        """The speedups against each other (`ParallelResult.against_rerun`), then the bubbles:
        two runs whose bubbles' bands do not meet place the bubble differently, and each run's
        reading of it (against the model and 1 - 1/p) holds for its own run only (read 105: 48%
        "taking turns" in one run, 29% "overlapped" in the next)."""
        if not isinstance(other, PipelineResult) or other.microbatches != self.microbatches:
            return f"{self.label} and {other.label}: not the same experiment, so not compared"
        said = super().against_rerun(other)
        if not (
            self.comparable(other) and self.both_results(other) and self.stages and other.stages
        ):
            return said
        bubbles = (
            f"their bubbles: {self.measured_bubble:.1%} {self.band_text(1)} in one run, "
            f"{other.measured_bubble:.1%} {other.band_text(1)} in the other"
        )
        # read 175: 49.1% compared, beside a least possible of 50% (a flagged bubble makes its
        # run not a result, above); below it as printed here, to 0.1%, inside the noise
        below = [r for r in (self, other) if round(r.measured_bubble, 3) < round(r.bubble_floor, 3)]
        if below:
            return (
                f"{said}; {bubbles}: a bubble below its least possible {below[0].bubble_floor:.0%} "
                "is not a result, so they are not compared"
            )
        # What both bands allow; empty when they do not meet.
        top = min(r.measured_bubble + r.bubble_noise_up for r in (self, other))
        bottom = max(r.measured_bubble - r.bubble_noise for r in (self, other))
        if top < bottom:
            return (
                f"{said}; {bubbles}: their bands do not meet, so the two runs place the bubble "
                "differently, and each run's reading of it (against the model and 1 - 1/p) holds "
                "for that run only"
            )
        said = (
            f"{said}; {bubbles}: their bands meet (both allow {max(bottom, 0):.1%} to {top:.1%}), "
            "so the runs do not disagree on it beyond their noise"
        )
        turns = 1 - 1 / self.stages
        holds = [r.within_bubble_noise(turns) for r in (self, other)]
        if holds[0] != holds[1]:
            said += (
                f"; against {turns:.0%} = 1 - 1/p one run's band holds it and the other's lies "
                f"{'below' if top < turns else 'above'} it: each reads its own run"
            )
        return said

    def band_text(self, digits: int = 0) -> str:
        """The bubble's band as printed (`band_words`); one that reaches below 0 stops at 0 and
        says so (read 107: '39% -46%/+20%')."""
        if self.bubble_noise >= self.measured_bubble:
            down = max(self.measured_bubble, 0.0)
            return f"{band_words(down, self.bubble_noise_up, digits)} (its band reaches 0)"
        return band_words(self.bubble_noise, self.bubble_noise_up, digits)

    def bubble_text(self, template: str = "{b} {n}") -> str:
        """The measured bubble and its noise, in whole percent, or with the decimals (up to 4)
        that show from the printed digits whether it is above the least possible beyond its
        noise (read 69: "55% ± 5%" above 50% "beyond its noise"; read 75: 54.55% ± 4.55%)."""
        bubble, noise, floor = self.measured_bubble, self.bubble_noise, self.bubble_floor
        if math.isinf(noise):  # read 80: '60% ± inf%'
            return f"{bubble:.0%} (no band: the step's runs spread by more than their median)"
        beyond = bubble > floor + noise

        def reads(d: int) -> bool:
            b, n, f = (round(100 * x, d) for x in (bubble, noise, floor))
            return (round(b - f, d) > n) == beyond

        d = enough_digits(reads, 0, 3, past=4)
        return template.format(b=f"{round(100 * bubble, d):.{d}f}%", n=self.band_text(d))

    @property
    def below_floor(self) -> bool:
        """The bubble below the least possible as printed (in whole percent), inside its noise
        (beyond it, `bubble_flags` flags it): better than the run allows, so not a result, as
        every share above its ceiling inside the noise is not one."""
        return not self.bubble_flags and self.measured_bubble < self.bubble_floor - 0.005

    @property
    def bubble_flags(self) -> list[str]:
        bubble = self.measured_bubble
        flags = fraction_flags(bubble, "the measured bubble")
        if not flags and bubble < self.bubble_floor - self.bubble_noise_up:
            flags.append(
                impossible(
                    f"the measured bubble of {bubble:.0%} is below the least possible "
                    f"{self.bubble_floor:.0%} by more than its noise (+{self.bubble_noise_up:.0%})",
                    BUBBLE_CAUSES,
                )
            )
        return flags

    @property
    def bubble_reading(self) -> str:
        """The bubble (from times) against the model and against 1 - 1/p, the idle share of p
        stages taking turns: whether the pipeline gained any time from overlapping its stages.
        Whether the stages overlapped at all is a trace's to say (a stage slowed by sharing
        cores can overlap and still gain nothing)."""
        bubble, noise, p = self.measured_bubble, self.bubble_noise, self.stages
        floor, serial = self.bubble_floor, 1 - 1 / p
        near_floor, near_serial = bubble <= floor + noise, self.within_bubble_noise(serial)
        bound = "the model held"
        if floor > self.model_bubble:  # fewer cores than stages: not GPipe's bound
            bound = (
                f"the cores' bound 1 - c/p = {floor:.0%} held (GPipe's "
                f"{self.model_bubble:.0%} needs a core per stage)"
            )
        if self.below_floor:  # read 80: a bubble below what the run allows is no result
            said = (
                f"below the least possible {floor:.0%}, inside its noise: not a result (a bubble "
                "cannot be smaller; too noisy to tell which time is off)"
            )
            if p > 1 and floor >= serial:
                said += (
                    f" (here the least possible is {serial:.0%} = 1 - 1/p: the stages take turns)"
                )
            return said
        if p > 1 and near_floor and near_serial and floor < serial:
            return (
                f"within its noise of both the least possible {floor:.0%} and {serial:.0%} = "
                f"1 - 1/p (stages taking turns): this run cannot tell them apart"
            )
        if near_floor:
            # read 157: the least possible printed, and whose noise (not the model's)
            where = f"within the bubble's noise of the least possible {floor:.0%}"
            # the rule every notebook reads a model by (core.verdicts.model_test): never held
            # on a noisy run
            noisy = noisy_run(self.measurement) or noisy_run(self.microbatched_reference)
            said = (
                f"{where}: too noisy to check ({UNTESTED['noisy']})"
                if noisy
                else f"{where}: {bound}"
            )
        else:
            said = (
                f"above the least possible {floor:.0%} beyond its noise: the model, which counts "
                "only the fill and the drain, does not account for this bubble"
            )
        if p > 1 and near_floor and floor >= serial:  # one core: the bound is taking turns
            said += f" (here the least possible is {serial:.0%} = 1 - 1/p: the stages take turns)"
        if p > 1 and not near_floor and near_serial:
            said += (
                f"; within its noise of {serial:.0%} = 1 - 1/p, the idle share of {p} stages "
                "taking turns: this run cannot show any time gained from overlapping them "
                "(whether they overlapped is the trace's to say)"
            )
        elif p > 1 and bubble > serial + noise:
            said += (
                f"; above {serial:.0%} = 1 - 1/p beyond its noise: slower than the {p} stages "
                "taking turns would be, so something else cost time (shared cores, the "
                "hand-overs and another program are candidates)"
            )
        elif p > 1 and not near_serial and floor < serial:  # read 95: always placed against it
            said += (
                f"; below {serial:.0%} = 1 - 1/p beyond its noise: faster than the {p} stages "
                "taking turns would be, so overlapping them gained time (against the "
                "microbatches' busy time on one device, the bubble's yardstick, not one device's "
                "whole batch; which ops ran at once is the trace's to say)"
            )
        return said

    @property
    def yardstick_flag(self) -> str | None:
        """The microbatches on one device faster than the whole batch on it beyond both noises:
        the same work on the same device, so the one-device time every speedup here is read
        against is in doubt (read 56: 2.18x, printed bare in the speedup column)."""
        busy, one = self.microbatched_reference, self.reference
        c = compare(busy, one)
        if not c.a_faster:
            return None
        return (
            f"the {self.microbatches} microbatches on one device took {format_seconds(c.a)} "
            f"against {format_seconds(c.b)} for the whole batch on the same device: "
            f"{1 / c.ratio:.2f}x faster, beyond both noises ({format_seconds(c.noise)}). It is "
            "the same work on the same device, so the one-device time is in doubt as the "
            "yardstick: it was measured slow (the machine busier during it), or the smaller "
            "matmuls ran faster per FLOP (hypotheses, not measured). No speedup against one "
            "device here is read as a result; the bubble reads the pipeline against the "
            "microbatches' own time, not the one-device time"
        )

    @property
    def trusted(self) -> bool:
        return super().trusted and not self.bubble_flags and not self.yardstick_flag

    @property
    def bubble_trusted(self) -> bool:
        """Whether the bubble can be read: the split computed the right thing and the bubble is
        not flagged. The yardstick's doubt does not reach it (the bubble reads the pipeline
        against the microbatches' own time, read 91), nor does a speedup above the reachable."""
        return self.matches and not self.bubble_flags

    def flags(self) -> list[str]:
        busy = self.microbatched_reference
        return [
            *super().flags(),
            *[flag for flag in [self.yardstick_flag] if flag],
            *self.bubble_flags,
            *(f"{busy.label}: {w}" for w in busy.warnings),
        ]

    def details(self) -> list[str]:
        p, m = self.stages, self.microbatches
        lines = [
            f"{p} stages of {self.stage_layers} layers, {m} microbatches, {self.hand_overs} "
            f"hand-overs (counted in the graph) of a {math.ceil(self.samples / m)}x{self.width} "
            "block"
        ]
        if self.bubble_flags:
            lines.append("measured bubble: flagged, not a result (see the warning)")
        else:
            lines.append(
                f"measured bubble {self.bubble_text('{b} ({n})')} of the "
                f"devices' time; GPipe model (p-1)/(m+p-1) = {self.model_bubble:.0%}: "
                + self.bubble_reading
            )
        if self.kind == "logical CPU" and p > self.cores:
            lines.append(
                f"{p} stages on {cores_phrase(self.cores)}: at most {self.cores} compute at once, "
                f"so the bubble cannot fall below {1 - self.cores / p:.0%} here in the model "
                "(its floor: a stage's ops no faster than in the one-device run; a split may beat "
                "it by cache effects, a hypothesis, and below it beyond the noise is flagged)"
            )
        return [*lines, *super().details()]

    def rows(self) -> list[tuple]:
        busy = self.microbatched_reference.median
        one, scheme, reachable = super().rows()
        busy_row = (
            f"the {self.microbatches} microbatches on one device (busy time)",
            busy,
            self.samples / busy,
            self.reference_time / busy,
            self.microbatched_reference,
        )
        return [one, busy_row, scheme, reachable]


def stage_bytes(width: int, stage_layers: int, batch: int) -> int:
    """A stage's weights, and every microbatch's output it hands on (kept until the step ends)."""
    return BYTES_PER_FLOAT * (stage_layers * (width * width + width) + 2 * batch * width)


def check_pipeline(
    width: int, batch: int, microbatches: int, n_devices: int, n_layers: int = 8
) -> tuple[list[Device], list[int]]:
    """Validate a pipeline run before anything is allocated: (devices, layers per stage)."""
    require_counts(
        width=width, batch=batch, microbatches=microbatches, n_devices=n_devices, n_layers=n_layers
    )
    devices = select_devices(n_devices)
    if n_layers > MAX_LAYERS:
        raise ValueError(f"n_layers must be at most {MAX_LAYERS}, got {n_layers}")
    stage_layers = split_sizes(n_layers, n_devices, "layers")
    if microbatches > batch:
        raise ValueError(
            f"microbatches: at most {batch} for a batch of {batch} (each microbatch needs a "
            f"row), got {microbatches}"
        )
    if microbatches * n_layers > MAX_PIECES:
        raise ValueError(
            f"microbatches x n_layers = {microbatches * n_layers} matmuls in one graph: at most "
            f"{MAX_PIECES}, so at most {MAX_PIECES // n_layers} microbatches for {n_layers} layers"
        )
    check_fits(stage_bytes(width, n_layers, batch), devices[:1], "the one-device reference")
    what = f"a stage of {max(stage_layers)} {width}x{width} layers on each device"
    check_fits(stage_bytes(width, max(stage_layers), batch), devices, what)
    return devices, stage_layers


def run_pipeline_parallel(
    width: int,
    batch: int,
    microbatches: int,
    n_devices: int,
    n_layers: int = 8,
    progress: Progress | None = None,
    device_peak: float | None = None,
    in_one_graph: Callable | None = None,
    **measure_options,
) -> PipelineResult:
    """`n_layers` layers in `n_devices` stages, `batch` rows in `microbatches`, timed three ways.

    Measured: the whole batch at once on one device (the reference, for the speedup); the same
    microbatches on one device (the busy time, for the bubble); the pipeline (the step time).
    `in_one_graph(layers, device_names, microbatches)` builds the pipeline's tf.function (default:
    the saved `pipeline_in_one_graph`). Inputs that are wrong or do not fit are refused before
    anything is allocated.
    """
    require_rate("device_peak", device_peak)
    require_measure_options(measure_options)
    devices, stage_layers = check_pipeline(width, batch, microbatches, n_devices, n_layers)
    build = in_one_graph or pipeline_parallel.pipeline_in_one_graph
    names = list(device_names(devices))

    layers = stack_weights(width, n_layers, names[0])
    x = input_batch(batch, width, names[0])
    flops = 2 * batch * width * width * n_layers
    one_device = on_one_device(dense_stack, names[0])
    microbatched = build(layers, names[:1], microbatches)
    pipeline = build(layers, names, microbatches)
    calls = [
        ("one device", lambda: one_device(x, layers), 1),
        (f"{microbatches} microbatches on one device", lambda: microbatched(x), 1),
        (f"pipeline on {n_devices}, {microbatches} microbatches", lambda: pipeline(x), n_devices),
    ]
    timings = measure_calls(calls, flops, device_peak, progress, **measure_options)
    # In layer-times: the first microbatch passes all L layers, then the slowest stage paces.
    ideal_speedup = microbatches * n_layers / pipeline_step_time(stage_layers, microbatches)
    graph = pipeline.get_concrete_function(x).graph
    return PipelineResult(
        scheme="pipeline parallel",
        devices=names,
        kind=devices[0].kind,
        samples=batch,
        measurement=timings[2],
        reference=timings[0],
        ideal_speedup=ideal_speedup,
        max_error=max_difference(pipeline(x), one_device(x, layers)),
        width=width,
        stage_layers=stage_layers,
        microbatches=microbatches,
        hand_overs=pipeline_parallel.count_hand_overs(graph),
        microbatched_reference=timings[1],
    )


def trace_pipeline(
    width: int,
    batch: int,
    microbatches: int,
    n_devices: int,
    n_layers: int = 8,
    in_one_graph: Callable | None = None,
    calls: int = 3,
) -> tuple[list[list[OpEvent]], list[str]]:
    """`calls` traced calls of the pipeline: each call's timeline rows, and the stage devices."""
    require_counts(calls=calls)
    devices, _ = check_pipeline(width, batch, microbatches, n_devices, n_layers)
    names = list(device_names(devices))
    build = in_one_graph or pipeline_parallel.pipeline_in_one_graph
    pipeline = build(stack_weights(width, n_layers, names[0]), names, microbatches)
    x = input_batch(batch, width, names[0])
    return [trace(pipeline, x, warmup=i == 0) for i in range(calls)], names


def stages_together_from_trace(rows: list[OpEvent], devices: list[str]) -> float | None:
    """How long the first two stages had their own ops in flight at the same time, as a share of
    the shorter's busy time (None with fewer than two busy stages): what an idle share cannot
    tell, stages that took turns from stages that overlapped and each ran slower."""
    own = [r for r in rows if r.lane == "" and r.kind != "copy"]
    busy = [busy_intervals(own, device_name(d)) for d in devices[:2]]
    shorter = min((busy_seconds(b) for b in busy), default=0.0)
    if len(busy) < 2 or shorter <= 0:
        return None
    return overlap_seconds(*busy) / shorter


def bubble_from_trace(rows: list[OpEvent], devices: list[str]) -> float:
    """1 - (time the stages were busy) / (stages x the span from first to last op): idle share."""
    start = min(r.start_s for r in rows)
    span = max(r.end_s for r in rows) - start
    own = [r for r in rows if r.lane == "" and r.kind != "copy"]  # the stages' own work only
    busy = sum(busy_seconds(busy_intervals(own, device_name(d))) for d in devices)
    return measured_bubble(span, busy, len(devices))
