"""TensorFlow's all-reduce graphs against the element-wise sum; sizes, memory, traces."""

import math
import time

import numpy as np
import pytest

import d2lhelpers as d2l
from d2lhelpers.collectives import tf_allreduce as tc
from d2lhelpers.core.units import MiB
from d2lhelpers.tracing.timeline import OpEvent
from d2lhelpers.workloads import chains_in_one_graph


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_allreduce_is_the_elementwise_sum_on_every_device(devices, n):
    xs = tc.allreduce_inputs(13 * 4, devices[:n], seed=n)  # 13: no even split into n chunks
    run = tc.allreduce_in_one_graph(devices[:n])
    assert run is tc.allreduce_in_one_graph(devices[:n])
    expected = np.sum([x.numpy() for x in xs], axis=0)
    sums = run(*xs)
    assert len(sums) == n
    for total in sums:
        np.testing.assert_allclose(total.numpy(), expected, rtol=1e-6)
    # One collective per device, each placed on its own device, nothing else computing.
    graph = run.get_concrete_function(*xs).graph
    ops = [op for op in graph.get_operations() if op.type == "CollectiveReduceV2"]
    assert sorted(op.device.split("device:")[-1] for op in ops) == [f"CPU:{i}" for i in range(n)]
    others = {op.type for op in graph.get_operations()} - {"CollectiveReduceV2"}
    assert others <= {"Const", "Placeholder", "Identity", "NoOp"}  # keys, inputs, outputs


def test_allreduce_traced_again_for_a_new_size_keeps_working(devices):
    run = tc.allreduce_in_one_graph(devices[:2])
    for nbytes in (8, 4096, 8):
        xs = tc.allreduce_inputs(nbytes, devices[:2])
        np.testing.assert_allclose(run(*xs)[1].numpy(), (xs[0] + xs[1]).numpy(), rtol=1e-6)


def test_allreduce_and_compute_returns_the_sums_and_the_chains(devices):
    grads = tc.allreduce_inputs(64, devices[:2])
    xs = [np.eye(3, dtype=np.float32) * (i + 1) for i in range(2)]
    for overlap in (True, False):
        reduced, products = tc.allreduce_and_compute(devices[:2], 2, overlap)(grads, xs)
        np.testing.assert_allclose(reduced[0].numpy(), (grads[0] + grads[1]).numpy(), rtol=1e-6)
        np.testing.assert_allclose(products[1].numpy(), np.eye(3) * 8)  # x @ x @ x, x = 2I
    with pytest.raises(ValueError, match="chain_length"):
        tc.allreduce_and_compute(devices[:2], 0, True)


def test_local_copy_and_add_compute_a_copy_and_a_sum(devices):
    copy, add = tc.local_copy_and_add(4 * 10, devices[0])
    copied, added = copy().numpy(), add().numpy()
    assert copied.shape == added.shape == (10,)
    assert not np.allclose(added, copied) and np.all(added > copied - 1e-6)  # a + b, b >= 0


def test_alpha_beta_models_predict_exact_data():
    alpha, beta = 1e-3, 2e9
    sizes = [4096, 65536, 2**20, 2**24, 2**26]
    times = [alpha + s / beta for s in sizes]
    tiny = alpha + 4 / beta
    model, fitted, fit_sizes = tc.alpha_beta_models(sizes, times, tiny_s=tiny)
    assert model.alpha_s == tiny  # alpha is the tiny message's time, nothing fitted
    assert model.beta_bytes_per_s == pytest.approx(beta, rel=1e-6)
    assert fit_sizes == [4096, 2**20, 2**26]
    assert fitted.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert fitted.beta_bytes_per_s == pytest.approx(beta, rel=1e-6)
    # Too few sizes to hold any out; time that does not grow: all latency.
    model, fitted, fit_sizes = tc.alpha_beta_models([4096, 8192], [2e-3, 2e-3], tiny_s=2e-3)
    assert math.isinf(model.beta_bytes_per_s) and fitted is None and fit_sizes == []


