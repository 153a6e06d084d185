"""Reading TensorFlow's profiler output (XSpace protos) into one row per op run.

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

import dataclasses
import glob
import os
import re
from collections.abc import Iterable, Mapping, Sequence

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

KINDS = ("matmul", "copy", "other")
SEND_TYPES = {"_Send", "_HostSend", "Send"}
RECV_TYPES = {"_Recv", "_HostRecv", "Recv"}
COPY_TYPES = SEND_TYPES | RECV_TYPES | {"MemcpyHtoD", "MemcpyDtoH", "MemcpyDtoD", "MemcpyP2P"}


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


def read_xspace(path: str | os.PathLike) -> xplane_pb2.XSpace:
    """The profiler's trace file (`plugins/profile/<run>/<host>.xplane.pb`) as an XSpace proto."""
    space = xplane_pb2.XSpace()
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    return space


def read_logdir(logdir: str | os.PathLike) -> list[xplane_pb2.XSpace]:
    """Every trace file the profiler wrote under `logdir` (one per host it traced)."""
    return [read_xspace(p) for p in glob.glob(f"{logdir}/plugins/profile/*/*.xplane.pb")]


def profiler_options():
    """The profiler's options for every trace here: level 2 host tracing is what records _Send
    events and async kernels (_Recv); no Python tracing."""
    return tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
    )


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
