"""Notebook 01, two devices, two jobs: independent chains on several devices at once.

In notebook order: the seed's pitfall (identical matmuls merged: which rates to believe, and which
optimisation merges them, in `l01_merge_probe`), then the experiment `run_concurrency`, its
result, its plot and its panel.

The model the notebook checks, for logical CPU devices (one op thread each) and c usable cores:
k chains on k devices take max(1, k / c) times one chain. Up to c run at once; beyond, they share
the cores. On separate GPUs the model is 1 for every k; virtual GPUs share one chip (no model).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import matplotlib.pyplot as plt

from d2lhelpers.admission import require_count, require_memory, require_processes
from d2lhelpers.benchmark import MIN_BLOCK_S, NOISY_IQR, PEAK_TOLERANCE, Measurement, measure
from d2lhelpers.devices import Device, check_fits, on_gpu, select_devices, setup_devices
from d2lhelpers.optimizer_probe import SWITCHES, ProbeRun, probe
from d2lhelpers.panel import Panel, largest_size_that_fits, slider
from d2lhelpers.peaks import CPU_SIZES, GPU_SIZES, best_chain_rate, device_peak_rate
from d2lhelpers.report import Reported, Table
from d2lhelpers.units import (
    BYTES_PER_FLOAT,
    MiB,
    cores_phrase,
    format_rate,
    format_seconds,
    usable_cores,
)
from d2lhelpers.verdicts import Comparison, impossible, noise_of
from d2lhelpers.workloads import chain_bytes, chain_flops, chains_in_one_graph, random_matrix

MAX_MATMULS = 1000  # ops per chain: a graph this long already takes seconds to trace


def plural(n: int, word: str) -> str:
    """'1 matmul', '20 matmuls', '3 branches'."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}{'es' if word.endswith(('ch', 'sh', 's', 'x')) else 's'}"


def noisy_run(m: Measurement) -> bool:
    """Whether a run's spread is too wide for any verdict drawn from it (benchmark's threshold)."""
    return m.iqr > NOISY_IQR * m.median


def concurrency_model(k: int, cores: int) -> float:
    """Time of k chains on k logical CPU devices, relative to one chain: max(1, k / cores)."""
    return max(1.0, k / cores)


def rates_verdict(identical: Measurement, chain: Measurement, device: Device | str) -> str:
    """Which rate above the peak to believe: blame merged work only if the chain stays below it.

    The chain cannot be merged. If it too measures above the peak, the peak is re-measured: a peak
    measured on a busy machine is low, and then the identical matmuls' excess proves nothing.
    """
    peak = identical.peak or chain.peak
    if not peak:
        return "no peak was given, so neither rate can be checked"
    identical_above, chain_above = (m.rate > PEAK_TOLERANCE * peak for m in (identical, chain))
    if chain_above:
        sizes = GPU_SIZES if on_gpu() else CPU_SIZES
        again = best_chain_rate(device, sizes)[0]
        verdict = (
            f"the chain, which cannot be merged, measured {chain.rate / peak:.1f}x the peak "
            f"{format_rate(peak)}: the peak was probably measured low (re-measured now: "
            f"{format_rate(again)}, the chain is {chain.rate / again:.2f}x that)"
        )
        if chain.rate > PEAK_TOLERANCE * again:
            verdict += "; even against it the chain is too fast: " + impossible("the chain's rate")
        return verdict + ". Merged work is not shown by these rates alone."
    if identical_above:
        return (
            f"the identical matmuls measured {identical.rate / peak:.1f}x the peak while the "
            f"chain measured {chain.rate / peak:.2f}x: only the identical matmuls break the "
            "peak, so their work was merged (fewer products ran than were asked for)"
        )
    return (
        f"neither rate is above the peak (identical {identical.rate / peak:.2f}x, chain "
        f"{chain.rate / peak:.2f}x): on this run no merged work shows in the rates"
    )


