"""Notebook 02's result: run, copy, and both in one function, each beside its ideal, with noise.

For the chain y_i = y_{i-1} @ x (i = 1..n) computed on the worker and its n results copied to
the driver (n·size²·4 bytes):

    ideal one after the other (one function) = run + copy - launch
    ideal overlapped                          = max(run, copy)
    hidden = (run + copy - launch - overlapped) / min(run, copy)   1: the shorter part all hidden

One function pays one launch (an RPC to the worker and back, timed as the same function on 1x1
matrices) where the separate run and copy calls paid two, so the saved launch is not counted as
hidden copy time. Every comparison carries its noise (`verdicts.noise_of`: the IQR, 5% of the
median at least); a hidden share above 100% or an overlapped run below max(run, copy) beyond that
noise cannot be true and is flagged, never shown as a result.
"""

from __future__ import annotations

import dataclasses

from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import GB, format_bytes, format_rate, format_seconds
from d2lhelpers.core.verdicts import NOISE_FLOOR, beats_ideal, compare, impossible, noise_of
from d2lhelpers.processes.tf_servers import HOST, traced_overlap
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.tracing.timeline import OpEvent, TracingOverhead

BOTH_TRACED = "worker and driver"
TRACED_OVERLAP_SEEN = 0.1  # below this share, a trace shows no real overlap
MAX_HIDDEN_BAND = 0.5  # a hidden share known only to ±50% or worse is not shown as a number


