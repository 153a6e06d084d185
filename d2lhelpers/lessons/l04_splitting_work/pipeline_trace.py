"""The pipeline's bubble: traced calls' idle share, and measured runs compared, beside GPipe."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable

from d2lhelpers.collectives.costs import pipeline_bubble_fraction
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import cores_phrase, enough_digits, plural, usable_cores
from d2lhelpers.core.verdicts import fraction_flags, impossible
from d2lhelpers.devices import setup_devices
from d2lhelpers.parallel.pipeline_runs import (
    PipelineResult,
    bubble_floor,
    bubble_from_trace,
    stages_together_from_trace,
    trace_pipeline,
)
from d2lhelpers.tracing.timeline import OpEvent, incomplete_reason


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class PipelineTraceResult(Reported):
    """Several traced pipeline calls: each one's idle share, beside GPipe's model.

    A trace is one call, with no repeats to give its noise: the spread of the idle share over
    the traced calls is the band a verdict uses, and `rows` is the call with the median share.
    """

    calls: list[list[OpEvent]]
    devices: list[str]
    microbatches: int
    kind: str
    cores: int

    @property
    def whole(self) -> list[list[OpEvent]]:
        """The calls whose trace holds every op: an incomplete one's missing rows read as idle."""
        return [rows for rows in self.calls if not incomplete_reason(rows)]

    @property
    def bubbles(self) -> list[float]:
        return [bubble_from_trace(rows, self.devices) for rows in self.whole]

    @property
    def bubble(self) -> float | None:
        """The median idle share of the whole traces; None when no trace was whole."""
        return statistics.median_low(self.bubbles) if self.bubbles else None

    @property
    def rows(self) -> list[OpEvent]:
        """The timeline of the call whose idle share is the median (or one that says why not)."""
        if self.bubble is None:
            return self.calls[0]
        return self.whole[self.bubbles.index(self.bubble)]

    @property
    def model(self) -> float:
        return pipeline_bubble_fraction(len(self.devices), self.microbatches)

    @property
    def floor(self) -> float:
        return bubble_floor(len(self.devices), self.microbatches, self.kind, self.cores)

    @property
    def spread(self) -> str:
        low, high = min(self.bubbles), max(self.bubbles)
        whole, traced = len(self.whole), len(self.calls)
        calls = (
            f"{traced} traced calls"
            if whole == traced
            else f"{whole} whole of {traced} traced calls"
        )
        return f"{calls}: {low:.0%} to {high:.0%}"

    def flags(self) -> list[str]:
        if self.bubble is None:
            return []
        flags = [f for b in self.bubbles for f in fraction_flags(b, "a traced idle share")]
        if not flags and max(self.bubbles) < self.floor:
            flags.append(
                impossible(
                    f"every traced idle share ({self.spread}) is below the least possible "
                    f"{self.floor:.0%}"
                )
            )
        return flags

    @property
    def verdict(self) -> str:
        if self.bubble is None:
            return incomplete_reason(self.rows)
        if self.flags():
            return "the traced idle share is flagged, not a result (see the warning)"
        low, high = min(self.bubbles), max(self.bubbles)
        model = f"the GPipe model (p-1)/(m+p-1) = {self.model:.0%}"
        if low > self.model:
            where = f"more than {model} in every call"
        elif high < self.model:
            where = f"less than {model} in every call"
        else:
            where = f"{model} lies within that spread"
        serial = 1 - 1 / len(self.devices)
        if len(self.devices) > 1 and low >= serial:
            where += (
                f"; every call at or above {serial:.0%} = 1 - 1/p, the idle share of stages "
                "taking turns: no traced call shows time gained from overlapping them"
            )
        elif len(self.devices) > 1 and high < serial:  # busy time summed beyond the span
            where += (
                f"; every call below {serial:.0%} = 1 - 1/p: the stages were in flight at the "
                "same time in every traced call (a trace cannot show whether each had a core)"
            )
        return (
            f"idle share in the traces: {self.bubble:.0%} ({self.spread}); {where}{self.together}"
        )

    @property
    def together(self) -> str:
        """'; the two stages in flight at the same time for 12% to 30% of the shorter's busy
        time ...': what answers whether they overlapped at all (an idle share alone cannot)."""
        shares = [
            s
            for rows in self.whole
            if (s := stages_together_from_trace(rows, self.devices)) is not None
        ]
        if len(self.devices) < 2 or not shares:
            return ""
        low, high = min(shares), max(shares)
        spread = f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%} to {high:.0%}"
        said = (
            f"; the first two stages had ops in flight at the same time for {spread} of the "
            "shorter's busy time"
        )
        if high <= 0:
            return said + ": in every traced call they took turns"
        # (on one core any overlap reads below the floor, and the verdict is a flag instead)
        return said + " (0% would be one after the other)"

    def tables(self) -> list[Table]:
        notes = []
        if self.kind == "logical CPU" and len(self.devices) > self.cores:
            note = (
                f"{len(self.devices)} stages on {cores_phrase(self.cores)}: at most "
                f"{plural(self.cores, 'stage')} {'computes' if self.cores == 1 else 'compute'} "
                "at a time, so the time idle cannot fall below "
                f"{self.floor:.0%} here while no two stages have ops in flight together (a bar "
                "runs from an op's start to its end, so it is expected to count any wait for a "
                "core inside it as busy: not measured here)"
            )
            if self.bubbles and min(self.bubbles) < self.floor:
                note += (
                    f"; a trace may count an op busy while it waits its turn on the cores, so a "
                    f"traced share can read lower ({min(self.bubbles):.0%} here; a hypothesis: "
                    "the trace does not show which op held a core)"
                )
            notes.append(note)
        return [Table("", (), (), [self.verdict, *notes], self.flags())]


