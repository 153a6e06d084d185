"""TensorFlow's all-reduce in a trace (`collectives/allreduce_trace.py`): its rows, their true
end, the ops that wait for it, and a trace that lost it."""

import numpy as np

import d2lhelpers as d2l
from d2lhelpers.collectives import allreduce_trace as at
from d2lhelpers.collectives import tf_allreduce, tf_collective
from d2lhelpers.tracing.timeline import OpEvent
from d2lhelpers.workloads import chains_in_one_graph


def test_allreduce_timeline_ends_rows_at_the_first_use_of_their_result():
    rows = [
        OpEvent("/device:CPU:0", "allreduce_0", "other", 0.0, 9.0),  # callback ran late
        OpEvent("/device:CPU:1", "allreduce_1", "other", 0.0, 4.0),
        OpEvent("/device:CPU:1", "allreduce_0", "copy", 5.0, 5.1, "copy from /device:CPU:0"),
        OpEvent("/device:CPU:0", "MatMul", "matmul", 4.5, 6.0),
    ]
    consumers = {"allreduce_0": {"MatMul"}, "allreduce_1": {"MatMul"}}
    fixed = at.allreduce_timeline(rows, consumers)
    assert [r.end_s for r in fixed] == [4.5, 4.0, 5.1, 6.0]
    assert [r.lane for r in fixed] == ["all-reduce", "all-reduce", rows[2].lane, ""]
    assert at.allreduce_timeline(rows)[0].end_s == 5.0  # the copy alone bounds it
    assert at.allreduce_rows(fixed, "/device:CPU:1") == [fixed[1]]


def test_a_trace_that_lost_an_allreduce_is_marked_incomplete(devices):
    run = chains_in_one_graph(devices[:1], 1)  # a matmul, but no all-reduce to find
    x = d2l.random_matrix(8, devices[0])
    rows = at.trace_with_allreduce(run, x, devices=[devices[0].name], tries=2)
    assert "no all-reduce on CPU:0 in 2 tries" in rows.incomplete
    assert at.allreduce_timeline(rows).incomplete == rows.incomplete  # still marked, redrawn


def test_allreduce_consumers_finds_data_and_control_users(devices):
    grads = tf_allreduce.allreduce_inputs(64, devices[:2])
    xs = [np.eye(3, dtype=np.float32)] * 2
    for overlap in (True, False):
        run = tf_collective.allreduce_and_compute(devices[:2], 2, overlap)
        consumers = at.allreduce_consumers(run.get_concrete_function(grads, xs).graph)
        waiting = {op for users in consumers.values() for op in users if "MatMul" in op}
        assert len(consumers) == 2 and bool(waiting) is (not overlap)  # only the forced order
