"""Notebook 07: the latency-throughput sweep of each layout beside its model, and a failure."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import tensorflow as tf

from d2lhelpers.core import checks as admission
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import device_names, format_rate, format_seconds, usable_cores
from d2lhelpers.core.verdicts import beats_ideal, compare, impossible, noise_of
from d2lhelpers.devices import on_gpu, select_devices
from d2lhelpers.lessons.l07_serving.runs import (
    SPLIT_LAYOUTS,
    ServingRun,
    capacity_model,
    check_layout_fits,
    decoder_config,
    run_serving,
    step_time,
)
from d2lhelpers.parallel.tensor_parallel import allreduce_sum
from d2lhelpers.serving.layouts import make_layout
from d2lhelpers.timing.benchmark import Measurement, measure
from d2lhelpers.timing.peaks import device_peak_rate

DEFAULT_LOADS = (
    0.3,
    0.7,
    1.1,
    1.5,
)  # offered load, as a fraction of the layout's measured capacity


def allreduce_time(n_devices: int, rows: int, width: int) -> Measurement:
    """One all-reduce of a [rows, width] block on the first n devices (TP pays 2 per layer)."""
    names = device_names(select_devices(n_devices))
    parts = []
    for name in names:
        with tf.device(name):
            parts.append(tf.random.stateless_normal((rows, width), seed=(0, 1)))
    run = tf.function(lambda *xs: allreduce_sum(xs, names))
    return measure(
        lambda: run(*parts), f"all-reduce of {rows}x{width} on {n_devices}", nbytes=4 * rows * width
    )


@dataclasses.dataclass
class LayoutSweep:
    """One layout: its measured step, its capacity, and one serving run per offered load."""

    layout: str
    step: Measurement
    slots: int
    tokens_per_request: int
    steps_per_request: int
    model_step_s: float
    runs: list[ServingRun]

    def capacity(self, step_s: float) -> float:
        """Generated tokens/s when every slot is always busy with a step of `step_s`."""
        return self.slots / step_s * self.tokens_per_request / self.steps_per_request

    @property
    def measured_capacity(self) -> float:
        return self.capacity(self.step.median)

    @property
    def model_capacity(self) -> float:
        return self.capacity(self.model_step_s)

    @property
    def saturation(self) -> float:
        """The most tokens/s any run reached: where the curve stops climbing."""
        return max(r.log.throughput for r in self.runs)


@dataclasses.dataclass
class LoadSweep(Reported):
    """Each layout's latency-throughput curve, its saturation, beside the model and the ideal."""

    n_devices: int
    one_device_step: Measurement
    allreduce: Measurement | None
    sweeps: list[LayoutSweep]
    on_gpu: bool
    one_device_flops: float  # of one step with one device's slots
    peak: float  # the device's measured peak, FLOP/s

    @property
    def compute_share(self) -> float:
        """How much of one device's step its arithmetic explains, at the measured peak."""
        return self.one_device_flops / self.peak / self.one_device_step.median

    def regime(self) -> str:
        """Whether a step is arithmetic or launching small ops: the model assumes the first."""
        share = self.compute_share
        step = format_seconds(self.one_device_step.median)
        if share > 1.2:
            return impossible(f"one step computes {share:.1f}x faster than the measured peak")
        if share < 0.5:
            return (
                f"A step here is launch-bound: its arithmetic explains {share:.0%} of its {step} "
                "at the measured peak; the rest is starting small ops, which several devices "
                "can do at once even when they share cores. The compute model does not apply "
                "well here; a wider model (the width slider) moves it towards compute-bound."
            )
        return f"A step here is compute-bound: arithmetic explains {share:.0%} of its {step}."

    @property
    def ideal_capacity(self) -> float:
        """n devices, each as fast as one device alone, no communication: n x one device."""
        return self.sweeps[0].capacity(self.one_device_step.median)

    def flags(self) -> list[str]:
        found = [
            f"{m.label}: {w}"
            for m in [self.one_device_step, self.allreduce, *(s.step for s in self.sweeps)]
            if m is not None
            for w in m.warnings
        ]
        for s in self.sweeps:
            if beats_ideal(s.step, self.one_device_step.median, noise_of(self.one_device_step)):
                found.append(
                    impossible(
                        f"{s.layout}'s step ({format_seconds(s.step.median)}) is faster than one "
                        f"device's ({format_seconds(self.one_device_step.median)}) with "
                        f"{self.n_devices}x the sequences"
                    )
                )
            if s.saturation > 1.15 * s.measured_capacity:
                found.append(
                    impossible(
                        f"{s.layout} served {format_rate(s.saturation, 'tokens/s')}, above its "
                        f"capacity {format_rate(s.measured_capacity, 'tokens/s')} "
                        "with every slot busy"
                    )
                )
        return found

    @property
    def verdict(self) -> str:
        best = max(self.sweeps, key=lambda s: s.saturation)
        others = [s for s in self.sweeps if s is not best]
        close = [s.layout for s in others if not compare(s.step, best.step).measurable]
        text = f"{best.layout} reached the highest throughput here, "
        text += format_rate(best.saturation, "tokens/s")
        if close:
            text += (
                f"; but its step time is not measurably different from {' and '.join(close)}'s, "
                "so this ranking may not repeat"
            )
        return text

    def tables(self) -> list[Table]:
        rows = []
        for s in self.sweeps:
            held = abs(s.step.median / s.model_step_s - 1) <= 0.25
            rows.append(
                [
                    s.layout,
                    format_seconds(s.step.median),
                    format_seconds(s.model_step_s),
                    format_rate(s.measured_capacity, "tok/s"),
                    format_rate(s.model_capacity, "tok/s"),
                    format_rate(s.saturation, "tok/s"),
                    "holds (within 25%)" if held else f"off: {s.step.median / s.model_step_s:.2f}x",
                ]
            )
        cols = ["layout", "step", "model step", "capacity", "model capacity", "saturation", "model"]
        ideal = format_rate(self.ideal_capacity, "tokens/s")
        verdicts = [
            f"ideal ({self.n_devices} x one device, no communication): {ideal}",
            self.regime(),
        ]
        sweep_rows = [
            [
                s.layout,
                f"{r.rate:.1f}",
                format_rate(r.log.throughput, "tok/s"),
                format_seconds(r.latency(50) or 0),
                format_seconds(r.latency(99) or 0),
                len(r.failed),
            ]
            for s in self.sweeps
            for r in s.runs
        ]
        return [
            Table(self.verdict, cols, rows, verdicts, self.flags()),
            Table(
                "each run",
                ["layout", "offered req/s", "throughput", "latency p50", "latency p99", "failed"],
                sweep_rows,
            ),
        ]