def test_sizes_up_to():
    assert tc.sizes_up_to(16 * MiB) == [4096 * 4**k for k in range(7)]
    assert tc.sizes_up_to(10_000) == [4096, 10_000]
    assert tc.sizes_up_to(4096) == [4096]
    for bad in (4095, 6 * 1024 + 2, 0):
        with pytest.raises(ValueError):
            tc.sizes_up_to(bad)
    with pytest.raises(TypeError):
        tc.sizes_up_to(4096.0)


@pytest.mark.parametrize(
    "sizes, error",
    [
        ([], ValueError),
        ([4096], ValueError),
        ([4096, 4096], ValueError),
        ([0, 4096], ValueError),
        ([-4, 4096], ValueError),
        ([6, 4096], ValueError),
        ([4.0, 4096], TypeError),
        ([True, 4096], TypeError),
        ("4096", TypeError),
        (4096, TypeError),
    ],
)
def test_allreduce_sizes_refuses(sizes, error):
    with pytest.raises(error):
        tc.allreduce_sizes(sizes)


def test_allreduce_sizes_sorts_and_deduplicates():
    assert tc.allreduce_sizes([64, 8, 64, np.int64(16)]) == [8, 16, 64]


def test_oversize_messages_are_refused_fast_naming_the_largest_that_fits(devices):
    largest = tc.largest_message_that_fits(devices[:2])
    assert largest >= 4096 and largest & (largest - 1) == 0  # a power of two
    tc.require_message_fits(largest, devices[:2], "fits")  # no error
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"largest size that fits is") as refused:
        tc.require_message_fits(2 * largest, devices[:2], "twice as much")
    assert time.perf_counter() - start < 1.0
    assert "free" in str(refused.value)


def test_allreduce_timeline_ends_rows_at_the_first_use_of_their_result():
    rows = [
        OpEvent("/device:CPU:0", "allreduce_0", "other", 0.0, 9.0),  # callback ran late
        OpEvent("/device:CPU:1", "allreduce_1", "other", 0.0, 4.0),
        OpEvent("/device:CPU:1", "allreduce_0", "copy", 5.0, 5.1, "copy from /device:CPU:0"),
        OpEvent("/device:CPU:0", "MatMul", "matmul", 4.5, 6.0),
    ]
    consumers = {"allreduce_0": {"MatMul"}, "allreduce_1": {"MatMul"}}
    fixed = tc.allreduce_timeline(rows, consumers)
    assert [r.end_s for r in fixed] == [4.5, 4.0, 5.1, 6.0]
    assert [r.lane for r in fixed] == ["all-reduce", "all-reduce", rows[2].lane, ""]
    assert tc.allreduce_timeline(rows)[0].end_s == 5.0  # the copy alone bounds it
    assert tc.allreduce_rows(fixed, "/device:CPU:1") == [fixed[1]]


def test_a_trace_that_lost_an_allreduce_is_marked_incomplete(devices):
    run = chains_in_one_graph(devices[:1], 1)  # a matmul, but no all-reduce to find
    x = d2l.random_matrix(8, devices[0])
    rows = tc.trace_with_allreduce(run, x, devices=[devices[0].name], tries=2)
    assert "no all-reduce on CPU:0 in 2 tries" in rows.incomplete
    assert tc.allreduce_timeline(rows).incomplete == rows.incomplete  # still marked, redrawn


def test_allreduce_consumers_finds_data_and_control_users(devices):
    grads = tc.allreduce_inputs(16, devices[:2])
    xs = [np.eye(2, dtype=np.float32)] * 2
    for overlap in (True, False):
        fn = tc.allreduce_and_compute(devices[:2], 1, overlap)
        consumers = tc.allreduce_consumers(fn.get_concrete_function(grads, xs).graph)
        assert len(consumers) == 2
        waiting = {op for users in consumers.values() for op in users if "MatMul" in op}
        assert bool(waiting) is (not overlap)  # only the forced order makes matmuls wait
