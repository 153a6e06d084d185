"""Saved traces: valid trace-event JSON (what Perfetto and chrome://tracing read) holding exactly
the bars that `plot_timeline` draws, one track per device and lane, one process per TF process."""

import gzip
import json
from pathlib import Path

import jsonschema
import matplotlib
import pytest

import d2lhelpers as d2l
from d2lhelpers.tracing import perfetto, timeline
from d2lhelpers.tracing.timeline import OpEvent
from d2lhelpers.workloads import chains_in_one_graph

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

CPU0, CPU1 = "/device:CPU:0", "/device:CPU:1"
WORKER = "/job:worker/replica:0/task:0/device:CPU:0"
ROWS = [
    OpEvent(CPU0, "MatMul", "matmul", 0.0, 0.002),
    OpEvent(CPU1, "MatMul_1", "matmul", 0.0005, 0.0031),
    OpEvent(CPU1, "x_copy", "copy", 0.0001, 0.000101, f"copy from {CPU0}"),  # 1 µs: widened
    OpEvent("/device:CPU:10", "add", "other", 0.0031, 0.0032),
    OpEvent(WORKER, "MatMul", "matmul", 0.001, 0.0042),  # another process: notebook 02's worker
]

# The trace-event format's JSON object form, as far as this file uses it: complete events and the
# metadata events that name and order processes and tracks (the format's document, linked from
# d2lhelpers/tracing/perfetto.py).
COMPLETE = {
    "type": "object",
    "required": ["name", "ph", "ts", "dur", "pid", "tid"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "cat": {"type": "string"},
        "ph": {"const": "X"},
        "ts": {"type": "number", "minimum": 0},
        "dur": {"type": "number", "minimum": 0},
        "pid": {"type": "integer"},
        "tid": {"type": "integer"},
        "args": {"type": "object"},
    },
}
METADATA = {
    "type": "object",
    "required": ["name", "ph", "pid", "args"],
    "properties": {
        "ph": {"const": "M"},
        "pid": {"type": "integer"},
        "tid": {"type": "integer"},
    },
    "oneOf": [
        {
            "properties": {
                "name": {"enum": ["process_name", "thread_name"]},
                "args": {"required": ["name"], "properties": {"name": {"type": "string"}}},
            }
        },
        {
            "properties": {
                "name": {"enum": ["process_sort_index", "thread_sort_index"]},
                "args": {
                    "required": ["sort_index"],
                    "properties": {"sort_index": {"type": "integer"}},
                },
            }
        },
    ],
}
TRACE_EVENT_FORMAT = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"oneOf": [COMPLETE, METADATA]}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
}


