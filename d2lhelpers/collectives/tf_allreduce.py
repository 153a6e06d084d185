"""TensorFlow's own all-reduce across the set-up devices: graphs, inputs, traces, local probes.

Which all-reduce. One `CollectiveReduceV2` op per device, all in one `tf.function`: TensorFlow's
collective runtime, the op that `MirroredStrategy` (its default cross-device ops on CPUs in TF
2.21) and `MultiWorkerMirroredStrategy` emit. With `communication_hint='ring'` each device runs
a ring: reduce-scatter then all-gather, in 2(n-1) steps of 1/n of the vector (the runtime may
split big vectors over several rings, chunks of at most 4 MB). Each op carries an ordering
token (a resource on its device), as tf.distribute's own launcher does: without one, the first
call never completes (probed: with `timeout_seconds` set it fails with DeadlineExceededError).

What else was tried (TF 2.21, 4 logical CPUs, one process):
- `MirroredStrategy(cross_device_ops=ReductionToOneDevice())`: copies every vector to one
  device, adds them there with one `AddN`, copies the sum back. Between logical CPUs a copy
  passes a pointer, so this times one `AddN` on one core, not a link.
- `HierarchicalCopyAllReduce`: also ran, as splits, packs and `AddN`s on one device.
- `NcclAllReduce`: eager calls returned sums; in a `tf.function` it refuses CPU tensors
  ("Device assignment ... required for nccl collective ops"). It is for GPUs.
- `MirroredStrategy()` with its default on CPUs, `CollectiveAllReduce`: the same op as here,
  wrapped in packing ops (Reshape, SplitV, Pack).
- Inside a `tf.function` the strategies' ops without a device scope all landed on CPU:0.

What the link is. On logical CPU devices the collective runtime moves each chunk with a real
`memcpy` between buffers of one process (`CollectiveRemoteAccessLocal::MemCpyAsync`) and adds
it on the same cores that compute. `local_copy_and_add` measures one device copying and adding
alone: the RAM speed a ring of logical CPUs can at best reach.

Lessons build on this module (notebook 05's sweep and overlap experiment live in
`lessons/l05_collectives/`); it imports no lesson.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Sequence

import tensorflow as tf

from d2lhelpers.collectives.costs import AlphaBeta, fit_alpha_beta
from d2lhelpers.core.checks import require_count
from d2lhelpers.core.units import (
    BYTES_PER_FLOAT,
    KiB,
    MiB,
    device_names,
    format_bytes,
    short_device_name,
)
from d2lhelpers.devices import Device, check_fits
from d2lhelpers.tracing.timeline import OpEvent, Trace, device_label, incomplete_reason, trace
from d2lhelpers.workloads import (
    matmul_chain,
)

TINY_BYTES = BYTES_PER_FLOAT  # alpha's message: one number
# Up to 16 MiB: below the allocator's cliff (see FRESH_PAGES_BYTES), where one beta holds.
DEFAULT_SIZES = (4 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB)
# glibc's malloc serves blocks above 32 MiB (its largest mmap threshold) with fresh pages from
# the kernel, every time: page faults and zeroing. Probed: one device copied 31 MiB at 10 GB/s,
# 33 MiB at 2.4 GB/s; the all-reduce's rate fell from 1.35 to 0.9 GB/s across the same step.
FRESH_PAGES_BYTES = 32 * MiB
# Input, output and the ring's chunk buffers on each device (and the local copy and add).
ALLREDUCE_BUFFERS = 3
COLLECTIVE_TIMEOUT_S = 120.0  # a collective that waits this long for its peers fails, not hangs
ALLREDUCE_OP = "allreduce"  # op names 'allreduce_<rank>' find the all-reduce in a trace
ALLREDUCE_LANE = "all-reduce"  # drawn as its own row under each device, not over its matmuls
# Far above the keys tf.distribute hands out (from 1 up), so a strategy in the same kernel never
# reuses one of ours for another set of devices.
_GROUP_KEY_BASE = 1 << 20
_group_keys: dict[tuple[str, ...], int] = {}
_instance_keys = itertools.count(1)
_ordering_tokens: dict[str, tf.Variable] = {}


# --- Admission: message sizes, before anything is allocated ---------------------------------------


def message_elements(nbytes, name: str = "a message size") -> int:
    """float32 elements in a message of `nbytes`: a whole number of bytes, >= 4, a multiple of 4."""
    nbytes = require_count(f"{name} (bytes)", nbytes, TINY_BYTES)
    if nbytes % BYTES_PER_FLOAT:
        raise ValueError(f"{name} must be a multiple of 4 bytes (float32), got {nbytes}")
    return nbytes // BYTES_PER_FLOAT


def allreduce_sizes(sizes) -> list[int]:
    """`sizes` (bytes per device) checked, deduplicated and ascending; at least two different."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise TypeError(f"sizes must be a list of byte counts, got {sizes!r}")
    if not sizes:
        raise ValueError("sizes is empty: give at least two different message sizes")
    for i, size in enumerate(sizes):
        message_elements(size, f"sizes[{i}]")
    sizes = sorted({int(s) for s in sizes})
    if len(sizes) < 2:
        raise ValueError(
            "give at least two different sizes: beta comes from the largest, the others are "
            f"predicted (got {sizes})"
        )
    return sizes


