"""Notebook 05: what an all-reduce and independent matmuls in one function say, timed and traced.

Three things that need not agree, all from one run's numbers: the trace (did they run at the
same time?), the time (did that save any?), and how much of the shorter part was hidden. On
logical CPUs the ring's copies and adds are work for the same cores the matmuls use; on a GPU
the link has its own copy engines.

Ideals. One after the other: allreduce + compute - launch, since one function pays one call's
fixed cost where the two separate calls paid two (the saved launch is not hidden time).
Overlapped: max(allreduce, compute), where the hidden share reaches its ceiling
1 - launch / min(allreduce, compute), not 100%.
"""

from __future__ import annotations

import dataclasses
import statistics

from d2lhelpers.collectives.allreduce_trace import allreduce_rows
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    cores_phrase,
    format_bytes,
    format_seconds,
    short_device_name,
    usable_cores,
)
from d2lhelpers.core.verdicts import (
    LIKELY_CAUSES,
    Comparison,
    TwoParts,
    faster_or_slower,
    how_below_ideal,
    impossible,
    noise_of,
    parts_between_runs,
)
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.tracing.timeline import (
    OpEvent,
    busy_intervals,
    busy_seconds,
    incomplete_reason,
    overlap_seconds,
)

OVERLAP_CAUSES = (
    LIKELY_CAUSES[0],
    "the parts alone were timed while the machine was busier than for the combined run",
    "work was skipped, or the clock stopped before the devices finished",
)