@dataclasses.dataclass
class MergeProbeResult(Reported):
    """n identical matmuls run once per switch, each in a fresh process: how many MatMuls ran."""

    n: int
    size: int
    runs: list[ProbeRun]

    def _of(self, switch: str) -> ProbeRun | None:
        return next((r for r in self.runs if r.switch == switch), None)

    @property
    def culprits(self) -> list[ProbeRun]:
        """The switches (not the control) with which every one of the n MatMuls ran."""
        merged = self._of("none")
        if merged is None or merged.executed >= self.n:
            return []
        return [
            r for r in self.runs if r.switch not in ("none", "classic_l0") and r.executed >= self.n
        ]

    @property
    def verdict(self) -> str:
        default = self._of("none")
        if default is not None and default.executed >= self.n:
            return f"all {self.n} MatMuls ran with every optimisation on: nothing was merged here"
        counts = "; ".join(f"{r.what} off: {r.executed} of {self.n} ran" for r in self.runs)
        culprits = self.culprits
        if not culprits:
            return f"none of the switches stopped the merge ({counts})"
        names = " and ".join(r.what for r in culprits)
        slower = [f"{r.seconds / default.seconds:.1f}x" for r in culprits] if default else []
        kept = [
            r for r in self.runs if r.switch not in ("none", "classic_l0") and r not in culprits
        ]
        sentence = f"with {names} off, {self.n} of {self.n} MatMuls ran"
        sentence += f" ({', '.join(slower)} the time per call)" if slower else ""
        sentence += f": {'that is' if len(culprits) == 1 else 'those are'} what merges them"
        if kept:
            stayed = " or ".join(r.what for r in kept)
            counts = ", ".join(str(r.executed) for r in kept)
            sentence += f". With {stayed} off, still {counts} of {self.n} ran"
        return sentence

    def tables(self) -> list[Table]:
        rows = [
            [r.what, r.how, f"{r.executed} of {r.n}", format_seconds(r.seconds)] for r in self.runs
        ]
        title = f"{plural(self.n, 'identical matmul')} of {self.size}x{self.size}"
        title += ", a fresh process per switch"
        columns = ["switched off", "how", "MatMuls executed", "time per call"]
        return [Table(title, columns, rows, [self.verdict])]


def run_merge_probe(
    n: int = 10, size: int = 512, switches=tuple(SWITCHES), progress: Callable | None = None
) -> MergeProbeResult:
    """Count the MatMuls that ran of `n` identical ones, with each candidate optimisation off.

    Each switch runs in a fresh Python process (`optimizer_probe.probe`): TensorFlow reads its
    optimiser settings once per runtime. About 3 s per switch on 2 cores at the defaults.
    """
    n = require_count("n (identical matmuls)", n, 1, MAX_MATMULS)
    size = require_count("size (matrix size)", size, 1, 8192)
    require_processes("the merge probe", 1)
    # A fresh TensorFlow process holds about 600 MiB before its (n + 2) matrices.
    require_memory("the merge probe", 600 * MiB + (n + 2) * size * size * BYTES_PER_FLOAT)
    report = progress or (lambda done, total, status="": None)
    runs = []
    for i, switch in enumerate(switches):
        report(i, len(switches), f"fresh process {i + 1} of {len(switches)}: {switch} off")
        runs.append(probe(switch, n, size))
    report(len(switches), len(switches), "done")
    return MergeProbeResult(n, size, runs)


