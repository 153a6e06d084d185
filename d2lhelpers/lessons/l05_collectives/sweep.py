"""Notebook 05: TensorFlow's all-reduce timed per message size, and the alpha-beta model's
predictions of the sizes it did not see.

A fit of t(S) = alpha + S / beta gives:
- alpha: the fixed cost of one call: launching one function piece per device, the ranks
  finding each other, the first chunk. NCCL on NVLink needs a few µs per step; on logical CPUs
  the whole call's start-up is about a millisecond, and grows with the number of devices.
- beta: S / t, the rate at which the ring gets S bytes per device reduced (NCCL-tests' "algbw").
  Its bus bandwidth B = beta * 2(n-1)/n is the rate each rank's "link" carried: on logical CPUs
  the rate at which shared cores copy and add in RAM, set beside one device's own copy and add.

The model must predict, not only fit: alpha comes from a tiny message alone, beta from the
largest size alone, and every other size is predicted; separately, a least-squares fit on every
other size predicts the sizes it did not see. It holds while the "link" keeps one speed: above
32 MiB every new tensor costs page faults (`FRESH_PAGES_BYTES`), and a beta taken there is 2-3x
too slow for the sizes below.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt

from d2lhelpers.collectives.costs import AlphaBeta, Residual, bus_bandwidth_bound_s
from d2lhelpers.collectives.tf_allreduce import (
    ALLREDUCE_BUFFERS,
    DEFAULT_SIZES,
    FRESH_PAGES_BYTES,
    TINY_BYTES,
    allreduce_in_one_graph,
    allreduce_inputs,
    allreduce_sizes,
    alpha_beta_models,
    local_copy_and_add,
    require_message_fits,
)
from d2lhelpers.core.checks import require_count, require_measure_options
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import format_bytes, format_rate, format_seconds
from d2lhelpers.core.verdicts import LIKELY_CAUSES, beats_ideal, impossible, noise_of
from d2lhelpers.lessons.l05_collectives.runs import (
    ESTIMATE_CALL_S,
    ESTIMATE_RATE_BYTES_PER_S,
    allreduce_devices,
)
from d2lhelpers.timing.benchmark import NOISY_IQR, Measurement
from d2lhelpers.timing.estimate import measure_seconds
from d2lhelpers.timing.interleaved import measure_interleaved, turn_options

BOUND_CAUSES = (
    "β was measured low: the largest size's run was slow (noise, or fresh pages for a large "
    "tensor), so B and its bound are too low",
    *LIKELY_CAUSES,
)
ALPHA_CAUSES = (
    "α was measured high: the 4-byte run was slow (the machine was busier then), so every "
    "prediction starts too high",
    *LIKELY_CAUSES,
)


@dataclasses.dataclass(repr=False)  # shown by its tables (`Reported`)
class AllreduceSweep(Reported):
    """TF's all-reduce on `n_devices` timed per message size, beside the alpha-beta predictions.

    `model`: alpha from the tiny message alone, beta from the largest size alone; it predicts
    every other size (`residuals`). `fitted`: least squares on every other size (`fit_sizes`),
    predicting the rest (`held_out_residuals`); None with fewer than 3 sizes. `copy`, `add`: one
    device copying, and adding, a tensor of the largest size (the RAM the link really is).
    """

    n_devices: int
    kind: str
    sizes: list[int]  # bytes per device, ascending
    measurements: list[Measurement]
    tiny: Measurement
    copy: Measurement
    add: Measurement
    model: AlphaBeta
    fitted: AlphaBeta | None
    fit_sizes: list[int]

    @property
    def times(self) -> list[float]:
        return [m.median for m in self.measurements]

    @property
    def predicted(self) -> list[float]:
        """The two-point model's time for every size (the largest is exact by construction)."""
        return [self.model.predict(s) for s in self.sizes]

    @property
    def residuals(self) -> list[Residual]:
        """Sizes the two-point model did not see (all but the largest): measured vs predicted."""
        return self.model.residuals(self.sizes[:-1], self.times[:-1])

    def within_noise(self) -> list[bool]:
        """Per predicted size: whether |measured - predicted| is inside that size's noise."""
        return [
            abs(r.measured_s - r.predicted_s) <= noise_of(m)
            for r, m in zip(self.residuals, self.measurements, strict=False)
        ]

    @property
    def held_out_sizes(self) -> list[int]:
        return [s for s in self.sizes if s not in self.fit_sizes]

    @property
    def held_out_residuals(self) -> list[Residual]:
        if self.fitted is None:
            return []
        held = self.held_out_sizes
        times = [t for s, t in zip(self.sizes, self.times, strict=True) if s in held]
        return self.fitted.residuals(held, times)

    @property
    def bus_bandwidth(self) -> float | None:
        """B = beta * 2(n-1)/n, bytes/s through each rank's link; None when nothing moves."""
        if self.n_devices < 2 or math.isinf(self.model.beta_bytes_per_s):
            return None
        return self.model.beta_bytes_per_s * 2 * (self.n_devices - 1) / self.n_devices

    def bound_s(self, nbytes: float) -> float | None:
        """Bus-bandwidth lower bound 2(n-1)/n * S / B with B = `bus_bandwidth`."""
        bandwidth = self.bus_bandwidth
        return bus_bandwidth_bound_s(self.n_devices, nbytes, bandwidth) if bandwidth else None

    @property
    def verdict(self) -> str:
        """How well alpha and beta, from two sizes alone, predicted the others (computed)."""
        largest = format_bytes(self.sizes[-1])
        if math.isinf(self.model.beta_bytes_per_s):
            return (
                f"The {largest} all-reduce took no longer than the {TINY_BYTES}-byte one: every "
                "size here is start-up cost α, and β cannot be measured (choose larger sizes)."
            )
        worst = max(self.residuals, key=lambda r: abs(r.relative))
        inside = sum(self.within_noise())
        return (
            f"α = {format_seconds(self.model.alpha_s)} and "
            f"β = {format_rate(self.model.beta_bytes_per_s, 'B/s')} (from the {TINY_BYTES}-byte "
            f"and the {largest} all-reduce alone) predict the other {len(self.residuals)} sizes "
            f"within {abs(worst.relative):.0%} (worst: {format_bytes(worst.nbytes)}, "
            f"{worst.relative:+.0%}); {inside} of {len(self.residuals)} within the "
            "measurement's noise."
        ) + self._calibration_caveat()

    def _calibration_caveat(self) -> str:
        """Predictions are no better than the two measurements alpha and beta come from."""
        noisy = [m for m in (self.tiny, self.measurements[-1]) if m.iqr > NOISY_IQR * m.median]
        if not noisy:
            return ""
        worst = max(noisy, key=lambda m: m.iqr / m.median)
        return (
            f" α and β come from noisy runs ({worst.label}: IQR {worst.iqr / worst.median:.0%} of "
            "its median), so these predictions are no better: run it again on a quieter machine."
        )

    def tables(self) -> list[Table]:
        return [self._model_table(), self._sizes_table(), *self._held_out_table()]

    def _model_table(self) -> Table:
        alpha, beta = self.model.alpha_s, self.model.beta_bytes_per_s
        largest = format_bytes(self.sizes[-1])
        rows = [("α", format_seconds(alpha), f"one {TINY_BYTES}-byte all-reduce")]
        rows.append(("β", format_rate(beta, "B/s"), f"the {largest} all-reduce, α taken off"))
        verdicts, flags = [self.verdict], []
        if self.bus_bandwidth:
            bus = self.bus_bandwidth
            rows.append(
                ("bus bandwidth B", format_rate(bus, "B/s"), "β·2(n-1)/n: each rank's link")
            )
            verdicts.append(
                f"B is {bus / self.copy.rate:.2f}x the rate at which one device copies "
                f"{largest} alone, {bus / self.add.rate:.2f}x the rate at which it adds."
            )
        rows.append(("one device copies", format_rate(self.copy.rate, "B/s"), largest))
        rows.append(("one device adds", format_rate(self.add.rate, "B/s"), largest))
        if self.kind == "logical CPU" and self.sizes[-1] > FRESH_PAGES_BYTES:
            flags.append(
                f"sizes above {format_bytes(FRESH_PAGES_BYTES)} get fresh pages from the kernel "
                "for every new tensor: page faults slow them, and a β taken there "
                "under-predicts the smaller sizes"
            )
        flags += self._below_bound_flags()
        for m in (self.tiny, *self.measurements, self.copy, self.add):
            flags += [f"{m.label}: {warning}" for warning in m.warnings]
        title = f"TF all-reduce (CollectiveReduceV2, ring) on {self.n_devices} {self.kind} devices"
        return Table(title, ("quantity", "value", "from"), rows, verdicts, flags)

    def below_bound(self) -> list[int]:
        """Sizes measured faster, beyond their noise, than the bound 2(n-1)/n * S / B."""
        if self.bus_bandwidth is None:
            return []
        return [
            s
            for s, m in zip(self.sizes[:-1], self.measurements[:-1], strict=True)
            if beats_ideal(m, self.bound_s(s))
        ]

    def below_alpha(self) -> list[int]:
        """Sizes measured faster, beyond both noises, than the 4-byte all-reduce (alpha)."""
        return [
            s
            for s, m in zip(self.sizes, self.measurements, strict=True)
            if beats_ideal(m, self.tiny.median, noise_of(self.tiny))
        ]

    def _below_bound_flags(self) -> list[str]:
        flags = []
        below = self.below_bound()
        if below:
            sizes = ", ".join(format_bytes(s) for s in below)
            what = (
                f"{sizes} measured faster than the bandwidth bound 2(n-1)/n·S/B, whose B comes "
                f"from the {format_bytes(self.sizes[-1])} run"
            )
            flags.append(impossible(what, BOUND_CAUSES))
        below = self.below_alpha()
        if below:
            sizes = ", ".join(format_bytes(s) for s in below)
            what = (
                f"{sizes} measured faster than the {TINY_BYTES}-byte all-reduce that gives α "
                f"({format_seconds(self.tiny.median)})"
            )
            flags.append(impossible(what, ALPHA_CAUSES))
        return flags

    def _sizes_table(self) -> Table:
        rows = []
        noise = [*self.within_noise(), True]
        for size, m, predicted, quiet in zip(
            self.sizes, self.measurements, self.predicted, noise, strict=True
        ):
            note = "calibrates β" if size == self.sizes[-1] else ("within noise" if quiet else "")
            rows.append(
                (
                    format_bytes(size),
                    format_seconds(m.median),
                    format_seconds(m.iqr),
                    format_seconds(predicted),
                    f"{(m.median - predicted) / m.median:+.0%}",
                    note,
                )
            )
        columns = ("size per device", "measured", "IQR", "predicted", "residual", "")
        return Table("measured vs α + S/β (α, β from the tiny and the largest)", columns, rows)

    def _held_out_table(self) -> list[Table]:
        if self.fitted is None:
            return []
        fit = ", ".join(format_bytes(s) for s in self.fit_sizes)
        title = (
            f"least squares on {fit}: α = {format_seconds(self.fitted.alpha_s)}, "
            f"β = {format_rate(self.fitted.beta_bytes_per_s, 'B/s')}; the sizes it did not see"
        )
        rows = [
            (
                format_bytes(r.nbytes),
                format_seconds(r.measured_s),
                format_seconds(r.predicted_s),
                f"{r.relative:+.0%}",
            )
            for r in self.held_out_residuals
        ]
        return [Table(title, ("size per device", "measured", "predicted", "residual"), rows)]


