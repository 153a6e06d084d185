"""Tensor parallelism: notebook 04's saved code (Megatron's split) against one device; its run."""

import numpy as np
import pytest
import tensorflow as tf

from d2lhelpers.parallel.model import (
    input_batch,
    mlp,
    mlp_weights,
    place,
    split_sizes,
)
from d2lhelpers.parallel.tensor_parallel import (
    allreduce_sum,
    column_parallel_linear,
    count_allreduces,
    row_parallel_linear,
    shard_mlp,
    split,
    tensor_parallel_in_one_graph,
    tensor_parallel_mlp,
)
from d2lhelpers.parallel.tensor_parallel_runs import run_tensor_parallel
from tests.conftest import builds_nothing

FAST = {"min_runs": 3, "max_runs": 3, "budget_s": 0.05}
CLOSE = {"rtol": 1e-5, "atol": 1e-5}


def _linear(devices, d_in, d_out, seed=0):
    with tf.device(devices[0].name):
        w = tf.random.stateless_normal((d_in, d_out), seed=(seed, 1))
        b = tf.random.stateless_normal((d_out,), seed=(seed, 2))
    return w, b, input_batch(5, d_in, devices[0])


def _where(tensors):
    return ["/device:" + t.device.split("device:")[-1] for t in tensors]


def _names(devices):
    return [d.name for d in devices]


def test_split_cuts_columns_and_rows_unevenly(devices):
    w = tf.reshape(tf.range(30.0), (3, 10))
    columns = split(w, 1, _names(devices))
    assert [int(c.shape[1]) for c in columns] == [3, 3, 2, 2]
    assert _where(columns) == _names(devices)
    np.testing.assert_array_equal(np.concatenate([c.numpy() for c in columns], 1), w.numpy())
    rows = split(tf.transpose(w), 0, _names(devices[:3]))
    assert [int(r.shape[0]) for r in rows] == [4, 3, 3]
    with pytest.raises(ValueError, match="3 rows cannot be split into 4"):
        split(w, 0, _names(devices))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("d_out", [8, 10, 7])
def test_column_parallel_linear_equals_one_device(devices, n, d_out):
    w, b, x = _linear(devices, 6, d_out, seed=n)
    chosen = _names(devices[:n])
    blocks = column_parallel_linear(x, split(w, 1, chosen), split(b, 0, chosen), chosen)
    assert _where(blocks) == chosen
    assert [int(y.shape[1]) for y in blocks] == split_sizes(d_out, n)
    joined = tf.concat(blocks, axis=1)
    np.testing.assert_allclose(joined.numpy(), (x @ w + b).numpy(), **CLOSE)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_row_parallel_linear_all_reduces_to_every_device(devices, n):
    w, b, x = _linear(devices, 9, 4, seed=n)  # 9 input features: uneven rows on 2 and 4
    chosen = _names(devices[:n])
    outputs = row_parallel_linear(split(x, 1, chosen), split(w, 0, chosen), b, chosen)
    assert _where(outputs) == _names(devices[:n])
    for y in outputs:
        np.testing.assert_allclose(y.numpy(), (x @ w + b).numpy(), **CLOSE)


def test_allreduce_adds_parts_and_bias_once(devices):
    parts = [place(tf.fill((2,), 10.0**k), d) for k, d in enumerate(devices)]
    totals = allreduce_sum(parts, _names(devices), bias=tf.constant([0.5, 0.5]))
    assert _where(totals) == _names(devices)
    for total in totals:  # the seed's Go example: 1 + 10 + 100 + 1000
        np.testing.assert_array_equal(total.numpy(), [1111.5, 1111.5])


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("hidden", [16, 13, 4])
def test_tensor_parallel_mlp_equals_one_device(devices, n, hidden):
    weights = mlp_weights(6, hidden, devices[0], seed=n)
    x = input_batch(5, 6, devices[0])
    chosen = _names(devices[:n])
    w1, b1, w2, b2 = shard_mlp(weights, chosen)
    assert [int(w.shape[1]) for w in w1] == split_sizes(hidden, n) == [int(b.shape[0]) for b in b1]
    assert [int(w.shape[0]) for w in w2] == split_sizes(hidden, n)
    assert _where(w1) == _where(w2) == chosen and _where([b2]) == chosen[-1:]
    outputs = tensor_parallel_in_one_graph(weights, chosen)(x)
    assert len(outputs) == n
    for y in outputs:
        np.testing.assert_allclose(y.numpy(), mlp(x, weights).numpy(), **CLOSE)


def test_graph_places_slices_and_counts_one_all_reduce(devices):
    weights = mlp_weights(4, 10, devices[0])
    x = input_batch(3, 4, devices[0])
    chosen = _names(devices)
    graph = tensor_parallel_in_one_graph(weights, chosen).get_concrete_function(x).graph
    matmuls = sorted(op.device for op in graph.get_operations() if op.type == "MatMul")
    assert matmuls == sorted(d.name for d in devices for _ in range(2))
    relus = sorted(op.device for op in graph.get_operations() if op.type == "Relu")
    assert relus == sorted(chosen)  # each slice's relu where its slice is
    assert count_allreduces(graph) == 1
    shards = shard_mlp(weights, chosen)

    @tf.function
    def two_blocks(x):
        hidden = tensor_parallel_mlp(x, shards, chosen)[0]
        return tensor_parallel_mlp(hidden, shards, chosen)

    assert count_allreduces(two_blocks.get_concrete_function(x).graph) == 2
    column_only = tf.function(lambda x: column_parallel_linear(x, shards[0], shards[1], chosen))
    assert count_allreduces(column_only.get_concrete_function(x).graph) == 0


def test_run_tensor_parallel_small(devices):
    calls = []
    run = run_tensor_parallel(8, 6, 3, hidden=10, progress=lambda *a: calls.append(a), **FAST)
    assert calls[-1] == (2, 2, "finished")
    assert any(s.startswith("measuring tensor parallel on 3 (round 2 of 2)") for *_, s in calls)
    assert run.scheme == "tensor parallel" and run.n_devices == 3
    assert run.time > 0 and run.reference_time > 0 and run.throughput > 0
    assert run.shard_widths == [4, 3, 3] and run.ideal_speedup == 10 / 4
    assert run.allreduces == 1 and run.max_error < 1e-5
    text = str(run)
    assert "cut into [4, 3, 3]" in text and "4 hand-overs each" in text
    assert "Communication here" not in text  # said once per notebook, not per run


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: run_tensor_parallel(8, 4, 4, hidden=3), ValueError, "3 hidden columns cannot"),
        (lambda: run_tensor_parallel(8, 4, 5), ValueError, "choose 1 to 4"),
        (lambda: run_tensor_parallel(8, 0, 2), ValueError, "batch must be at least 1, got 0"),
        (lambda: run_tensor_parallel(8, 4, 0), ValueError, "n_devices must be at least 1"),
        (lambda: run_tensor_parallel(8, 4.5, 2), TypeError, "batch must be a whole number"),
        (lambda: run_tensor_parallel(8, 4, 2, min_runs=-1), ValueError, "min_runs"),
        # 2 TiB of weights: refused before allocating
        (lambda: run_tensor_parallel(2**18, 2**10, 4), ValueError, "is free"),
    ],
)
def test_run_tensor_parallel_refuses_bad_input_before_building(devices, call, error, message):
    with builds_nothing():
        with pytest.raises(error, match=message):
            call()
