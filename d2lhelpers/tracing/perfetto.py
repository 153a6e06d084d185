"""A traced timeline as a file a learner can open: Chrome trace-event JSON, which Perfetto reads.

`save_trace(rows, "traces/run.json")` writes the rows that `plot_timeline` draws (a `trace(...)`
result, or any list of `OpEvent`), op by op with their own start and end (the plot widens very
short bars; the file does not), one track per device or copy lane, named as the plot names its
rows and in the plot's order, all on the trace's one clock (microseconds after its first op).
Each TensorFlow process is one process in the file: this kernel's devices, and each remote
job/task (notebook 02's worker) apart.

Open it with the tools used on real clusters:
- Perfetto UI, https://ui.perfetto.dev: *Open trace file* (the file is read in the browser and
  not uploaded); W/S zoom, A/D pan, a click shows an op's name, device, kind and duration.
- Chrome or Chromium: `chrome://tracing`, *Load*.
- TensorBoard's profile plugin reads TensorFlow's own profiler folder, not this file: run the call
  between `tf.profiler.experimental.start("logs")` and `tf.profiler.experimental.stop()`, then
  `tensorboard --logdir logs` (expected to work, not tested here).

The format is the trace-event format's JSON object form: complete events (`"ph": "X"`, `ts` and
`dur` in microseconds) and metadata events (`"ph": "M"`) that name and order processes and
threads (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from collections.abc import Sequence
from pathlib import Path

from d2lhelpers.core.units import plural
from d2lhelpers.tracing.timeline import OpEvent, _lane_label, _natural

THIS_PROCESS = "this process"
US_PER_S = 1e6  # the format counts microseconds; rounded to the XSpace's nanoseconds


def process_of(device: str) -> str:
    """The TensorFlow process a device belongs to: `this process` for this kernel's devices
    (`/device:CPU:0`), else its job and task (`/job:worker/replica:0/task:0`)."""
    if device.startswith("/job:") and "/device:" in device:
        return device[: device.index("/device:")]
    return THIS_PROCESS


def trace_events(rows: Sequence[OpEvent]) -> dict:
    """`rows` as a trace-event JSON object: one process per TensorFlow process, one track per
    device and lane (named and ordered as `plot_timeline`'s rows), one complete event per op."""
    lanes = sorted({(r.device, r.lane) for r in rows}, key=lambda key: _natural(*key))
    processes = sorted({process_of(d) for d, _ in lanes}, key=lambda p: (p != THIS_PROCESS, p))
    pid = {name: i + 1 for i, name in enumerate(processes)}
    tid = {lane: i + 1 for i, lane in enumerate(lanes)}
    events = []
    for name, number in pid.items():
        events.append(_meta("process_name", number, 0, name=name))
        events.append(_meta("process_sort_index", number, 0, sort_index=number))
    for (device, lane), number in tid.items():
        track = pid[process_of(device)]
        events.append(_meta("thread_name", track, number, name=_lane_label(device, lane)))
        events.append(_meta("thread_sort_index", track, number, sort_index=number))
    for r in sorted(rows, key=lambda r: (r.start_s, tid[(r.device, r.lane)])):
        events.append(
            {
                "name": r.op,
                "cat": r.kind,
                "ph": "X",
                "ts": round(r.start_s * US_PER_S, 3),
                "dur": round(r.duration_s * US_PER_S, 3),
                "pid": pid[process_of(r.device)],
                "tid": tid[(r.device, r.lane)],
                "args": {
                    "device": r.device,
                    "kind": r.kind,
                    **({"lane": r.lane} if r.lane else {}),
                },
            }
        )
    about = {"source": "d2lhelpers", "clock": "microseconds after the trace's first op"}
    if incomplete := getattr(rows, "incomplete", ""):
        about["incomplete"] = incomplete
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": about}


def _meta(kind: str, pid: int, tid: int, **args) -> dict:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


@dataclasses.dataclass(frozen=True)
class SavedTrace:
    """Where a trace was saved, and what it holds; prints how to open it."""

    path: Path
    ops: int
    tracks: int
    incomplete: str = ""

    def __str__(self) -> str:
        ops, tracks = plural(self.ops, "op"), plural(self.tracks, "track")
        # Beside the notebook: the path from its folder (a book or a course server shows no
        # machine's temporary folders); elsewhere the whole path.
        here = os.path.relpath(self.path)
        where = self.path if here.startswith("..") else here
        text = (
            f"Saved {ops} on {tracks} to {where}. Open it at "
            "https://ui.perfetto.dev (Open trace file) or in chrome://tracing (Load)."
        )
        return f"{text} {self.incomplete}" if self.incomplete else text

    def _repr_pretty_(self, printer, _cycle) -> None:
        printer.text(str(self))


def save_trace(rows: Sequence[OpEvent], path: str | os.PathLike = "trace.json") -> SavedTrace:
    """Write `rows` as Chrome-trace / Perfetto JSON at `path` (gzipped when it ends in `.gz`;
    folders are made); returns where, and how many ops and tracks it holds."""
    if not rows:
        why = getattr(rows, "incomplete", "") or "the trace captured nothing"
        raise ValueError(f"no op rows to save: {why}")
    document = trace_events(rows)
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as file:
        json.dump(document, file)
    return SavedTrace(
        path,
        ops=len(rows),
        tracks=len({(r.device, r.lane) for r in rows}),
        incomplete=document["otherData"].get("incomplete", ""),
    )