def estimate_allreduce_sweep_s(
    n_devices: int = 2, sizes: Sequence[int] = DEFAULT_SIZES, rounds: int = 2, **measure_options
) -> float:
    """About how many seconds `run_allreduce_sweep` takes (a cautious guess, measuring nothing)."""
    options = require_measure_options(measure_options, budget_s=1.0)
    sizes = allreduce_sizes(sizes)
    n = require_count("n_devices", n_devices, 2)
    rounds = require_count("rounds", rounds, 1, 20)
    turn = turn_options(options, rounds)
    per_call = [ESTIMATE_CALL_S + 2 * (n - 1) / n * s / ESTIMATE_RATE_BYTES_PER_S for s in sizes]
    local = sizes[-1] / ESTIMATE_RATE_BYTES_PER_S
    calls = [ESTIMATE_CALL_S, *per_call, local, local]
    return rounds * sum(measure_seconds(call, **turn) for call in calls)


def run_allreduce_sweep(
    n_devices: int | None = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    progress: Callable[[int, int, str], None] | None = None,
    rounds: int = 2,
    **measure_options,
) -> AllreduceSweep:
    """Time TF's all-reduce of each size (bytes per device) on the first `n_devices` devices.

    Also a 4-byte all-reduce (alpha) and one device copying and adding the largest size, all
    timed in turns, `rounds` times (`measure_interleaved`): a load that changes meanwhile slows
    them alike. Checked before anything is allocated: 2 devices or more, two sizes or more, each
    a multiple of 4 bytes, all fitting in memory at once. `progress(done, total, status)` after
    every timed block; `measure_options` go to `measure` (budget_s shared among the rounds).
    """
    options = require_measure_options(measure_options, budget_s=1.0)
    rounds = require_count("rounds", rounds, 1, 20)
    devices = allreduce_devices(n_devices, "it has no bandwidth to measure")
    sizes = allreduce_sizes(sizes)
    kind = devices[0].kind
    what = f"an all-reduce of {format_bytes(sizes[-1])} on {len(devices)} devices"
    # Every size's inputs live at once, and one device copies and adds the largest.
    extra = sum(sizes[:-1]) + ALLREDUCE_BUFFERS * sizes[-1]
    require_message_fits(sizes[-1], devices, what, "size in sizes", extra_bytes=extra)
    steps = Steps(progress, rounds)
    run = allreduce_in_one_graph(devices)
    runs = []
    for nbytes in (TINY_BYTES, *sizes):
        xs = allreduce_inputs(nbytes, devices)
        label = f"all-reduce of {format_bytes(nbytes)} on {len(devices)} {kind} devices"
        runs.append((lambda xs=xs: run(*xs), label, {"nbytes": nbytes}))
    largest = format_bytes(sizes[-1])
    copy, add = local_copy_and_add(sizes[-1], devices[0])
    runs.append((copy, f"one device's copy of {largest}", {"nbytes": sizes[-1]}))
    runs.append((add, f"one device's add of {largest}", {"nbytes": sizes[-1]}))
    tiny, *measurements, copied, added = measure_interleaved(
        runs,
        rounds,
        on_round=lambda: steps.finish(f"round {steps.done + 1} of {rounds}"),
        on_repeat=lambda r, label, repeat: steps.say(
            f"measuring {label} (round {r} of {rounds}), repeat {repeat}"
        ),
        **turn_options(options, rounds),
    )
    model, fitted, fit_sizes = alpha_beta_models(
        sizes, [m.median for m in measurements], tiny.median
    )
    return AllreduceSweep(
        len(devices), kind, sizes, measurements, tiny, copied, added, model, fitted, fit_sizes
    )


