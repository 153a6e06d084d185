"""Notebook 01's experiment: independent chains on 1, 2, ... devices at once, beside the model.

The model (`core.concurrency`): k chains on k logical CPU devices with c usable cores take
max(1, k / c) times one chain; on separate GPUs, 1 for every k; virtual GPUs share one chip (no
model). Here: the experiment `run_concurrency` (it runs the notebook's `chains_in_one_graph` and
`random_matrix`), its result and its run-time estimate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from d2lhelpers import workloads
from d2lhelpers.core.checks import require_count
from d2lhelpers.core.concurrency import devices_at_once, slowdown_model
from d2lhelpers.core.counts import chain_bytes, chain_flops
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    cores_phrase,
    format_seconds,
    plural,
    ratio_and_decimals,
    the_cores,
    usable_cores,
)
from d2lhelpers.core.verdicts import (
    NOISY_IQR,
    Comparison,
    impossible,
    noise_of,
    noise_text,
    noisy_run,
    slower_cause,
)
from d2lhelpers.devices import check_fits, select_devices
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.timing.estimate import CALL_S, call_seconds, interleaved_seconds, trace_seconds
from d2lhelpers.timing.interleaved import ROUNDS, measure_in_turns

MAX_MATMULS = 1000  # ops per chain: a graph this long already takes seconds to trace


@dataclasses.dataclass(repr=False)  # shown by its tables (`Reported`)
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
        return [slowdown_model(k, self.kind, self.cores) for k in self.device_counts]

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
        # Each k on its own: a miss beyond the band (which holds both runs' spread) is a miss
        # however noisy the run; a noisy k only stops the model being called held.
        noisy = [k for k in noisy if k not in slower]
        if slower:
            k = slower[0]
            took, want = self.slowdowns[k - 1], self.model[k - 1]
            one, mk = self.measurements[0], self.measurements[k - 1]
            serial = Comparison(mk.median, k * one.median, noise_of(mk) + k * noise_of(one))
            cause = slower_cause(self.cores, beyond_serial=serial.a_slower)  # beyond the noise
            return (
                f"slower than the model {where} at k = {slower} ({took:.2f}x one chain "
                f"at k = {k}, model {want:.2f}x): {cause}"
                + (f"; k = {noisy} too noisy to check" if noisy else "")
            )
        if noisy:
            one = self.measurements[0].median
            # read 185: 2.48x against a one-core model of 4.00x, said only 'too noisy'
            below = ", ".join(
                f"k = {k}: {took:.2f}x against {want:.2f}x ±{c.noise / one:.2f}x"
                for k, took, want, c in zip(
                    self.device_counts, self.slowdowns, self.model, found, strict=True
                )
                if c.a < c.b
            )
            return (
                f"too noisy to check the model {where}: the runs with k = {noisy} spread by more "
                f"than {NOISY_IQR:.0%} (another program using the cores?): run again"
                + (
                    f"; below the model's time within the noise ({below}): not read as faster, "
                    "not a result"
                    if below
                    else ""
                )
            )
        together = devices_at_once(len(self.times), self.kind, self.cores)
        one = self.measurements[0].median
        bands = ", ".join(  # read 108: the bands printed, as every verdict's
            f"k = {k}: ±{c.noise / one:.2f}x"
            for k, c in zip(self.device_counts, found, strict=True)
            if k > 1
        )
        # read 161: faster than the model within the noise is 'not a result' in notebook 04
        quick = [str(k) for k, c in zip(self.device_counts, found, strict=True) if c.a < c.b]
        faster = (
            f"; at k = {', '.join(quick)} faster than the model within the noise, not read as "
            "faster (its table's rows say so)"
            if quick
            else ""
        )
        return (
            f"the model {where} holds within the noise for every k ({bands} one chain's time, "
            f"both runs' noise{faster}): consistent with up to "  # read 156: an inference
            f"{plural(together, 'chain')} running at the same time"
            + (
                f", more taking turns on {the_cores(self.cores)}"
                if together < len(self.times)
                else ""
            )
            + " (inferred from the times and the core count, not traced)"
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
            # as the sentence: noise stops "held", the row's own or one device's (every row's
            # model is a multiple of it)
            shaky = noisy_run(m) or noisy_run(self.measurements[0])
            if c is not None and not c.measurable and shaky:
                reading = "too noisy to check"
            if c is not None and c.measurable:
                reading = "faster: impossible" if c.a_faster else "slower than the model"
                if c.a_faster:
                    flags.append(impossible(f"{k} devices at {slow:.2f}x, model {want:.2f}x"))
            if c is not None:  # the band the reading used, in the same units as "vs one"
                one = self.measurements[0].median
                low = max(0.0, c.b - c.noise)  # noise wider than the model: a time stays >= 0
                reading += f" (band {low / one:.2f}x to {(c.b + c.noise) / one:.2f}x)"
                if not c.measurable and c.a < c.b:  # as notebook 04 reads it (read 73)
                    reading += "; its speedup above the model's is noise, not a result"
            # read 158: below the model, the digits that show it ('2.00' beside a 2.00 model)
            below = c is not None and c.a < c.b
            shown, d = ratio_and_decimals(slow, want) if below else (f"{slow:.2f}", 2)
            rows.append(
                [
                    k,
                    format_seconds(m.median),
                    noise_text(m),
                    f"{shown}x",
                    "-" if want is None else f"{want:.{d}f}x",
                    reading,
                    f"{speed:.{d}f}",
                ]
            )
            flags += [f"{m.label}: {w}" for w in m.warnings]
        title = f"{plural(self.n_matmuls, 'matmul')} of {self.size}x{self.size} per device"
        columns = ["devices", "time", "noise", "vs one", "model", "reading"]
        # read 173: 'ideal = devices' beside a 2-core cap of min(k, c); review: none on one chip
        ideal = {"logical CPU": "ideal = min(devices, cores)", "virtual GPU": "no ideal: one chip"}
        columns.append(f"speedup ({ideal.get(self.kind, 'ideal = devices')})")
        notes = [self.verdict]
        if (
            self.model is not None
        ):  # read 173: '1.20x to 1.80x' not rebuilt from the noises beside it
            notes.append(
                "each band: the model ± (the row's noise x its 'vs one' + one device's noise x "
                "the model), both runs' noises added, as every verdict here reads them"
            )
        return [Table(title, columns, rows, notes, flags)]


def run_concurrency(
    size: int,
    n_matmuls: int,
    max_devices: int,
    progress: Callable[..., None] | None = None,
    device_peak: float | None = None,
    chains_in_one_graph: Callable = workloads.chains_in_one_graph,
    random_matrix: Callable = workloads.random_matrix,
    **measure_options,
) -> ConcurrencyResult:
    """Run one chain per device on 1, 2, ..., `max_devices` devices at once, each timed.

    `chains_in_one_graph(devices, n)` builds the graph and `random_matrix(size, device, seed)`
    the inputs: pass the notebook's own to run what it defines. Refuses bad values and sizes that
    do not fit before building anything. `progress(done, total, status)` is called after each
    timed block ("measuring 2 chains on 2 devices (round 1 of 2), repeat 3"); the device counts
    are timed in turns, round after round. With `device_peak` (FLOP/s of one device), k devices'
    rate is checked against the peak of those that can compute at once.
    """
    size = require_count("size (the 'matrix size' slider)", size, 1)
    n_matmuls = require_count(
        "n_matmuls (the 'matmuls per chain' slider)", n_matmuls, 1, MAX_MATMULS
    )
    devices = select_devices(require_count("max_devices (the 'devices' slider)", max_devices, 1))
    what = f"a {size}x{size} chain on each of {plural(max_devices, 'device')}"
    check_fits(chain_bytes(size), devices, what + " (the 'matrix size' slider)")
    steps = Steps(progress, ROUNDS)
    cores, kind = usable_cores(), devices[0].kind
    xs = [random_matrix(size, d, seed=i) for i, d in enumerate(devices)]
    runs = []
    for k in range(1, max_devices + 1):
        steps.say(f"tracing {plural(k, 'chain')} on {plural(k, 'device')}")
        run = chains_in_one_graph(devices[:k], n_matmuls)
        peak = devices_at_once(k, kind, cores) * device_peak if device_peak else None
        label = f"{plural(k, 'chain')} on {plural(k, 'device')}"
        rate = {"flops": k * chain_flops(size, n_matmuls), "peak": peak}
        runs.append((lambda run=run, k=k: run(*xs[:k]), label, rate))
    # In turns (`measure_in_turns`): a load that changes meanwhile slows every k alike.
    measurements = measure_in_turns(runs, steps, ROUNDS, **measure_options)
    return ConcurrencyResult(size, n_matmuls, kind, measurements, cores)


def estimate_seconds(
    size: int, n_matmuls: int, max_devices: int, peak: float, cores: int, kind: str, **options
) -> float:
    """Expected seconds of `run_concurrency` (with `measure` options `options`): per device
    count k, tracing one graph of k chains and one `measure` of a call whose work runs at `peak`
    per device, k devices taking the model's time (k times one on virtual GPUs: one chip)."""
    total = 0.0
    for k in range(1, max_devices + 1):
        slowdown = slowdown_model(k, kind, cores) or k
        call = call_seconds(chain_flops(size, n_matmuls) * slowdown, peak)
        total += trace_seconds(k * n_matmuls) + interleaved_seconds(
            max(call, CALL_S), ROUNDS, **options
        )
    return total
