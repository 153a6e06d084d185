"""Which op ran where, and when: per-device timelines from a real TensorFlow trace, as a Gantt.

`trace(fn, *args)` runs one call of a `tf.function` under TensorFlow 2's profiler and returns one
row per op: (device, op, kind, start_s, end_s), times relative to the first op. Two devices
worked at once exactly where their busy intervals intersect:

    overlap(A, B) = |busy(A) ∩ busy(B)|,   busy(D) = ∪ [start, end) of D's ops

so `overlap_seconds(busy_intervals(rows, d0, 'matmul'), busy_intervals(rows, d1, 'matmul'))` is
the time both devices were multiplying.

Why the profiler's XSpace and not `tf.compat.v1` step stats (both probed on TF 2.21, 4 logical
CPUs; see the helper's report):
- It traces the very `tf.function` that was timed, run eagerly. Step stats need a v1 `Session`
  on a rebuilt graph: another runtime with its own executor, and Grappler folds constant inputs
  away (the probe's graph ran as a handful of `Const` nodes) unless fed through placeholders.
- Nanosecond timestamps on one wall clock (step stats: microseconds).
- GPUs: a plane per GPU, a line per CUDA stream, kernels and memcpys timed on the device.
- Remote devices (`/job:worker/...` over loopback gRPC): the local trace shows only the local
  halves of the copies (`_Recv`); the worker's ops appear once the worker runs a profiler server
  (`tf.profiler.experimental.server.start`) and is traced with `tf.profiler.experimental.client.
  trace`. Its XSpace then holds the worker's ops and `_Send`s, on the same wall clock, so
  `events_from_xspace([local, worker], ...)` merges them onto one time axis (probed; clocks of
  different machines would need aligning).
- Overhead: small. A 2-chain call of 6.6 ms ran in 6.2 ms traced (within noise) on an idle
  2-core machine; `tracing_overhead` measures it for any call. A whole `trace()` adds about
  20 ms of profiler start, stop and file writing around the call, outside the op times, plus
  tracing the function afresh (below).

Why `trace()` traces a fresh copy of the function (probed on TF 2.21, 2 cores): TensorFlow's
executor keeps a running estimate of each kernel's cost, starting high and updated by every
untraced call, and records a kernel whose estimate falls under its 'expensive' threshold only at
profiler level 3 (`GetTFTraceMeLevel`: level 2 for expensive ops, 3 for cheap ones). The host
tracer records level 2, and TF 2.21's `tf.profiler.experimental.start` cannot raise it (it logs
"host_tracer_level expects an i value" and keeps its default). So a small op that had run a few
hundred times (`measure` runs that many) vanished from the trace: the notebook-03 MLP at
16x32x64 kept 0 to 3 of its 4 MatMuls in 10 of 10 traces after 2,000 untraced calls, and all 4
in 10 of 10 when a fresh copy of the same function was traced. A fresh copy has fresh estimates,
so every op that ran is recorded; `trace` also checks that each device that holds matmuls in the
graph shows one, tries again, and otherwise returns a `Trace` marked `incomplete` that callers
print as one sentence instead of drawing it or concluding from it.

The XSpace itself is read by `d2lhelpers.tracing.xspace`.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence

import matplotlib.pyplot as plt
import tensorflow as tf
from matplotlib.patches import Patch

from d2lhelpers.core.units import short_device_name
from d2lhelpers.timing.benchmark import sync_devices
from d2lhelpers.tracing.xspace import (  # noqa: F401  (re-exported: callers read traces through here)
    KINDS,
    EmptyTraceError,
    OpEvent,
    device_label,
    events_from_xspace,
    op_kind,
    profiler_options,
    read_logdir,
    xplane_pb2,
)

KIND_COLORS = {"matmul": "tab:blue", "copy": "tab:orange", "other": "tab:gray"}
MIN_VISIBLE_WIDTH = 0.005  # of the time axis: a 6 µs copy would otherwise vanish from a 10 ms chart


def graph_op_devices(graph: tf.Graph) -> tuple[dict[str, str], set[str]]:
    """Each op's requested device in `graph` and the functions it calls, and the names of the
    Identity ops that move a tensor to another device (those are copies)."""
    devices: dict[str, str] = {}
    for function in graph.as_graph_def().library.function:
        for node in function.node_def:
            devices.setdefault(node.name, device_label(node.device))
    cross_device = set()
    for op in graph.get_operations():  # the function's own ops win over same-named inner ones
        devices[op.name] = device_label(op.device)
        if op.type == "Identity" and op.inputs:
            source = device_label(op.inputs[0].op.device)
            if source and devices[op.name] and source != devices[op.name]:
                cross_device.add(op.name)
    return devices, cross_device


def default_device() -> str:
    """Where TensorFlow puts an op with no device: the first GPU if there is one, else the CPU."""
    gpus = tf.config.list_logical_devices("GPU")
    return device_label(gpus[0].name) if gpus else "/device:CPU:0"


class Trace(list):
    """A traced call's rows (a list of `OpEvent`); `incomplete`: why they are not the whole call,
    one sentence, or '' when every expected op is there."""

    def __init__(self, rows: Iterable[OpEvent] = (), incomplete: str = ""):
        super().__init__(rows)
        self.incomplete = incomplete


def incomplete_reason(rows: Sequence[OpEvent]) -> str:
    """The sentence saying why `rows` are not a whole trace ('' for whole ones, or plain lists)."""
    return getattr(rows, "incomplete", "")


def fresh_copy(fn: Callable) -> Callable:
    """`fn` traced again as a new tf.function: new kernels, whose cost estimates start high, so
    the profiler records every op of its calls (see the module's notes). Same graph, same names."""
    return tf.function(
        fn.python_function,
        input_signature=fn.input_signature,
        autograph=getattr(fn, "_autograph", True),
        jit_compile=getattr(fn, "_jit_compile", None),
        reduce_retracing=getattr(fn, "_reduce_retracing", False),
    )


def matmul_devices(graph: tf.Graph) -> set[str]:
    """The devices of this process that run a matmul in `graph` (or in the functions it calls):
    a whole trace of a call shows a matmul on each. Another process's devices are not traced."""
    ops = [(op.type, op.device) for op in graph.get_operations()]
    ops += [(n.op, n.device) for f in graph.as_graph_def().library.function for n in f.node_def]
    found = {device_label(d) or default_device() for t, d in ops if op_kind(t) == "matmul"}
    return {label for label in found if label.startswith("/device:")}


def trace(
    fn: Callable,
    *args,
    warmup: bool = True,
    check: Callable[[list[OpEvent]], str] | None = None,
    tries: int = 3,
) -> Trace:
    """Run `fn(*args)` once under the profiler; return its ops, one row each, sorted by start.

    `fn` must be a `tf.function` (its graph says where each op was placed). A fresh copy of it is
    traced (`fresh_copy`), after one warm-up call with `warmup`, so the trace holds a steady call,
    not tracing and compiling. The trace must show a matmul on every device that has one in the
    graph, and `check(rows)` must return '' (else: what is missing); up to `tries` times. The
    result is a `Trace`: when no try passed, its `incomplete` sentence says what was missing.
    """
    if not hasattr(fn, "get_concrete_function"):
        raise TypeError("trace() needs a tf.function: wrap the code in @tf.function first")
    problem = ""
    for _ in range(tries):
        copy = fresh_copy(fn)
        graph = copy.get_concrete_function(*args).graph
        op_devices, identities = graph_op_devices(graph)
        expected = matmul_devices(graph)
        if warmup:
            copy(*args)
            sync_devices()
        with tempfile.TemporaryDirectory() as logdir:
            with profiling(logdir):
                copy(*args)
                sync_devices()  # a GPU's kernels are still queued when the call returns
            spaces = read_logdir(logdir)
        try:
            rows = events_from_xspace(spaces, op_devices, default_device(), identities)
        except EmptyTraceError:
            if not expected and check is None:
                raise  # the function ran no op that a trace shows: there is nothing to retry
            rows = []
        seen = {r.device for r in rows if r.kind == "matmul"}
        missing = sorted(expected - seen, key=lambda d: _natural(d, ""))
        problem = ", ".join(f"no matmul on {short_device_name(d)}" for d in missing)
        problem = problem or (check(rows) if check else "")
        if not problem:
            return Trace(rows)
    sentence = (
        f"This trace is incomplete ({problem} in {tries} {'try' if tries == 1 else 'tries'}), "
        "so no timeline is drawn and nothing is concluded from it."
    )
    return Trace(rows, sentence)


@contextlib.contextmanager
def profiling(logdir: str | os.PathLike):
    """The profiler on for a `with` block; its XSpace is written under `logdir` on exit."""
    try:
        tf.profiler.experimental.start(str(logdir), options=profiler_options())
    except tf.errors.AlreadyExistsError as error:
        raise RuntimeError(
            "another profiler session is running in this process (TensorBoard's callback, "
            "or an earlier tf.profiler.experimental.start without stop): stop it first"
        ) from error
    try:
        yield
    finally:
        tf.profiler.experimental.stop()


def busy_intervals(
    rows: Iterable[OpEvent], device: str | None = None, kind: str | None = None
) -> list[tuple[float, float]]:
    """The merged [start, end) intervals in which `device` (any, if None) ran ops of `kind`."""
    device = device_label(device) if device else None
    return merged_intervals(
        (r.start_s, r.end_s)
        for r in rows
        if (device is None or r.device == device) and (kind is None or r.kind == kind)
    )


def merged_intervals(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """[start, end) spans, in any order and overlapping, as sorted disjoint intervals."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def busy_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of merged intervals."""
    return sum(end - start for start, end in intervals)


def common_intervals(
    a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """A ∩ B for two lists of merged intervals: where both were busy (merged, sorted)."""
    common, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            common.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return common


def overlap_seconds(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """|A ∩ B| for two lists of merged intervals: the time both were busy."""
    return busy_seconds(common_intervals(a, b))


def plot_timeline(rows: Sequence[OpEvent], title: str = "timeline", ax=None):
    """A Gantt chart: one row per device (and per copy lane), ops coloured by kind, time in ms.

    Gaps between bars are idle time. Bars shorter than 0.5% of the axis are widened to it so
    that a microsecond copy stays visible; the rows' own times are not changed.
    Rows of an incomplete trace (`Trace.incomplete`) are not drawn: their sentence is printed
    instead (None returned), or written in `ax` when the chart is part of a larger figure.
    """
    if incomplete_reason(rows):
        if ax is None:
            print(incomplete_reason(rows))
            return None
        ax.text(0.5, 0.5, incomplete_reason(rows), ha="center", va="center", wrap=True)
        ax.set_axis_off()
        ax.set_title(title)
        return ax.figure
    if not rows:
        raise EmptyTraceError("no op events to draw: the trace captured nothing")
    lanes = sorted({(r.device, r.lane) for r in rows}, key=lambda key: _natural(*key))
    row_of = {lane: i for i, lane in enumerate(lanes)}
    span_ms = max(r.end_s for r in rows) * 1e3 or 1.0
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 1.2 + 0.5 * len(lanes)))
    for kind in KINDS:
        for lane, i in row_of.items():
            bars = [
                (r.start_s * 1e3, max(r.duration_s * 1e3, MIN_VISIBLE_WIDTH * span_ms))
                for r in rows
                if (r.device, r.lane) == lane and r.kind == kind
            ]
            if bars:
                # White edges keep back-to-back ops apart: each op is its own bar.
                ax.broken_barh(
                    bars, (i - 0.35, 0.7), facecolors=KIND_COLORS[kind], edgecolor="white", lw=0.5
                )
    ax.set_yticks(range(len(lanes)), [_lane_label(d, lane) for d, lane in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(0, span_ms * 1.02)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(
        handles=[Patch(color=KIND_COLORS[k], label=k) for k in KINDS],
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        fontsize=8,
    )
    ax.set_title(title)
    ax.figure.tight_layout()
    return ax.figure


def _lane_label(device: str, lane: str) -> str:
    if lane.startswith("copy from "):
        source = lane.removeprefix("copy from ")
        return f"{short_device_name(device)} ← {short_device_name(source)} (copies)"
    return f"{short_device_name(device)} {lane}".strip()


def _natural(device: str, lane: str):
    """Sort CPU:2 before CPU:10, and a device's copy lanes right after its own row."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", device)], lane