@dataclasses.dataclass
class ConcurrencyResult(Reported):
    """Time of one chain per device, on 1, 2, ... devices at once, beside the model."""

    size: int
    n_matmuls: int
    kind: str
    measurements: list[Measurement]
    cores: int = dataclasses.field(default_factory=usable_cores)

    @property
    def device_counts(self) -> list[int]:
        return list(range(1, len(self.measurements) + 1))

    @property
    def times(self) -> list[float]:
        return [m.median for m in self.measurements]

    @property
    def slowdowns(self) -> list[float]:
        """Time on k devices / time on one: the ideal is 1.0 for every k."""
        return [t / self.times[0] for t in self.times]

    @property
    def speedups(self) -> list[float]:
        """Work done per second relative to one device: the ideal is k."""
        return [k / s for k, s in zip(self.device_counts, self.slowdowns, strict=True)]

    @property
    def model(self) -> list[float] | None:
        """Expected slowdowns: max(1, k/c) on logical CPUs, 1 on GPUs; None on virtual GPUs."""
        if self.kind == "logical CPU":
            return [concurrency_model(k, self.cores) for k in self.device_counts]
        return [1.0] * len(self.measurements) if self.kind == "GPU" else None

    def comparisons(self) -> list[Comparison] | None:
        """Each k's time against the model's, the noise of both runs taken into account."""
        if self.model is None:
            return None
        one = self.measurements[0]
        return [
            Comparison(m.median, want * one.median, noise_of(m) + want * noise_of(one))
            for m, want in zip(self.measurements, self.model, strict=True)
        ]

    @property
    def verdict(self) -> str:
        found = self.comparisons()
        if found is None:
            return (
                f"{plural(len(self.times), 'device')} took {self.slowdowns[-1]:.2f}x one; virtual "
                "GPUs share one chip's compute, so no model is checked"
            )
        where = f"max(1, k/{self.cores}) for {cores_phrase(self.cores)}"
        if self.kind == "GPU":
            where = "1.0 for separate GPUs"
        faster = [k for k, c in zip(self.device_counts, found, strict=True) if c.a_faster]
        slower = [k for k, c in zip(self.device_counts, found, strict=True) if c.a_slower]
        if faster:
            return f"k = {faster}: faster than the model {where}: impossible, see the warnings"
        noisy = [
            k for k, m in zip(self.device_counts, self.measurements, strict=True) if noisy_run(m)
        ]
        if noisy:
            return (
                f"too noisy to check the model {where}: the runs with k = {noisy} spread by more "
                f"than {NOISY_IQR:.0%} (another program using the cores?): run again"
            )
        if slower:
            k = slower[0]
            return (
                f"slower than the model {where} from k = {k} on ({self.slowdowns[k - 1]:.2f}x one "
                f"chain, model {self.model[k - 1]:.2f}x): something else is using the cores, or "
                "the chains are too short to keep the devices busy"
            )
        together = min(len(self.times), self.cores if self.kind == "logical CPU" else 10**9)
        return (
            f"the model {where} holds within the noise for every k: up to "
            f"{plural(together, 'chain')} ran at the same time"
            + (", more shared the cores" if together < len(self.times) else "")
        )

    def tables(self) -> list[Table]:
        found = self.comparisons() or [None] * len(self.times)
        model = self.model or [None] * len(self.times)
        rows, flags = [], []
        for k, m, slow, speed, want, c in zip(
            self.device_counts,
            self.measurements,
            self.slowdowns,
            self.speedups,
            model,
            found,
            strict=True,
        ):
            reading = "-" if c is None else "as the model"
            if c is not None and c.measurable:
                reading = "faster: impossible" if c.a_faster else "slower than the model"
                if c.a_faster:
                    flags.append(impossible(f"{k} devices at {slow:.2f}x, model {want:.2f}x"))
            rows.append(
                [
                    k,
                    format_seconds(m.median),
                    f"{slow:.2f}x",
                    "-" if want is None else f"{want:.2f}x",
                    reading,
                    f"{speed:.2f}",
                ]
            )
            flags += [f"{m.label}: {w}" for w in m.warnings]
        title = f"{plural(self.n_matmuls, 'matmul')} of {self.size}x{self.size} per device"
        columns = ["devices", "time", "vs one", "model", "reading", "speedup (ideal = devices)"]
        return [Table(title, columns, rows, [self.verdict], flags)]


def run_concurrency(
    size: int,
    n_matmuls: int,
    max_devices: int,
    progress: Callable[..., None] | None = None,
    device_peak: float | None = None,
    **measure_options,
) -> ConcurrencyResult:
    """Run one chain per device on 1, 2, ..., `max_devices` devices at once, each timed.

    Refuses bad values and sizes that do not fit before building anything. `progress(done,
    total, status)` is called after each timed block ("measuring 2 of 4 devices, repeat 3").
    With `device_peak` (FLOP/s of one device), k devices' rate is flagged above k times that.
    """
    size = require_count("size (the 'matrix size' slider)", size, 1)
    n_matmuls = require_count(
        "n_matmuls (the 'matmuls per chain' slider)", n_matmuls, 1, MAX_MATMULS
    )
    devices = select_devices(require_count("max_devices (the 'devices' slider)", max_devices, 1))
    what = f"a {size}x{size} chain on each of {plural(max_devices, 'device')}"
    check_fits(chain_bytes(size), devices, what + " (the 'matrix size' slider)")
    report = progress or (lambda done, total, status="": None)
    xs = [random_matrix(size, d, seed=i) for i, d in enumerate(devices)]
    measurements = []
    for k in range(1, max_devices + 1):
        doing = f"measuring {k} of {max_devices} devices"
        report(k - 1, max_devices, f"{doing}: tracing and warm-up")
        run = chains_in_one_graph(devices[:k], n_matmuls)
        measurements.append(
            measure(
                lambda run=run, k=k: run(*xs[:k]),
                f"{plural(k, 'chain')} on {plural(k, 'device')}",
                flops=k * chain_flops(size, n_matmuls),
                peak=k * device_peak if device_peak else None,
                on_repeat=lambda r, doing=doing, k=k: report(
                    k - 1, max_devices, f"{doing}, repeat {r}"
                ),
                **measure_options,
            )
        )
    report(max_devices, max_devices, "done")
    return ConcurrencyResult(size, n_matmuls, devices[0].kind, measurements)