@dataclasses.dataclass
class ComputeCopyResult(Reported):
    """Run, copy, launch, and both in one function (forced one after the other, overlapped)."""

    size: int
    n_matmuls: int
    overlap: bool
    nbytes: int  # the n results copied
    run: Measurement
    copy: Measurement
    sequential: Measurement  # one function, copies held until the last matmul
    overlapped: Measurement | None  # one function, copies as soon as each result is ready
    link_peak: float  # loopback TCP, B/s, measured
    rows: list[OpEvent]  # one traced call of the overlapped (or, without overlap, sequential) run
    trace_source: str  # 'worker and driver' (one clock) or 'driver only' (fallback)
    worker_device: str
    launch: Measurement  # the one function on 1x1 matrices: a call's fixed cost
    overhead: TracingOverhead | None = None

    # --- ideals and their noise -----------------------------------------------------------------

    @property
    def shorter(self) -> float:
        return min(self.run.median, self.copy.median)

    @property
    def ideal_sequential(self) -> float:
        """run + copy: two separate calls."""
        return self.run.median + self.copy.median

    @property
    def ideal_sequential_one_function(self) -> float:
        """run + copy - launch: one function pays one launch, the two calls paid two."""
        return self.ideal_sequential - self.launch.median

    @property
    def ideal_sequential_noise(self) -> float:
        return noise_of(self.run) + noise_of(self.copy) + noise_of(self.launch)

    @property
    def ideal_overlapped(self) -> float:
        return max(self.run.median, self.copy.median)

    @property
    def ideal_overlapped_noise(self) -> float:
        return noise_of(self.run if self.run.median >= self.copy.median else self.copy)

    @property
    def combined(self) -> Measurement:
        """The run whose hidden fraction is reported: overlapped if run, else sequential."""
        return self.overlapped if self.overlapped is not None else self.sequential

    @property
    def hidden_fraction(self) -> float:
        """(run + copy - launch - combined) / min(run, copy): the raw number, unchecked."""
        return (self.ideal_sequential_one_function - self.combined.median) / self.shorter

    @property
    def hidden_noise(self) -> float:
        """How far `hidden_fraction` could move from the noise of the four times in it."""
        return (self.ideal_sequential_noise + noise_of(self.combined)) / self.shorter

    @property
    def copy_rate(self) -> float:
        """Bytes per second the copy moved over the link."""
        return self.nbytes / self.copy.median

    @property
    def traced_overlap(self) -> float:
        return traced_overlap(self.rows, self.worker_device, HOST)

    # --- what the numbers say -------------------------------------------------------------------

    def flags(self) -> list[str]:
        """Why some number here cannot be true; empty when every number is plausible.

        A time below its ideal is flagged twice over: beyond the noise ("impossible"), and as a
        point estimate more than `NOISE_FLOOR` below it even when the runs were too noisy to
        say more (an impossible number is never shown as a result, however noisy).
        """
        found = self._below_ideal(
            self.sequential,
            self.ideal_sequential_one_function,
            self.ideal_sequential_noise,
            "one after the other",
            "run + copy - launch",
        )
        if self.overlapped is not None:
            found += self._below_ideal(
                self.overlapped,
                self.ideal_overlapped,
                self.ideal_overlapped_noise,
                "overlapped",
                "max(run, copy)",
            )
            if self.hidden_fraction > 1 + NOISE_FLOOR:
                found.append(
                    impossible(
                        f"the hidden share came out at {self.hidden_fraction:.0%} of "
                        f"min(run, copy) (noise ±{self.hidden_noise:.0%}), above 100%"
                    )
                )
        for m in (self.run, self.copy, self.launch, self.sequential, self.overlapped):
            found += [f"{m.label}: {w}" for w in (m.warnings if m is not None else ())]
        return found

    @staticmethod
    def _below_ideal(m: Measurement, ideal: float, noise: float, what: str, name: str):
        fmt = format_seconds
        if beats_ideal(m, ideal, noise):
            how = "by more than the noise"
        elif m.median < ideal * (1 - NOISE_FLOOR):
            how = "within noise so large that this run cannot tell which time is off"
        else:
            return []
        return [
            impossible(
                f"{what} took {fmt(m.median)} = {m.median / ideal:.2f}x its ideal {name} "
                f"{fmt(ideal)}, below it {how}"
            )
        ]

    def hidden_text(self) -> str:
        """The hidden share as shown: a number only when it is inside 0..100% given its noise."""
        h, band = self.hidden_fraction, self.hidden_noise
        if h > 1 + NOISE_FLOOR:
            return "not shown: above 100% (flagged)"
        if band > MAX_HIDDEN_BAND:
            return f"too noisy to tell (±{band:.0%})"
        if h + band < 0:
            lost = self.combined.median - self.ideal_sequential_one_function
            return f"none: took {format_seconds(lost)} longer than run + copy - launch"
        if abs(h) <= band:
            return f"none measurable (±{band:.0%})"
        return f"{min(h, 1.0):.0%} ±{band:.0%}"

    @property
    def verdict(self) -> str:
        """One computed sentence: what this run shows, or that it shows nothing trustworthy."""
        if any("impossible" in flag for flag in self.flags()):
            return "Not a result: a time came out better than its ideal (see the warnings)."
        if self.overlapped is None:
            c = compare(self.sequential, self.ideal_sequential_one_function)
            c = dataclasses.replace(
                c, noise=noise_of(self.sequential) + self.ideal_sequential_noise
            )
            how = (
                "matches it within the noise: nothing overlapped, as forced"
                if not c.measurable
                else f"is {c.ratio:.2f}x it"
            )
            return (
                f"One after the other took {format_seconds(c.a)}; its ideal run + copy - "
                f"launch is {format_seconds(c.b)}: it {how}."
            )
        c = compare(self.overlapped, self.sequential)
        if c.a_faster:
            faster = (
                f"Overlapped ran faster than one after the other ({format_seconds(c.a)} vs "
                f"{format_seconds(c.b)}); hidden: {self.hidden_text()} of the shorter part"
            )
            if self.trace_source != BOTH_TRACED:
                return f"{faster}; the worker's trace is missing, so no trace shows why."
            if self.traced_overlap < TRACED_OVERLAP_SEEN:
                return (
                    f"{faster}; but its traced call shows no copy during a matmul, so this run "
                    "does not show overlap as the cause."
                )
            return (
                f"{faster}; the traced call shows copies during matmuls for "
                f"{self.traced_overlap:.0%} of the shorter part."
            )
        if c.a_slower:
            return (
                f"Overlapped was slower than one after the other ({format_seconds(c.a)} vs "
                f"{format_seconds(c.b)}); a likely cause, not tested here: the copies competed "
                "with the compute for the same cores."
            )
        return (
            f"No measurable difference between overlapped ({format_seconds(c.a)}) and one "
            f"after the other ({format_seconds(c.b)}), within the noise of "
            f"{format_seconds(c.noise)}."
        )

    def closest_ideal(self) -> str:
        """Which ideal the one-after-the-other time matches (Try it 2), computed with noise."""
        sequential = self.sequential.median
        near_sum = abs(sequential - self.ideal_sequential_one_function) <= (
            noise_of(self.sequential) + self.ideal_sequential_noise
        )
        near_max = abs(sequential - self.ideal_overlapped) <= (
            noise_of(self.sequential) + self.ideal_overlapped_noise
        )
        if near_sum and not near_max:
            return "run + copy - launch"
        if near_max and not near_sum:
            return "max(run, copy)"
        if near_sum and near_max:
            return "both (they are within the noise of each other)"
        sum_off = abs(sequential / self.ideal_sequential_one_function - 1)
        max_off = abs(sequential / self.ideal_overlapped - 1)
        closer = "run + copy - launch" if sum_off <= max_off else "max(run, copy)"
        return f"neither within the noise; closer to {closer}"

    def which_ideal(self) -> str:
        """Try it 2, checked against this run: the sentence saying which ideal it matched."""
        matched = self.closest_ideal()
        if matched == "run + copy - launch":
            said = "as the worked answer says"
        elif matched.startswith("both"):
            said = "so this run cannot check the worked answer; try more matmuls or a larger size"
        else:
            said = "not what the worked answer says; this run's noise (see its warnings) may be why"
        return (
            f"One after the other took {format_seconds(self.sequential.median)} "
            f"(run + copy - launch {format_seconds(self.ideal_sequential_one_function)}, "
            f"max(run, copy) {format_seconds(self.ideal_overlapped)}): it matches {matched}, "
            f"{said}."
        )

    def tables(self) -> list[Table]:
        def row(what, m, ideal="", ideal_s=None):
            ratio = f"{m.median / ideal_s:.2f}x" if ideal_s else ""
            return [
                what,
                format_seconds(m.median),
                format_seconds(m.iqr),
                len(m.times),
                ideal,
                ratio,
            ]

        link = format_bytes(self.nbytes)
        rows = [
            row(f"run: {self.n_matmuls} matmuls of {self.size}² on the worker", self.run),
            row(f"copy: {link} worker -> driver", self.copy),
            row("launch: the function on 1x1 matrices", self.launch),
            row(
                "one after the other (one function)",
                self.sequential,
                f"run + copy - launch {format_seconds(self.ideal_sequential_one_function)}",
                self.ideal_sequential_one_function,
            ),
        ]
        if self.overlapped is not None:
            rows.append(
                row(
                    "overlapped (one function)",
                    self.overlapped,
                    f"max(run, copy) {format_seconds(self.ideal_overlapped)}",
                    self.ideal_overlapped,
                )
            )
        times = Table(
            "Times (medians, timed in turns)",
            ["what", "median", "IQR", "runs", "ideal", "x ideal"],
            rows,
        )
        rates = Table(
            "Rates",
            ["what", "rate", "beside"],
            [
                ["run", format_rate(self.run.rate), "one worker thread"],
                [
                    "copy over loopback gRPC",
                    f"{self.copy_rate / GB:.2f} GB/s",
                    f"{self.copy_rate / self.link_peak:.0%} of loopback TCP "
                    f"({self.link_peak / GB:.2f} GB/s, measured)",
                ],
            ],
        )
        what = "overlapped" if self.overlapped is not None else "one-after-the-other"
        overlap_rows = [
            [
                "hidden (from the times)",
                self.hidden_text(),
                "ideal 100%" if self.overlapped is not None else "ideal 0%: forced order",
            ]
        ]
        if self.trace_source == BOTH_TRACED:
            overlap_rows.append(
                [
                    f"traced {what} call: copies during matmuls",
                    f"{self.traced_overlap:.0%} of the shorter part",
                    "worker and driver on one clock",
                ]
            )
        else:
            overlap_rows.append(
                [
                    f"traced {what} call",
                    "worker's trace missing",
                    "the timeline shows only the driver's side",
                ]
            )
        if self.overhead is not None:
            c = compare(self.overhead.traced, self.overhead.untraced)
            cost = f"{c.ratio - 1:+.0%}" if c.measurable else "none measurable"
            note = f"traced {format_seconds(c.a)} vs untraced {format_seconds(c.b)}"
            note += "" if c.measurable else f", within the noise of {format_seconds(c.noise)}"
            overlap_rows.append(["tracing overhead (driver)", cost, note])
        overlap = Table(
            "Overlap", ["what", "value", "note"], overlap_rows, [self.verdict], self.flags()
        )
        return [times, rates, overlap]
