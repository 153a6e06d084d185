"""The three schemes run for real, side by side: validation, estimate, result, plot, panel."""

from __future__ import annotations

import dataclasses
import math

import matplotlib.pyplot as plt

from d2lhelpers.core.checks import require_count, require_measure_options, require_rate
from d2lhelpers.core.counts import mlp_flops
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import format_seconds
from d2lhelpers.core.verdicts import compare
from d2lhelpers.devices import on_gpu, setup_devices
from d2lhelpers.parallel.common import (
    ParallelRun,
)
from d2lhelpers.parallel.pipeline_parallel import MAX_PIECES, check_pipeline, run_pipeline_parallel
from d2lhelpers.parallel.replicas import check_replicas, run_replicas
from d2lhelpers.parallel.tensor_parallel import check_tensor_parallel, run_tensor_parallel
from d2lhelpers.timing.benchmark import MIN_BLOCK_S
from d2lhelpers.timing.peaks import device_peak_rate
from d2lhelpers.ui.panel import Panel, slider

SLIDERS = {  # the panel's names for run_three_schemes' arguments, used in every refusal
    "width": "model width",
    "batch": "batch",
    "microbatches": "pipeline microbatches",
    "n_devices": "devices",
}
MEASUREMENTS = (2, 2, 3)  # replicas, tensor parallel, pipeline parallel: timed runs of each
MEASURE_BUDGET_S = 2.0  # measure's default time budget for one measurement
TRACE_S = 0.5  # building and tracing one scheme's graph, about


def check_three_schemes(width, batch, microbatches, n_devices) -> int:
    """Refuse, before any scheme runs, values that one of the three would refuse; the layers.

    Every message names the slider that fixes it and the largest (or least) value that works.
    """
    values = {"width": width, "batch": batch, "microbatches": microbatches, "n_devices": n_devices}
    for name, value in values.items():
        require_count(SLIDERS[name], value, 1)
    count = len(setup_devices())
    if n_devices > count:
        raise ValueError(f"devices: at most {count} (the devices set up), got {n_devices}")
    if batch < n_devices:
        raise ValueError(
            f"batch: at least {n_devices} for {n_devices} devices (each replica "
            f"needs a request), or devices: at most {batch}"
        )
    if microbatches > batch:
        raise ValueError(f"pipeline microbatches: at most {batch} for batch {batch}")
    n_layers = max(8, n_devices)
    if microbatches * n_layers > MAX_PIECES:
        raise ValueError(f"pipeline microbatches: at most {MAX_PIECES // n_layers}")
    try:
        check_replicas(width, batch, n_devices, counts=[n_devices])
        check_tensor_parallel(width, batch, n_devices)
        check_pipeline(width, batch, microbatches, n_devices, n_layers)
    except ValueError as error:
        raise ValueError(f"{error} Move 'model width' or 'batch' down.") from None
    return n_layers


def estimate_three_schemes(width, batch, microbatches, n_devices, peak: float) -> float:
    """Seconds the run may take: every measurement running to its budget, as on a busy machine.

    A measurement warms up (2 calls at `peak` FLOP/s), then repeats blocks of >= MIN_BLOCK_S
    until the spread is small (a quiet machine: 5 blocks) or its budget (MEASURE_BUDGET_S) is
    spent after at least 3 runs; each scheme's graph is also built and traced once.
    """
    n_layers = max(8, n_devices)
    work = (mlp_flops(batch, width, 4 * width),) * 2 + (2 * batch * width * width * n_layers,)
    total = 0.0
    for flops, count in zip(work, MEASUREMENTS, strict=True):
        t = flops / peak
        total += count * (2 * t + max(MEASURE_BUDGET_S, 3 * t) + max(t, MIN_BLOCK_S)) + TRACE_S
    return total


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class ThreeSchemes(Reported):
    """Replicas, tensor parallel and pipeline parallel, each measured beside one device."""

    runs: list[ParallelRun]

    @property
    def where(self) -> str:
        n, kind = self.runs[0].n_devices, self.runs[0].kind
        return f"{n} {kind} device{'s' if n > 1 else ''}"

    @property
    def verdict(self) -> str:
        trusted = [r for r in self.runs if r.trusted]
        flagged = [r.scheme for r in self.runs if not r.trusted]
        tail = f"; flagged, not results: {', '.join(flagged)} (see the warnings)" if flagged else ""
        faster = [r for r in trusted if compare(r.measurement, r.reference).a_faster]
        if not faster:
            return f"On {self.where}, no scheme was measurably faster than one device{tail}"
        best = min(faster, key=lambda r: r.time)
        rest = [r for r in trusted if r is not best]
        tied = [r for r in rest if not compare(best.measurement, r.measurement).a_faster]
        lead = f"{best.scheme} ({best.speedup:.2f}x one device)"
        if tied:
            names = ", ".join(f"{r.scheme} ({r.speedup:.2f}x)" for r in tied)
            return f"On {self.where}, {lead} and {names} were fastest, within the noise{tail}"
        behind = ", ".join(f"{r.scheme} ({r.speedup:.2f}x)" for r in rest)
        ahead = f", measurably ahead of {behind}" if behind else ""
        return f"On {self.where}, {lead} was fastest{ahead}{tail}"

    def __str__(self) -> str:
        return f"{self.verdict}\n\n{super().__str__()}"

    def _repr_pretty_(self, printer, _cycle) -> None:  # shown under the panel's verdict: no repeat
        printer.text(super().__str__())

    def tables(self) -> list[Table]:
        rows = []
        for r in self.runs:
            outcome = "flagged" if not r.trusted else _outcome(r)
            rows.append(
                (
                    r.scheme,
                    format_seconds(r.time),
                    f"{r.throughput:,.0f}",
                    f"{r.speedup:.2f}x ± {r.speedup_noise:.2f}",
                    f"{r.reachable_speedup:.2f}x",
                    outcome,
                    _split(r),
                )
            )
        columns = (
            "scheme",
            "time per batch",
            "samples/s",
            "speedup vs one device",
            "reachable here",
            "outcome",
            "what was split",
        )
        notes = [line for line in self.runs[0].details() if "compute at once" in line]
        flags = [flag for r in self.runs for flag in r.flags()]
        return [Table(f"three schemes on {self.where}", columns, rows, notes, flags)]