def estimate_seconds(
    size: int, n_matmuls: int, max_devices: int, peak: float, cores: int, kind: str
) -> float:
    """Expected seconds of `run_concurrency` from the work and the measured peak.

    Per device count: a warm-up and a sizing call, then about 5 timed calls (at least 5 blocks of
    `MIN_BLOCK_S`, and after 3 calls a long run stops at measure's 2 s budget).
    """
    total = 0.0
    for k in range(1, max_devices + 1):
        slowdown = concurrency_model(k, cores) if kind == "logical CPU" else 1.0
        call = chain_flops(size, n_matmuls) * slowdown / peak
        total += 2 * call + max(min(5 * call, max(2.0, 3 * call)), 5 * MIN_BLOCK_S)
    return total


def plot_concurrency(result: ConcurrencyResult):
    """Time and speedup against the number of devices running at once, each with its ideal."""
    ks = result.device_counts
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    left.plot(ks, [t * 1e3 for t in result.times], "o-", ms=7, label="measured", zorder=3)
    left.axhline(result.times[0] * 1e3, ls="--", c="gray", label="ideal: same as one device")
    right.plot(ks, result.speedups, "o-", ms=7, label="measured", zorder=3)
    right.plot(ks, ks, "--", c="gray", label="ideal: one more device, one more chain")
    if result.kind == "logical CPU":
        left.plot(
            ks,
            [m * result.times[0] * 1e3 for m in result.model],
            ":",
            c="tab:red",
            label=f"model: max(1, k/{result.cores})",
        )
        right.plot(
            ks,
            [min(k, result.cores) for k in ks],
            ":",
            c="tab:red",
            label=f"model: min(k, {result.cores}), {cores_phrase(result.cores)}",
        )
    left.set(xlabel="devices running one chain each", ylabel="time (ms)")
    left.set_ylim(0, max(result.times) * 1e3 * 1.15)
    title = f"{plural(result.n_matmuls, 'matmul')} of {result.size}x{result.size} per device"
    left.set_title(title, fontsize=10)
    right.set(xlabel="devices", ylabel="work per second vs one device")
    right.set_ylim(0, max(ks[-1], max(result.speedups)) * 1.15)
    right.set_title("speedup", fontsize=10)
    for ax in (left, right):
        ax.set_xticks(ks)
        ax.set_xlim(0.5, ks[-1] + 0.5)  # one device: its point sits in the middle, not on an edge
        # Below the axes, never over a measured point.
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    fig.suptitle(f"{result.kind} devices", fontsize=10)
    fig.tight_layout()
    return fig


def concurrency_panel() -> Panel:
    """Notebook 01: one chain per device on 1..N devices at once, time and speedup vs model."""
    devices = setup_devices()
    default_size, cap, default_n = (4096, 8192, 50) if on_gpu() else (512, 2048, 20)
    largest = largest_size_that_fits(chain_bytes, devices, cap)
    sliders = {
        "size": slider("matrix size", min(default_size, largest), 64, largest, 64),
        "n_matmuls": slider("matmuls per chain", default_n, 1, 100),
        "max_devices": slider("devices (1 to all set up)", len(devices), 1, len(devices)),
    }
    peak = device_peak_rate(devices[0])

    def experiment(size, n_matmuls, max_devices, progress):
        return run_concurrency(size, n_matmuls, max_devices, progress, device_peak=peak)

    def estimate(size, n_matmuls, max_devices):
        return estimate_seconds(size, n_matmuls, max_devices, peak, usable_cores(), devices[0].kind)

    return Panel(
        "One chain per device, all at once", sliders, experiment, plot_concurrency, estimate
    )
