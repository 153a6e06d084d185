import numpy as np
import tensorflow as tf

import d2lhelpers as d2l
from d2lhelpers.core.counts import chain_bytes
from d2lhelpers.workloads import chains_in_one_graph, identical_matmuls, matmul_chain


def test_matmul_chain_equals_numpy_powers(devices):
    x = d2l.random_matrix(32, devices[1], seed=3)
    assert x.device.endswith("CPU:1")
    expected = np.linalg.matrix_power(x.numpy().astype(np.float64), 6)
    np.testing.assert_allclose(matmul_chain(x, 5).numpy(), expected, rtol=1e-3, atol=1e-4)


def test_long_chain_stays_finite(devices):
    y = matmul_chain(d2l.random_matrix(256, devices[0]), 100)
    assert np.isfinite(y.numpy()).all() and 0 < np.abs(y.numpy()).max() < 1e3


def test_counts():
    assert d2l.chain_flops(4000, 50) == 6.4e12  # the seed's 50 products of 4000²: 2·4000³ each
    assert chain_bytes(1000) == 12_000_000


def test_chains_in_one_graph_places_one_chain_per_device(devices):
    xs = [d2l.random_matrix(16, d, seed=i) for i, d in enumerate(devices[:2])]
    run = chains_in_one_graph(devices[:2], 3)
    ys = run(*xs)
    for x, y in zip(xs, ys, strict=True):
        np.testing.assert_allclose(y.numpy(), matmul_chain(x, 3).numpy(), rtol=1e-5)
    # Where each product runs is decided in the graph (outputs may be handed back elsewhere).
    graph = run.get_concrete_function(*xs).graph
    matmul_devices = {op.device for op in graph.get_operations() if op.type == "MatMul"}
    assert {d.split("device:")[-1] for d in matmul_devices} == {"CPU:0", "CPU:1"}


def test_identical_matmuls_are_traced_but_one_runs(devices):
    # Counted from a trace, not inferred from a rate: no timing, so no flakiness under load.
    x = d2l.random_matrix(64, devices[0])
    dup = tf.function(lambda x: identical_matmuls(x, 20))
    traced = dup.get_concrete_function(x).graph.get_operations()
    assert sum(op.type == "MatMul" for op in traced) == 20
    assert len({row.op for row in d2l.trace(dup, x) if row.kind == "matmul"}) == 1
    chain = chains_in_one_graph([devices[0]], 20)
    assert sum(row.kind == "matmul" for row in d2l.trace(chain, x)) == 20


def test_building_a_graph_per_device_set_gives_no_retracing_advice(devices, caplog):
    xs = [d2l.random_matrix(8, d, seed=i) for i, d in enumerate(devices)]
    for k in (1, 2, 3, 4) * 3:  # as a panel does: a new graph per device count, run after run
        chains_in_one_graph(devices[:k], 2)(*xs[:k])
    assert "retracing" not in caplog.text
