import numpy as np
import pytest
import tensorflow as tf

import d2lhelpers as d2l
from d2lhelpers.workloads import chain_bytes, identical_matmuls


def test_matmul_chain_equals_numpy_powers(devices):
    x = d2l.random_matrix(32, devices[1], seed=3)
    assert x.device.endswith("CPU:1")
    expected = np.linalg.matrix_power(x.numpy().astype(np.float64), 6)
    np.testing.assert_allclose(d2l.matmul_chain(x, 5).numpy(), expected, rtol=1e-3, atol=1e-4)


def test_long_chain_stays_finite(devices):
    y = d2l.matmul_chain(d2l.random_matrix(256, devices[0]), 100)
    assert np.isfinite(y.numpy()).all() and 0 < np.abs(y.numpy()).max() < 1e3


def test_counts():
    assert d2l.chain_flops(4000, 50) == 50 * 2 * 4000**3
    assert chain_bytes(1000) == 12_000_000


def test_chains_in_one_graph_places_one_chain_per_device(devices):
    xs = [d2l.random_matrix(16, d, seed=i) for i, d in enumerate(devices[:2])]
    run = d2l.chains_in_one_graph(devices[:2], 3)
    assert run is d2l.chains_in_one_graph(devices[:2], 3)  # traced once, reused
    ys = run(*xs)
    for x, y in zip(xs, ys, strict=True):
        np.testing.assert_allclose(y.numpy(), d2l.matmul_chain(x, 3).numpy(), rtol=1e-5)
    # Where each product runs is decided in the graph (outputs may be handed back elsewhere).
    graph = run.get_concrete_function(*xs).graph
    matmul_devices = {op.device for op in graph.get_operations() if op.type == "MatMul"}
    assert {d.split("device:")[-1] for d in matmul_devices} == {"CPU:0", "CPU:1"}


def test_identical_matmuls_are_traced_but_one_runs(devices):
    x = d2l.random_matrix(512, devices[0])
    dup = tf.function(lambda x: identical_matmuls(x, 20))
    traced = dup.get_concrete_function(x).graph.get_operations()
    assert sum(op.type == "MatMul" for op in traced) == 20
    peak = d2l.device_peak_rate(devices[0])
    m = d2l.measure(lambda: dup(x), "dup", flops=d2l.chain_flops(512, 20), peak=peak)
    assert m.rate > 3 * peak  # one product's time for twenty's work
    assert any("deduplicated" in w for w in m.warnings)
    chain = d2l.chains_in_one_graph([devices[0]], 20)
    honest = d2l.measure(lambda: chain(x), "chain", flops=d2l.chain_flops(512, 20), peak=peak)
    assert not any("peak" in w for w in honest.warnings)


def test_concurrency_sweep_small(devices):
    calls = []
    result = d2l.concurrency_sweep(
        64, 2, 3, lambda done, total: calls.append((done, total)), min_runs=3, budget_s=0.2
    )
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert result.device_counts == [1, 2, 3] and result.kind == "logical CPU"
    assert result.slowdowns[0] == 1.0 and result.speedups[0] == 1.0
    assert result.speedups[2] == pytest.approx(3 / result.slowdowns[2])
    assert "ideal 1.00" in result.table() and len(result.table().splitlines()) == 4


def test_concurrency_sweep_refuses_bad_input(devices):
    with pytest.raises(ValueError, match="choose 1 to 4"):
        d2l.concurrency_sweep(64, 2, 5)
    with pytest.raises(ValueError, match="at least 1"):
        d2l.concurrency_sweep(0, 2, 2)
    with pytest.raises(ValueError, match="is free"):
        d2l.concurrency_sweep(2**20, 1, 4)  # 12 TiB per device: refused before allocating