@dataclasses.dataclass(repr=False)  # shown by its tables (`Reported`)
class AllreduceOverlapResult(TwoParts, Reported):
    """The all-reduce alone, the compute alone, a call's fixed cost, and both in one function.

    `launch`: the compute function on 1x1 matrices, a call that does no work: what one function
    saves over two separate calls. `rows`: one traced call of the combined function.
    """

    n_devices: int
    kind: str
    overlap: bool
    nbytes: int
    allreduce: Measurement
    compute: Measurement
    launch: Measurement
    combined: Measurement
    sum_name = "all-reduce + compute - launch"  # not a field: how `TwoParts` writes the ideal
    rows: list[OpEvent]  # one traced call, through `allreduce_timeline`
    devices: list[str]
    cores: int = dataclasses.field(default_factory=usable_cores)

    @property
    def parts(self) -> tuple[Measurement, Measurement]:
        return self.allreduce, self.compute

    @property
    def ideal(self) -> float:
        return self.ideal_overlapped if self.overlap else self.ideal_sequential

    def against_sequential(self) -> Comparison:
        """The combined run against the one-after-the-other ideal, with all four noises."""
        return Comparison(
            self.combined.median, self.ideal_sequential, self.hidden_noise * self.shorter
        )

    def traced_overlap(self) -> dict[str, float]:
        """Per device, |all-reduce ∩ matmuls| / the shorter of the two, from the trace.

        1 when the shorter ran entirely while the other did; 0 when they took turns. Empty
        for an incomplete trace: its missing rows would read as time not overlapped; so is a
        device on which either part left no rows (nothing to compare, not 0%).
        """
        if incomplete_reason(self.rows):
            return {}
        fractions = {}
        for device in self.devices:
            reducing = busy_intervals(allreduce_rows(self.rows, device))
            computing = busy_intervals(self.rows, device, "matmul")
            shorter = min(busy_seconds(reducing), busy_seconds(computing))
            if shorter > 0:
                fractions[device] = overlap_seconds(reducing, computing) / shorter
        return fractions

    @property
    def impossible_result(self) -> bool:
        """Faster than max(allreduce, compute) (overlapped) or than the sum (one after the
        other) beyond the noise: a measurement problem, not a result."""
        if self.against_overlapped().a_faster:
            return True
        return not self.overlap and self.against_sequential().a_faster

    def not_a_result(self) -> bool:
        """Why the hidden share is not shown is in the warnings (`TwoParts.hidden_text`)."""
        return self.above_ceiling or self.below_sequential or self.impossible_result

    @property
    def above_ceiling(self) -> bool:
        """Overlapped, a hidden share above `hidden_ceiling` but inside the noise: too noisy to
        tell which time is off. The share passes its ceiling exactly when the combined call is
        faster than max(allreduce, compute), so that is what is compared (no rounding)."""
        return (
            self.overlap
            and not self.impossible_result
            and self.combined.median < self.ideal_overlapped
        )

    @property
    def below_sequential(self) -> bool:
        """Forced one after the other, yet below its ideal (the parts' sum less a launch) by
        more than the noise floor, inside the noise: too noisy to tell which time is off (as
        notebook 02 reads the same case)."""
        return (
            not self.overlap
            and not self.impossible_result
            and how_below_ideal(self.combined, self.ideal_sequential) is not None
        )

    @property
    def verdict(self) -> str:
        """What the time says, then what the trace says, both from this run."""
        if self.impossible_result:
            return "No verdict: the combined run measured faster than its ideal (see the warning)."
        if self.above_ceiling:
            return (
                "No verdict: the hidden share came out above its ceiling, inside the noise (see "
                "the warning)."
            )
        if self.below_sequential:
            return (
                "No verdict: forced one after the other, the combined run came out below its "
                "ideal, inside the noise (see the warning)."
            )
        c = self.against_sequential()
        both = f"the two in one function took {format_seconds(c.a)}"
        sequential = f"one after the other ({format_seconds(c.b)}, the parts' sum less a launch)"
        if not self.overlap:
            if c.a_slower:
                timed = f"In order, {both}: {c.ratio:.2f}x its ideal, {sequential}."
            else:
                timed = (
                    f"In order, {both}: no measurable difference from its ideal, {sequential}, "
                    f"within the noise of {format_seconds(c.noise)}."
                )
        elif c.a_faster:
            timed = (
                f"Overlapped, {both}: {format_seconds(c.b - c.a)} less than {sequential}, "
                f"hiding {self.hidden_fraction:.0%} of the shorter part (at most "
                f"{self.hidden_ceiling:.0%}: 1 - launch / min(all-reduce, compute))."
            )
        elif c.a_slower:
            timed = (
                f"Overlapped, {both}: {c.ratio:.2f}x {sequential}: running them at once cost "
                "time here and hid none."
            )
        else:
            timed = (
                f"Overlapped, {both}: no measurable difference from {sequential}, within the "
                f"noise of {format_seconds(c.noise)}: no time measurably hidden."
            )
            full = self.against_overlapped()
            if not full.measurable:  # read 129: within both ideals, 'none hidden' is not shown
                timed += (
                    f" It is also within the noise ({format_seconds(full.noise)}) of max("
                    f"all-reduce, compute), {format_seconds(full.b)}: this run cannot tell a "
                    "full overlap from none."
                )
        return f"{timed} {self._traced_sentence(c)}"

    def against_overlapped(self) -> Comparison:
        """The combined run against max(all-reduce, compute), with its noise and the longer
        part's (as `impossible_result` reads the same ideal)."""
        longer = max(self.allreduce, self.compute, key=lambda m: m.median)
        noise = noise_of(self.combined) + noise_of(longer)
        return Comparison(self.combined.median, self.ideal_overlapped, noise)

    def _traced_sentence(self, c: Comparison) -> str:
        fractions = self.traced_overlap()
        if not fractions:
            return incomplete_reason(self.rows) or "The trace caught no all-reduce and matmuls."
        each = ", ".join(f"{short_device_name(d)} {f:.0%}" for d, f in fractions.items())
        sentence = (
            f"The trace shows the all-reduce and the matmuls at the same time for {each} of "
            "the shorter part."
        )
        shown = max(fractions.values()) > 0  # read 125: nothing at the same time, no turns
        if self.kind == "logical CPU" and self.cores == 1 and shown:
            sentence += (
                " With 1 usable CPU core, ops at the same time in a trace were both in "
                "progress, taking turns on that core wherever both needed it (an op waiting for "
                "its peer needs none; which was waiting is not traced)."
            )
        elif shown and self.kind == "logical CPU" and len(self.devices) >= self.cores > 1:
            sentence += (
                f" With {cores_phrase(self.cores)} for {len(self.devices)} devices' matmuls and "
                "the ring's own threads, ops at the same time in a trace were in progress "
                "together, taking turns on the cores wherever more needed a core than there are "
                "(expected from how the operating system shares cores, not traced; an op waiting "
                "for its peer needs none, and which were waiting is not traced either)."
            )
        traced = statistics.mean(fractions.values())
        hidden = self.hidden_fraction if c.a_faster else 0.0
        if self.overlap and traced - hidden > self.hidden_noise:
            sentence += " Running at the same time is not running for free"
            if self.kind == "logical CPU":
                sentence += (
                    f"; both may need the same {cores_phrase(self.cores)}: whether the ring's "
                    "time is copies and adds that need a core (as the matmuls do) or waiting is "
                    "a hypothesis this run does not test."
                )
            else:
                sentence += "."
        return sentence

    def parts_against(self, other: AllreduceOverlapResult) -> str:
        """This run's parts alone against another run's (each run times its own): where one
        differs beyond both noises, the machine's speed moved between the cells, and each run's
        verdict holds against its own parts only (read 54: 10.39 ms against 13.95 ms, unsaid)."""
        parts = parts_between_runs(
            [
                ("all-reduce alone", self.allreduce, other.allreduce),
                ("matmul chains alone", self.compute, other.compute),
                ("launch", self.launch, other.launch),  # read 86: it enters both ideals too
            ],
            "both runs share one yardstick",
        )
        # read 132: the two combined calls, read directly (an overlapped call slower than the
        # forced order was left to be inferred from two tables)
        names = [
            "the " + ("overlapped" if r.overlap else "forced-order") + " combined call"
            for r in (self, other)
        ]
        both = faster_or_slower(self.combined, other.combined, *names)
        return f"{parts}; {both} (each timed in its own cell)"

    def tables(self) -> list[Table]:
        parts = [self.allreduce, self.compute, self.launch, self.combined]
        names = [
            f"all-reduce of {format_bytes(self.nbytes)} alone",
            "matmul chains alone",
            "launch: the compute function on 1x1 matrices",
            "both in one function, " + ("overlapped" if self.overlap else "one after the other"),
        ]
        rows = [
            (name, format_seconds(m.median), format_seconds(m.iqr), len(m.times))
            for name, m in zip(names, parts, strict=True)
        ]
        title = f"all-reduce and compute on {self.n_devices} {self.kind} devices"
        measured = Table(title, ("run", "median", "IQR", "runs"), rows)
        ideal_rows = [  # (name, ideal, whether it is a floor for this run's order)
            ("one after the other: all-reduce + compute - launch", self.ideal_sequential,
             not self.overlap),
            ("overlapped: max(all-reduce, compute)", self.ideal_overlapped, True),
        ]  # fmt: skip
        compared = []
        for name, ideal, floor in ideal_rows:  # read 178: below its floor, marked where printed
            aside = floor and self.combined.median < ideal and self.not_a_result()
            ratio = f"{self.combined.median / ideal:.2f}x"
            compared.append(
                (name, format_seconds(ideal), ratio + " (below it: not a result)" * aside)
            )
        compared.append(
            (
                "hidden: (sum - launch - both) / min(all-reduce, compute)",
                self.hidden_text(),
                f"ceiling {self.hidden_ceiling:.0%} = 1 - launch / min(all-reduce, compute)"
                if self.overlap
                else "ideal 0%: order forced",
            )
        )
        traced = self.traced_overlap()
        for device, fraction in traced.items():
            compared.append(
                (f"traced at the same time on {short_device_name(device)}", f"{fraction:.0%}", "")
            )
        if incomplete_reason(self.rows):
            compared.append(("traced at the same time", "trace incomplete", ""))
        elif not traced:
            compared.append(("traced at the same time", "no all-reduce and matmuls caught", ""))
        columns = ("ideal, or what was hidden and traced", "value", "both / ideal")
        notes = [self.verdict]
        if self.kind == "logical CPU" and self.cores == 1:  # read 67: said where it cannot hold
            notes.append(
                "with 1 usable CPU core, max(all-reduce, compute) and the ceiling are reachable "
                "only for the part of the all-reduce that waits rather than computes: work that "
                "needs the core takes turns on it, so for that part the reachable is one after "
                "the other (expected, not measured: how much of the ring's time computes is not "
                "traced)"
            )
        return [
            measured,
            Table("against the ideals", columns, compared, notes, self.flags()),
        ]

    def flags(self) -> list[str]:
        found = []
        if self.impossible_result:
            ideal = "max(all-reduce, compute)" if self.overlap else "all-reduce + compute - launch"
            found.append(
                impossible(
                    f"both in one function took {format_seconds(self.combined.median)}, faster "
                    f"than its ideal {ideal}",
                    OVERLAP_CAUSES,
                )
            )
        hidden, noise = self.hidden_fraction, self.hidden_noise
        if self.above_ceiling:
            found.append(
                f"a hidden fraction of {hidden:.0%} (± {noise:.0%}) is above its ceiling "
                f"{self.hidden_ceiling:.0%} = 1 - launch / min(all-reduce, compute) (the combined "
                "call below max(all-reduce, compute)), inside the noise: this run was too noisy "
                "to tell which time is off, so not a result"
            )
        elif self.below_sequential:
            found.append(
                f"forced one after the other, both in one function took "
                f"{format_seconds(self.combined.median)} = "
                f"{self.combined.median / self.ideal_sequential:.2f}x its ideal all-reduce + "
                f"compute - launch {format_seconds(self.ideal_sequential)}, below it inside the "
                "noise: this run was too noisy to tell which time is off, so not a result"
            )
        elif -hidden > noise:  # read 167: inside the noise, '-0% is below 0' beside 1.00x
            found.append(
                f"a hidden fraction of {hidden:.0%} (± {noise:.0%}) is below 0, so it is not a "
                "share of time hidden: the combined run took longer than the parts one after "
                "the other. Possible causes, not measured here: the runs contend for the same "
                "cores or memory, or the machine was busy (another program or another copy of "
                "this notebook)"
            )
        for m in (self.allreduce, self.compute, self.launch, self.combined):
            found += [f"{m.label}: {warning}" for warning in m.warnings]
        return found