def plot_allreduce_sweep(result: AllreduceSweep, ax=None):
    """Log-log: measured times, the alpha-beta prediction, and the bus-bandwidth lower bound."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    low, high = TINY_BYTES, result.sizes[-1]
    grid = [low * (high / low) ** (i / 60) for i in range(61)]
    ax.plot(grid, [result.model.predict(s) for s in grid], "-", c="tab:blue", label="predicted")
    if result.fitted is not None:
        fitted = [result.fitted.predict(s) for s in grid]
        ax.plot(grid, fitted, ":", c="tab:green", label="least squares on every other size")
    if result.bus_bandwidth:
        bus = format_rate(result.bus_bandwidth, "B/s")
        bound = [result.bound_s(s) for s in grid]
        ax.plot(grid, bound, "--", c="gray", label=f"lower bound 2(n-1)/n·S/B, B = {bus}")
    if result.copy.rate:
        ram = format_rate(result.copy.rate, "B/s")
        at_copy = [bus_bandwidth_bound_s(result.n_devices, s, result.copy.rate) for s in grid]
        label = f"2(n-1)/n·S at one device's copy rate ({ram})"
        ax.plot(grid, at_copy, "-.", c="tab:red", lw=1, label=label)
    ax.errorbar(
        result.sizes[:-1],
        result.times[:-1],
        yerr=[m.iqr / 2 for m in result.measurements[:-1]],
        fmt="o",
        c="tab:orange",
        label="measured (predicted sizes)",
    )
    ax.plot(
        [TINY_BYTES, high],
        [result.tiny.median, result.times[-1]],
        "s",
        c="black",
        label="measured (α and β from these)",
    )
    ax.set(xscale="log", yscale="log", xlabel="bytes per device", ylabel="time (s)")
    # The bound falls towards 0 at tiny sizes: show it only near the measurements.
    ax.set_ylim(bottom=min(result.tiny.median, *result.times) / 30)
    ax.set_title(f"TF all-reduce on {result.n_devices} {result.kind} devices")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.figure.tight_layout()
    return ax.figure
