import pickle
import re

import pytest

from d2lhelpers.timing.benchmark import (
    Benchmark,
    MeasuredPeak,
    Measurement,
    PeakRecord,
    format_rate,
    format_seconds,
    measure,
    measurement_warnings,
)
from tests.conftest import FakeClock


def no_sync():
    pass


def measured_peak(rate: float, again: float | None = None, noise: float = 0.0) -> MeasuredPeak:
    """A peak of `rate` whose re-measure gives `again` (None: it cannot be measured again)."""
    measure_again = None if again is None else (lambda: (again, noise))
    return MeasuredPeak(PeakRecord(rate, noise, measure_again))


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
    assert len(m.warnings) == 1 and "50.00x the device's measured peak" in m.warnings[0]
    assert "deduplicated" in m.warnings[0] and "WARNING" in str(m)
    headline = str(m).splitlines()[0]  # a skimming reader stops here: it must say so too
    assert headline.endswith("(above it beyond the noise: not a result, see the warning)")


def test_a_rate_at_the_peak_has_no_not_a_result_in_its_headline():
    assert "not a result" not in str(Measurement("ok", [0.1] * 5, work=1e9, peak=1e10))


def test_rate_at_the_peak_is_not_flagged():
    m = Measurement("ok", [0.1] * 5, work=1e9, peak=1e10)
    assert m.rate == pytest.approx(1e10)
    assert "1.00 of the peak 10.0 GFLOP/s" in str(m)


def test_k_devices_peak_is_named_a_ceiling_not_a_measured_peak():
    """Read 105: '208.2 GFLOP/s = 1.00 of the peak 208.2 GFLOP/s' for 2 x one device's peak,
    a ceiling nobody measured."""
    readings = [0.0] + [x for i in range(5) for x in (float(i), i + 0.1)]
    peak = measured_peak(10e9)
    two = measure(
        lambda: None,
        "both",
        flops=2e9,
        peak=2 * peak,
        warmup=0,
        clock=FakeClock(*readings),
        number=1,
        sync=no_sync,
    )
    assert two.peak_factor == 2
    assert (
        "= 1.00 of the ceiling 20.0 GFLOP/s (2 x the measured peak 10.0 GFLOP/s: that many "
        "devices computing at once, each assumed as fast)" in str(two)
    )
    readings = [0.0] + [x for i in range(5) for x in (float(i), i + 0.1)]
    one = measure(
        lambda: None,
        "one",
        flops=1e9,
        peak=peak,
        warmup=0,
        clock=FakeClock(*readings),
        number=1,
        sync=no_sync,
    )
    assert "= 1.00 of the peak 10.0 GFLOP/s" in str(one) and "ceiling" not in str(one)


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


def timed(seconds: float, runs: int = 5) -> FakeClock:
    """Readings for `measure(..., warmup=0, number=1)`: `runs` blocks of `seconds` each."""
    return FakeClock(0.0, *[x for i in range(runs) for x in (float(i), i + seconds)])


def test_a_rate_above_the_peak_remeasures_the_peak_and_blames_it_when_it_explains():
    calls = []

    def remeasure():
        calls.append(1)
        return 12e9, 0.01  # the first peak (8 GFLOP/s) had been measured on a busy machine

    m = measure(
        lambda: None,
        "chain",
        flops=1e9,
        peak=MeasuredPeak(PeakRecord(8e9, 0.0, remeasure)),
        warmup=0,
        number=1,
        clock=timed(0.1),
        sync=no_sync,
    )
    assert m.rate == pytest.approx(10e9) and calls == [1]
    assert m.remeasured_peak == 12e9 and m.best_peak == 12e9
    (warning,) = m.warnings
    assert warning.startswith("the peak was measured low: 10.0 GFLOP/s is 1.25x the device's")
    assert "0.83x the peak measured again now (12.0 GFLOP/s)" in warning
    assert "impossible" not in warning and "deduplicated" not in warning
    assert "= 0.83 of the peak 12.0 GFLOP/s (the best reading kept; measured again now: 12.0 " in (
        str(m)
    )