def run_load_sweep(
    n_devices: int = 2,
    layouts=SPLIT_LAYOUTS,
    loads=DEFAULT_LOADS,
    n_requests: int = 16,
    prompt_len: int = 8,
    n_out: int = 16,
    width: int = 64,
    layers: int = 2,
    slots_per_device: int = 4,
    progress: Callable | None = None,
) -> LoadSweep:
    """Each layout at offered loads (fractions of its measured capacity), beside its model."""
    config = decoder_config(width, layers, prompt_len, n_out)
    devices = select_devices(admission.require_count("devices", n_devices, 2))
    loads = [float(x) for x in loads]
    if not loads or any(not 0 < x <= 10 for x in loads):
        raise ValueError("offered loads must be fractions of capacity in (0, 10], at least one")
    layouts = list(layouts)
    for name in layouts:
        if name not in SPLIT_LAYOUTS:
            raise ValueError(f"layouts must be among {SPLIT_LAYOUTS}, got {name!r}")
        check_layout_fits(name, config, devices, slots_per_device * n_devices)
    total, done = len(layouts) * (len(loads) + 1) + 1, 0

    def report(status):
        nonlocal done
        done += 1
        if progress:
            progress(done, total, status)

    one = step_time(make_layout("one device", config, devices[:1], slots_per_device))
    report("measured one device's step")
    reduce = allreduce_time(n_devices, slots_per_device * n_devices, width)
    model = capacity_model(one.median, n_devices, layers, reduce.median, usable_cores(), on_gpu())
    steps_per_request = prompt_len + n_out - 1
    sweeps = []
    for name in layouts:
        layout = make_layout(name, config, devices, slots_per_device * n_devices)
        step = step_time(layout)
        report(f"{name}: measured its step")
        capacity = layout.slots / step.median / steps_per_request  # requests/s, all slots busy
        runs = []
        for i, fraction in enumerate(loads, start=1):
            runs.append(
                run_serving(
                    name,
                    n_devices,
                    fraction * capacity,
                    n_requests,
                    prompt_len,
                    n_out,
                    width,
                    layers,
                    slots_per_device,
                    max_wall_s=max(5.0, 4 * n_requests / capacity),
                    progress=None,
                )
            )
            report(f"{name}: load {i} of {len(loads)} ({fraction:.0%} of capacity)")
        sweeps.append(
            LayoutSweep(name, step, layout.slots, n_out, steps_per_request, model[name], runs)
        )
    flops = slots_per_device * config.flops_per_token(config.max_len)
    peak = device_peak_rate(devices[0])
    return LoadSweep(n_devices, one, reduce, sweeps, on_gpu(), flops, peak)


