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
  20 ms of profiler start, stop and file writing around the call, outside the op times.

On CPU the XSpace has one `/host:CPU` plane, a line per thread, events named `node:OpType` and no
device tag: each op's device comes from the traced graph's `op.device`, and each copy's from its
rendezvous key (`src_device;...;dst_device;edge;...`). What the probes showed about TF 2.21:
- Line timestamps count from the trace's start (the 'Task Environment' plane's
  `profile_start_time`), not from 1970: spaces from two processes must each add their own.
- `_Send` events and `_Recv`s (traced as `ExecutorState::ProcessAsync::Start`/`Done`, not as
  op events) need host tracer level 2. A local `_Send`'s event also covers the receiver's
  continuation (milliseconds): its duration is not the copy's.
- The last `_Recv`'s `Done` can be recorded after the call returned and the trace stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence

import matplotlib.pyplot as plt
import tensorflow as tf
from matplotlib.patches import Patch
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from d2lhelpers.benchmark import Measurement, measure, sync_devices
from d2lhelpers.units import format_seconds

KINDS = ("matmul", "copy", "other")
KIND_COLORS = {"matmul": "tab:blue", "copy": "tab:orange", "other": "tab:gray"}
SEND_TYPES = {"_Send", "_HostSend", "Send"}
RECV_TYPES = {"_Recv", "_HostRecv", "Recv"}
COPY_TYPES = SEND_TYPES | RECV_TYPES | {"MemcpyHtoD", "MemcpyDtoH", "MemcpyDtoD", "MemcpyP2P"}
MIN_VISIBLE_WIDTH = 0.005  # of the time axis: a 6 µs copy would otherwise vanish from a 10 ms chart


@dataclasses.dataclass(frozen=True)
class OpEvent:
    """One op's run: where, what, and when (seconds after the trace's first op)."""

    device: str
    op: str
    kind: str  # 'matmul', 'copy' or 'other'
    start_s: float
    end_s: float
    lane: str = ""  # a copy link or GPU copy stream, drawn as its own row; '' = the device's ops

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class EmptyTraceError(RuntimeError):
    """The trace captured no op events, so there is nothing to draw."""


def op_kind(op_type: str) -> str:
    """'matmul', 'copy' or 'other' for a TensorFlow op type (or a GPU memcpy's name)."""
    if "MatMul" in op_type or op_type in ("Einsum", "Conv2D"):
        return "matmul"
    if op_type in COPY_TYPES or op_type.startswith("Memcpy"):
        return "copy"
    return "other"


def device_label(name: str) -> str:
    """'/device:CPU:1' for this process's devices; the full name for another job's or task's."""
    if not name:
        return name
    spec = tf.DeviceSpec.from_string(name)
    if spec.device_type is None:
        return name
    if spec.job in (None, "localhost") and spec.task in (None, 0) and spec.replica in (None, 0):
        return f"/device:{spec.device_type}:{spec.device_index or 0}"
    return spec.to_string()


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


def trace(fn: Callable, *args, warmup: bool = True) -> list[OpEvent]:
    """Run `fn(*args)` once under the profiler; return its ops, one row each, sorted by start.

    `fn` must be a `tf.function` (its graph says where each op was placed). With `warmup` it is
    called once before tracing, so the trace holds a steady call, not tracing and compiling.
    """
    if not hasattr(fn, "get_concrete_function"):
        raise TypeError("trace() needs a tf.function: wrap the code in @tf.function first")
    op_devices, identities = graph_op_devices(fn.get_concrete_function(*args).graph)
    if warmup:
        fn(*args)
        sync_devices()
    with tempfile.TemporaryDirectory() as logdir:
        with profiling(logdir):
            fn(*args)
            sync_devices()  # a GPU's kernels are still queued when the call returns
        paths = glob.glob(f"{logdir}/plugins/profile/*/*.xplane.pb")
        spaces = [read_xspace(path) for path in paths]
    return events_from_xspace(spaces, op_devices, default_device(), identities)


@contextlib.contextmanager
def profiling(logdir: str | os.PathLike):
    """The profiler on for a `with` block; its XSpace is written under `logdir` on exit."""
    # Level 2 host tracing is what records _Send events and async kernels (_Recv).
    options = tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
    )
    try:
        tf.profiler.experimental.start(str(logdir), options=options)
    except tf.errors.AlreadyExistsError as error:
        raise RuntimeError(
            "another profiler session is running in this process (TensorBoard's callback, "
            "or an earlier tf.profiler.experimental.start without stop): stop it first"
        ) from error
    try:
        yield
    finally:
        tf.profiler.experimental.stop()