def test_a_rate_above_a_remeasured_peak_lists_the_causes_in_order():
    m = measure(
        lambda: None,
        "dup",
        flops=50e9,
        peak=measured_peak(10e9, 11e9),
        warmup=0,
        number=1,
        clock=timed(0.1),
        sync=no_sync,
    )
    (warning,) = m.warnings
    assert warning.startswith(
        "500.0 GFLOP/s is 50.00x the device's measured peak (10.0 GFLOP/s, 11.0 GFLOP/s when "
        "measured again), above the 1.05x its noise of 5% allows: impossible, so not a result"
    )
    order = [warning.index(f"({i}) ") for i in (1, 2, 3)]
    assert order == sorted(order)
    # 45x the peak, far beyond a 5% noise: work not done comes first, noise last.
    assert "(1) the work was deduplicated" in warning
    assert "(2) the reference (peak or baseline) was measured low (measured again" in warning
    assert "(3) the runs were too noisy" in warning
    assert "(unlikely: these runs were not noisy)" in warning


def test_a_rate_above_the_peak_within_the_noise_does_not_remeasure():
    calls = []
    peak = MeasuredPeak(PeakRecord(10e9, 0.0, lambda: calls.append(1) or (20e9, 0.0)))
    # Quiet runs: the rate's noise is the 5% floor, so 1.05x the peak is within it...
    m = measure(
        lambda: None, flops=1.05e9, peak=peak, warmup=0, number=1, clock=timed(0.1), sync=no_sync
    )
    assert m.rate == pytest.approx(10.5e9) and calls == [] and not m.above_peak
    assert m.warnings == [] and m.remeasured_peak is None
    assert (
        "= 1.05 of the peak 10.0 GFLOP/s (above it by less than the noise of 5%: not a result)"
        in str(m)
    )
    # ... and 1.06x is beyond it: the peak is measured again, and the new one kept for all.
    m = measure(
        lambda: None, flops=1.06e9, peak=peak, warmup=0, number=1, clock=timed(0.1), sync=no_sync
    )
    assert calls == [1] and m.remeasured_peak == 20e9 and peak.current == 20e9
    # read 66: the noise later rates meet is the gap between the readings (10 and 20: 50%),
    # printed as such, not the noise this rate was judged with (0)
    assert m.remeasured_noise == pytest.approx(0.5)
    assert "this rate is judged with the peak's noise before that, 0%, later rates with 50%" in (
        str(m)
    )


def test_the_peaks_own_noise_and_the_runs_iqr_widen_the_band():
    quiet = [1.0] * 5
    assert Measurement("r", quiet, work=1.07e9, peak=1e9).above_peak  # 5% floor only
    m = Measurement("r", quiet, work=1.07e9, peak=1e9, peak_noise=0.03)
    assert m.rate_noise == pytest.approx(0.08) and not m.above_peak
    assert Measurement("r", quiet, work=1.09e9, peak=1e9, peak_noise=0.03).above_peak
    wide = [0.9, 0.9, 1.0, 1.1, 1.1]  # IQR 20% of the median
    assert not Measurement("r", wide, work=1.15e9, peak=1e9).above_peak
    assert Measurement("r", wide, work=1.25e9, peak=1e9).above_peak
    assert not Measurement("r", quiet, work=1e9).above_peak  # no peak, nothing to be above


def test_one_peak_per_run_every_holder_sees_the_remeasured_one():
    record = PeakRecord(8e9, 0.02, lambda: (12e9, 0.01))
    held = MeasuredPeak(record)  # a notebook's `peak`, taken before the re-measure
    first = measure(
        lambda: None, flops=1e9, peak=held, warmup=0, number=1, clock=timed(0.1), sync=no_sync
    )
    assert first.remeasured_peak == 12e9 and first.peak_noise == 0.02  # judged as measured
    later = measure(
        lambda: None, flops=0.5e9, peak=held, warmup=0, number=1, clock=timed(0.1), sync=no_sync
    )
    # Later runs compare with the new peak, whose noise is at least its readings' gap: 8 vs 12.
    assert later.peak == 12e9 and later.remeasured_peak is None
    assert later.peak_noise == pytest.approx(1 / 3)
    assert (2 * held).current == 24e9 and MeasuredPeak(record).current == 12e9
    record.measure_again = lambda: (9e9, 0.5)  # measured lower: a peak is a best rate, kept
    assert held.remeasure() == 9e9  # what this reading gave ...
    assert held.current == 12e9 and held.noise == pytest.approx(1 / 3)  # ... the best is kept


