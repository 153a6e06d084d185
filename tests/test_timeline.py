"""Timelines: busy intervals and plots on hand-built rows, then real traces of real chains."""

import matplotlib
import pytest
import tensorflow as tf

import d2lhelpers as d2l
from d2lhelpers.parallel import branches
from d2lhelpers.tracing import timeline
from d2lhelpers.tracing.timeline import EmptyTraceError, OpEvent
from d2lhelpers.workloads import chains_in_one_graph, matmul_chain

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

CPU0, CPU1 = "/device:CPU:0", "/device:CPU:1"


def test_a_trace_with_no_op_events_raises_instead_of_drawing_nothing(devices):
    with pytest.raises(EmptyTraceError, match="no op events"):
        timeline.trace(tf.function(lambda x: x), tf.constant(1.0))  # runs no op at all
    with pytest.raises(EmptyTraceError):
        timeline.plot_timeline([])
    with pytest.raises(TypeError, match="tf.function"):
        timeline.trace(lambda x: x * 2, tf.constant(1.0))


def test_busy_intervals_merge_and_overlap_is_their_intersection():
    rows = [
        OpEvent(CPU0, "a", "matmul", 0.0, 1.0),
        OpEvent(CPU0, "b", "matmul", 1.0, 2.0),  # back to back: one busy stretch
        OpEvent(CPU0, "c", "other", 2.0, 9.0),
        OpEvent(CPU0, "d", "matmul", 3.0, 4.0),
        OpEvent(CPU1, "e", "matmul", 1.5, 3.5),
    ]
    zero = timeline.busy_intervals(rows, CPU0, "matmul")
    assert zero == [(0.0, 2.0), (3.0, 4.0)]
    assert timeline.busy_intervals(rows, "/job:localhost/replica:0/task:0/device:CPU:0") != []
    one = timeline.busy_intervals(rows, CPU1, "matmul")
    assert timeline.overlap_seconds(zero, one) == pytest.approx(1.0)
    assert timeline.overlap_seconds(one, zero) == pytest.approx(1.0)
    assert timeline.busy_seconds(zero) == pytest.approx(3.0)
    assert timeline.overlap_seconds(zero, []) == 0.0