def _outcome(run: ParallelRun) -> str:
    c = compare(run.measurement, run.reference)
    return "faster" if c.a_faster else "slower" if c.a_slower else "no measurable difference"


def _split(run: ParallelRun) -> str:
    if run.scheme == "tensor parallel":
        return f"hidden {run.hidden} -> {run.shard_widths}; {run.allreduces} all-reduce"
    if run.scheme == "pipeline parallel":
        bubble = (
            "bubble flagged"
            if run.bubble_flags
            else f"bubble {run.measured_bubble:.0%} (model {run.model_bubble:.0%})"
        )
        return f"{run.stage_layers} layers, {run.microbatches} microbatches; {bubble}"
    return "the batch; no communication"


def run_three_schemes(
    width, batch, microbatches, n_devices, progress=None, device_peak=None, **measure_options
) -> ThreeSchemes:
    """All three schemes on `n_devices`, each beside one device; everything validated first."""
    require_rate("device_peak", device_peak)
    require_measure_options(measure_options)
    n_layers = check_three_schemes(width, batch, microbatches, n_devices)
    schemes = [
        (
            "replicas",
            lambda p: run_replicas(
                width, batch, n_devices, progress=p, device_peak=device_peak, **measure_options
            ),
        ),
        (
            "tensor parallel",
            lambda p: run_tensor_parallel(
                width, batch, n_devices, progress=p, device_peak=device_peak, **measure_options
            ),
        ),
        (
            "pipeline parallel",
            lambda p: run_pipeline_parallel(
                width,
                batch,
                microbatches,
                n_devices,
                n_layers,
                progress=p,
                device_peak=device_peak,
                **measure_options,
            ),
        ),
    ]
    total, runs = sum(MEASUREMENTS), []
    for (name, run), before in zip(schemes, (0, 2, 4), strict=True):

        def report(done, _, status, name=name, before=before):
            if progress:
                progress(before + done, total, f"{name}: {status}")

        runs.append(run(report))
    return ThreeSchemes(runs)


def plot_three_scheme_speedups(result: ThreeSchemes):
    """Each scheme's measured speedup (with its noise) beside what is reachable for its split."""
    runs = result.runs
    fig, ax = plt.subplots(figsize=(8, 3.2))
    names = [r.scheme for r in runs]
    colours = ["tab:blue" if r.trusted else "lightgray" for r in runs]
    bars = ax.bar(
        names,
        [r.speedup for r in runs],
        color=colours,
        yerr=[r.speedup_noise for r in runs],
        capsize=4,
        label="measured speedup",
    )
    for bar, r in zip(bars, runs, strict=True):
        if not r.trusted:
            bar.set_hatch("//")
            ax.annotate(
                "flagged",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
                color="tab:red",
            )
    ax.scatter(
        names,
        [r.reachable_speedup for r in runs],
        marker="_",
        s=900,
        c="black",
        label="reachable for this split here",
        zorder=3,
    )
    ax.axhline(1, c="tab:red", lw=1, label="one device")
    top = max(max(r.speedup + r.speedup_noise, r.reachable_speedup) for r in runs)
    ax.set(
        ylabel="speedup vs one device", title=result.where, ylim=(0, math.ceil(top * 1.15 * 2) / 2)
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def parallelism_panel() -> Panel:
    """Notebook 04: replicas, tensor parallel and pipeline parallel, run for real, side by side."""
    devices = setup_devices()
    count = len(devices)
    width, batch = (4096, 4096) if on_gpu() else (256, 512)
    sliders = {
        "width": slider(SLIDERS["width"], width, 32, 4 * width, 32),
        "batch": slider(SLIDERS["batch"], batch, 16, 4 * batch, 16),
        "microbatches": slider(SLIDERS["microbatches"], 8, 1, 32),
        "n_devices": slider(SLIDERS["n_devices"], min(2, count), 1, count),
    }

    def experiment(width, batch, microbatches, n_devices, progress):
        check_three_schemes(width, batch, microbatches, n_devices)  # before the peak is measured
        peak = device_peak_rate(devices[0])
        return run_three_schemes(width, batch, microbatches, n_devices, progress, peak)

    def estimate(width, batch, microbatches, n_devices):
        check_three_schemes(width, batch, microbatches, n_devices)
        return estimate_three_schemes(
            width, batch, microbatches, n_devices, device_peak_rate(devices[0])
        )

    return Panel(
        "Three ways to split one model, run for real",
        sliders,
        experiment,
        plot_three_scheme_speedups,
        estimate,
    )
