"""Notebook 01's experiment: independent chains on 1, 2, ... devices at once, beside the model.

The model, for logical CPU devices (one op thread each) and c usable cores: k chains on k
devices take max(1, k / c) times one chain. Up to c run at once; beyond, they share the cores.
On separate GPUs the model is 1 for every k; virtual GPUs share one chip (no model).
In order: the model, the verdicts on the notebook's own cells, the experiment `run_concurrency`,
its result, its estimate, its plot and its panel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import matplotlib.pyplot as plt

from d2lhelpers.core.checks import require_count
from d2lhelpers.core.counts import chain_bytes, chain_flops
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    cores_phrase,
    format_seconds,
    usable_cores,
)
from d2lhelpers.core.verdicts import Comparison, impossible, noise_of
from d2lhelpers.devices import check_fits, on_gpu, select_devices, setup_devices
from d2lhelpers.timing.benchmark import MIN_BLOCK_S, NOISY_IQR, Measurement, measure
from d2lhelpers.timing.peaks import device_peak_rate
from d2lhelpers.ui.panel import Panel, largest_size_that_fits, slider
from d2lhelpers.workloads import (
    chains_in_one_graph,
    random_matrix,
)

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


def model_for(k: int, kind: str, cores: int) -> float | None:
    """The model's slowdown of k devices at once: max(1, k/c), 1 on GPUs, None on virtual GPUs."""
    if kind == "logical CPU":
        return concurrency_model(k, cores)
    return 1.0 if kind == "GPU" else None


def at_once_verdict(both: Measurement, one: Measurement, kind: str, k: int = 2, cores=None) -> str:
    """k chains in one graph against one chain: at the same time, shared cores, or neither."""
    cores = usable_cores() if cores is None else cores
    want = model_for(k, kind, cores)
    ratio = both.median / one.median
    said = f"{plural(k, 'chain')} at once took {ratio:.2f}x one chain"
    if want is None:
        return said + " (virtual GPUs share one chip: no model is checked)"
    c = Comparison(both.median, want * one.median, noise_of(both) + want * noise_of(one))
    where = f"the model's {want:.2f}x ({cores_phrase(cores)})" if kind == "logical CPU" else "1.00x"
    if c.a_faster:
        return impossible(f"{said}, faster than {where}")
    if noisy_run(both) or noisy_run(one):
        return f"{said}; too noisy to check it against {where} (a run spread by more than 10%)"
    if c.a_slower:
        return f"{said}, slower than {where}: something else is using the cores"
    if want == 1.0:
        return f"{said}, as {where} says: they ran at the same time"
    return f"{said}, as {where} says: more chains than cores, so they took turns on the cores"


def separate_calls_verdict(separate: Measurement, first: Measurement, second: Measurement) -> str:
    """Two calls one after the other in Python: did their work overlap, or run in sequence?"""
    longer = max(first, second, key=lambda m: m.median)
    total = first.median + second.median
    noise = noise_of(separate) + noise_of(first) + noise_of(second)
    said = f"two separate calls took {separate.median / longer.median:.2f}x the longer call alone"
    sum_is = f"the sum of both is {total / longer.median:.2f}x"
    at_once = Comparison(separate.median, longer.median, noise_of(separate) + noise_of(longer))
    in_turn = Comparison(separate.median, total, noise)
    if at_once.a_faster:
        return impossible(f"{said}, faster than that call alone")
    if not at_once.measurable:
        return f"{said}, within the noise of one: their work overlapped"
    if not in_turn.measurable:
        return f"{said}; {sum_is}, within the noise: they ran one after the other"
    if in_turn.a_faster:
        return f"{said}; {sum_is}: less, so they overlapped in part"
    return f"{said}; {sum_is}: even more, so something else slowed them"


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
        if self.kind not in ("logical CPU", "GPU"):
            return None
        return [model_for(k, self.kind, self.cores) for k in self.device_counts]

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
    cores = usable_cores()

    def at_once(k):  # devices that can compute at the same time: above their peak is impossible
        return min(k, cores) if devices[0].kind == "logical CPU" else k

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
                peak=at_once(k) * device_peak if device_peak else None,
                on_repeat=lambda r, doing=doing, k=k: report(
                    k - 1, max_devices, f"{doing}, repeat {r}"
                ),
                **measure_options,
            )
        )
    report(max_devices, max_devices, "done")
    return ConcurrencyResult(size, n_matmuls, devices[0].kind, measurements, cores)


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
