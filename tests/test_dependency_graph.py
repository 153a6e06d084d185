import matplotlib
import matplotlib.text
import numpy as np
import pytest
import tensorflow as tf

import d2lhelpers as d2l
from d2lhelpers.parallel.branches import branch_weights, mlp_branches_in_one_graph
from d2lhelpers.tracing.graph import dependency_levels, op_graph, plot_op_graph

matplotlib.use("Agg")


def _names(devices):
    return [d.name for d in devices]


def test_branches_equal_the_unsplit_mlp(devices):
    x = tf.random.stateless_normal((8, 16), seed=(1, 2))
    weights = branch_weights(16, 11, 3)
    run = mlp_branches_in_one_graph(_names(devices[:3]), devices[3].name)
    w1 = tf.concat([w for w, _ in weights], axis=1)
    w2 = tf.concat([w for _, w in weights], axis=0)
    expected = tf.nn.relu(x @ w1) @ w2
    np.testing.assert_allclose(run(x, weights).numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_uneven_branches_differ_by_one_unit_and_too_many_are_refused():
    assert [w1.shape[1] for w1, _ in branch_weights(16, 10, 3)] == [4, 3, 3]
    with pytest.raises(ValueError, match="2 hidden units cannot be split into 3"):
        branch_weights(16, 2, 3)


def test_op_graph_reads_devices_and_dependencies_from_the_trace(devices):
    x = tf.ones((4, 8))
    weights = branch_weights(8, 8, 2)
    run = mlp_branches_in_one_graph(_names(devices[:2]), devices[2].name)
    nodes = op_graph(run, x, weights)
    by_type = {}
    for node in nodes:
        by_type.setdefault(node.type, []).append(node)
    assert {n.device for n in by_type["MatMul"]} == {"CPU:0", "CPU:1"}
    assert len(by_type["MatMul"]) == 4 and len(by_type["Relu"]) == 2
    (join,) = by_type["AddN"]
    assert join.device == "CPU:2"
    assert {by_name.type for by_name in nodes if by_name.name in join.inputs} == {"MatMul"}
    depth = dependency_levels(nodes)
    assert depth[join.name] == 4  # input -> matmul -> relu -> matmul -> add
    assert all(depth[m.name] in (1, 3) for m in by_type["MatMul"])
    assert not any(n.type in ("Identity", "NoOp") for n in nodes)


def test_plot_op_graph_draws_every_op_and_a_legend_per_device(devices):
    x = tf.ones((4, 8))
    weights = branch_weights(8, 8, 2)
    nodes = op_graph(mlp_branches_in_one_graph(_names(devices[:2]), devices[2].name), x, weights)
    figure = plot_op_graph(nodes)
    (ax,) = figure.axes
    boxes = [t for t in ax.texts if not isinstance(t, matplotlib.text.Annotation)]
    assert len(boxes) == len(nodes) and "input x" in {b.get_text() for b in boxes}
    arrows = [t for t in ax.texts if isinstance(t, matplotlib.text.Annotation)]
    assert len(arrows) == sum(len(n.inputs) for n in nodes)
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"CPU:0", "CPU:1", "CPU:2"}
    assert d2l.setup_devices() == devices


def test_one_at_a_time_orders_the_branches_and_keeps_the_result(devices):
    x = tf.random.stateless_normal((4, 8), seed=(3, 4))
    weights = branch_weights(8, 9, 3)
    free = mlp_branches_in_one_graph([devices[0].name] * 3, devices[1].name)
    serial = mlp_branches_in_one_graph([devices[0].name] * 3, devices[1].name, one_at_a_time=True)
    np.testing.assert_allclose(serial(x, weights).numpy(), free(x, weights).numpy(), rtol=1e-6)
    graph = serial.get_concrete_function(x, weights).graph
    ordered = [op for op in graph.get_operations() if op.type == "MatMul" and op.control_inputs]
    assert len(ordered) == 2  # branches 2 and 3 each wait for the branch before
    free_graph = free.get_concrete_function(x, weights).graph
    assert not any(op.control_inputs for op in free_graph.get_operations() if op.type == "MatMul")
    # The drawn graph shows the order too: each later branch's first MatMul waits for a branch.
    waits = [n for n in op_graph(serial, x, weights) if n.type == "MatMul" and len(n.inputs) == 3]
    assert len(waits) == 2