def run_pipeline_trace(
    width: int,
    batch: int,
    microbatches: int,
    n_devices: int,
    in_one_graph: Callable | None = None,
    calls: int = 3,
) -> PipelineTraceResult:
    """Trace `calls` pipelined calls (8 layers) and read the bubble each timeline shows."""
    traces, names = trace_pipeline(
        width, batch, microbatches, n_devices, in_one_graph=in_one_graph, calls=calls
    )
    kind = setup_devices()[0].kind
    return PipelineTraceResult(traces, names, microbatches, kind, usable_cores())


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class BubbleComparisonResult(Reported):
    """The same pipeline measured with fewer and more microbatches: the bubble beside the model."""

    runs: list[PipelineResult]

    @property
    def verdict(self) -> str:
        few, many = self.runs
        if not (few.bubble_trusted and many.bubble_trusted):
            return "a bubble or a run was flagged, so the two cannot be compared (see the warnings)"
        # each bubble's band is wider downwards (`bubble_noise`) than upwards (`_up`)
        shrank = few.bubble_noise + many.bubble_noise_up
        grew = few.bubble_noise_up + many.bubble_noise
        if math.isinf(shrank) or math.isinf(grew):
            change = f"{few.measured_bubble:.0%} -> {many.measured_bubble:.0%}"
            said = f"too noisy to compare the two bubbles ({change}: one has no band)"
        elif few.below_floor or many.below_floor:  # read 94: a 'not a result' was compared
            change = f"{few.measured_bubble:.0%} -> {many.measured_bubble:.0%}"
            said = f"a bubble below its least possible is not a result, so not compared ({change})"
        else:
            said = self._change_words()
        return f"{said}; {few.microbatches} microbatches: {few.bubble_reading}; " + (
            f"{many.microbatches}: {many.bubble_reading}"
        )

    def _change_words(self) -> str:
        """Shrank, grew or neither beyond the two bands, in points with the decimals (up to 3)
        that let a reader see the verdict from the printed gap and bands (read 141: '37% -> 19%'
        'measurably' shrank, beside bands of -7% and +11%), and only the allowance for the
        direction it moved (read 147: 'noise -77%/+37%' beside a drop)."""
        few, many = self.runs

        def down_of(run) -> float:  # a bubble is never below 0: the table's band stops there
            return min(run.bubble_noise, max(run.measured_bubble, 0.0))

        shrank = down_of(few) + many.bubble_noise_up
        grew = few.bubble_noise_up + down_of(many)

        def side(gap: float, down: float, up: float) -> int:
            return 1 if gap > down else -1 if gap < -up else 0

        def points(x: float, d: int) -> float:
            return round(100 * x, d)

        def printed(d: int) -> tuple[float, float, float]:
            gap = round(points(few.measured_bubble, d) - points(many.measured_bubble, d), d)
            down = round(points(down_of(few), d) + points(many.bubble_noise_up, d), d)
            up = round(points(few.bubble_noise_up, d) + points(down_of(many), d), d)
            return gap, down, up

        verdict = side(few.measured_bubble - many.measured_bubble, shrank, grew)

        def shows(d: int) -> bool:  # read 158: 'down 25, within the 25' read as a tie
            gap, down, up = printed(d)
            return side(gap, down, up) == verdict and gap not in (down, -up)

        d = enough_digits(shows, 0, 2, past=3)
        gap, down, up = printed(d)
        change = (
            f"{points(few.measured_bubble, d):.{d}f}% -> {points(many.measured_bubble, d):.{d}f}%"
        )
        if verdict == 1:
            return (
                f"more microbatches measurably shrank the bubble: {change}, down {gap:.{d}f} "
                f"points, more than the {down:.{d}f} the two bands allow (the first's down, "
                "the second's up)"
            )
        if verdict == -1:
            return (
                f"more microbatches measurably grew the bubble here: {change}, up {-gap:.{d}f} "
                f"points, more than the {up:.{d}f} the two bands allow"
            )
        moved = (
            f"down {gap:.{d}f} points, within the {down:.{d}f} the two bands allow for a drop"
            if gap >= 0
            else f"up {-gap:.{d}f} points, within the {up:.{d}f} the two bands allow for a rise"
        )
        return f"no measurable difference between the two bubbles ({change}: {moved})"

    def tables(self) -> list[Table]:
        rows = []
        for run in self.runs:
            measured = (  # a wrong split or a flagged bubble gives no bubble to read
                "flagged" if not run.bubble_trusted else run.bubble_text()
            )
            if run.bubble_trusted and run.below_floor:  # read 80: 26% ± 118% beside a least of 33%
                measured += f", below the least possible {run.bubble_floor:.0%}: not a result"
            rows.append((run.microbatches, measured, f"{run.model_bubble:.0%}"))
        columns = ("microbatches", "measured bubble", "GPipe model (p-1)/(m+p-1)")
        flags = [flag for run in self.runs for flag in run.flags()]
        return [Table("the bubble against the microbatches", columns, rows, [self.verdict], flags)]


def compare_bubbles(few: PipelineResult, many: PipelineResult) -> BubbleComparisonResult:
    """Two pipeline runs that differ only in their microbatches, fewer first."""
    if few.microbatches >= many.microbatches or few.stage_layers != many.stage_layers:
        raise ValueError(
            "give two runs of the same pipeline, the one with fewer microbatches first"
        )
    return BubbleComparisonResult([few, many])