def tracks(document: dict) -> dict[tuple[int, int], tuple[str, int]]:
    """(pid, tid) -> (track name, sort index), from the metadata events."""
    meta = [e for e in document["traceEvents"] if e["ph"] == "M"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    order = {
        (e["pid"], e["tid"]): e["args"]["sort_index"]
        for e in meta
        if e["name"] == "thread_sort_index"
    }
    assert names.keys() == order.keys()
    return {key: (names[key], order[key]) for key in names}


def plotted_bars(figure) -> tuple[list[str], list[tuple[int, float, float]]]:
    """The plot's row labels, and each bar as (row, start ms, width ms), read from its patches."""
    ax = figure.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    bars = []
    for collection in ax.collections:
        for path in collection.get_paths():
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            bars.append((round(float(ys.mean())), float(xs.min()), float(xs.max() - xs.min())))
    return labels, bars


def file_bars(document: dict, span_ms: float) -> tuple[list[str], list[tuple[int, float, float]]]:
    """The file's tracks in their sort order, and each op as the plot would draw it: widened to
    the plot's smallest visible width when shorter."""
    found = tracks(document)
    labels = [name for name, _ in sorted(found.values(), key=lambda track: track[1])]
    row = {key: labels.index(name) for key, (name, _) in found.items()}
    smallest = timeline.MIN_VISIBLE_WIDTH * span_ms
    bars = [
        (row[(e["pid"], e["tid"])], e["ts"] / 1e3, max(e["dur"] / 1e3, smallest))
        for e in document["traceEvents"]
        if e["ph"] == "X"
    ]
    return labels, bars


def assert_same_bars(document: dict, rows) -> None:
    figure = timeline.plot_timeline(rows, "the plot")
    try:
        labels, bars = plotted_bars(figure)
    finally:
        plt.close(figure)
    span_ms = max(r.end_s for r in rows) * 1e3
    file_labels, from_file = file_bars(document, span_ms)
    assert file_labels == labels
    key = lambda bar: (bar[0], round(bar[1], 6), round(bar[2], 6))  # noqa: E731
    assert sorted(map(key, from_file)) == sorted(map(key, bars))


def test_the_file_is_trace_event_json_with_the_plots_rows_and_bars(tmp_path):
    saved = d2l.save_trace(ROWS, tmp_path / "traces" / "run.json")
    assert saved.path == tmp_path / "traces" / "run.json" and (saved.ops, saved.tracks) == (5, 5)
    assert "https://ui.perfetto.dev" in str(saved) and "chrome://tracing" in str(saved)
    document = json.loads(saved.path.read_text())
    jsonschema.validate(document, TRACE_EVENT_FORMAT)
    assert_same_bars(document, ROWS)


def test_each_op_keeps_its_own_times_in_microseconds_on_one_clock():
    document = perfetto.trace_events(ROWS)
    ops = {(e["name"], e["args"]["device"]): e for e in document["traceEvents"] if e["ph"] == "X"}
    assert len(ops) == len(ROWS)
    for row in ROWS:
        event = ops[(row.op, row.device)]
        assert event["ts"] == pytest.approx(row.start_s * 1e6, abs=1e-3)
        assert event["dur"] == pytest.approx(row.duration_s * 1e6, abs=1e-3)  # 1 µs, not widened
        assert event["cat"] == row.kind


def test_one_process_per_tensorflow_process_and_one_track_per_device_and_lane():
    document = perfetto.trace_events(ROWS)
    processes = {
        e["pid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"
    }
    assert processes == {1: "this process", 2: "/job:worker/replica:0/task:0"}
    names = {key: name for key, (name, _) in tracks(document).items()}
    assert sorted(names.values()) == sorted(
        ["CPU:0", "CPU:1", "CPU:1 ← CPU:0 (copies)", "CPU:10", "worker:0 CPU:0"]
    )
    worker_track = next(key for key, name in names.items() if name == "worker:0 CPU:0")
    assert worker_track[0] == 2  # the worker's track sits in the worker's process
    assert all(key[0] == 1 for key, name in names.items() if name != "worker:0 CPU:0")


def test_a_real_trace_saves_what_its_timeline_draws(devices, tmp_path):
    x = d2l.random_matrix(64, devices[0])
    both = chains_in_one_graph(devices[:2], 3)
    rows = d2l.trace(both, x, x)
    saved = d2l.save_trace(rows, tmp_path / "real.json.gz")  # gzipped: both viewers read it
    with gzip.open(saved.path, "rt") as file:
        document = json.load(file)
    jsonschema.validate(document, TRACE_EVENT_FORMAT)
    assert_same_bars(document, rows)
    assert sum(e["ph"] == "X" and e["cat"] == "matmul" for e in document["traceEvents"]) >= 2


def test_an_incomplete_trace_says_so_in_the_file_and_an_empty_one_is_refused(tmp_path, monkeypatch):
    class Incomplete(list):  # what `trace` returns when an expected op is missing
        incomplete = "This trace is incomplete (no matmul on CPU:1)."

    saved = d2l.save_trace(Incomplete(ROWS[:1]), tmp_path / "part.json")
    assert saved.incomplete and str(saved).endswith("(no matmul on CPU:1).")
    assert str(saved).startswith("Saved 1 op on 1 track to ")
    document = json.loads(saved.path.read_text())
    assert document["otherData"]["incomplete"] == Incomplete.incomplete
    monkeypatch.chdir(tmp_path)  # saved beside the notebook: the path from its folder
    assert f"to {Path('part.json')}. Open it" in str(saved)
    monkeypatch.chdir(tmp_path / "..")
    assert f"to {tmp_path.name}/part.json. Open it" in str(saved)
    with pytest.raises(ValueError, match=r"no op rows to save: This trace is incomplete"):
        d2l.save_trace(Incomplete(), tmp_path / "none.json")
    with pytest.raises(ValueError, match="the trace captured nothing"):
        d2l.save_trace([], tmp_path / "none.json")
