"""Replicas: notebook 04's saved code against one device, and its measured run."""

import numpy as np
import pytest

from d2lhelpers.parallel.model import input_batch, mlp, mlp_weights
from d2lhelpers.parallel.replica_runs import run_replicas
from d2lhelpers.parallel.replicas import replicas_in_one_graph
from tests.conftest import builds_nothing

FAST = {"min_runs": 3, "max_runs": 3, "budget_s": 0.05}


def _names(devices):
    return [d.name for d in devices]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_replicas_equal_one_device_with_uneven_shares(devices, n):
    weights = mlp_weights(6, 9, devices[0], seed=n)
    x = input_batch(11, 6, devices[0])  # 11 rows: uneven shares on 2, 3 and 4 devices
    outputs = replicas_in_one_graph(weights, _names(devices[:n]))(x)
    assert [int(y.shape[0]) for y in outputs] == [11 // n + (k < 11 % n) for k in range(n)]
    joined = np.concatenate([y.numpy() for y in outputs])
    np.testing.assert_allclose(joined, mlp(x, weights).numpy(), rtol=1e-5, atol=1e-6)


def test_each_replica_computes_on_its_own_device_with_its_own_copy(devices):
    weights = mlp_weights(4, 8, devices[0])
    x = input_batch(8, 4, devices[0])
    run = replicas_in_one_graph(weights, _names(devices))
    graph = run.get_concrete_function(x).graph
    matmuls = [op.device for op in graph.get_operations() if op.type == "MatMul"]
    assert sorted(matmuls) == sorted(d.name for d in devices for _ in range(2))
    # The copies are placed once, outside the graph: the graph reads them, it copies no weights.
    copies = [t for t in graph.captures if t[0].shape == (4, 8)]
    assert {c[0].device.split("device:")[-1] for c in copies} == {
        d.name.split("device:")[-1] for d in devices
    }


def test_run_replicas_small(devices):
    calls = []
    run = run_replicas(16, 32, 2, progress=lambda *a: calls.append(a), **FAST)
    assert [c[2] for c in calls if not c[2].startswith("measuring")] == [
        "done: round 1 of 2",
        "finished",
    ]
    assert calls[0][2].startswith("measuring one device (round 1 of 2), repeat ")
    assert calls[-1][:2] == (2, 2)
    assert run.scheme == "replicas" and run.n_devices == 2 and run.kind == devices[0].kind
    assert run.time > 0 and run.reference_time > 0 and run.throughput == 32 / run.time
    assert run.ideal_speedup == 2.0 and run.max_error < 1e-5
    assert run.measurement.work == 2 * 2 * 32 * 16 * 64  # hidden defaults to 4 x width
    assert "replicas on 2" in run.verdict and "reachable here: 2.00x" in run.verdict


def test_one_replica_is_the_reference_measured_once(devices):
    run = run_replicas(8, 10, 1, **FAST)
    assert run.measurement is run.reference and run.speedup == 1.0
    assert run_replicas(8, 10, 3, **FAST).ideal_speedup == 10 / 4  # 10 rows: 4 + 3 + 3


def test_a_replica_that_computes_something_else_is_caught(devices):
    def wrong(weights, devices):  # every replica adds its bias twice
        return replicas_in_one_graph(weights._replace(b2=2 * weights.b2), devices)

    run = run_replicas(8, 8, 2, in_one_graph=wrong, **FAST)
    assert run.max_error > 1e-2 and not run.trusted and "computed something else" in str(run)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: run_replicas(8, 8, 5), ValueError, "choose 1 to 4"),
        (lambda: run_replicas(0, 8, 2), ValueError, "width must be at least 1, got 0"),
        (lambda: run_replicas(8, -3, 2), ValueError, "batch must be at least 1"),
        (lambda: run_replicas(8.0, 8, 2), TypeError, "width must be a whole number"),
        (lambda: run_replicas(8, 8, "2"), TypeError, "n_devices must be a whole number"),
        (lambda: run_replicas(8, 8, 2, hidden=0), ValueError, "hidden must be at least 1"),
        (lambda: run_replicas(8, 3, 4), ValueError, "choose a batch of at least 4"),
        (lambda: run_replicas(8, 8, 2, max_runs=0), ValueError, "max_runs must be at least 1"),
        (lambda: run_replicas(8, 8, 2, device_peak=0), ValueError, "device_peak"),
        # 2 TiB of weights: refused before allocating
        (lambda: run_replicas(2**18, 2**10, 2), ValueError, "is free"),
    ],
)
def test_run_replicas_refuses_bad_input_before_building(devices, call, error, message):
    with builds_nothing():
        with pytest.raises(error, match=message):
            call()
