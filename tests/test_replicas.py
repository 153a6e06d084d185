import time

import numpy as np
import pytest

from d2lhelpers.parallel.common import (
    input_batch,
    mlp,
    mlp_weights,
)
from d2lhelpers.parallel.replicas import (
    replica_sweep,
    replicas_in_one_graph,
    replicate,
    run_replicas,
    shard_batch,
)

FAST = {"min_runs": 3, "max_runs": 3, "budget_s": 0.05}


def test_shard_batch_balances_requests(devices):
    x = input_batch(10, 3, devices[0])
    shards = shard_batch(x, devices)
    assert [int(s.shape[0]) for s in shards] == [3, 3, 2, 2]
    assert all(s.device.endswith(d.name) for s, d in zip(shards, devices, strict=True))
    np.testing.assert_array_equal(np.concatenate([s.numpy() for s in shards]), x.numpy())


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_replicas_equal_one_device(devices, n):
    weights = mlp_weights(6, 9, devices[0], seed=n)
    x = input_batch(11, 6, devices[0])  # 11 rows: uneven shares on 2, 3 and 4 devices
    chosen = devices[:n]
    replicas = replicate(weights, chosen)
    assert all(r.w1.device.endswith(d.name) for r, d in zip(replicas, chosen, strict=True))
    outputs = replicas_in_one_graph(chosen)(shard_batch(x, chosen), replicas)
    joined = np.concatenate([y.numpy() for y in outputs])
    np.testing.assert_allclose(joined, mlp(x, weights).numpy(), rtol=1e-5, atol=1e-6)


def test_replicas_graph_runs_each_replica_on_its_device(devices):
    weights = mlp_weights(4, 8, devices[0])
    x = input_batch(8, 4, devices[0])
    run = replicas_in_one_graph(devices)
    assert run is replicas_in_one_graph(devices)
    graph = run.get_concrete_function(shard_batch(x, devices), replicate(weights, devices)).graph
    matmuls = [op.device for op in graph.get_operations() if op.type == "MatMul"]
    assert sorted(matmuls) == sorted(d.name for d in devices for _ in range(2))


def test_run_replicas_small(devices):
    calls = []
    run = run_replicas(16, 32, 2, progress=lambda *a: calls.append(a), **FAST)
    assert [(done, total) for done, total, _ in calls] == [(0, 2), (1, 2), (1, 2), (2, 2)]
    assert calls[0][2] == "measuring replicas on 1 device (step 1 of 2)"
    assert calls[-1][2] == "finished"
    assert run.scheme == "replicas" and run.n_devices == 2 and run.kind == devices[0].kind
    assert run.time > 0 and run.reference_time > 0 and run.throughput == 32 / run.time
    assert run.ideal_speedup == 2.0 and run.max_error < 1e-5
    assert run.measurement.work == 2 * 2 * 32 * 16 * 64  # hidden defaults to 4 x width
    assert "replicas on 2" in run.verdict and "reachable here: 2.00x" in run.verdict


def test_replica_sweep_shares_the_reference(devices):
    runs = replica_sweep(8, 10, 3, **FAST)
    assert [r.n_devices for r in runs] == [1, 2, 3]
    assert runs[0].measurement is runs[0].reference and runs[0].speedup == 1.0
    assert all(r.reference is runs[0].reference for r in runs)
    assert [r.ideal_speedup for r in runs] == [1.0, 2.0, 10 / 4]  # 10 rows: 4 + 3 + 3
    assert all(r.throughput > 0 and r.max_error < 1e-5 for r in runs)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: run_replicas(8, 8, 5), ValueError, "choose 1 to 4"),
        (lambda: run_replicas(0, 8, 2), ValueError, "width must be at least 1, got 0"),
        (lambda: run_replicas(8, -3, 2), ValueError, "batch must be at least 1"),
        (lambda: run_replicas(8.0, 8, 2), TypeError, "width must be a whole number"),
        (lambda: run_replicas(8, 8, "2"), TypeError, "max_devices must be a whole number"),
        (lambda: run_replicas(8, 8, 2, hidden=0), ValueError, "hidden must be at least 1"),
        (lambda: run_replicas(8, 3, 4), ValueError, "choose a batch of at least 4"),
        (lambda: replica_sweep(8, 8, 2, counts=[1, 3]), ValueError, "at most 2, got 3"),
        (lambda: replica_sweep(8, 8, 2, counts=[]), ValueError, "at least one value"),
        (lambda: run_replicas(8, 8, 2, max_runs=0), ValueError, "max_runs must be at least 1"),
        (lambda: run_replicas(8, 8, 2, device_peak=0), ValueError, "device_peak"),
        # 2 TiB of weights: refused before allocating
        (lambda: run_replicas(2**18, 2**10, 2), ValueError, "is free"),
        (lambda: replica_sweep(2**18, 2**10, 2), ValueError, "is free"),
    ],
)
def test_run_replicas_refuses_bad_input_fast(devices, call, error, message):
    start = time.perf_counter()
    with pytest.raises(error, match=message):
        call()
    assert time.perf_counter() - start < 1.0
