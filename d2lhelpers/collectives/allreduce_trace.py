"""TensorFlow's all-reduce in a profiler trace: its rows, the ops that wait for it, its true end,
and a trace that lost it said to be incomplete.

The all-reduce ops are found by name: notebook 05's saved `allreduce_ops` names them
'allreduce_<rank>' (`ALLREDUCE_OP`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import tensorflow as tf

from d2lhelpers.core.units import short_device_name
from d2lhelpers.tracing.timeline import OpEvent, Trace, device_label, incomplete_reason, trace

ALLREDUCE_OP = "allreduce"  # the saved cells name the ops 'allreduce_<rank>': found in a trace
ALLREDUCE_LANE = "all-reduce"  # drawn as its own row under each device, not over its matmuls


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