def sizes_up_to(largest: int, smallest: int = 4 * KiB) -> list[int]:
    """`smallest`, 4x that, 16x, ... below `largest`, then `largest`: one slider, one sweep."""
    message_elements(smallest, "the smallest size")
    message_elements(largest, "the largest size")
    if largest < smallest:
        raise ValueError(f"the largest size ({largest} B) is below the smallest ({smallest} B)")
    sizes = [smallest]
    while sizes[-1] * 4 < largest:
        sizes.append(sizes[-1] * 4)
    return sizes + [largest] if largest > sizes[-1] else sizes


def largest_message_that_fits(
    devices: Sequence[Device], buffers: int = ALLREDUCE_BUFFERS, extra_bytes: int = 0
) -> int:
    """The largest power-of-two message (bytes per device) that `check_fits` accepts, or 0."""
    for power in range(44, 1, -1):
        try:
            check_fits(buffers * 2**power + extra_bytes, list(devices))
            return 2**power
        except ValueError:
            continue
    return 0


def require_message_fits(
    nbytes: int,
    devices: Sequence[Device],
    what: str,
    name: str = "size",
    buffers: int = ALLREDUCE_BUFFERS,
    extra_bytes: int = 0,
) -> None:
    """`check_fits` for `buffers` messages of `nbytes` per device; a refusal names the largest
    message that fits and the argument (or slider) `name` that chooses it."""
    try:
        check_fits(buffers * nbytes + extra_bytes, list(devices), what)
    except ValueError as error:
        largest = largest_message_that_fits(devices, buffers, extra_bytes)
        raise ValueError(
            f"{error} The largest {name} that fits is {format_bytes(largest)} per device."
        ) from None


# --- The all-reduce graph ------------------------------------------------------------------------


def _communication_hint(devices: Sequence[Device | str]) -> str:
    """'ring' on logical CPUs and virtual GPUs (NCCL refuses two ranks on one chip); else 'auto'."""
    kinds = {d.kind for d in devices if isinstance(d, Device)}
    return "auto" if kinds == {"GPU"} else "ring"


def _ordering_token(name: str) -> tf.Tensor:
    """A resource on device `name` that orders its collectives (what tf.distribute does too)."""
    if name not in _ordering_tokens:
        with tf.init_scope(), tf.device(name):
            _ordering_tokens[name] = tf.Variable(0.0, trainable=False, name="ordering_token")
    return _ordering_tokens[name].handle


