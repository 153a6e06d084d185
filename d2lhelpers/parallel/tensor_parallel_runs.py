"""Tensor parallelism measured: inputs checked first, then the split MLP timed beside one device.

The scheme is notebook 04's saved code (`parallel.tensor_parallel`, Megatron's column-then-row
split and its all-reduce); `run_tensor_parallel` takes the notebook's own
`tensor_parallel_in_one_graph`, so an edited cell changes what is measured. What is counted: the
all-reduces of one forward pass, read from the traced graph. An MLP block has one; a transformer
layer has two (after attention and after the MLP), the seed's "about twice per layer", and
training adds two more in the backward pass. Widths that N does not divide are cut into uneven
slices (10 columns on 4 devices: 3, 3, 2, 2); the widest slice sets the pace.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from d2lhelpers.core.checks import require_measure_options, require_rate
from d2lhelpers.core.progress import Progress
from d2lhelpers.core.units import BYTES_PER_FLOAT
from d2lhelpers.devices import Device, check_fits
from d2lhelpers.parallel import tensor_parallel
from d2lhelpers.parallel.model import (
    check_mlp_run,
    max_difference,
    mlp_setup,
    split_sizes,
)
from d2lhelpers.parallel.result import ParallelResult, measure_calls


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class TensorParallelResult(ParallelResult):
    """A measured tensor-parallel MLP: also its sizes, the slices' widths and its all-reduces."""

    width: int = 0
    hidden: int = 0
    shard_widths: list[int] = dataclasses.field(default_factory=list)
    allreduces: int = 0  # in one forward pass, counted in the traced graph

    def details(self) -> list[str]:
        split_line = (
            f"hidden width {self.hidden} cut into {self.shard_widths}; {self.allreduces} "
            f"all-reduce per forward pass (counted in the graph), of a {self.samples}x"
            f"{self.width} block, {2 * (self.n_devices - 1)} hand-overs each (as `allreduce_sum` "
            "is written: the running sum in, the total out; not counted here)"
        )
        return [split_line, *super().details()]


def shard_bytes(width: int, hidden: int, batch: int, n_devices: int) -> int:
    """What one device holds: its slices of W1, b1, W2, b2, and x, H_k, its partial sum and Y."""
    slice_width = math.ceil(hidden / n_devices)
    weights = 2 * width * slice_width + slice_width + width
    activations = batch * (3 * width + slice_width)
    return BYTES_PER_FLOAT * (weights + activations)


def check_tensor_parallel(
    width: int, batch: int, n_devices: int, hidden: int | None = None
) -> tuple[int, list[Device], list[int]]:
    """Validate a tensor-parallel run before anything is allocated: (hidden, devices, slices)."""
    hidden, devices = check_mlp_run(width, batch, n_devices, hidden)
    shard_widths = split_sizes(hidden, n_devices, "hidden columns")
    what = f"a 1/{n_devices} slice of a {width}x{hidden} MLP on each device"
    check_fits(shard_bytes(width, hidden, batch, n_devices), devices, what)
    return hidden, devices, shard_widths


def run_tensor_parallel(
    width: int,
    batch: int,
    n_devices: int,
    hidden: int | None = None,
    progress: Progress | None = None,
    device_peak: float | None = None,
    in_one_graph: Callable | None = None,
    **measure_options,
) -> TensorParallelResult:
    """The MLP (width -> hidden -> width) split over `n_devices`, timed beside one device.

    `in_one_graph(weights, device_names)` builds the split's tf.function (default: the saved
    `tensor_parallel_in_one_graph`). `hidden` defaults to 4 x `width`; any hidden width >=
    n_devices works (uneven slices). Inputs that are wrong or do not fit are refused before
    anything is allocated.
    """
    require_rate("device_peak", device_peak)
    require_measure_options(measure_options)
    hidden, devices, shard_widths = check_tensor_parallel(width, batch, n_devices, hidden)
    build = in_one_graph or tensor_parallel.tensor_parallel_in_one_graph
    names, weights, x, flops, reference_run = mlp_setup(width, hidden, batch, devices)
    run = build(weights, names)
    label = f"tensor parallel on {n_devices}"
    calls = [
        ("one device", lambda: reference_run(x, weights), 1),
        (label, lambda: run(x), n_devices),
    ]
    timings = measure_calls(calls, flops, device_peak, progress, **measure_options)
    expected = reference_run(x, weights)
    return TensorParallelResult(
        scheme="tensor parallel",
        devices=names,
        kind=devices[0].kind,
        samples=batch,
        measurement=timings[1],
        reference=timings[0],
        ideal_speedup=hidden / max(shard_widths),
        max_error=max(max_difference(y, expected) for y in run(x)),
        width=width,
        hidden=hidden,
        shard_widths=shard_widths,
        allreduces=tensor_parallel.count_allreduces(run.get_concrete_function(x).graph),
    )
