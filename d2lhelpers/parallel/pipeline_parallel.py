"""Pipeline parallelism, GPipe-style forward: the layers cut into stages, microbatches in flight.

The model is a stack of L layers, h <- relu(h W_l + b_l). With p devices the layers are cut into
p stages of consecutive layers (uneven when p does not divide L), stage s on device s, and

    Y_i = F_{p-1}( ... F_1(F_0(X_i)) ... ),   i = 0 .. m-1,

where X is split along its first dimension into m microbatches X_i, F_s is stage s, and Y is the
Y_i in order. Activations are handed over once per stage boundary per microbatch: (p-1) m
hand-overs of a microbatch-sized block, far less than tensor parallelism's all-reduces.

Stage s may work on microbatch i only after stage s-1 has handed it over (data) and after it has
finished microbatch i-1 (a device does one thing at a time: an explicit control dependency,
because logical CPU devices would otherwise run several microbatches of one stage at once). All
m x p pieces sit in ONE tf.function, and TensorFlow's dependency tracker does the scheduling:
stage s works on microbatch i while stage s+1 works on microbatch i-1.
# ref: Huang et al., GPipe (arXiv:1811.06965), figure 2c.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Sequence

import tensorflow as tf

from d2lhelpers.collectives.costs import pipeline_bubble_fraction, pipeline_step_time
from d2lhelpers.core.checks import require_counts, require_measure_options, require_rate
from d2lhelpers.core.progress import Progress, Steps
from d2lhelpers.core.units import BYTES_PER_FLOAT, cores_phrase, device_name, device_names
from d2lhelpers.core.verdicts import LIKELY_CAUSES, fraction_flags, impossible, noise_of
from d2lhelpers.devices import Device, check_fits, select_devices
from d2lhelpers.parallel.common import (
    ParallelRun,
    input_batch,
    max_difference,
    offsets,
    on_one_device,
    place,
    split_sizes,
)
from d2lhelpers.timing.benchmark import Measurement, measure
from d2lhelpers.tracing.timeline import busy_intervals, busy_seconds, trace

HAND_OVER = "hand_over"
MAX_LAYERS = 256
MAX_PIECES = 4096  # microbatches x layers: each is a matmul in the one traced graph
BUBBLE_CAUSES = (
    LIKELY_CAUSES[0],
    "the one-device run of the same microbatches was slow (all the layers' weights do not fit "
    "the caches that one stage's share fits), so the busy time was measured high",
    LIKELY_CAUSES[2],
)

Layer = tuple[tf.Tensor, tf.Tensor]  # (W, b)


def stack_weights(width: int, n_layers: int, device: Device | str, seed: int = 0) -> list[Layer]:
    """`n_layers` width x width layers on `device`, He-scaled (activations stay ~1)."""
    require_counts(width=width, n_layers=n_layers)
    layers = []
    with tf.device(device_name(device)):
        for layer in range(n_layers):
            w = tf.random.stateless_normal((width, width), seed=(seed, 2 * layer))
            b = 0.1 * tf.random.stateless_normal((width,), seed=(seed, 2 * layer + 1))
            layers.append((w * (2 / width) ** 0.5, b))
    return layers


def dense_stack(x: tf.Tensor, layers: Sequence[Layer]) -> tf.Tensor:
    """x through every layer in turn, on whichever device the ops are placed."""
    for w, b in layers:
        x = tf.nn.relu(tf.linalg.matmul(x, w) + b)
    return x


def split_stages(layers: Sequence[Layer], devices: Sequence[Device | str]) -> list[list[Layer]]:
    """Consecutive layers cut into one stage per device (uneven: 10 layers on 4 -> 3 3 2 2)."""
    sizes = split_sizes(len(layers), len(devices), "layers")
    stages = []
    for (start, stop), device in zip(offsets(sizes), devices, strict=True):
        stages.append([(place(w, device), place(b, device)) for w, b in layers[start:stop]])
    return stages


def pipeline_forward(
    x: tf.Tensor,
    stages: Sequence[Sequence[Layer]],
    devices: Sequence[Device | str],
    microbatches: int,
) -> list[tf.Tensor]:
    """The outputs Y_0 .. Y_{m-1} of the m microbatches, in order (build inside a tf.function)."""
    names = device_names(devices)
    with tf.device(names[0]):
        pieces = tf.split(x, split_sizes(int(x.shape[0]), microbatches, "rows"))
    last_on_stage: list[tf.Tensor | None] = [None] * len(stages)
    outputs = []
    for piece in pieces:
        h = piece
        for s, (name, layers) in enumerate(zip(names, stages, strict=True)):
            after_previous = [] if last_on_stage[s] is None else [last_on_stage[s]]
            with tf.device(name), tf.control_dependencies(after_previous):
                if s > 0:  # named, so the hand-overs can be counted in the graph
                    h = tf.identity(h, name=HAND_OVER)
                h = dense_stack(h, layers)
            last_on_stage[s] = h
        outputs.append(h)
    return outputs


def pipeline_in_one_graph(devices: Sequence[Device | str], microbatches: int) -> Callable:
    """One tf.function for the whole pipeline: call it with (x, stages)."""
    return _pipeline_in_one_graph(device_names(devices), microbatches)


@functools.lru_cache(maxsize=32)
def _pipeline_in_one_graph(names: tuple[str, ...], microbatches: int) -> Callable:
    @tf.function
    def run(x, stages):
        return pipeline_forward(x, stages, names, microbatches)

    return run


def count_hand_overs(graph: tf.Graph) -> int:
    """Activations handed from one stage to the next in a traced pipeline graph."""
    pattern = re.compile(rf"(?:^|/){HAND_OVER}(?:_\d+)?$")
    return sum(bool(pattern.search(op.name)) for op in graph.get_operations())


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
    the busy time was mis-timed: `PipelineRun` flags it.
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


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class PipelineRun(ParallelRun):
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
    def bubble_floor(self) -> float:
        return bubble_floor(self.stages, self.microbatches, self.kind, self.cores)

    @property
    def bubble_noise(self) -> float:
        """How far the measured bubble could move: both times' relative noise, through 1 - b."""
        busy = self.microbatched_reference
        relative = noise_of(self.measurement) / self.time + noise_of(busy) / busy.median
        return (1 - self.measured_bubble) * relative

    @property
    def bubble_flags(self) -> list[str]:
        bubble = self.measured_bubble
        flags = fraction_flags(bubble, "the measured bubble")
        if not flags and bubble < self.bubble_floor - self.bubble_noise:
            flags.append(
                impossible(
                    f"the measured bubble of {bubble:.0%} is below the least possible "
                    f"{self.bubble_floor:.0%} by more than its noise (±{self.bubble_noise:.0%})",
                    BUBBLE_CAUSES,
                )
            )
        return flags

    @property
    def trusted(self) -> bool:
        return super().trusted and not self.bubble_flags

    def flags(self) -> list[str]:
        busy = self.microbatched_reference
        return [
            *super().flags(),
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
                f"measured bubble {self.measured_bubble:.0%} (±{self.bubble_noise:.0%}) of the "
                f"devices' time; GPipe model (p-1)/(m+p-1) = {self.model_bubble:.0%}"
            )
        if self.kind == "logical CPU" and p > self.cores:
            lines.append(
                f"{p} stages on {cores_phrase(self.cores)}: at most {self.cores} compute at once, "
                f"so the bubble cannot fall below {1 - self.cores / p:.0%} here"
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
    **measure_options,
) -> PipelineRun:
    """`n_layers` layers in `n_devices` stages, `batch` rows in `microbatches`, timed three ways.

    Measured: the whole batch at once on one device (the reference, for the speedup); the same
    microbatches on one device (the busy time, for the bubble); the pipeline (the step time).
    Inputs that are wrong or do not fit are refused before anything is allocated.
    """
    require_rate("device_peak", device_peak)
    require_measure_options(measure_options)
    devices, stage_layers = check_pipeline(width, batch, microbatches, n_devices, n_layers)

    layers = stack_weights(width, n_layers, devices[0])
    x = input_batch(batch, width, devices[0])
    flops = 2 * batch * width * width * n_layers
    one_device = on_one_device(dense_stack, devices[0])
    microbatched = pipeline_in_one_graph(devices[:1], microbatches)
    pipeline = pipeline_in_one_graph(devices, microbatches)
    stages = split_stages(layers, devices)
    calls = [
        ("one device", lambda: one_device(x, layers), 1),
        (f"{microbatches} microbatches on one device", lambda: microbatched(x, [layers]), 1),
        (f"pipeline on {n_devices}", lambda: pipeline(x, stages), n_devices),
    ]
    steps, timings = Steps(progress, len(calls)), []
    for label, call, k in calls:
        peak = k * device_peak if device_peak else None
        on_repeat = steps.start(label)
        timings.append(
            measure(call, label, flops=flops, peak=peak, on_repeat=on_repeat, **measure_options)
        )
        steps.finish(label)
    # In layer-times: the first microbatch passes all L layers, then the slowest stage paces.
    ideal_speedup = microbatches * n_layers / pipeline_step_time(stage_layers, microbatches)
    return PipelineRun(
        scheme="pipeline parallel",
        devices=list(device_names(devices)),
        kind=devices[0].kind,
        samples=batch,
        measurement=timings[2],
        reference=timings[0],
        ideal_speedup=ideal_speedup,
        max_error=max_difference(pipeline(x, stages), one_device(x, layers)),
        width=width,
        stage_layers=stage_layers,
        microbatches=microbatches,
        hand_overs=count_hand_overs(pipeline.get_concrete_function(x, stages).graph),
        microbatched_reference=timings[1],
    )


def trace_pipeline(width: int, batch: int, microbatches: int, n_devices: int, n_layers: int = 8):
    """One traced call of the pipeline: timeline rows, and the stage devices in order."""
    devices, _ = check_pipeline(width, batch, microbatches, n_devices, n_layers)
    layers = stack_weights(width, n_layers, devices[0])
    x = input_batch(batch, width, devices[0])
    rows = trace(pipeline_in_one_graph(devices, microbatches), x, split_stages(layers, devices))
    return rows, devices


def bubble_from_trace(rows, devices) -> float:
    """1 - (time the stages were busy) / (stages x the span from first to last op): idle share."""
    start = min(r.start_s for r in rows)
    span = max(r.end_s for r in rows) - start
    own = [r for r in rows if r.lane == "" and r.kind != "copy"]  # the stages' own work only
    busy = sum(busy_seconds(busy_intervals(own, device_name(d))) for d in devices)
    return measured_bubble(span, busy, len(devices))