def read_xspace(path: str | os.PathLike) -> xplane_pb2.XSpace:
    """The profiler's trace file (`plugins/profile/<run>/<host>.xplane.pb`) as an XSpace proto."""
    space = xplane_pb2.XSpace()
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    return space


def events_from_xspace(
    spaces: xplane_pb2.XSpace | Sequence[xplane_pb2.XSpace],
    op_devices: Mapping[str, str],
    fallback_device: str = "/device:CPU:0",
    cross_device_identities: Iterable[str] = (),
) -> list[OpEvent]:
    """Parse XSpaces (one per traced process) into rows sorted by start, on one time axis.

    Each space counts its times from its own start (`profile_start_ns`), so the spaces of
    several processes on one machine line up on its wall clock.

    Host ops ('node:OpType' events) go to `op_devices[node]` (or `fallback_device`); ops of a
    device with its own plane (a GPU) are taken from that plane, where they ran, not from the
    host, where they were launched. A copy between devices is one row on the receiving device,
    in lane 'copy from <source>': from when both the tensor was sent and the receive was posted,
    to when the receive completed. Raises `EmptyTraceError` when no op event is found.
    """
    spaces = [spaces] if isinstance(spaces, xplane_pb2.XSpace) else list(spaces)
    identities = set(cross_device_identities)
    device_planes = {
        device_label(p.name) for s in spaces for p in s.planes if p.name.startswith("/device:")
    }
    found = []  # (device, op, kind, start_ps, end_ps, lane)
    sends, recv_posted, recv_done = {}, {}, {}
    for space in spaces:
        began = profile_start_ns(space)
        for plane in space.planes:
            on_device = plane.name.startswith("/device:")
            if not (on_device or plane.name.startswith("/host:")):
                continue
            for line in plane.lines:
                if on_device and not line.name.startswith("Stream"):
                    continue  # CUPTI overhead and summary lines are not op runs
                for event in line.events:
                    meta = plane.event_metadata[event.metadata_id]
                    # Whole picoseconds since 1970: a float would round them to 256 ns.
                    start = (began + line.timestamp_ns) * 1000 + event.offset_ps
                    end = start + event.duration_ps
                    if on_device:
                        found.append(_device_event(plane, line, meta, event, start, end))
                        continue
                    if meta.name.startswith("ExecutorState::ProcessAsync::"):
                        stats = _stats(plane, event)
                        if stats.get("kernel_type") in RECV_TYPES:
                            pending = recv_posted if meta.name.endswith("Start") else recv_done
                            pending.setdefault(stats["name"], (start, end))
                        continue
                    node, _, op_type = meta.name.rpartition(":")
                    if not node or op_type != meta.display_name or not _is_op_type(op_type):
                        continue  # the profiler's own markers ('EagerService:Enqueue'), not ops
                    if op_type in SEND_TYPES:
                        src, _, dst, *_ = str(_stats(plane, event).get("key", ";;")).split(";")
                        sends[node] = (start, end, device_label(src), device_label(dst))
                        continue
                    device = op_devices.get(node) or op_devices.get(node.split("/_")[0])
                    device = device or fallback_device
                    if device in device_planes:
                        continue
                    kind = "copy" if node in identities else op_kind(op_type)
                    found.append((device, node, kind, start, end, ""))
    found += _copies(sends, recv_posted, recv_done, fallback_device, device_planes)
    if not found:
        raise EmptyTraceError(
            "the trace captured no op events, so there is no timeline to draw: was the function "
            "called inside the trace, and did it run any op (not only constants)?"
        )
    t0 = min(row[3] for row in found)
    rows = [
        OpEvent(device, op, kind, (start - t0) / 1e12, (end - t0) / 1e12, lane)
        for device, op, kind, start, end, lane in found
    ]
    return sorted(rows, key=lambda r: (r.start_s, r.device, r.lane))


def profile_start_ns(space: xplane_pb2.XSpace) -> int:
    """When the trace began (ns since the epoch): line timestamps count from it, not from 1970."""
    for plane in space.planes:
        if plane.name == "Task Environment":
            return int(_stats(plane, plane).get("profile_start_time") or 0)
    return 0


def _is_op_type(name: str) -> bool:
    # Internal ops (_Send, _Recv, _FusedMatMul) are not in tf.raw_ops; the public ones all are.
    return name.startswith("_") or hasattr(tf.raw_ops, name)


def _stats(plane, event) -> dict:
    """An event's (or a plane's) stats by name; a reference stat is resolved to its string."""
    values = {}
    for stat in event.stats:
        which = stat.WhichOneof("value")
        value = getattr(stat, which) if which else None
        if which == "ref_value":
            value = plane.stat_metadata[value].name
        values[plane.stat_metadata[stat.metadata_id].name] = value
    return values