def _allreduce_ops(xs: Sequence[tf.Tensor], names: tuple[str, ...], hint: str) -> list:
    """One CollectiveReduceV2 per device; call while tracing. One instance key per call."""
    group_key = _group_keys.setdefault(names, _GROUP_KEY_BASE + len(_group_keys))
    instance_key = next(_instance_keys)  # shared by the ranks: a key per rank would deadlock
    reduced = []
    for rank, (name, x) in enumerate(zip(names, xs, strict=True)):
        with tf.device(name):
            reduced.append(
                tf.raw_ops.CollectiveReduceV2(
                    input=x,
                    group_size=len(names),
                    group_key=group_key,
                    instance_key=instance_key,
                    ordering_token=[_ordering_token(name)],
                    merge_op="Add",
                    final_op="Id",
                    communication_hint=hint,
                    timeout_seconds=COLLECTIVE_TIMEOUT_S,
                    name=f"{ALLREDUCE_OP}_{rank}",
                )
            )
    return reduced


def allreduce_in_one_graph(devices: Sequence[Device | str]) -> Callable:
    """One tf.function: `run(*xs)` with one tensor per device returns, on each device, the sum.

    sum_i xs[i], element by element, computed by TensorFlow's collective ring; nothing else runs
    in it. Cached per set of devices; each new shape is traced with its own instance key.
    """
    names = device_names(devices)
    if not names:
        raise ValueError("an all-reduce needs at least one device")
    return _allreduce_in_one_graph(names, _communication_hint(devices))


@functools.lru_cache(maxsize=32)
def _allreduce_in_one_graph(names: tuple[str, ...], hint: str) -> Callable:
    for name in names:
        _ordering_token(name)  # created eagerly, before tracing

    @tf.function
    def run(*xs):
        return _allreduce_ops(xs, names, hint)

    return run


def allreduce_inputs(nbytes: int, devices: Sequence[Device | str], seed: int = 0) -> list:
    """One float32 vector of `nbytes` per device, created there (rank r holds values near r+1)."""
    elements = message_elements(nbytes)
    xs = []
    for rank, name in enumerate(device_names(devices)):
        with tf.device(name):
            noise = tf.random.stateless_uniform((elements,), seed=(seed, rank))
            xs.append(noise + float(rank + 1))
    return xs


def allreduce_and_compute(
    devices: Sequence[Device | str], chain_length: int, overlap: bool
) -> Callable:
    """One tf.function `run(grads, xs)`: all-reduce `grads` and run a matmul chain on each `xs`.

    overlap=True: the chains share no data with the all-reduce, so the dependency tracker runs
    them at the same time (the seed's "fuse all_reduce with the next layer's forward").
    overlap=False: every chain waits, by control dependencies, for the whole all-reduce (every
    rank's sum): one after the other.
    """
    chain_length = require_count("chain_length", chain_length, 1)
    names = device_names(devices)
    return _allreduce_and_compute(names, _communication_hint(devices), chain_length, overlap)


@functools.lru_cache(maxsize=32)
def _allreduce_and_compute(names, hint, chain_length, overlap) -> Callable:
    for name in names:
        _ordering_token(name)

    @tf.function
    def run(grads, xs):
        reduced = _allreduce_ops(grads, names, hint)
        after = [] if overlap else reduced
        products = []
        for name, x in zip(names, xs, strict=True):
            with tf.device(name), tf.control_dependencies(after):
                products.append(matmul_chain(x, chain_length))
        return reduced, products

    return run


# --- Local probes: what one device's copy and add cost, and alpha-beta from a sweep ---------------


def local_copy_and_add(nbytes: int, device: Device | str) -> tuple[Callable, Callable]:
    """Two calls on one device, inputs bound: copy a tensor of `nbytes`, and add two of them.

    Timed, they give the RAM speed of one core: what a ring of logical CPUs moves data at, at
    best. The copy is a real one (`DeepCopy`; `tf.identity` would pass a pointer).
    """
    name = device_names([device])[0]
    with tf.device(name):
        a, b = tf.random.stateless_uniform((2, message_elements(nbytes)), seed=(1, 2))

    @tf.function
    def copy(x):
        with tf.device(name):
            return tf.raw_ops.DeepCopy(x=x)

    @tf.function
    def add(x, y):
        with tf.device(name):
            return x + y

    return (lambda: copy(a)), (lambda: add(a, b))


