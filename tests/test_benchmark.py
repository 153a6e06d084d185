import pytest

from d2lhelpers.benchmark import (
    Benchmark,
    Measurement,
    compare_to_ideal,
    format_rate,
    format_seconds,
    measure,
)
from tests.conftest import FakeClock


def no_sync():
    pass


def test_benchmark_prints_like_d2l_and_syncs_on_enter_and_exit(capsys):
    events = []
    clock = FakeClock(10.0, 10.0629)
    with Benchmark("GPU1 time", clock=clock, sync=lambda: events.append("sync")) as b:
        events.append("body")
    assert events == ["sync", "body", "sync"]
    assert capsys.readouterr().out == "GPU1 time: 0.0629 sec\n"
    assert b.elapsed == pytest.approx(0.0629)


def test_measure_warms_up_then_stops_when_stable():
    calls = []
    # `began`, then (start, end) per run: five runs of 1.0 s
    readings = [0.0] + [x for i in range(5) for x in (i * 2.0, i * 2.0 + 1.0)]
    m = measure(
        lambda: calls.append(1),
        "x",
        warmup=2,
        budget_s=100,
        clock=FakeClock(*readings),
        number=1,
        sync=no_sync,
    )
    assert len(calls) == 2 + 5
    assert m.times == [1.0] * 5 and m.median == 1.0 and m.iqr == 0.0
    assert m.warnings == []


def test_measure_repeats_noisy_runs_until_the_budget_and_warns():
    durations = [1, 3] * 10  # IQR/median stays far above 0.1
    readings = [0.0]
    t = 0.0
    for d in durations:
        readings += [t, t + d]
        t += d
    m = measure(
        lambda: None,
        "noisy",
        warmup=0,
        budget_s=9.5,
        clock=FakeClock(*readings),
        number=1,
        sync=no_sync,
    )
    # stops at the first check after 9.5 s: runs 1+3+1+3+1+3 = 12 s, i.e. six runs
    assert len(m.times) == 6
    assert any("noisy" in w for w in m.warnings)


def test_measure_stops_at_max_runs():
    readings = [0.0] + [x for i in range(3) for x in (float(i), 2.0 * i + 0.5)]
    m = measure(
        lambda: None,
        warmup=0,
        min_runs=5,
        max_runs=3,
        budget_s=1e9,
        clock=FakeClock(*readings),
        number=1,
        sync=no_sync,
    )
    assert len(m.times) == 3


def test_rate_and_peak_flag_the_deduplicated_workload():
    # 50 matmuls' FLOPs in the time of one: the rate is 50x the peak and must be flagged
    flops_one = 2 * 4000**3
    readings = [0.0] + [x for i in range(5) for x in (float(i), i + 0.1)]
    m = measure(
        lambda: None,
        "dup",
        flops=50 * flops_one,
        peak=flops_one / 0.1,
        warmup=0,
        clock=FakeClock(*readings),
        number=1,
        sync=no_sync,
    )
    assert m.rate == pytest.approx(50 * flops_one / 0.1)
    assert len(m.warnings) == 1 and "50.0x the device's measured peak" in m.warnings[0]
    assert "deduplicated" in m.warnings[0] and "WARNING" in str(m)


def test_rate_at_the_peak_is_not_flagged():
    m = Measurement("ok", [0.1] * 5, work=1e9, peak=1e10)
    assert m.rate == pytest.approx(1e10)
    assert "1.00 of the peak 10.0 GFLOP/s" in str(m)


def test_bytes_give_a_bandwidth_and_both_units_are_refused():
    readings = [0.0] + [x for i in range(5) for x in (float(i), i + 0.5)]
    m = measure(
        lambda: None, nbytes=1e9, warmup=0, clock=FakeClock(*readings), number=1, sync=no_sync
    )
    assert m.unit == "B/s" and format_rate(m.rate, m.unit) == "2.0 GB/s"
    with pytest.raises(ValueError):
        measure(lambda: None, flops=1, nbytes=1)


def test_measurement_statistics():
    m = Measurement("s", [1.0, 2.0, 3.0, 4.0, 100.0])
    assert m.median == 3.0
    assert m.iqr == pytest.approx(2.0)  # inclusive quartiles: 2.0 and 4.0
    assert m.rate is None
    assert Measurement("z", [0.0, 0.0, 0.0]).median == 0.0


def test_compare_to_ideal_flags_results_better_than_ideal():
    assert compare_to_ideal(1.05, 1.0, "both").endswith("1.05x ideal")
    assert "WARNING: faster than the ideal" in compare_to_ideal(0.7, 1.0, "overlap")


def test_formatting():
    assert format_seconds(2.5) == "2.500 s"
    assert format_seconds(0.0629) == "62.90 ms"
    assert format_seconds(6e-6) == "6.0 µs"
    assert format_rate(155e9) == "155.0 GFLOP/s"
    assert format_rate(12.0) == "12.0 FLOP/s"


def test_measure_sizes_blocks_so_overhead_is_negligible():
    calls, syncs = [], []
    # calibration: one call takes 1 ms -> number = 10 ms / 1 ms = 10 calls per block;
    # then `began` and five blocks of 10 calls lasting 12 ms each -> 1.2 ms per call
    readings = [0.0, 0.001, 1.0] + [x for i in range(5) for x in (1 + i * 0.012, 1.012 + i * 0.012)]
    m = measure(
        lambda: calls.append(1),
        warmup=0,
        clock=FakeClock(*readings),
        sync=lambda: syncs.append(1),
    )
    assert len(calls) == 1 + 5 * 10
    assert len(syncs) == 1 + 1 + 5  # after warm-up, after calibration, once per block
    assert m.times == pytest.approx([0.0012] * 5)
