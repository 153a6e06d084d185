"""TensorFlow's own all-reduce, around the call itself: the devices and message sizes it is
given, checked before anything is allocated, and its inputs (its rows in a trace:
`allreduce_trace`).

The call is notebook 05's code, saved into `collectives/tf_collective.py`: one
`CollectiveReduceV2` op per device, all in one `tf.function`, TensorFlow's collective runtime,
the op that `MirroredStrategy` (its default cross-device ops on CPUs in TF 2.21) and
`MultiWorkerMirroredStrategy` emit. With `communication_hint='ring'` each device runs a ring:
reduce-scatter then all-gather, in 2(n-1) steps of 1/n of the vector (the runtime may split big
vectors over several rings, chunks of at most 4 MB). Each op carries an ordering token (a
resource on its device), as tf.distribute's own launcher does: without one, the first call never
completes (probed: with `timeout_seconds` set it fails with DeadlineExceededError).

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
it on the same cores that compute.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from d2lhelpers.core.checks import require_count
from d2lhelpers.core.units import (
    BYTES_PER_FLOAT,
    KiB,
    MiB,
    device_names,
    format_bytes,
)
from d2lhelpers.devices import Device, check_fits, select_devices, setup_devices

TINY_BYTES = BYTES_PER_FLOAT  # alpha's message: one number
# Up to 16 MiB: below the allocator's cliff (see FRESH_PAGES_BYTES), where one beta holds.
DEFAULT_SIZES = (4 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB)
# glibc's malloc serves blocks above 32 MiB (its largest mmap threshold) with fresh pages from
# the kernel, every time: page faults and zeroing. Probed: one device copied 31 MiB at 10 GB/s,
# 33 MiB at 2.4 GB/s; the all-reduce's rate fell from 1.35 to 0.9 GB/s across the same step.
FRESH_PAGES_BYTES = 32 * MiB
# Input, output and the ring's chunk buffers on each device (and the local copy and add).
ALLREDUCE_BUFFERS = 3
NOISE_BLOCK = 4096  # random elements at the start of each input, then repeated


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


def allreduce_devices(n_devices, what: str) -> list[Device]:
    """The first `n_devices` set-up devices (None: all), refused if one: it would move nothing;
    `what` says what the caller then cannot do."""
    count = len(setup_devices())
    n = count if n_devices is None else require_count("n_devices", n_devices, 1)
    if n == 1:
        fix = (
            f"choose n_devices from 2 to {count}"
            if count > 1
            else "only 1 device is set up: run d2l.setup_devices(2) first, in a new kernel"
        )
        raise ValueError(f"an all-reduce on one device moves nothing, so {what}: {fix}")
    return select_devices(n)


def allreduce_inputs(nbytes: int, devices: Sequence[Device | str], seed: int = 0) -> list:
    """One float32 vector of `nbytes` per device, created there: rank r holds r+1 plus noise in
    [0, 1), random over the first `NOISE_BLOCK` elements and repeating after them (generating
    random numbers costs 4x a copy, and a 16 MiB vector per device should not wait for that)."""
    elements = message_elements(nbytes)
    block = min(elements, NOISE_BLOCK)
    xs = []
    for rank, name in enumerate(device_names(devices)):
        with tf.device(name):
            noise = tf.random.stateless_uniform((block,), seed=(seed, rank))
            noise = tf.tile(noise, [-(-elements // block)])[:elements]
            xs.append(noise + float(rank + 1))
    return xs