def test_a_plain_float_peak_cannot_be_remeasured_and_noise_is_named_first():
    m = Measurement("n", [0.05, 0.05, 0.1, 0.15, 0.15], work=50e9, peak=10e9)
    noisy, above = measurement_warnings(m)
    assert noisy.startswith("noisy: IQR is 100.0% of the median")
    assert "50.00x the device's measured peak (10.0 GFLOP/s)" in above
    assert "when measured again" not in above and "(these runs were noisy)" in above


def test_a_measured_peak_scales_with_its_remeasure_and_pickles_as_a_number():
    peak = measured_peak(2.0, 3.0)
    assert peak == 2.0 and (4 * peak) == 8.0 and (peak * 4) == 8.0
    assert (4 * peak).remeasure() == 12.0 and (peak * 0.5).remeasure() == 1.5
    assert isinstance(4 * peak, MeasuredPeak) and MeasuredPeak(1.0).remeasure() is None
    assert type(pickle.loads(pickle.dumps(4 * peak))) is float
    with pytest.raises(TypeError):
        peak * "x"


def test_a_run_too_short_to_be_work_is_flagged():
    (warning,) = measurement_warnings(Measurement("nothing", [5e-8] * 5))
    assert "too short to be device work" in warning
    assert measurement_warnings(Measurement("op", [2e-6] * 5)) == []
    assert "no time at all" in measurement_warnings(Measurement("z", [0.0] * 3))[0]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (dict(min_runs=0), ValueError),
        (dict(max_runs=0), ValueError),
        (dict(warmup=-1), ValueError),
        (dict(number=0), ValueError),
        (dict(min_runs=2.5), TypeError),
        (dict(max_runs="5"), TypeError),
    ],
)
def test_measure_refuses_degenerate_settings_before_running(kwargs, error):
    calls = []
    with pytest.raises(error):
        measure(lambda: calls.append(1), sync=no_sync, **kwargs)
    assert calls == []
    with pytest.raises(TypeError, match="a function to call"):
        measure(None, sync=no_sync)


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


# --- Edges found by mutation testing (make mutate) ---------------------------------------------


def test_measure_defaults_label_warmup_and_budget():
    calls = []
    # noisy runs of 0.5 s and 1.5 s: the 2 s budget is spent after the third (2.5 s)
    durations = [0.5, 1.5] * 5
    readings, t = [0.0], 0.0
    for d in durations:
        readings += [t, t + d]
        t += d
    m = measure(lambda: calls.append(1), clock=FakeClock(*readings), number=1, sync=no_sync)
    assert m.label == "run" and len(calls) == 1 + 3 and len(m.times) == 3


def test_measure_stops_at_exactly_the_noise_limit_and_not_at_exactly_the_budget():
    # IQR exactly 10% of the median: stable enough, stop after min_runs
    readings = [0.0] + [
        x for i, d in enumerate([9.5, 9.5, 10, 10.5, 10.5]) for x in (i * 20.0, i * 20.0 + d)
    ]
    m = measure(
        lambda: None, warmup=0, number=1, budget_s=1e9, clock=FakeClock(*readings), sync=no_sync
    )
    assert len(m.times) == 5 and m.warnings == []
    # the budget is spent only once the time is *over* it: 1 + 3 + 1 = 5 s is not over 5 s
    readings, t = [0.0], 0.0
    for d in [1, 3, 1, 3, 1, 3]:
        readings += [t, t + d]
        t += d
    m = measure(
        lambda: None, warmup=0, number=1, budget_s=5.0, clock=FakeClock(*readings), sync=no_sync
    )
    assert len(m.times) == 4


def test_measure_calls_back_after_each_block_with_the_count():
    seen = []
    measure(
        lambda: None,
        warmup=0,
        number=1,
        budget_s=1e9,
        on_repeat=seen.append,
        clock=timed(0.1),
        sync=no_sync,
    )
    assert seen == [1, 2, 3, 4, 5]