def alpha_beta_models(
    sizes: Sequence[int], seconds: Sequence[float], tiny_s: float
) -> tuple[AlphaBeta, AlphaBeta | None, list[int]]:
    """The two ways the alpha-beta model is made to predict (sizes ascending, times per size).

    Two-point: alpha = `tiny_s` (a 4-byte all-reduce), beta from the largest size alone:
    S_max / (t_max - alpha); beta = inf when the largest took no longer than the tiny one.
    Held out: least squares (`fit_alpha_beta`) on every other size from the smallest, to
    predict the sizes between; (None, []) with fewer than 3 sizes.
    """
    if seconds[-1] > tiny_s:
        model = AlphaBeta.from_measurements(tiny_s, sizes[-1], seconds[-1])
    else:  # time did not grow with size: all of it is latency
        model = AlphaBeta(tiny_s, math.inf)
    if len(sizes) < 3:
        return model, None, []
    fit_sizes = list(sizes[::2])
    return model, fit_alpha_beta(fit_sizes, list(seconds[::2])), fit_sizes


# --- Traces of an all-reduce ---------------------------------------------------------------------


def _is_allreduce(row: OpEvent) -> bool:
    return row.op.startswith(ALLREDUCE_OP) and not row.lane.startswith("copy")  # not its result


def allreduce_rows(rows: Sequence[OpEvent], device: str | None = None) -> list[OpEvent]:
    """The trace rows of the all-reduce ops themselves (on `device`, if given)."""
    device = device_label(device) if device else None
    return [r for r in rows if _is_allreduce(r) and (device is None or r.device == device)]


def allreduce_consumers(graph: tf.Graph) -> dict[str, set[str]]:
    """For each all-reduce op in `graph`, the ops that take its result or wait for it."""
    consumers: dict[str, set[str]] = {}
    for op in graph.get_operations():
        if op.type == "CollectiveReduceV2":
            consumers.setdefault(op.name, set())
        for source in [t.op for t in op.inputs] + list(op.control_inputs):
            if source.type == "CollectiveReduceV2":
                consumers.setdefault(source.name, set()).add(op.name)
    return consumers


def allreduce_timeline(
    rows: Sequence[OpEvent], consumers: dict[str, set[str]] | None = None
) -> list[OpEvent]:
    """`rows` ready to draw: each all-reduce row in its own lane under its device (else it
    hides the matmuls it overlaps), and ended no later than the first use of its result.

    The profiler closes an async kernel's event only when its completion callback returns, and
    on busy cores that thread can be preempted for milliseconds after the sum was ready (probed:
    up to 17 ms on 2 loaded cores, while the ops it unblocked already ran), which would draw a
    false overlap. No op can use the result before it exists, so the first copy of it, or the
    first start of an op in `consumers[op]` (see `allreduce_consumers`), bounds the true end.
    An incomplete trace stays marked so (`Trace.incomplete`).
    """
    consumers = consumers or {}
    fixed = []
    for row in rows:
        if _is_allreduce(row):
            users = consumers.get(row.op, set())
            uses = [
                r.start_s
                for r in rows
                if (r.kind == "copy" and r.op == row.op and r.lane == f"copy from {row.device}")
                or (r.op in users and r.lane == "")
            ]
            end = max(row.start_s, min([row.end_s, *uses]))
            row = dataclasses.replace(row, end_s=end, lane=ALLREDUCE_LANE)
        fixed.append(row)
    return Trace(fixed, incomplete_reason(rows))


def trace_with_allreduce(fn, *args, devices: Sequence[str], tries: int = 3) -> Trace:
    """`trace(fn, *args)`, again if an all-reduce row is missing (then marked incomplete).

    A collective's profiler event closes after its completion callback; when it is the last op
    of the call, the profiler can stop first and lose it.
    """
    wanted = {device_label(device) for device in devices}

    def missing_allreduce(rows) -> str:
        lost = wanted - {r.device for r in allreduce_rows(rows)}
        return ", ".join(f"no all-reduce on {short_device_name(d)}" for d in sorted(lost))

    return trace(fn, *args, check=missing_allreduce, tries=tries)
