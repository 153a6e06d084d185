"""Notebook 01's pitfall: n identical matmuls in a tf.function, merged into one.

Which rate above the peak to believe (`rates_verdict`), and which optimisation merges the
identical ops: each candidate switched off in a fresh process (`run_merge_probe`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from d2lhelpers.core.checks import require_count, require_memory, require_processes
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    BYTES_PER_FLOAT,
    MiB,
    format_rate,
    format_seconds,
)
from d2lhelpers.core.verdicts import impossible
from d2lhelpers.devices import Device, on_gpu
from d2lhelpers.lessons.l01_two_devices.concurrency import MAX_MATMULS, plural
from d2lhelpers.timing.benchmark import PEAK_TOLERANCE, Measurement
from d2lhelpers.timing.peaks import CPU_SIZES, GPU_SIZES, best_chain_rate
from d2lhelpers.tracing.optimizer_probe import SWITCHES, ProbeRun, probe


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
            still = "; ".join(f"with {r.what} off, {r.executed} of {self.n}" for r in kept)
            sentence += f". Still merged: {still} ran"
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