def test_plot_has_one_row_per_device_and_per_copy_lane():
    rows = [
        OpEvent(CPU0, "MatMul", "matmul", 0.0, 0.002),
        OpEvent(CPU1, "MatMul_1", "matmul", 0.001, 0.003),
        OpEvent("/device:CPU:10", "add", "other", 0.0031, 0.0032),
        OpEvent("/device:CPU:2", "MatMul_2", "matmul", 0.0, 0.004),
    ]
    fig = timeline.plot_timeline(rows, title="four devices")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["CPU:0", "CPU:1", "CPU:2", "CPU:10"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["matmul", "copy", "other"]
    assert "ms" in ax.get_xlabel() and ax.get_xlim()[1] >= 4.0
    plt.close(fig)

    copy = OpEvent(CPU1, "MatMul", "copy", 0.002, 0.002001, f"copy from {CPU0}")
    fig = timeline.plot_timeline([*rows, copy])
    assert len(fig.axes[0].get_yticks()) == 5
    assert "CPU:1 ← CPU:0 (copies)" in [t.get_text() for t in fig.axes[0].get_yticklabels()]
    plt.close(fig)


def matmuls(rows, device):
    return timeline.busy_intervals(rows, device.name, "matmul")


def in_dependency_order(rows) -> bool:
    """Each row starts no earlier than the row before it ended (a chain's order)."""
    return all(a.end_s <= b.start_s for a, b in zip(rows, rows[1:], strict=False))


def test_independent_chains_trace_as_one_ordered_chain_per_device(devices):
    # What must hold on any machine: which ops ran where, and in what order. How much the two
    # chains overlapped is the scheduler's doing on this run: `make bench` reports it.
    xs = [d2l.random_matrix(400, d, seed=i) for i, d in enumerate(devices[:2])]
    run = chains_in_one_graph(devices[:2], 5)
    rows = timeline.trace(run, *xs)
    assert rows.incomplete == ""
    for device in (timeline.device_label(d.name) for d in devices[:2]):
        chain = [r for r in rows if r.kind == "matmul" and r.device == device]
        assert len(chain) == 5, [(r.device, r.op) for r in rows]
        assert in_dependency_order(chain), [(r.op, r.start_s, r.end_s) for r in chain]
    assert not [r for r in rows if r.kind == "copy"]  # the chains share nothing


def test_a_trace_holds_every_matmul_even_after_many_untraced_calls(devices):
    # TensorFlow stops tracing an op its running cost estimate calls cheap (profiler level 3):
    # a few hundred calls of these tiny matmuls used to leave 1 to 3 of the 4 in the trace.
    x = tf.random.stateless_normal((16, 32), seed=(0, 1))
    names = [d.name for d in devices[:3]]
    run = branches.mlp_branches_in_one_graph(names[1:3], names[0])
    weights = branches.branch_weights(32, 64, 2)
    for _ in range(400):
        run(x, weights)
    rows = timeline.trace(run, x, weights)
    found = sorted((r.op, r.device) for r in rows if r.kind == "matmul")
    one, two = (timeline.device_label(d.name) for d in devices[1:3])
    want = [("MatMul", one), ("MatMul_1", one), ("MatMul_2", two), ("MatMul_3", two)]
    assert found == want and rows.incomplete == ""


def test_an_incomplete_trace_says_so_in_one_sentence_and_draws_nothing(devices, capsys):
    run = chains_in_one_graph(devices[:1], 2)
    x = d2l.random_matrix(16, devices[0])
    rows = timeline.trace(run, x, check=lambda rows: "no all-reduce on CPU:9", tries=2)
    assert rows.incomplete == (
        "This trace is incomplete (no all-reduce on CPU:9 in 2 tries), so no timeline is drawn "
        "and nothing is concluded from it."
    )
    assert timeline.plot_timeline(rows, "one call") is None
    assert capsys.readouterr().out == rows.incomplete + "\n"
    fig, ax = plt.subplots()
    assert timeline.plot_timeline(rows, "one call", ax=ax) is fig
    assert not ax.collections and [t.get_text() for t in ax.texts] == [rows.incomplete]
    plt.close(fig)
    assert timeline.trace(run, x).incomplete == ""  # a whole trace is not marked


def test_a_dependent_chain_split_across_two_devices_never_overlaps(devices):
    first, second = devices[0].name, devices[1].name

    @tf.function
    def dependent(x):
        with tf.device(first):
            y = matmul_chain(x, 3)
        with tf.device(second):
            return matmul_chain(y, 3)  # every product here waits for y

    rows = timeline.trace(dependent, d2l.random_matrix(300, devices[0]))

    zero, one = matmuls(rows, devices[0]), matmuls(rows, devices[1])
    assert timeline.busy_seconds(zero) > 0 and timeline.busy_seconds(one) > 0
    assert timeline.overlap_seconds(zero, one) == 0.0
    copies = [r for r in rows if r.kind == "copy" and r.device == timeline.device_label(second)]
    assert len(copies) == 1 and copies[0].lane == f"copy from {timeline.device_label(first)}"
    assert zero[-1][1] <= copies[0].start_s <= copies[0].end_s <= one[0][0]


def test_a_second_profiler_session_is_refused_clearly(devices, tmp_path):
    run = chains_in_one_graph(devices[:1], 1)
    x = d2l.random_matrix(8, devices[0])
    with timeline.profiling(tmp_path), pytest.raises(RuntimeError, match="another profiler"):
        timeline.trace(run, x)
    assert timeline.trace(run, x)  # and the first session was stopped on the way out
