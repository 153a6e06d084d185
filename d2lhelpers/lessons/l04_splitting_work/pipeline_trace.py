"""The pipeline's bubble: one traced call's idle share, and measured runs compared, beside GPipe."""

from __future__ import annotations

import dataclasses

from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import cores_phrase, usable_cores
from d2lhelpers.core.verdicts import NOISE_FLOOR, fraction_flags, impossible
from d2lhelpers.parallel.pipeline_parallel import (
    PipelineRun,
    bubble_floor,
    bubble_from_trace,
    trace_pipeline,
)
from d2lhelpers.tracing.timeline import incomplete_reason


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class PipelineTrace(Reported):
    """One traced pipeline call: its timeline rows and the idle share they show, beside GPipe."""

    rows: list
    devices: list
    microbatches: int
    kind: str
    cores: int

    @property
    def bubble(self) -> float | None:
        """None from an incomplete trace: its missing rows would read as idle time."""
        return None if incomplete_reason(self.rows) else bubble_from_trace(self.rows, self.devices)

    @property
    def floor(self) -> float:
        return bubble_floor(len(self.devices), self.microbatches, self.kind, self.cores)

    def flags(self) -> list[str]:
        if self.bubble is None:
            return []
        flags = fraction_flags(self.bubble, "the traced idle share")
        # A trace has no repeats to give its noise: allow the house's noise floor.
        if not flags and self.bubble < self.floor - NOISE_FLOOR:
            flags.append(
                impossible(
                    f"the traced idle share {self.bubble:.0%} is below the least possible "
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
        p, m = len(self.devices), self.microbatches
        model = (p - 1) / (m + p - 1)
        if self.bubble > model + NOISE_FLOOR:
            where = "more than"
        elif self.bubble < model - NOISE_FLOOR:
            where = "less than"
        else:
            where = "close to"
        return (
            f"idle share in this trace: {self.bubble:.0%}, {where} the GPipe model "
            f"(p-1)/(m+p-1) = {model:.0%}"
        )

    def tables(self) -> list[Table]:
        notes = []
        if self.kind == "logical CPU" and len(self.devices) > self.cores:
            notes.append(
                f"{len(self.devices)} stages on {cores_phrase(self.cores)}: the idle "
                f"share cannot fall below {self.floor:.0%} here"
            )
        return [Table("", (), (), [self.verdict, *notes], self.flags())]


def run_pipeline_trace(width: int, batch: int, microbatches: int, n_devices: int) -> PipelineTrace:
    """Trace one pipelined call (8 layers) and measure the bubble the timeline shows."""
    rows, devices = trace_pipeline(width, batch, microbatches, n_devices)
    return PipelineTrace(rows, devices, microbatches, devices[0].kind, usable_cores())


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class BubbleComparison(Reported):
    """The same pipeline measured with fewer and more microbatches: the bubble beside the model."""

    runs: list[PipelineRun]

    @property
    def verdict(self) -> str:
        few, many = self.runs
        if not (few.trusted and many.trusted):
            return "a bubble or a run was flagged, so the two cannot be compared (see the warnings)"
        gap = few.measured_bubble - many.measured_bubble
        band = few.bubble_noise + many.bubble_noise
        change = f"{few.measured_bubble:.0%} -> {many.measured_bubble:.0%}"
        if gap > band:
            return f"more microbatches measurably shrank the bubble: {change}"
        if gap < -band:
            return f"more microbatches measurably grew the bubble here: {change}"
        return f"no measurable difference between the two bubbles ({change}, noise ±{band:.0%})"

    def tables(self) -> list[Table]:
        rows = []
        for run in self.runs:
            measured = (
                "flagged"
                if run.bubble_flags
                else f"{run.measured_bubble:.0%} ± {run.bubble_noise:.0%}"
            )
            rows.append((run.microbatches, measured, f"{run.model_bubble:.0%}"))
        columns = ("microbatches", "measured bubble", "GPipe model (p-1)/(m+p-1)")
        flags = [flag for run in self.runs for flag in run.flags()]
        return [Table("the bubble against the microbatches", columns, rows, [self.verdict], flags)]


def compare_bubbles(few: PipelineRun, many: PipelineRun) -> BubbleComparison:
    """Two pipeline runs that differ only in their microbatches, fewer first."""
    if few.microbatches >= many.microbatches or few.stage_layers != many.stage_layers:
        raise ValueError(
            "give two runs of the same pipeline, the one with fewer microbatches first"
        )
    return BubbleComparison([few, many])