@dataclasses.dataclass
class FailureRun(Reported):
    """The same load on replicas and on a tensor-parallel group, one device lost mid-run."""

    runs: list[ServingRun]
    fail_at_s: float

    @property
    def verdict(self) -> str:
        parts = []
        for r in self.runs:
            n = len(r.log.requests)
            parts.append(
                f"{r.log.layout}: {len(r.finished)} of {n} finished, "
                f"{len(r.failed_in_flight)} failed in flight, "
                f"{len(r.failed) - len(r.failed_in_flight)} refused after"
                + (
                    f", {sum(q.rerouted for q in r.log.requests)} re-routed"
                    if r.log.layout == "replicas"
                    else ""
                )
            )
        return f"one device lost at {self.fail_at_s:.2f} s — " + "; ".join(parts)

    def tables(self) -> list[Table]:
        rows = [
            [
                r.log.layout,
                len(r.finished),
                len(r.failed_in_flight),
                len(r.failed) - len(r.failed_in_flight),
                sum(q.rerouted for q in r.log.requests),
                format_seconds(r.log.failover_s) if r.log.failed_at_s is not None else "-",
                format_rate(r.log.throughput, "tok/s"),
            ]
            for r in self.runs
        ]
        cols = [
            "layout",
            "finished",
            "failed in flight",
            "refused after",
            "re-routed",
            "failover pause",
            "throughput",
        ]
        return [Table(self.verdict, cols, rows)]


def run_serving_failure(
    n_devices: int = 2,
    rate: float | None = None,
    n_requests: int = 24,
    fail_after: float = 0.3,
    width: int = 64,
    n_out: int = 16,
    progress: Callable | None = None,
) -> FailureRun:
    """Replicas and tensor parallel under the same load; the last device lost mid-run."""
    admission.require_count("devices", n_devices, 2)
    if not 0 < fail_after < 1:
        raise ValueError("fail_after is the share of the arrivals after which a device is lost")
    runs = []
    probe = make_layout(
        "replicas", decoder_config(width, 2, 8, n_out), select_devices(n_devices), 4 * n_devices
    )
    step = step_time(probe, max_runs=10).median
    rate = rate or 0.6 * probe.slots / step / (8 + n_out - 1)
    fail_at = fail_after * n_requests / rate
    for i, name in enumerate(("replicas", "tensor parallel"), start=1):
        runs.append(
            run_serving(
                name,
                n_devices,
                rate,
                n_requests,
                8,
                n_out,
                width,
                fail_at_s=fail_at,
                max_wall_s=max(5.0, 6 * n_requests / rate),
            )
        )
        if progress:
            progress(i, 2, f"{name}: one device lost at {fail_at:.2f} s")
    return FailureRun(runs, fail_at)