def test_one_long_call_is_timed_alone():
    calls = []
    # calibration from a clock that does not start at zero: 0.02 s per call -> one call per block
    readings = [100.0, 100.02, 200.0] + [x for i in range(5) for x in (200.0 + i, 200.02 + i)]
    m = measure(
        lambda: calls.append(1), warmup=0, budget_s=1e9, clock=FakeClock(*readings), sync=no_sync
    )
    assert len(calls) == 1 + 5 and m.times == pytest.approx([0.02] * 5)


def test_measure_names_the_setting_it_refuses():
    for kwargs, name in [
        (dict(warmup=-1), "warmup"),
        (dict(min_runs=0), "min_runs"),
        (dict(max_runs=0), "max_runs"),
        (dict(number=0), "number"),
        (dict(number=10**6 + 1), "number"),
    ]:
        with pytest.raises(ValueError, match=f"^{name} must be at least"):
            measure(lambda: None, sync=no_sync, **kwargs)
    with pytest.raises(ValueError, match="^give flops or nbytes, not both$"):
        measure(lambda: None, flops=1, nbytes=1, sync=no_sync)
    m = measure(lambda: None, number=10**6, warmup=0, max_runs=1, clock=timed(1.0, 1), sync=no_sync)
    assert m.times == [1e-6]


def test_every_warning_word_for_word():
    assert measurement_warnings(Measurement("z", [0.0, 0.0, 0.0, 1.0, 1.0])) == [
        "the clock measured no time at all: the run was not timed"
    ]
    assert measurement_warnings(Measurement("t", [1e-6] * 3)) == []
    assert measurement_warnings(Measurement("t", [5e-7] * 3)) == [
        "each call took 500.0 ns: too short to be device work (one TensorFlow op alone takes "
        "about 10 µs); the function probably does nothing"
    ]
    assert measurement_warnings(Measurement("n", [9.5, 9.5, 10, 10.5, 10.5])) == []
    assert measurement_warnings(Measurement("n", [9, 9, 10, 11, 11])) == [
        "noisy: IQR is 20.0% of the median (above 10%); possible causes, not measured here: "
        "another program, this experiment's own threads or processes competing for the cores, or "
        "runs too short"
    ]
    within_noise = Measurement("r", [1.0] * 3, work=10.5e9, unit="B/s", peak=10e9)
    assert measurement_warnings(within_noise) == []
    low = Measurement("r", [1.0] * 3, work=12.5e9, unit="B/s", peak=10e9, remeasured_peak=12e9)
    assert measurement_warnings(low) == [
        "the peak was measured low: 12.5 GB/s is 1.25x the device's measured peak (10.0 GB/s), "
        "above the 1.05x its noise of 5% allows, "
        "but 1.04x the peak measured again now (12.0 GB/s); the first peak was probably "
        "measured while the machine was busy (a hypothesis, not measured)"
    ]
    (impossible,) = measurement_warnings(
        Measurement("r", [1.0] * 3, work=50e9, unit="B/s", peak=10e9, remeasured_peak=11e9)
    )
    assert impossible == (
        "50.0 GB/s is 5.00x the device's measured peak (10.0 GB/s, 11.0 GB/s when measured "
        "again), above the 1.05x its noise of 5% allows: impossible, so not a result. "
        "Possible causes, not measured here: "
        "(1) the work was deduplicated (identical ops merged) or skipped, or the clock stopped "
        "before the device finished; (2) the reference (peak or baseline) was measured low "
        "(measured again, it still explains nothing); (3) the runs were too noisy (another "
        "program, or another copy of this notebook, was running) (unlikely: these runs were not "
        "noisy), which cannot reach 4.55x the peak 11.0 GB/s: 71 times its noise (5%) above it"
    )  # 4.55x the re-measured peak is 3.55 / 0.05 = 71 times the noise: work not done first
    noisy = measurement_warnings(Measurement("r", [1, 1, 2, 3, 3], work=50e9, peak=1e9))
    assert "(these runs were noisy), which cannot reach" in noisy[1]
    # Just beyond the noise, noise still comes first.
    near = measurement_warnings(Measurement("r", [1.0, 1.1, 1.2, 1.3, 1.4], work=1.4e9, peak=1e9))
    assert (
        "not measured here: (1) the runs were too noisy" in near[-1]
    )  # noisy runs: their noise first
    assert "(these runs were noisy)" in near[-1]
    # Just beyond the noise of runs that were not noisy: that cause goes last, saying why.
    quiet = measurement_warnings(Measurement("r", [1.0] * 3, work=1.12e9, peak=1e9))
    assert "not measured here: (1) the reference (peak or baseline) was measured low" in quiet[0]
    assert "(3) the runs were too noisy" in quiet[0]
    assert quiet[0].endswith("(unlikely: these runs were not noisy)")


