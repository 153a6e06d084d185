"""Notebook 07: one layout serving one offered load, read in its steady-state window."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from d2lhelpers.core import checks
from d2lhelpers.core.progress import no_progress
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.verdicts import higher_or_lower, with_noise
from d2lhelpers.lessons.l07_serving.plots import plot_requests
from d2lhelpers.lessons.l07_serving.points import (
    POINT_COLUMNS,
    Capacity,
    LoadPoint,
    Window,
    capacities_against_sweep,
    describe_step,
    measure_capacity,
    ready_engines,
    run_point,
    setup_run,
)
from d2lhelpers.serving.config import LAYOUTS
from d2lhelpers.serving.engines import ServingCode


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class ServingRunResult(Reported):
    """A layout's measured capacity and one timed load on it."""

    layout: str
    capacity: Capacity
    point: LoadPoint
    # (model config, devices, slots per device, tokens per request), as `LoadSweepResult.setup`
    setup: tuple = ()
    config = property(lambda self: self.setup[0] if self.setup else None)

    def against_sweep(self, sweep) -> str:
        """This run's capacity against the load sweep's for its layout, timed in another cell
        (read 174: 4.1 ktok/s here, 5.3 in the sweep, beyond both noises, unsaid); '' without
        a sweep, as `capacities_against_sweep`."""
        if sweep is None:
            return ""
        if self.config is None or sweep.config is None:
            return (
                "this run's or the sweep's model was not recorded, so their capacities are not "
                "compared"
            )
        if not sweep.same_setup(self):
            return (
                "this run and the sweep served different setups (model, devices, slots or tokens), "
                "so their capacities are not compared"
            )
        return capacities_against_sweep(sweep, [(self.layout, self.capacity.tokens_per_s)])

    def plot(self, ax=None):
        """Each request of the load, its window shaded (`plots.plot_requests`)."""
        return plot_requests(self.point.log, ax, window=self.point.span)

    @property
    def verdict(self) -> str:
        p = self.point
        return higher_or_lower(p.throughput, p.offered_tokens, "throughput", "the offered load")

    def tables(self) -> list[Table]:
        c = self.capacity
        start, end = self.point.span
        steps = "; ".join(
            f"server {i}: decoding step {describe_step(d)} for {slots} slots, prefill "
            f"{describe_step(p)}"
            for i, (d, p, slots) in enumerate(zip(c.decode, c.prefill, c.slots, strict=True))
        )
        notes = [
            f"capacity from its steps: {with_noise(c.tokens_per_s, 'tokens/s')}"
            f", every server's summed ({steps})",
            f"window {start:.2f}-{end:.2f} s: {len(self.point.in_window)} requests arrived in it; "
            f"warm-up before it and drain after it left out",
        ]
        notes += [line for line in [c.summed_note(self.point.throughput)] if line]
        stall = self.point.stalled(self.layout)
        return [
            Table(
                f"{self.layout}, one load",
                POINT_COLUMNS,
                [self.point.row()],
                notes,
                [stall] * bool(stall) + c.warnings,
            )
        ]


def run_serving(
    layout: str = "replicas",
    n_devices: int = 2,
    load: float = 0.7,
    *,
    prompt_len: int = 8,
    n_out: int = 16,
    width: int = 64,
    layers: int = 2,
    slots_per_device: int = 4,
    window: Window | None = None,
    code: ServingCode | None = None,
    progress: Callable | None = None,
) -> ServingRunResult:
    """`layout` at `load` x its measured capacity, Poisson arrivals, read in its window."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    config, devices, window, code = setup_run(
        n_devices, width, layers, prompt_len, n_out, window, code, least=1
    )
    checks.require_rate("load", load, allow_none=False)
    engines = ready_engines(layout, config, devices, slots_per_device, code, prompt_len)
    capacity = measure_capacity(engines, prompt_len, n_out)
    rate = load * capacity.requests_per_s
    point = run_point(engines, rate, config, n_out, window, code, progress=progress or no_progress)
    setup = (config, n_devices, slots_per_device, n_out)
    return ServingRunResult(layout, capacity, point, setup)