def _device_event(plane, line, meta, event, start, end):
    """A GPU stream's event: a memcpy (in its stream's lane) or a kernel (on the device's row)."""
    stats = _stats(plane, event)
    device = device_label(plane.name)
    annotation = str(stats.get("tf_op") or stats.get("kernel_annotation") or "").split("#")[0]
    node, _, op_type = annotation.rpartition(":")
    if meta.name.startswith("Memcpy"):
        return (device, node or meta.name, "copy", start, end, line.name)
    kind = op_kind(op_type) if op_type else "other"
    if kind == "other" and "gemm" in meta.name.lower():
        kind = "matmul"
    return (device, node or meta.display_name or meta.name, kind, start, end, "")


def _copies(sends, recv_posted, recv_done, fallback_device, device_planes):
    """Pair each _Recv with its _Send: the partitioner names them 'tensor/_N' and 'tensor/_N+1'.

    A copy to or from a device with its own plane is left out: the device's copy stream times
    it; the host only saw it handed over.
    """
    rows = []
    for name, (posted, posted_end) in recv_posted.items():
        match = re.fullmatch(r"(.*)/_(\d+)", name)
        tensor = match.group(1) if match else name
        send = sends.pop(f"{tensor}/_{int(match.group(2)) - 1}", None) if match else None
        start = max(posted, send[0]) if send else posted
        # The receive's completion callback then runs the ops it unblocked: take its start only.
        # The last one can end after the call returned and the trace stopped: then the send's
        # end (or the posting's) is the best bound left.
        if name in recv_done:
            end = recv_done[name][0]
        else:
            end = send[1] if send else posted_end
        end = max(start, end)
        src, dst = (send[2], send[3]) if send else ("", fallback_device)
        rows.append((src, dst, tensor, start, end))
    for name, (start, end, src, dst) in sends.items():  # receivers outside the trace
        rows.append((src, dst or fallback_device, name.split("/_")[0], start, end))
    return [
        (dst, tensor, "copy", start, end, f"copy from {src}" if src else "copy")
        for src, dst, tensor, start, end in rows
        if src not in device_planes and dst not in device_planes
    ]


def busy_intervals(
    rows: Iterable[OpEvent], device: str | None = None, kind: str | None = None
) -> list[tuple[float, float]]:
    """The merged [start, end) intervals in which `device` (any, if None) ran ops of `kind`."""
    device = device_label(device) if device else None
    spans = sorted(
        (r.start_s, r.end_s)
        for r in rows
        if (device is None or r.device == device) and (kind is None or r.kind == kind)
    )
    merged: list[tuple[float, float]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def busy_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of merged intervals."""
    return sum(end - start for start, end in intervals)


def overlap_seconds(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """|A ∩ B| for two lists of merged intervals: the time both were busy."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclasses.dataclass
class TracingOverhead:
    """The same call timed with the profiler off and on (ideal: the same time)."""

    untraced: Measurement
    traced: Measurement

    @property
    def ratio(self) -> float:
        return self.traced.median / self.untraced.median

    def __str__(self) -> str:
        return (
            f"untraced {format_seconds(self.untraced.median)}, traced "
            f"{format_seconds(self.traced.median)}: tracing costs {self.ratio - 1:+.0%}"
        )


def tracing_overhead(fn: Callable, *args, **measure_options) -> TracingOverhead:
    """Time `fn(*args)` without, then with, the profiler recording (`measure`'s options apply)."""
    untraced = measure(lambda: fn(*args), "untraced", **measure_options)
    with tempfile.TemporaryDirectory() as logdir, profiling(logdir):
        traced = measure(lambda: fn(*args), "traced (profiler on)", **measure_options)
    return TracingOverhead(untraced, traced)


def plot_timeline(rows: Sequence[OpEvent], title: str = "timeline", ax=None):
    """A Gantt chart: one row per device (and per copy lane), ops coloured by kind, time in ms.

    Gaps between bars are idle time. Bars shorter than 0.5% of the axis are widened to it so
    that a microsecond copy stays visible; the rows' own times are not changed.
    """
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


def _short(device: str) -> str:
    """'CPU:1' for this process's devices, 'worker:0 CPU:0' for task 0 of job 'worker'."""
    if not device.startswith("/job:"):
        return device.removeprefix("/device:")
    spec = tf.DeviceSpec.from_string(device)
    return f"{spec.job}:{spec.task or 0} {spec.device_type}:{spec.device_index or 0}"


def _lane_label(device: str, lane: str) -> str:
    if lane.startswith("copy from "):
        return f"{_short(device)} ← {_short(lane.removeprefix('copy from '))} (copies)"
    return f"{_short(device)} {lane}".strip()


def _natural(device: str, lane: str):
    """Sort CPU:2 before CPU:10, and a device's copy lanes right after its own row."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", device)], lane