def test_a_measurement_prints_in_one_piece():
    m = Measurement("copy", [0.5, 0.5, 0.5], work=2e9, unit="B/s", peak=3e9, remeasured_peak=5e9)
    m.warnings = ["one", "two"]
    assert str(m) == (
        "copy: 500.00 ms (IQR 0.0 µs, 3 runs), 4.0 GB/s = 0.80 of the peak 5.0 GB/s "
        "(the best reading kept; measured again now: 5.0 GB/s)\n  WARNING: one\n  WARNING: two"
    )
    m = Measurement("chain", [0.5, 0.5, 0.5], work=2e9, peak=5e9)
    assert (
        str(m)
        == "chain: 500.00 ms (IQR 0.0 µs, 3 runs), 4.0 GFLOP/s = 0.80 of the peak 5.0 GFLOP/s"
    )


def test_a_peak_without_a_remeasure_stays_without_one_when_scaled():
    assert (2 * MeasuredPeak(1.0)).remeasure() is None and MeasuredPeak(1.0).noise == 0.0


def test_benchmark_defaults_to_done(capsys):
    b = Benchmark(clock=FakeClock(1.0, 1.5), sync=no_sync)
    assert b.elapsed is None
    with b:
        pass
    assert capsys.readouterr().out == "Done: 0.5000 sec\n"


def test_calibration_from_a_clock_that_does_not_start_at_zero():
    calls = []
    # one call takes 1 ms -> ten calls per 10 ms block, whatever the clock's origin
    readings = [100.0, 100.001, 200.0] + [x for i in range(5) for x in (200.0 + i, 200.01 + i)]
    m = measure(
        lambda: calls.append(1), warmup=0, budget_s=1e9, clock=FakeClock(*readings), sync=no_sync
    )
    assert len(calls) == 1 + 5 * 10 and m.times == pytest.approx([0.001] * 5)


def test_a_rate_at_exactly_the_noise_of_the_remeasured_peak_is_explained_by_it():
    m = Measurement("r", [1.0] * 3, work=10.5e9, unit="B/s", peak=5e9, remeasured_peak=10e9)
    (warning,) = measurement_warnings(m)
    assert warning.startswith("the peak was measured low")
    assert "(above it by less than the noise of 5%: not a result)" in str(m)


def test_a_rate_within_the_noise_of_a_peak_that_barely_moved_blames_no_one():
    # Above the first peak beyond the noise, within it of the second, which is no higher than the
    # first beyond the peak's own noise: nothing was measured low, and nothing is impossible.
    m = Measurement("r", [1.0] * 3, work=11.2e9, peak=10e9, remeasured_peak=10.3e9)
    m.peak_noise = 0.04
    assert m.rate_noise == pytest.approx(0.09) and not m.above_peak  # 1.09x of 10.3, 1.12x of 10
    assert measurement_warnings(m) == []
    assert "(above it by less than the noise of 9%: the rate's 5.0% + the peak's 4.0%: not a " in (
        str(m)
    )
    # read 161: parts that add up to the total as printed (5.8% + 3.6%, not 6% + 4% beside 9%)
    odd = Measurement("r", [0.971, 0.971, 1.0, 1.029, 1.029], work=10.5e9, peak=10e9)  # IQR 5.8%
    odd.peak_noise = 0.036
    said = odd.above_peak_within
    total, first, second = (float(x) for x in re.findall(r"([\d.]+)%", said)[:3])
    assert (first, second, total) == (5.8, 3.6, 9) and round(first + second) == total
    m.remeasured_noise = 0.03
    assert "judged with the peak's noise before that, 4%, later rates with 3%: the larger" in str(m)


