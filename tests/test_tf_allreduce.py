import math

import matplotlib.pyplot as plt
import numpy as np
import pytest

import d2lhelpers as d2l
from d2lhelpers import tf_allreduce as ta
from d2lhelpers.benchmark import Measurement
from d2lhelpers.timeline import OpEvent

QUICK = {"min_runs": 3, "max_runs": 3, "budget_s": 0.05}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_allreduce_is_the_elementwise_sum_on_every_device(devices, n):
    xs = ta.allreduce_inputs(13 * 4, devices[:n], seed=n)  # 13: no even split into n chunks
    run = ta.allreduce_in_one_graph(devices[:n])
    assert run is ta.allreduce_in_one_graph(devices[:n])
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
    run = ta.allreduce_in_one_graph(devices[:2])
    for nbytes in (8, 4096, 8):
        xs = ta.allreduce_inputs(nbytes, devices[:2])
        np.testing.assert_allclose(run(*xs)[1].numpy(), (xs[0] + xs[1]).numpy(), rtol=1e-6)


def test_alpha_beta_models_predict_exact_data():
    alpha, beta = 1e-3, 2e9
    sizes = [4096, 65536, 2**20, 2**24, 2**26]
    times = [alpha + s / beta for s in sizes]
    tiny = alpha + 4 / beta
    model, fitted, fit_sizes = ta.alpha_beta_models(sizes, times, tiny_s=tiny)
    assert model.alpha_s == tiny  # alpha is the tiny message's time, nothing fitted
    assert model.beta_bytes_per_s == pytest.approx(beta, rel=1e-6)
    assert fit_sizes == [4096, 2**20, 2**26]
    assert fitted.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert fitted.beta_bytes_per_s == pytest.approx(beta, rel=1e-6)
    # Too few sizes to hold any out; time that does not grow: all latency.
    model, fitted, fit_sizes = ta.alpha_beta_models([4096, 8192], [2e-3, 2e-3], tiny_s=2e-3)
    assert math.isinf(model.beta_bytes_per_s) and fitted is None and fit_sizes == []


def _fake(seconds: float, nbytes: float | None = None) -> Measurement:
    return Measurement("fake", [seconds], nbytes, "B/s")


def test_sweep_result_residuals_and_bound_from_known_numbers():
    sizes = [1000, 2000, 4000, 8000]
    times = [1.1e-3, 1.3e-3, 1.4e-3, 2.0e-3]
    model, fitted, fit_sizes = ta.alpha_beta_models(sizes, times, tiny_s=1e-3)
    sweep = ta.AllReduceSweep(
        4, "logical CPU", sizes, [_fake(t, s) for s, t in zip(sizes, times, strict=True)],
        _fake(1e-3), _fake(1e-3, 4e6), _fake(2e-3, 4e6), model, fitted, fit_sizes,
    )  # fmt: skip
    assert model.beta_bytes_per_s == pytest.approx(8000 / 1e-3)
    assert sweep.predicted == pytest.approx([1e-3 + s / 8e6 for s in sizes])
    assert [r.nbytes for r in sweep.residuals] == [1000, 2000, 4000]
    assert sweep.residuals[0].relative == pytest.approx((1.1e-3 - 1.125e-3) / 1.1e-3)
    assert sweep.held_out_sizes == [2000, 8000]
    assert [r.nbytes for r in sweep.held_out_residuals] == [2000, 8000]
    assert sweep.bus_bandwidth == pytest.approx(8e6 * 2 * 3 / 4)
    assert sweep.bound_s(8000) == pytest.approx(8000 / 8e6)  # = S / beta
    text = "\n".join(sweep.lines())
    assert "alpha = 1000 µs" in text and "memcpy" in text and "held out" in text


def test_sizes_up_to():
    assert ta.sizes_up_to(16 * ta.MiB) == [4096 * 4**k for k in range(7)]
    assert ta.sizes_up_to(10_000) == [4096, 10_000]
    assert ta.sizes_up_to(4096) == [4096]
    for bad in (4095, 6 * 1024 + 2, 0):
        with pytest.raises(ValueError):
            ta.sizes_up_to(bad)


@pytest.mark.parametrize("n", [1, 2])
def test_sweep_measures_tiny_sizes(devices, n):
    calls = []
    sizes = [64, 4096, 1024]
    result = ta.allreduce_sweep(n, sizes, lambda done, total: calls.append((done, total)), **QUICK)
    assert calls == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
    assert result.sizes == [64, 1024, 4096] and result.n_devices == n
    assert len(result.measurements) == len(result.predicted) == 3
    assert all(t > 0 for t in result.times) and result.tiny.median > 0
    assert all(p > 0 for p in result.predicted)
    assert len(result.residuals) == 2 and len(result.held_out_residuals) == 1
    assert all(math.isfinite(r.relative) for r in result.residuals + result.held_out_residuals)
    assert result.copy.rate > 0 and result.add.rate > 0
    assert result.kind == "logical CPU" and result.lines()
    figure = ta.plot_allreduce_sweep(result)
    assert figure.axes[0].get_xscale() == "log" and figure.axes[0].get_yscale() == "log"
    plt.close(figure)


