"""The three schemes run for real, side by side: validation, estimate, result, plot, panel.

The panel runs the notebook's own scheme functions (`replicas_in_one_graph`,
`tensor_parallel_in_one_graph`, `pipeline_in_one_graph`): edit a saved cell, run it again, and
the panel measures the edited code.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import matplotlib.pyplot as plt

from d2lhelpers.core.checks import require_count, require_measure_options, require_rate
from d2lhelpers.core.concurrency import at_once_here
from d2lhelpers.core.counts import mlp_flops
from d2lhelpers.core.progress import Progress
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import format_seconds
from d2lhelpers.core.verdicts import compare, with_noise
from d2lhelpers.devices import on_gpu, setup_devices
from d2lhelpers.parallel.pipeline_runs import MAX_PIECES, check_pipeline, run_pipeline_parallel
from d2lhelpers.parallel.replica_runs import check_replicas, run_replicas
from d2lhelpers.parallel.result import SPEEDUP_COLUMN, ParallelResult
from d2lhelpers.parallel.tensor_parallel_runs import check_tensor_parallel, run_tensor_parallel
from d2lhelpers.timing.estimate import (
    CALL_S,
    DRAW_S,
    call_seconds,
    interleaved_seconds,
    trace_seconds,
)
from d2lhelpers.timing.interleaved import ROUNDS
from d2lhelpers.timing.peaks import device_peak_rate
from d2lhelpers.ui.panel import Panel, slider

SLIDERS = {  # the panel's names for run_three_schemes' arguments, used in every refusal
    "width": "model width",
    "batch": "batch",
    "microbatches": "pipeline microbatches",
    "n_devices": "devices",
}


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
        check_replicas(width, batch, n_devices)
        check_tensor_parallel(width, batch, n_devices)
        check_pipeline(width, batch, microbatches, n_devices, n_layers)
    except ValueError as error:
        raise ValueError(f"{error} Move 'model width' or 'batch' down.") from None
    return n_layers


def graph_ops(n_devices: int, microbatches: int, n_layers: int) -> list[int]:
    """Ops in each graph `run_three_schemes` traces, about: replicas and tensor parallel (each
    beside the MLP on one device, ~10 ops), then the stack on one device, its microbatches on one
    device, and the pipeline (3 ops per layer per microbatch, a hand-over per stage boundary)."""
    n, m, layers = n_devices, microbatches, n_layers
    split = 10 * n + 2
    return [
        10,
        split,
        10,
        split,
        5 * layers,
        (3 * m + 2) * layers,
        (3 * layers + n - 1) * m + 2 * layers,
    ]


def estimate_three_schemes(
    width, batch, microbatches, n_devices, peak: float, at_once: int, **measure_options
) -> float:
    """Seconds `run_three_schemes` takes: each measurement by `measure`'s rules, stopping as
    this machine's recent measures did.

    One call of each model at `peak` FLOP/s on one device, and `at_once` times faster split
    (the devices that compute at the same time); each graph is built and traced once (its ops
    counted as TensorFlow traces them: about 10 per device for an MLP split, 3 per layer and
    microbatch for the pipeline), and each scheme is called once more to compare its outputs.
    """
    n, m, n_layers = n_devices, microbatches, max(8, n_devices)
    mlp_s = max(call_seconds(mlp_flops(batch, width, 4 * width), peak), CALL_S)
    stack_s = max(call_seconds(2 * batch * width * width * n_layers, peak), CALL_S)
    split_s = max(mlp_s / at_once, CALL_S)
    measured = [mlp_s, *([split_s] if n > 1 else []), mlp_s, split_s]  # replicas, tensor
    measured += [stack_s, stack_s, max(stack_s / at_once, CALL_S)]  # one, microbatched, pipeline
    checks = 2 * (mlp_s + split_s) + stack_s + stack_s / at_once
    timed = sum(interleaved_seconds(t, ROUNDS, **measure_options) for t in measured)
    traced = sum(trace_seconds(k) for k in graph_ops(n, m, n_layers))
    return timed + traced + checks


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class ThreeSchemesResult(Reported):
    """Replicas, tensor parallel and pipeline parallel, each measured beside one device."""

    runs: list[ParallelResult]

    @property
    def where(self) -> str:
        n, kind = self.runs[0].n_devices, self.runs[0].kind
        return f"{n} {kind} device{'s' if n > 1 else ''}"

    @property
    def verdict(self) -> str:
        trusted = [r for r in self.runs if r.trusted]
        flagged = [r.scheme for r in self.runs if not r.trusted]
        tail = f"; flagged, not results: {', '.join(flagged)} (see the warnings)" if flagged else ""
        above = [r.scheme for r in trusted if r.above_reachable]  # inside the noise: not read
        if above:
            tail += f"; above the reachable within the noise, not results: {', '.join(above)}"
        trusted = [r for r in trusted if not r.above_reachable]
        faster = [r for r in trusted if compare(r.measurement, r.reference).a_faster]
        if not faster:
            return f"On {self.where}, no scheme was measurably faster than one device{tail}"
        # read 113: the lowest time among every trusted scheme, not only those measurably faster
        # than their own one device (3.87 ms 'fastest' beside 3.86 ms)
        best = min(trusted, key=lambda r: r.time)
        rest = [r for r in trusted if r is not best]
        tied = [r for r in rest if not compare(best.measurement, r.measurement).a_faster]

        # read 93: ranked by time per batch, each speedup against its own cell's one device, so
        # the times are quoted (1.28x was 'fastest' beside 1.29x, from two one-device times)
        def said(r):
            return f"{r.scheme} ({format_seconds(r.time)}, {r.speedup:.2f}x)"

        lead = (
            f"{best.scheme} ({format_seconds(best.time)} a batch, {best.speedup:.2f}x its one "
            "device" + ("" if best in faster else ", though not measurably faster than it") + ")"
        )
        behind = _listed([said(r) for r in rest if r not in tied])
        tail = "; ranked by time per batch (each speedup is against its own one-device time)" + tail
        if tied:  # read 60: "A, B and C were fastest" read as a ranking the noise does not give
            names = _listed([said(r) for r in tied])
            ahead = f"; {best.scheme} is measurably ahead of {behind}" if behind else ""
            rank = "them" if len(tied) > 1 else "the two"
            tied = sorted(tied, key=lambda r: r.time)
            apart = [  # read 129: two tied with the fastest may still be apart from each other
                f"{a.scheme} is measurably ahead of {b.scheme}"
                for i, a in enumerate(tied)
                for b in tied[i + 1 :]
                if compare(a.measurement, b.measurement).a_faster
            ]
            if apart:
                rank = f"{best.scheme} against either; " + "; ".join(apart)
            return (
                f"On {self.where}, {lead} was the fastest measured but not measurably ahead of "
                f"{names}: the noise cannot rank {rank}{ahead}{tail}"
            )
        ahead = f", measurably ahead of {behind}" if behind else ""
        return f"On {self.where}, {lead} was fastest{ahead}{tail}"

    def __str__(self) -> str:
        return f"{self.verdict}\n\n{super().__str__()}"

    def _repr_pretty_(self, printer, _cycle) -> None:  # shown under the panel's verdict: no repeat
        printer.text(super().__str__())

    def tables(self) -> list[Table]:
        rows = []
        for r in self.runs:
            outcome = "flagged" if not r.trusted else compare(r.measurement, r.reference).outcome
            model = "not read (flagged)" if not r.trusted else MODEL_WORDS[r.reachable_test]
            if r.trusted and r.above_reachable:  # above the bound, inside the noise
                outcome = (
                    f"above the reachable, within its noise (±{r.speedup_noise:.2f}): not a result"
                )
                model = "not read (above it)"
            elif r.trusted and r.speedup > r.reachable_speedup:  # above it, inside the floor
                model += " (measured just above it: that part is noise, not a result)"
            rows.append(
                (
                    r.scheme,
                    with_noise(r.measurement),
                    with_noise(r.reference),
                    f"{r.throughput:,.0f}",
                    r.speedup_text(),
                    f"{r.reachable_speedup:.2f}x",
                    model,
                    outcome,
                    _split(r),
                )
            )
        columns = (
            "scheme",
            "time per batch",
            "one device's (its speedup's yardstick)",
            "samples/s",
            SPEEDUP_COLUMN,
            "reachable here (model)",
            "its time against the reachable's",
            "outcome vs one device",
            "what was split",
        )
        notes = [line for line in self.runs[0].details() if "compute at once" in line]
        if len(self.runs) > 1:  # each scheme timed its own yardstick: do the speedups share one?
            notes.append(self.runs[0].one_device_against(*self.runs[1:]))
        notes += [
            f"pipeline's bubble: {r.bubble_reading}"
            for r in self.runs
            if r.scheme == "pipeline parallel" and not r.bubble_flags
        ]
        flags = [flag for r in self.runs for flag in r.flags()]
        return [Table(f"three schemes on {self.where}", columns, rows, notes, flags)]


MODEL_WORDS = {  # `model_test`'s words for a time against the reachable's, within both noises
    "missed": "slower beyond the noise: missed",
    "held": "within the noise: held",
    "noisy": "within the noise: too noisy to check",
    "untestable": "within the noise of no gain too: untested",
}


def _listed(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


def _split(run: ParallelResult) -> str:
    if run.scheme == "tensor parallel":
        return f"hidden {run.hidden} -> {run.shard_widths}; {run.allreduces} all-reduce"
    if run.scheme == "pipeline parallel":
        busy = run.microbatched_reference
        bubble = (
            "bubble flagged"
            if run.bubble_flags
            else f"bubble {run.measured_bubble:.1%} {run.band_text(1)} = 1 - busy / "
            f"({run.stages} x the time per batch), busy (the {run.microbatches} microbatches on "
            f"one device) {with_noise(busy)} (model "
            f"{run.model_bubble:.1%})"
        )
        return f"{run.stage_layers} layers, {run.microbatches} microbatches; {bubble}"
    return "the batch; nothing exchanged between replicas"


def run_three_schemes(
    width: int,
    batch: int,
    microbatches: int,
    n_devices: int,
    progress: Progress | None = None,
    device_peak: float | None = None,
    replicas_in_one_graph: Callable | None = None,
    tensor_parallel_in_one_graph: Callable | None = None,
    pipeline_in_one_graph: Callable | None = None,
    **measure_options,
) -> ThreeSchemesResult:
    """All three schemes on `n_devices`, each beside one device; everything validated first.

    Each `*_in_one_graph` is a scheme's graph builder (default: notebook 04's saved one).
    """
    require_rate("device_peak", device_peak)
    require_measure_options(measure_options)
    n_layers = check_three_schemes(width, batch, microbatches, n_devices)
    common = {"device_peak": device_peak, **measure_options}
    split = (width, batch, n_devices)
    schemes = [  # (name, its run, its sizes, its graph builder); each takes ROUNDS steps
        ("replicas", run_replicas, split, replicas_in_one_graph),
        ("tensor parallel", run_tensor_parallel, split, tensor_parallel_in_one_graph),
        ("pipeline parallel", run_pipeline_parallel,
         (width, batch, microbatches, n_devices, n_layers), pipeline_in_one_graph),
    ]  # fmt: skip
    runs = []
    for i, (name, run, sizes, build) in enumerate(schemes):

        def report(done, _, status, name=name, before=i * ROUNDS):
            if progress:
                progress(before + done, len(schemes) * ROUNDS, f"{name}: {status}")

        runs.append(run(*sizes, progress=report, in_one_graph=build, **common))
    return ThreeSchemesResult(runs)


def plot_three_scheme_speedups(result: ThreeSchemesResult):
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


def parallelism_panel(
    replicas_in_one_graph: Callable | None = None,
    tensor_parallel_in_one_graph: Callable | None = None,
    pipeline_in_one_graph: Callable | None = None,
) -> Panel:
    """Notebook 04: the three schemes, run for real side by side, with the notebook's functions.

    Each `*_in_one_graph` is a scheme's graph builder (default: notebook 04's saved one).
    """
    devices = setup_devices()
    count = len(devices)
    width, batch = (4096, 4096) if on_gpu() else (256, 512)
    sliders = {
        "width": slider(SLIDERS["width"], width, 32, 4 * width, 32),
        "batch": slider(SLIDERS["batch"], batch, 16, 4 * batch, 16),
        "microbatches": slider(SLIDERS["microbatches"], 8, 1, 32),
        "n_devices": slider(SLIDERS["n_devices"], min(2, count), 1, count),
    }
    builders = {
        "replicas_in_one_graph": replicas_in_one_graph,
        "tensor_parallel_in_one_graph": tensor_parallel_in_one_graph,
        "pipeline_in_one_graph": pipeline_in_one_graph,
    }

    def experiment(width, batch, microbatches, n_devices, progress):
        check_three_schemes(width, batch, microbatches, n_devices)  # before the peak is measured
        peak = device_peak_rate(devices[0])
        return run_three_schemes(width, batch, microbatches, n_devices, progress, peak, **builders)

    def estimate(width, batch, microbatches, n_devices):
        check_three_schemes(width, batch, microbatches, n_devices)
        at_once = at_once_here(n_devices, devices[0].kind)
        peak = device_peak_rate(devices[0])
        return estimate_three_schemes(width, batch, microbatches, n_devices, peak, at_once) + DRAW_S

    return Panel(
        "Three ways to split one model, run for real",
        sliders,
        experiment,
        plot_three_scheme_speedups,
        estimate,
    )