def test_a_lower_remeasure_is_reported_as_measured_while_the_best_is_kept():
    record = PeakRecord(8e9, 0.0, lambda: (6e9, 0.0))  # measured again, it came out lower
    m = measure(
        lambda: None,
        flops=2e9,
        peak=MeasuredPeak(record),
        warmup=0,
        number=1,
        clock=timed(0.1),
        sync=no_sync,
    )  # 20 GFLOP/s against a peak of 8: above it, so the peak is measured again
    assert m.remeasured_peak == 6e9 and m.best_peak == 8e9 and record.rate == 8e9
    assert "8.0 GFLOP/s, 6.0 GFLOP/s when measured again" in m.warnings[0]
    assert "measured again now: 6.0 GFLOP/s" in str(m)


def test_the_default_cap_is_50_runs_and_the_record_counts_whole_blocks():
    from d2lhelpers.timing import stopping

    # Never settles (calls of 1 and 2 ms, alternately), budget out of reach: 50 runs, the cap.
    now, calls = [0.0], [0]

    def run():
        calls[0] += 1
        now[0] += 1e-3 if calls[0] % 2 else 2e-3

    m = measure(run, clock=lambda: now[0], sync=no_sync, number=1, warmup=0, budget_s=1e9)
    assert len(m.times) == 50 and stopping.share_past_fewest() == 1.0
    assert m.peak_noise == 0.0  # no measured peak: no peak noise
    # Blocks of 2 calls (2 ms, then 4 ms: 1.5 ms a call) stop at the first past 31 ms, the
    # 11th; its cap is floor(31 ms / 3 ms) + 1 = 11 blocks of the block's time, not the call's.
    stopping.forget()
    now[0], calls[0] = 0.0, 0

    def pairs():
        calls[0] += 1
        now[0] += 1e-3 if (calls[0] - 1) % 4 < 2 else 2e-3

    m = measure(pairs, clock=lambda: now[0], sync=no_sync, number=2, warmup=0, budget_s=0.031)
    assert len(m.times) == 11 and stopping.share_past_fewest() == 1.0


def test_a_remeasure_at_exactly_the_kept_rate_keeps_its_noise():
    # Measured again at the same 5 GFLOP/s but noisier: not higher, so the kept rate's own noise
    # (2%) stays, and the two readings agree (drift (5 - 5) / 5 = 0): max(0.02, 0) = 0.02.
    record = PeakRecord(5e9, 0.02, lambda: (5e9, 0.3))
    record.remeasure()
    assert (record.rate, record.noise, record.readings) == (5e9, 0.02, [5e9, 5e9])


def test_a_rate_exactly_at_the_peak_is_not_said_to_be_above_it():
    # 1e9 FLOP in 1 s per run: 1.0 GFLOP/s, exactly the peak of 1e9: equal, so not above it.
    m = Measurement("at", [1.0] * 3, work=1e9, peak=1e9)
    assert m.rate == 1e9 and not m.above_peak
    assert str(m).endswith(", 1.0 GFLOP/s = 1.00 of the peak 1.0 GFLOP/s")


def test_a_rate_just_within_its_noise_is_printed_apart_from_the_edge():
    # Read 116: a ratio printed '1.07' beside 'less than the noise of 7%' reads as at the edge.
    m = Measurement("r", [1.0] * 3, work=106.8e9, peak=100e9)
    m.peak_noise = 0.02  # the rate's 5% + the peak's 2%: the edge is 1.07
    assert "= 1.068 of the peak 100.0 GFLOP/s (above it by less than the noise of 7%" in str(m)
    m.work = 103e9
    assert "= 1.03 of the peak" in str(m)


def test_a_rate_prints_the_digits_that_rebuild_its_share_of_the_peak():
    """Read 171: '1.7 TFLOP/s = 9.58 of the peak 172.3 GFLOP/s' (1.7 / 0.1723 is 9.87)."""
    merged = Measurement("merged", [0.001] * 5, work=1.650e9, peak=172.3e9)
    assert "1.65 TFLOP/s = 9.58 of the peak 172.3 GFLOP/s" in str(merged)
    plain = Measurement("ok", [0.001] * 5, work=186.6e6, peak=198.7e9)  # 0.94 rebuilds at 1
    assert "186.6 GFLOP/s = 0.94 of the peak 198.7 GFLOP/s" in str(plain)