@pytest.mark.parametrize(
    "sizes",
    [[], [4096], [4096, 4096], [0, 4096], [-4, 4096], [6, 4096], [4.0, 4096], [True, 4096]],
)
def test_sweep_refuses_bad_sizes(devices, sizes):
    with pytest.raises(ValueError):
        ta.allreduce_sweep(2, sizes)


def test_sweep_refuses_bad_device_counts_and_sizes_that_do_not_fit(devices, monkeypatch):
    for n in (0, 5):
        with pytest.raises(ValueError, match="devices"):
            ta.allreduce_sweep(n, [4096, 8192])

    def no_allocation(*args, **kwargs):
        raise AssertionError("allocated before checking the size")

    monkeypatch.setattr(ta, "allreduce_inputs", no_allocation)
    with pytest.raises(ValueError, match="free"):
        ta.allreduce_sweep(2, [4096, 2**44])
    with pytest.raises(ValueError, match="free"):
        ta.overlap_experiment(2, 2**44)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_devices": 1},
        {"n_devices": 5},
        {"size": 3},
        {"size": 0},
        {"chain_size": 0},
        {"chain_length": 0},
        {"chain_length": 2.5},
    ],
)
def test_overlap_experiment_refuses_bad_input(devices, kwargs):
    with pytest.raises(ValueError):
        ta.overlap_experiment(**kwargs)


def test_overlap_result_ideals_from_known_numbers():
    result = ta.OverlapResult(
        2, "logical CPU", True, 4096, _fake(4e-3), _fake(10e-3), _fake(11e-3), [], []
    )
    assert result.ideal_sequential == pytest.approx(14e-3)
    assert result.ideal_overlapped == pytest.approx(10e-3) == result.ideal
    assert result.hidden_fraction == pytest.approx(3e-3 / 4e-3)
    text = "\n".join(result.lines())
    assert "1.10x ideal" in text and "would be 14.00 ms" in text and "hidden: 75%" in text


def test_allreduce_timeline_ends_rows_at_the_first_use_of_their_result():
    rows = [
        OpEvent("/device:CPU:0", "allreduce_0", "other", 0.0, 9.0),  # callback ran late
        OpEvent("/device:CPU:1", "allreduce_1", "other", 0.0, 4.0),
        OpEvent("/device:CPU:1", "allreduce_0", "copy", 5.0, 5.1, "copy from /device:CPU:0"),
        OpEvent("/device:CPU:0", "MatMul", "matmul", 4.5, 6.0),
    ]
    consumers = {"allreduce_0": {"MatMul"}, "allreduce_1": {"MatMul"}}
    fixed = ta.allreduce_timeline(rows, consumers)
    assert [r.end_s for r in fixed] == [4.5, 4.0, 5.1, 6.0]
    assert [r.lane for r in fixed] == ["all-reduce", "all-reduce", rows[2].lane, ""]
    assert ta.allreduce_timeline(rows)[0].end_s == 5.0  # the copy alone bounds it
    assert ta.allreduce_rows(fixed, "/device:CPU:1") == [fixed[1]]


def _traced_fractions(result):
    fractions = result.traced_overlap()
    assert set(fractions) == set(result.devices)
    for device in result.devices:  # every device's all-reduce and compute are in the trace
        assert ta.allreduce_rows(result.rows, device)
        assert d2l.busy_intervals(result.rows, device, "matmul")
    return fractions


def test_overlap_shows_in_the_trace_only_when_overlapped(devices):
    # About 2 ms of all-reduce and 6 ms of matmuls per device: the all-reduce fits in the chain.
    options = {"size": 2 * ta.MiB, "chain_size": 256, "chain_length": 20, **QUICK}
    calls = []
    together = ta.overlap_experiment(2, progress=lambda *a: calls.append(a), **options)
    apart = ta.overlap_experiment(2, overlap=False, **options)
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
    overlapped, sequential = _traced_fractions(together), _traced_fractions(apart)
    # Probed 60 times: overlapped, each device 0.32 to 1.0 (mostly 1.0); one after the other, 0.
    assert min(overlapped.values()) > 0.15 and np.mean(list(overlapped.values())) > 0.5, overlapped
    assert max(sequential.values()) < 0.05, sequential
    for result in (together, apart):
        assert result.combined.median > 0 and len(result.lines()) == 5
    assert apart.ideal == apart.ideal_sequential and together.ideal == together.ideal_overlapped
