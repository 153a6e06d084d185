"""Notebook 01's pitfall: n identical matmuls in a tf.function, merged into one.

Which rate above the peak to believe (`rates_verdict`), and which optimisation merges the
identical ops: sets of switches turned off, each in a fresh process (`run_merge_probe`), each
compared with its control (the same settings but the one under test).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from d2lhelpers.core.checks import require_count, require_memory, require_processes
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    BYTES_PER_FLOAT,
    MiB,
    format_rate,
    format_seconds,
    plural,
    ratio_past_noise,
)
from d2lhelpers.core.verdicts import impossible, noise_text, ratio_noise
from d2lhelpers.lessons.l01_two_devices.concurrency import MAX_MATMULS
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.tracing.optimizer_probe import SWITCHES, ProbeRun, classic_setting, probe


def rates_verdict(identical: Measurement, chain: Measurement) -> str:
    """Which rate above the peak to believe: blame merged work only if the chain, which cannot
    be merged, is not above the peak too (beyond the noise of its rate and of the peak).

    `measure` has already measured the peak again when a rate came out above it, and the chain
    was measured after the identical matmuls, so its peak is the newest.
    """
    peak = chain.best_peak or identical.best_peak
    if not peak or identical.rate is None or chain.rate is None:
        return "no peak was given, so neither rate can be checked"
    # Each ratio with the digits that put it on its side of its own noise's edge (read 116).
    chain_x, chain_edge = ratio_past_noise(chain.rate / peak, chain.rate_noise)
    ident_x = ratio_past_noise(identical.rate / peak, identical.rate_noise)[0]
    said = f"identical {ident_x}, chain {chain_x} the peak"
    if chain.above_peak:
        return (
            f"{said} {format_rate(peak)}: the chain, which cannot be merged, is above the peak "
            f"({chain_edge}) even after the peak was measured again: "
            + impossible("the chain's rate")
            + ". So these rates cannot show whether work was merged"
        )
    if identical.above_peak:
        return (
            f"{said} {format_rate(peak)}: only the identical matmuls are above the peak beyond "
            "the noise, and the chain is not, so the identical matmuls did less work than was "
            "asked for: fewer products ran"
        )
    return (
        f"{said} {format_rate(peak)}: neither is above the peak beyond the noise, so on this "
        "run the rates show no merged work (the trace above counts what ran)"
    )


@dataclasses.dataclass(repr=False)  # shown by its tables (`Reported`)
class MergeProbeResult(Reported):
    """n identical matmuls run once per set of switches, each in a fresh process: how many ran."""

    n: int
    size: int
    runs: list[ProbeRun]

    def _of(self, switch: str | None) -> ProbeRun | None:
        return next((r for r in self.runs if r.switch == switch), None)

    def _attribution(self, run: ProbeRun) -> tuple[bool, str]:
        """Whether `run`, which ran all n, shows what merges them (its control still merged)."""
        control = self._of(SWITCHES[run.switch].control)
        said = f"with {run.what} off, {run.n} of {run.n} MatMuls ran"
        if control is None:
            return False, f"{said}, but no control differing from it in one setting was run"
        if not control.merged:
            return False, (
                f"{said}, and so did its control ({control.what} off: {control.executed} of "
                f"{control.n}): the control's own settings stop the merge, so this run does not "
                "show what merges them"
            )
        ratio = run.seconds / control.seconds
        return True, (
            f"{said} ({ratio:.1f}x ± {ratio_noise(ratio, run, control):.1f} the time per call "
            # read 118: 'differs only in that' read as both switches; it is one setting
            "of its control, the row that differs from it in one setting and still merged: "
            f"{control.executed} of {control.n} ran): that is what merges them"
        )

    @property
    def culprits(self) -> list[ProbeRun]:
        """The runs that ran all n while their control still merged."""
        return [r for r in self.runs if not r.merged and self._attribution(r)[0]]

    @property
    def verdict(self) -> str:
        default = self._of("none")
        if default is None:
            return "the default settings were not run: there is no merge to explain"
        if not default.merged:
            return f"all {self.n} MatMuls ran with every optimisation on: nothing was merged here"
        unmerged = [r for r in self.runs if not r.merged]
        if not unmerged:
            counts = "; ".join(f"{r.what} off: {r.executed} of {r.n}" for r in self.runs)
            return f"none of the switches stopped the merge ({counts})"
        sentences = [self._attribution(r)[1] for r in unmerged]
        for culprit in self.culprits:
            parts = [self._of(p) for p in SWITCHES[culprit.switch].parts]
            if parts and all(p is not None and p.merged for p in parts):
                counts = "; ".join(f"{p.what} off, {p.executed} of {p.n} ran" for p in parts)
                sentences.append(
                    f"with only one of them off, the merge stays ({counts}): each merges them "
                    "on its own"
                )
        return ". ".join(s[0].upper() + s[1:] for s in sentences)

    def tables(self) -> list[Table]:
        rows = [
            [r.what, r.how, f"{r.executed} of {r.n}", format_seconds(r.seconds), noise_text(r)]
            for r in self.runs
        ]
        title = f"{plural(self.n, 'identical matmul')} of {self.size}x{self.size} in a "
        title += "tf.function, a fresh function per row, a fresh process per classic setting"
        columns = ["switched off", "how", "MatMuls executed", "time per call (median of 5)"]
        columns.append("noise")
        # read 94: the probe's processes inherit this kernel's setting (optimizer_probe)
        # read 154: the setting is read from the environment now, and says so
        value = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
        onednn = "on" if value == "1" else "off"
        # unset here (never after `import d2lhelpers`), the probe sets 0: not this kernel's
        same = ", as the probe sets it" if value is None else ", as in this kernel"
        value = " unset" if value is None else f"={value}"
        where = (
            "each process runs on TensorFlow's own CPU device with its default thread pools "
            f"(every usable core) and oneDNN {onednn}{same} "
            f"(TF_ENABLE_ONEDNN_OPTS{value} in its environment, read now; the baseline's process "
            "sets it to 1, "
            "`timing/peaks.py`; how the package starts the probe's: they inherit this "
            "kernel's environment; neither shown by a cell), not on one of this kernel's "
            "logical devices: "
            "its times are not one device's, and only the counts, and each row's time against "
            "its control's (both run that way), are read"
        )
        return [Table(title, columns, rows, [self.verdict, where])]


def run_merge_probe(
    n: int = 10, size: int = 512, switches=tuple(SWITCHES), progress: Callable | None = None
) -> MergeProbeResult:
    """Count the MatMuls that ran of `n` identical ones, with each set of switches off.

    The sets that share a classic optimiser setting run in one fresh Python process
    (`optimizer_probe.probe`): TensorFlow reads that setting once per runtime. About 5 s per
    process (3 processes) on 2 cores at the defaults.
    """
    n = require_count("n (identical matmuls)", n, 1, MAX_MATMULS)
    size = require_count("size (matrix size)", size, 1, 8192)
    require_processes("the merge probe", 1)
    # A fresh TensorFlow process holds about 600 MiB before its (n + 2) matrices.
    require_memory("the merge probe", 600 * MiB + (n + 2) * size * size * BYTES_PER_FLOAT)
    report = progress or (lambda done, total, status="": None)
    groups: dict[tuple, list[str]] = {}  # one fresh process per classic setting
    for switch in switches:
        groups.setdefault(classic_setting(switch), []).append(switch)
    found = {}
    for i, group in enumerate(groups.values()):
        report(i, len(groups), f"fresh process {i + 1} of {len(groups)}: {', '.join(group)} off")
        found.update({run.switch: run for run in probe(group, n, size)})
    report(len(groups), len(groups), "done")
    return MergeProbeResult(n, size, [found[s] for s in switches])
