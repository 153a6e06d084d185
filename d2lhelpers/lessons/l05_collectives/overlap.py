"""Notebook 05: an all-reduce and independent matmuls in one function, timed and traced.

The seed's recap: "fuse all_reduce with the next layer's forward". The all-reduce alone, the
matmuls alone, a call that does no work, and both in one function are timed in turns, then the
combined function is traced once (`overlap_result` says what the numbers mean). The all-reduce
and the combined function are the notebook's (`allreduce_in_one_graph`,
`allreduce_and_compute`): an edited cell changes what runs.
"""

from __future__ import annotations

from collections.abc import Callable

from d2lhelpers.collectives import tf_collective
from d2lhelpers.collectives.allreduce_trace import (
    allreduce_consumers,
    allreduce_timeline,
    trace_with_allreduce,
)
from d2lhelpers.collectives.tf_allreduce import (
    allreduce_devices,
    allreduce_inputs,
    message_elements,
    require_message_fits,
)
from d2lhelpers.core.checks import require_count, require_measure_options
from d2lhelpers.core.counts import chain_bytes, chain_flops
from d2lhelpers.core.heap import return_freed_memory
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.units import MiB, device_names, format_bytes
from d2lhelpers.lessons.l05_collectives.overlap_result import AllreduceOverlapResult
from d2lhelpers.timing.interleaved import measure_in_turns
from d2lhelpers.workloads import chains_in_one_graph, random_matrix

MAX_CHAIN_SIZE = 8192  # matrices beyond this take minutes per chain on CPUs


def _overlap_checks(n_devices, size, chain_size, chain_length) -> tuple[list, int, int, int]:
    if n_devices is None:
        raise TypeError("n_devices must be a whole number of devices, 2 or more, got None")
    devices = allreduce_devices(n_devices, "there is nothing to overlap")
    message_elements(size, "size")
    chain_size = require_count("chain_size", chain_size, 1, MAX_CHAIN_SIZE)
    chain_length = require_count("chain_length", chain_length, 1, 1000)
    return devices, size, chain_size, chain_length


def run_allreduce_overlap(
    n_devices: int = 2,
    size: int = 8 * MiB,
    chain_size: int = 256,
    chain_length: int = 12,
    overlap: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    rounds: int = 3,
    allreduce_and_compute: Callable = tf_collective.allreduce_and_compute,
    allreduce_in_one_graph: Callable = tf_collective.allreduce_in_one_graph,
    **measure_options,
) -> AllreduceOverlapResult:
    """Time an all-reduce of `size` bytes per device and a chain of `chain_length` matmuls of
    `chain_size`² per device: each alone, then together in one function, and trace that one.
    The all-reduce alone is `allreduce_in_one_graph(devices)`; both together are
    `allreduce_and_compute(devices, chain_length, overlap)`.
    The four are timed in turns, `rounds` times (`measure_in_turns`), so a machine whose load
    changes meanwhile slows them alike.

    The defaults make the two parts similar (a few ms each on 2 cores), where the two ideals
    differ most. Checked before anything is allocated: at least 2 devices, a size that is a
    multiple of 4 bytes, and memory for both. `progress(done, total, status)` after every
    timed block.
    """
    for fn in (allreduce_and_compute, allreduce_in_one_graph):
        if not callable(fn):
            raise TypeError(f"pass the notebook's functions, got {fn!r}")
    options = require_measure_options(measure_options, budget_s=1.0)
    rounds = require_count("rounds", rounds, 1, 20)
    if not isinstance(overlap, bool):
        raise TypeError(f"overlap must be True or False, got {overlap!r}")
    devices, size, chain_size, chain_length = _overlap_checks(
        n_devices, size, chain_size, chain_length
    )
    what = f"an all-reduce of {format_bytes(size)} and a {chain_size}² matmul chain"
    require_message_fits(size, devices, what, "size", extra_bytes=chain_bytes(chain_size))
    grads = allreduce_inputs(size, devices)
    xs = [random_matrix(chain_size, d, seed=i) for i, d in enumerate(devices)]
    tiny_xs = [random_matrix(1, d) for d in devices]
    reduce_only = allreduce_in_one_graph(devices)
    compute_only = chains_in_one_graph(devices, chain_length)
    combined = allreduce_and_compute(devices, chain_length, overlap)
    steps = Steps(progress, rounds + 1)
    n = len(devices)
    flops = n * chain_flops(chain_size, chain_length)
    both = "both, " + ("overlapped" if overlap else "one after the other")
    runs = [
        (lambda: reduce_only(*grads), f"all-reduce of {format_bytes(size)} on {n} devices",
         {"nbytes": size}),
        (lambda: compute_only(*xs), f"{chain_length} matmuls of {chain_size}² on each device",
         {"flops": flops}),
        (lambda: compute_only(*tiny_xs), "launch: the compute function on 1x1 matrices", {}),
        (lambda: combined(grads, xs), both, {}),
    ]  # fmt: skip
    measured = measure_in_turns(runs, steps, rounds, return_freed_memory, **options)
    steps.say("tracing one call of both in one function")
    names = device_names(devices)
    traced = trace_with_allreduce(combined, grads, xs, devices=names)
    consumers = allreduce_consumers(combined.get_concrete_function(grads, xs).graph)
    rows = allreduce_timeline(traced, consumers)
    steps.finish("the trace")
    kind = devices[0].kind
    return AllreduceOverlapResult(n, kind, overlap, size, *measured, rows, list(names))
