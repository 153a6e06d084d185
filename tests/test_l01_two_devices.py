"""Notebook 01's lesson: the concurrency model and its verdicts, the merge probe, the panel."""

import matplotlib
import nbformat
import pytest
from nbclient import NotebookClient

import d2lhelpers as d2l
from d2lhelpers.core import cache
from d2lhelpers.lessons import l01_two_devices as l01
from d2lhelpers.lessons.l01_two_devices import ConcurrencyResult, MergeProbeResult, merging
from d2lhelpers.lessons.l01_two_devices import verdicts as l01_verdicts
from d2lhelpers.timing.benchmark import Benchmark, Measurement
from d2lhelpers.timing.estimate import CALL_S, measure_seconds, trace_seconds
from d2lhelpers.tracing.optimizer_probe import SWITCHES, ProbeRun
from d2lhelpers.workloads import chains_in_one_graph
from tests.conftest import ROOT, builds_nothing

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)


def sweep(times, kind="logical CPU", cores=2, n=20):
    """A result from fixed times (each measured five times, no spread)."""
    ms = [Measurement(f"{k} devices", [t] * 5) for k, t in enumerate(times, start=1)]
    return ConcurrencyResult(512, n, kind, ms, cores)


def test_a_row_below_its_model_prints_the_digits_that_show_it():
    # read 158: 'its speedup above the model's is noise' beside a printed 2.00 and model 2.00
    row = sweep([0.010, 0.00997]).tables()[0].rows[1]
    assert row[3:5] == ["0.997x", "1.000x"] and row[6] == "2.006"
    assert row[5].endswith("; its speedup above the model's is noise, not a result")
    assert sweep([0.010, 0.0101]).tables()[0].rows[1][3:5] == ["1.01x", "1.00x"]


def test_the_table_says_its_band_rule_and_where_the_ideal_speedup_holds():
    """Read 173: 'band 1.20x to 1.80x' beside ±13% and ±5%, rebuilt only by the rule unsaid;
    'speedup (ideal = devices)' beside a 2-core cap."""
    table = sweep([0.010, 0.0103, 0.0171]).tables()[0]
    assert table.columns[-1] == "speedup (ideal = min(devices, cores))"
    assert table.verdicts[-1].startswith("each band: the model ± (the row's noise x its 'vs one'")
    assert sweep([0.010, 0.010], kind="GPU").tables()[0].columns[-1] == "speedup (ideal = devices)"
    # review: the band rebuilds from the row's numbers by that rule (row 2: 0.0171 s, 3 devices)
    from d2lhelpers.core.verdicts import noise_of

    m = sweep([0.010, 0.0103, 0.0171])
    one, row, want = m.measurements[0], m.measurements[2], m.model[2]
    low = want - (noise_of(row) + want * noise_of(one)) / one.median
    high = want + (noise_of(row) + want * noise_of(one)) / one.median
    assert f"(band {low:.2f}x to {high:.2f}x)" in table.rows[2][5]
    # review: virtual GPUs share one chip: no model, so no ideal and no band rule
    shared = sweep([0.010, 0.010], kind="virtual GPU").tables()[0]
    assert shared.columns[-1] == "speedup (no ideal: one chip)" and len(shared.verdicts) == 1


def test_the_result_reads_the_model_for_its_kind_and_cores():
    assert sweep([1.0, 1.0, 1.0, 1.0]).model == [1.0, 1.0, 1.5, 2.0]
    assert sweep([1.0, 1.0, 1.0], cores=1).model == [1.0, 2.0, 3.0]
    assert sweep([1.0, 1.0], kind="GPU").model == [1.0, 1.0]
    assert sweep([1.0, 1.0], kind="virtual GPU").model is None


def test_verdict_holds_when_times_follow_the_model():
    result = sweep([0.010, 0.0101, 0.0149, 0.0201])
    assert (
        "holds within the noise" in result.verdict
        and "consistent with up to 2 chains running at the same time" in result.verdict
    )
    assert result.verdict.endswith(
        ", more taking turns on the cores (inferred from the times and the core count, not traced)"
    )
    # read 161: k = 3 at 14.9 ms against the model's 15 ms: faster within the noise, said so
    assert "both runs' noise; at k = 3 faster than the model within the noise, not read as " in (
        result.verdict
    )
    assert "faster than the model within" not in sweep([0.010, 0.0101, 0.0151]).verdict
    # read 108: the bands the verdict used are printed (k x 5% + k's own 5%, over one chain)
    assert "(k = 2: ±0.10x, k = 3: ±0.15x, k = 4: ±0.20x one chain's time" in result.verdict
    table = result.tables()[0]
    assert [row[5].split(" (band")[0] for row in table.rows] == ["as the model"] * 4
    assert not table.flags
    # the band each reading used, in the units of "vs one": 1.00x +- (5% + 5%) at k = 2
    assert table.rows[1][5] == "as the model (band 0.90x to 1.10x)"
    # read 73: 1.49x against the model's 1.5x is a speedup above the model's, inside the noise
    assert table.rows[2][5].endswith("; its speedup above the model's is noise, not a result")
    assert table.rows[2][6] == "2.01" and "not a result" not in table.rows[3][5]
    assert table.rows[0][1:3] == ["10.00 ms", "±5% (floor)"]  # each time beside its noise
    assert table.title == "20 matmuls of 512x512 per device"


def test_verdict_on_one_core_expects_queueing_not_a_broken_model():
    # One usable core: two chains taking twice as long is what the model says, not "off by 50%".
    result = sweep([0.010, 0.020, 0.030, 0.040], cores=1)
    assert "holds" in result.verdict and "1 usable CPU core" in result.verdict
    assert "consistent with up to 1 chain running at the same time" in result.verdict
    assert ", more taking turns on the core (inferred" in result.verdict  # read 157: one core


def test_verdict_says_slower_and_flags_faster_than_the_model():
    slow = sweep([0.010, 0.016, 0.016, 0.020])
    assert slow.verdict.startswith("slower than the model") and "at k = [2]" in slow.verdict
    fast = sweep([0.010, 0.010, 0.008, 0.010])
    assert "impossible" in fast.verdict
    assert any("impossible" in flag for flag in fast.tables()[0].flags)


def test_noise_decides_what_is_measurable_and_a_noisy_run_gives_no_verdict():
    quiet = [0.0100, 0.0102, 0.0105, 0.0106, 0.0107]  # IQR 4% of the median
    ms = [Measurement("1", [0.010] * 5), Measurement("2", quiet)]
    near = ConcurrencyResult(512, 20, "logical CPU", ms, 2)
    assert near.comparisons()[1].measurable is False  # 1.05x: inside the noise
    assert "holds" in near.verdict
    ms = [Measurement("1", [0.010] * 5), Measurement("2", [0.009, 0.011, 0.012, 0.013, 0.0135])]
    noisy = ConcurrencyResult(512, 20, "logical CPU", ms, 2)
    assert noisy.comparisons()[1].measurable is False  # 1.2x, but inside the runs' IQR
    assert noisy.verdict.startswith("too noisy to check the model") and "k = [2]" in noisy.verdict
    reading = noisy.tables()[0].rows[1][5]
    assert reading.startswith("too noisy to check (band ")  # the table says as the sentence
    # One device's own run noisy: every row's model is a multiple of it, so no row reads "as the
    # model" while the sentence says too noisy (a run once printed both).
    ms = [Measurement("1", [0.009, 0.011, 0.012, 0.013, 0.0135]), Measurement("2", [0.012] * 5)]
    shaky = ConcurrencyResult(512, 20, "logical CPU", ms, 2)
    assert shaky.verdict.startswith("too noisy to check the model") and "k = [1]" in shaky.verdict
    readings = [row[5].split(" (band")[0] for row in shaky.tables()[0].rows]
    assert readings == ["too noisy to check"] * 2
    assert "below the model's time" not in shaky.verdict  # 1.2x against 1.0x: above it
    # read 185: on one core, 2 devices at 1.6x against a model of 2.00x, inside a noisy band:
    # said below the model within the noise, not read as faster, not only 'too noisy'
    ms = [Measurement("1", [0.010] * 5), Measurement("2", [0.010, 0.014, 0.016, 0.020, 0.024])]
    fast = ConcurrencyResult(512, 20, "logical CPU", ms, 1)
    assert not fast.comparisons()[1].measurable and fast.verdict.endswith(
        "; below the model's time within the noise (k = 2: 1.60x against 2.00x ±0.70x): not read "
        "as faster, not a result"
    )
    # A band wider than the model's time starts at 0x, not below (read 48: "-0.01x to 2.01x").
    ms = [Measurement("1", [0.002, 0.004, 0.010, 0.016, 0.030]), Measurement("2", [0.010] * 5)]
    wide = ConcurrencyResult(512, 20, "logical CPU", ms, 2).tables()[0].rows[1][5]
    assert wide.endswith("(band 0.00x to 2.25x)")
    # Slower than k chains one after the other: missing overlap cannot explain it.
    ms = [Measurement("1", [0.010] * 5), Measurement("2", [0.027] * 5)]
    beyond = ConcurrencyResult(512, 20, "logical CPU", ms, 2).verdict
    assert "(2.70x one chain at k = 2, model 1.00x): slower even than the same work" in beyond
    # 2.10x one chain is above 2x, but inside the noise of both: not "slower than serial".
    wide = [0.019, 0.020, 0.021, 0.023, 0.024]  # IQR 3 ms around 21 ms
    ms = [Measurement("1", [0.010] * 5), Measurement("2", wide)]
    near = ConcurrencyResult(512, 20, "logical CPU", ms, 2).verdict
    assert "slower than the model" in near and "slower even than" not in near


def test_a_noisy_k_does_not_hide_a_clean_miss_at_another(monkeypatch):
    spread = [0.012, 0.014, 0.016, 0.020, 0.022]  # k = 3: IQR far above 10%, inside the band
    ms = [Measurement("1", [0.010] * 5), Measurement("2", [0.018] * 5), Measurement("3", spread)]
    result = ConcurrencyResult(512, 20, "logical CPU", ms, 2)
    assert result.verdict.startswith("slower than the model") and "at k = [2]" in result.verdict
    assert "1.80x one chain at k = 2" in result.verdict and "k = [3] too noisy" in result.verdict
    # The cause named follows the load average: another program only when it shows one.
    monkeypatch.setattr(cache.os, "getloadavg", lambda: (3.5, 0.0, 0.0), raising=False)
    assert "load average, 3.5, was above" in result.verdict
    assert "possibly another program" in result.verdict
    monkeypatch.setattr(cache.os, "getloadavg", lambda: (1.0, 0.0, 0.0), raising=False)
    assert "does not show another program beyond what this run's own" in result.verdict


def test_virtual_gpus_print_what_was_measured_without_a_model():
    result = sweep([0.010, 0.018], kind="virtual GPU")
    assert "1.80x one" in result.verdict and "no model" in result.verdict
    assert result.tables()[0].rows[1][4] == "-"


def points_under_legend(ax, xs, ys) -> list:
    ax.figure.canvas.draw()
    box = ax.get_legend().get_window_extent()
    return [p for p in ax.transData.transform(list(zip(xs, ys, strict=True))) if box.contains(*p)]


@pytest.mark.parametrize("times", [[0.010], [0.010, 0.010, 0.015, 0.020]])
def test_plot_keeps_legends_off_the_points_and_pluralises(times):
    result = sweep(times, n=1)
    fig = l01.plot_concurrency(result)
    left, right = fig.axes
    ks = result.device_counts
    assert left.get_title() == "1 matmul of 512x512 per device"
    assert points_under_legend(left, ks, [t * 1e3 for t in result.times]) == []
    assert points_under_legend(right, ks, result.speedups) == []
    for ax in (left, right):  # every point inside the axes, none on an edge
        low, high = ax.get_xlim()
        assert low < ks[0] and ks[-1] < high
    labels = [line.get_label() for line in left.lines + right.lines]
    assert "model: max(1, k/2)" in labels and "ideal: same as one device" in labels
    assert right.lines[0].get_ydata().tolist() == pytest.approx(result.speedups)
    plt.close(fig)


def test_estimate_grows_with_the_work_and_with_fewer_cores():
    base = l01.estimate_seconds(512, 20, 4, 50e9, 2, "logical CPU")
    assert 0 < base < l01.estimate_seconds(1024, 20, 4, 50e9, 2, "logical CPU")
    assert base < l01.estimate_seconds(512, 20, 4, 50e9, 1, "logical CPU")
    # One device: the cores do not matter; every device count traces one graph.
    one = l01.estimate_seconds(512, 20, 1, 50e9, 1, "logical CPU")
    assert one == l01.estimate_seconds(512, 20, 1, 50e9, 2, "logical CPU")
    assert one > trace_seconds(20) + 5 * 512**3 * 2 * 20 / 50e9  # a trace, at least 5 runs
    # The smallest run: a call costs CALL_S however little its work; measure's blocks last
    # 10 ms, and 2 rounds of 3 blocks each take about 60 ms whatever the matrix size.
    tiny = l01.estimate_seconds(64, 1, 1, 50e9, 2, "logical CPU")
    assert tiny == pytest.approx(trace_seconds(1) + 2 * measure_seconds(CALL_S, min_runs=3))
    assert 0.06 < tiny < 0.08
    # Separate GPUs each bring a chip; virtual GPUs share one: k devices take k times one.
    gpus = l01.estimate_seconds(4096, 50, 2, 10e12, 2, "GPU")
    assert gpus < l01.estimate_seconds(4096, 50, 2, 10e12, 2, "virtual GPU")
    # 2048 x 100 x 4 devices at 50 GFLOP/s: minutes, so a panel can warn before the run.
    assert l01.estimate_seconds(2048, 100, 4, 50e9, 2, "logical CPU") > 60
    # measure's options change it as they change the run: fewer runs, less time.
    assert l01.estimate_seconds(512, 20, 4, 50e9, 2, "logical CPU", min_runs=2) < base


def rate(label, rate_, peak, times=(1.0,)):
    return Measurement(label, list(times), work=rate_ * times[0], peak=peak)


def test_rates_verdict_blames_merging_only_when_the_chain_is_not_above_the_peak():
    merged = l01.rates_verdict(rate("dup", 10e9, 1e9), rate("chain", 0.9e9, 1e9))
    assert "only the identical matmuls are above the peak" in merged
    assert merged.startswith("identical 10.00x, chain 0.90x the peak 1.0 GFLOP/s")
    # 1.04x the peak is inside the chain's noise (the 5% floor): not above it, still merged.
    within = l01.rates_verdict(rate("dup", 10e9, 1e9), rate("chain", 1.04e9, 1e9))
    assert "fewer products ran" in within and "impossible" not in within
    # The chain above its (re-measured) peak beyond the noise: the rates prove nothing.
    chain = rate("chain", 1.5e9, 1e9)
    chain.remeasured_peak = 1.2e9
    above = l01.rates_verdict(rate("dup", 10e9, 1e9), chain)
    assert "1.25x the peak 1.2 GFLOP/s" in above and "impossible" in above
    assert "cannot show whether work was merged" in above
    neither = l01.rates_verdict(rate("dup", 0.5e9, 1e9), rate("chain", 0.9e9, 1e9))
    assert "neither is above the peak beyond the noise" in neither
    assert "no peak" in l01.rates_verdict(rate("d", 1e9, None), rate("c", 1e9, None))


def test_baseline_verdict_reads_logical_devices_against_a_yardstick_and_gpus_against_a_ceiling():
    one = rate("one", 1e11, None)
    baseline = {"flops_per_s": 2e11, "noise": 0.02}
    # the run's 5% floor + the baseline's 2%, counted at the 5% floor as every reading of it is
    # (read 58: 8% here beside 10% in notebook 03 for the same baseline)
    match = l01.baseline_verdict(rate("both", 2.06e11, None), one, baseline, "logical CPU")
    assert match.startswith("2 devices together: 206.0 GFLOP/s = 1.03 of the usable cores'")
    assert "; they match it, within the noise of 10%" in match
    assert match.splitlines()[1] == (
        "one device: 100.0 GFLOP/s = 0.50 of the baseline; at best it can match it (expected, not "
        "measured): below that by more than the noise of 10%"
    )
    # read 142's rule: 0.868 of it past 5% + 7.7% would print '0.87' and '13%', touching
    edge = {**baseline, "noise": 0.077}
    near = l01.baseline_verdict(rate("both", 0.868 * 2e11, None), one, edge, "logical CPU")
    assert "= 0.868 of the usable cores'" in near
    assert "; below it by more than the noise of 12.7%" in near
    alone = l01.baseline_verdict(near_one := rate("one", 0.868 * 2e11, None), near_one, edge, "GPU")
    assert "one device: 173.6 GFLOP/s = 0.868 of the baseline;" in alone
    pair = l01.baseline_verdict(rate("both", 2 * 0.868 * 2e11, None), one, edge, "GPU")
    assert "= 1.736 of the usable cores'" in pair  # against 2x it (separate GPUs)
    assert "below that by more than the noise of 12.7%" in pair
    # One device can at best match the usable cores too (one core: the baseline is one core's).
    alone = l01.baseline_verdict(one, rate("one", 2.1e11, None), baseline, "logical CPU")
    assert (
        "at best it can match it (expected, not measured), and does, within the noise of 10%"
        in alone
    )
    # Two one-thread chains above one chain split across the same cores: a finding, not a flag
    # (book 48: 86.4 against 68.5 GFLOP/s), and the one-device line is still read.
    above = l01.baseline_verdict(rate("both", 2.3e11, None), one, baseline, "logical CPU")
    assert "above it by more than the noise of 10%: independent chains, one thread each" in above
    assert "impossible" not in above and "a yardstick, not a ceiling" in above
    assert "below that by more than the noise of 10%" in above.splitlines()[1]
    assert "from the cache" not in above  # measured in this run
    # The baseline's chain size is printed beside it (read 50: 512² chains against a 1024² one)
    sized = l01.baseline_verdict(
        rate("both", 2.3e11, None), one, {**baseline, "size": 1024}, "logical CPU"
    )
    assert "baseline 200.0 GFLOP/s (one 1024x1024 matmul chain); above it" in sized
    assert "a rate depends on the matrix size" in sized
    busy = {**baseline, "not_cached": "not kept: the load average, 3.0, was above 2 cores"}
    rough = l01.baseline_verdict(rate("both", 2.06e11, None), one, busy, "logical CPU")
    assert rough.splitlines()[2] == (
        "the baseline itself: not kept: the load average, 3.0, was above 2 cores (a rough "
        "yardstick for any line above read against it)"
    )
    assert "rough yardstick" not in match
    cached = {**baseline, "from_cache": True, "measured_at": "2026-11-30T10:00:00"}
    stale = l01.baseline_verdict(rate("both", 2.3e11, None), one, cached, "logical CPU")
    assert "the baseline is 2026-11-30T10:00:00's, from the cache" in stale
    # Virtual GPUs share one chip: above its baseline beyond the noise is impossible.
    chip = l01.baseline_verdict(rate("both", 2.3e11, None), one, baseline, "virtual GPU")
    assert "above that by more than the noise of 10%: impossible" in chip
    assert "puts the baseline in doubt" in chip.splitlines()[1]
    noisy = rate("both", 2.3e11, None, times=(0.9, 0.9, 1.0, 1.1, 1.1))  # IQR 20%
    assert "impossible" not in l01.baseline_verdict(noisy, one, baseline, "virtual GPU")
    below = l01.baseline_verdict(rate("both", 1.5e11, None), one, baseline, "virtual GPU")
    assert "at best they can match it (expected, not measured): below that by more" in below
    # Their own peak (2 x 80 GFLOP/s) is below the baseline: 'below' says little, and it says so.
    capped = l01.baseline_verdict(rate("both", 1.5e11, 1.6e11), one, baseline, "logical CPU")
    assert "below it by more than the noise" in capped
    assert "(but their own measured peak allows only 0.80 of it" in capped
    assert "allows only" not in below  # no peak known: nothing to add
    gpus = l01.baseline_verdict(rate("both", 3.9e11, None), one, baseline, "GPU")
    assert (
        "at best they can reach 2x it (expected, not measured), and do" in gpus
        and "impossible" not in gpus
    )
    above_one = l01.baseline_verdict(one, rate("one", 2.3e11, None), baseline, "GPU")
    assert above_one.splitlines()[1].count("impossible") == 1
    # One device's own peak above the usable cores' baseline beyond both noises (a one-core
    # run once had 183 against 143 GFLOP/s): the yardstick is off, and nothing is read against it.
    strong = rate("one", 1.9e11, 2.6e11)  # peak 1.30x the baseline, noises 0% + 2%
    low = l01.baseline_verdict(rate("both", 2.1e11, 5.2e11), strong, baseline, "logical CPU")
    assert "\n" not in low and " of the baseline" not in low  # no ratio against it
    assert low.startswith(
        "2 devices together: 210.0 GFLOP/s; one device: 190.0 GFLOP/s; neither read against the "
        "baseline 200.0 GFLOP/s: one device's measured peak 260.0 GFLOP/s is 1.30 of the usable "
        "cores' baseline, above it beyond both noises (±10%: the peak's 5% + the baseline's 5%, "
        "each at least the 5% floor). One device, one thread, is expected at best to roughly "
        "match every usable core on one chain (expected, not measured), so the baseline is not a "
        "yardstick in this run: no rate here is read against it, not a result "
        "(d2l.machine_baseline_rate(refresh=True) measures it again). "
        "Possible causes, not measured here: "
        "(1) the baseline was measured low"
    )
    assert "impossible" not in low  # an expectation set aside, not a law broken (read 57)
    assert "at best match" not in low and "at best they" not in low  # no reading against it
    cached_low = l01.baseline_verdict(rate("both", 2.1e11, None), strong, cached, "logical CPU")
    assert "(1) the baseline is 2026-11-30T10:00:00's, from the cache" in cached_low
    # 1.02x: inside the baseline's 2% noise, so read as before
    close = l01.baseline_verdict(
        rate("both", 2.1e11, None), rate("one", 1.9e11, 2.04e11), baseline, "logical CPU"
    )
    assert "at best" in close and "no rate here" not in close
    # each device's peak below the baseline, the two at once (2 x one's peak) 2.4x it: that is
    # a ceiling they need not reach, not a measurement, so the baseline still stands
    both = rate("both", 2.1e11, 4.8e11)
    combined = l01.baseline_verdict(both, rate("one", 1.9e11, 2.04e11), baseline, "logical CPU")
    assert "neither read" not in combined and "of the usable cores' baseline" in combined
    # read 74: one device at 1.05 of its own peak (its line: 'not a result') read 'and does'
    hot = rate("one", 2.1e11, 2e11)
    set_aside = l01.baseline_verdict(rate("both", 2.06e11, 4e11), hot, baseline, "logical CPU")
    assert set_aside.splitlines()[1] == (  # no rate after 'baseline': make one-core's reading
        "one device: 210.0 GFLOP/s is 1.05 of its own measured peak 200.0 GFLOP/s, above it, so "
        "not a result (as its line above says), and not read against the baseline"
    )
    assert "they match it" in set_aside.splitlines()[0]  # the two together are still read
    # read 176: the peak measured again after it (its record now at 205 GFLOP/s): the line
    # says so, and where this rate sits against it; its verdict stands
    from d2lhelpers.timing.benchmark import MeasuredPeak, PeakRecord

    hot.peak_source = MeasuredPeak(PeakRecord(2.05e11))
    later = rate("both", 3.9e11, 4.1e11)
    said = l01.baseline_verdict(later, hot, baseline, "logical CPU").splitlines()[1]
    # review: read within both noises (210 against 205 is 2.4%, inside the rate's 5% floor)
    assert said == (
        "one device: 210.0 GFLOP/s is 1.05 of its own measured peak 200.0 GFLOP/s, above it, so "
        "not a result (as its line above says); the peak was measured again after it, at 205.0 "
        "GFLOP/s, and this rate is within both noises of it (±5%: its own and that peak's; its "
        "line's verdict stands: a rerun of its cell reads it against that), and not read against "
        "the baseline"
    )
    high = {**baseline, "flops_per_s": 2.4e11}  # a baseline that 230 GFLOP/s does not set aside
    hot.peak_source = MeasuredPeak(PeakRecord(2.3e11))  # 210 is 9% below: beyond the 5%
    assert "and this rate is below it beyond both noises (±5%" in (
        l01.baseline_verdict(later, hot, high, "logical CPU")
    )
    hot.peak_source = MeasuredPeak(PeakRecord(2.3e11, 0.10))  # that peak's 10% noise counts too
    assert "and this rate is within both noises of it (±15%" in (
        l01.baseline_verdict(later, hot, high, "logical CPU")
    )
    hot.peak_source = None
    hot_both = l01.baseline_verdict(rate("both", 2.06e11, 2e11), one, baseline, "virtual GPU")
    assert hot_both.splitlines()[0].endswith(
        "; not read against it: 206.0 GFLOP/s is 1.03 of its own measured peak 200.0 GFLOP/s, "
        "above it, so not a result (as its line above says)"
    )
    assert "at best they" not in hot_both and "puts the baseline in doubt" not in hot_both
    # read 105: two devices' ceiling is 2 x one device's measured peak, not a measured peak
    ceiling = rate("both", 2.06e11, 2e11)
    ceiling.peak_factor = 2
    said = l01.baseline_verdict(ceiling, one, baseline, "virtual GPU").splitlines()[0]
    assert said.endswith(
        "206.0 GFLOP/s is 1.03 of its ceiling 200.0 GFLOP/s (2 x the measured peak 100.0 "
        "GFLOP/s: that many devices computing at once, each assumed as fast), above it, so not a "
        "result (as its line above says)"
    )
    # separate GPUs each bring a chip: their combined peak above one chip's baseline is expected
    assert "no rate here" not in l01.baseline_verdict(
        both, rate("one", 1.9e11, 2.04e11), baseline, "GPU"
    )


def probe_result(counts: dict, n=10):
    runs = [ProbeRun(switch, n, executed, 0.001 * executed) for switch, executed in counts.items()]
    return MergeProbeResult(n, 64, runs)


AS_MEASURED = {"none": 1, "arithmetic": 1, "classic_cse": 1, "both_control": 1, "both": 10}


def test_merge_probe_verdict_names_what_stops_the_merge_beside_its_control():
    found = probe_result(AS_MEASURED)
    assert [r.switch for r in found.culprits] == ["both"]
    first, second = found.verdict.split(". ")
    assert first == (
        "With Grappler's arithmetic_optimization and the classic CSE off, 10 of 10 MatMuls ran "
        "(10.0x ± 1.0 the time per call of its control, the row that differs from it in one "
        "setting and still merged: 1 of 10 ran): that is what merges them"
    )
    assert second.startswith("With only one of them off, the merge stays (Grappler's arithm")
    assert second.endswith("1 of 10 ran): each merges them on its own")
    assert "10 of 10" in str(found) and "MatMuls executed" in found._repr_html_()
    # each time with its noise: 5 calls' IQR, or the floor (each ratio's band: both summed)
    assert found.tables()[0].rows[-1][3:] == ["10.00 ms", "±5% (floor)"]
    # the probe's processes use TensorFlow's default threading: their times are not one device's
    assert (
        "only the counts, and each row's time against its control's (both run that way), are read"
        in (found.tables()[0].verdicts[-1])
    )
    spread = MergeProbeResult(10, 64, [ProbeRun("both_control", 10, 1, 0.01, 0.002)])
    assert spread.tables()[0].rows[0][4] == "±20%"


def test_the_merge_probes_oneDNN_setting_is_read_from_the_environment(monkeypatch):
    # read 154: 'oneDNN off, as in this kernel' was said with nothing showing it
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    assert (
        "oneDNN on, as in this kernel (TF_ENABLE_ONEDNN_OPTS=1 in its environment, read now;"
        in (probe_result(AS_MEASURED).tables()[0].verdicts[-1])
    )
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert (
        "oneDNN off, as in this kernel (TF_ENABLE_ONEDNN_OPTS=0 in its environment, read now;"
        in (probe_result(AS_MEASURED).tables()[0].verdicts[-1])
    )


def test_a_control_that_also_runs_everything_attributes_nothing():
    found = probe_result({**AS_MEASURED, "both_control": 10})
    assert found.culprits == []
    assert "and so did its control" in found.verdict and "that is what merges" not in found.verdict
    missing = probe_result({"none": 1, "both": 10})
    assert (
        missing.culprits == [] and "no control differing from it in one setting" in missing.verdict
    )


def test_merge_probe_verdict_reads_each_outcome():
    grappler = probe_result({"none": 1, "arithmetic": 10})
    assert [r.switch for r in grappler.culprits] == ["arithmetic"]
    assert grappler.verdict.startswith("With Grappler's arithmetic_optimization off, 10 of 10")
    assert "its control, the row that differs from it in one setting and still merged: 1 of 10" in (
        grappler.verdict
    )
    assert "each merges" not in probe_result({**AS_MEASURED, "arithmetic": 10}).verdict
    nothing = probe_result({"none": 1, "arithmetic": 1, "both": 1})
    assert nothing.verdict.startswith("none of the switches stopped the merge")
    unmerged = probe_result({"none": 10, "both": 10})
    assert unmerged.verdict.startswith("all 10 MatMuls ran") and unmerged.culprits == []
    assert "not run" in probe_result({"both": 10}).verdict


def test_run_merge_probe_runs_each_switch_and_reports_progress(monkeypatch):
    # The fresh processes themselves are tested in test_optimizer_probe; here, the assembly.
    ran = []

    def fake_probe(switches, n, size):
        ran.append(switches)
        return [ProbeRun(s, n, n if s.startswith("both") else 1, 0.01) for s in switches]

    monkeypatch.setattr(merging, "probe", fake_probe)
    calls = []
    result = l01.run_merge_probe(4, 32, progress=lambda *a: calls.append(a))
    assert ran == [["none", "arithmetic"], ["classic_cse", "both"], ["both_control"]]
    assert calls[1] == (1, 3, "fresh process 2 of 3: classic_cse, both off") and calls[-1][0] == 3
    assert [r.switch for r in result.runs] == list(SWITCHES)  # rows in the table's order
    assert [r.switch for r in result.culprits] == []  # every control ran all n: nothing shown


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: l01.run_concurrency(64, 10**6, 1), ValueError, "at most 1000"),
        (lambda: l01.run_concurrency(512.5, 2, 1), TypeError, "matrix size"),
        (lambda: l01.run_concurrency(64, 0, 1), ValueError, "matmuls per chain"),
        (lambda: l01.run_concurrency(64, 2, 0), ValueError, "devices"),
        (lambda: l01.run_concurrency(64, 2, 5), ValueError, "choose 1 to 4"),
        (lambda: l01.run_concurrency(2**20, 1, 4), ValueError, "is free"),
        (lambda: l01.run_merge_probe(0, 64), ValueError, "identical matmuls"),
        (lambda: l01.run_merge_probe(3, 64.0), TypeError, "matrix size"),
    ],
)
def test_bad_values_are_refused_before_anything_is_built(devices, call, error, words):
    with builds_nothing():
        with pytest.raises(error, match=words):
            call()


def test_run_concurrency_reports_progress_with_a_status(devices):
    calls = []
    result = l01.run_concurrency(
        64, 2, 3, lambda *args: calls.append(args), device_peak=1e12, min_runs=3, budget_s=0.2
    )
    # At most min(k, usable cores) logical devices compute at once: that is the peak to check.
    assert [m.peak for m in result.measurements] == [
        min(k, d2l.usable_cores()) * 1e12 for k in (1, 2, 3)
    ]
    assert result.device_counts == [1, 2, 3] and result.kind == "logical CPU"
    assert result.slowdowns[0] == 1.0 and result.speedups[2] == pytest.approx(
        3 / result.slowdowns[2]
    )
    statuses = [c[2] for c in calls]
    # In turns: every device count once per round, each turn's first repeat reported.
    for r in (1, 2):
        assert f"measuring 2 chains on 2 devices (round {r} of 2), repeat 1" in statuses
    assert statuses.index("measuring 3 chains on 3 devices (round 1 of 2), repeat 1") < (
        statuses.index("measuring 1 chain on 1 device (round 2 of 2), repeat 1")
    )
    assert calls[-1] == (2, 2, "finished")
    assert all(done <= total == 2 for done, total, _ in calls)


def test_panel_runs_from_pytest_and_shows_verdict_figure_and_table(devices, capsys):
    panel = l01.concurrency_panel()
    assert panel.sliders["max_devices"].max == len(devices)
    values = {"size": 64, "n_matmuls": 2, "max_devices": 2}
    for name, value in values.items():
        panel.sliders[name].value = value
    assert 0 < panel.estimate(**values) < panel.estimate(size=1024, n_matmuls=50, max_devices=4)
    panel.run()
    assert panel.error is None, panel.error
    assert panel.result.device_counts == [1, 2] and panel.result.n_matmuls == 2
    # The panel's output holds, in order, the verdict, the whole figure and the table.
    verdict, figure, table = panel.output.outputs
    assert "model" in verdict["text"]
    assert figure["data"]["image/png"] and figure["data"]["text/plain"].startswith("Figure:")
    assert "2 matmuls of 64x64" in table["data"]["text/plain"]


def test_the_panel_runs_the_functions_it_is_given(devices):
    built, made = [], []

    def chains(on, n):
        built.append((len(on), n))
        return chains_in_one_graph(on, n)

    def matrix(size, device, seed=0):
        made.append(size)
        return d2l.random_matrix(size, device, seed)

    panel = l01.concurrency_panel(chains, matrix)
    for name, value in {"size": 64, "n_matmuls": 2, "max_devices": 2}.items():
        panel.sliders[name].value = value
    panel.run()
    assert panel.error is None and built == [(1, 2), (2, 2)] and made == [64, 64]


def test_an_edited_saved_cell_changes_what_the_panel_runs():
    """A learner edits the `#@save` cell of `chains_in_one_graph`, re-runs it, presses Run."""
    notebook = nbformat.read(ROOT / "notebooks" / "01_two_devices_two_jobs.ipynb", as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    panel_at = next(i for i, c in enumerate(code) if "d2l.concurrency_panel(" in c.source)
    # The set-up, every saved cell, the panel and its run: the measurements between are skipped.
    cells = [code[0]] + [c for c in code if c.source.startswith("#@save")]
    cells += code[panel_at : panel_at + 2]
    edited = "    names = [device_name(d) for d in devices]\n"
    (chains,) = [c for c in cells if edited in c.source]
    chains.source = chains.source.replace(edited, edited + '    print("edited:", len(names))\n')
    small = "for s, v in [('size', 64), ('n_matmuls', 2), ('max_devices', 2)]:\n"
    cells[-1].source = small + "    panel.sliders[s].value = v\n" + cells[-1].source
    for cell in cells:
        cell.outputs = []
    notebook.cells = cells
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    printed = "".join(o.get("text", "") for o in cells[-1].outputs)
    assert printed.splitlines() == ["edited: 1", "edited: 2"]  # one graph per device count


def test_panel_refuses_an_oversize_run_before_allocating(devices, monkeypatch):
    panel = l01.concurrency_panel()
    monkeypatch.setattr("d2lhelpers.devices._host_available_bytes", lambda: 10 * 2**20)
    panel.sliders["size"].value = panel.sliders["size"].max
    panel.run()
    assert isinstance(panel.error, ValueError) and "matrix size" in str(panel.error)


def timed(t):
    return Measurement("run", [t] * 5)


def test_at_once_verdict_reads_the_model_for_the_usable_cores():
    together = l01.at_once_verdict(timed(0.0101), timed(0.010), "logical CPU", cores=2)
    assert (
        together.endswith(
            "both runs' noise): consistent with their running at the same time (an inference from "
            "the timing and the core count, not observed)"
        )
        and "1.01x one chain" in together
    )
    turns = l01.at_once_verdict(timed(0.020), timed(0.010), "logical CPU", cores=1)
    assert "as the model's 2.00x (1 usable CPU core) says" in turns and "taking turns" in turns
    # read 108: the band is printed (5% of 20 ms + 2 x 5% of 10 ms, over 10 ms)
    assert "says (within ±0.20x: both runs' noise): more chains than cores" in turns
    # read 154: below the model within the noise is said so, not read bare
    below = l01.at_once_verdict(timed(0.0098), timed(0.010), "logical CPU", cores=2)
    assert "0.98x one chain" in below and "noise, below it by less than that: not read as " in below
    assert "below it" not in together
    slow = l01.at_once_verdict(timed(0.016), timed(0.010), "logical CPU", cores=2)
    assert "slower than the model's 1.00x" in slow and "slower even than" not in slow
    serial = l01.at_once_verdict(timed(0.026), timed(0.010), "logical CPU", cores=2)
    assert "slower even than the same work one after the other" in serial  # 2.6x > 2 chains
    # A miss beyond the band is a miss, however spread the runs: not "too noisy to check".
    spread = Measurement("both", [0.016, 0.018, 0.020, 0.024, 0.026])  # IQR 30% of its median
    missed = l01.at_once_verdict(spread, timed(0.010), "logical CPU", cores=2)
    assert "slower than the model's 1.00x" in missed and "beyond both runs' noise" in missed
    assert "too noisy" not in missed
    near = Measurement("both", [0.008, 0.009, 0.0105, 0.012, 0.013])  # as spread, inside
    inside = l01.at_once_verdict(near, timed(0.010), "logical CPU", cores=2)
    assert "too noisy to check" in inside and "within their noise of the model's" in inside
    assert "impossible" in l01.at_once_verdict(timed(0.006), timed(0.010), "GPU")
    assert "no model" in l01.at_once_verdict(timed(0.012), timed(0.010), "virtual GPU")


def test_at_once_verdict_reads_each_chain_alone_against_the_least_time_they_allow():
    """Read 166: on one core, 51.02 ms against 2 x the longer chain (28.76 ms) was 'impossible',
    though the two chains alone added up to 54.84 ms: taking turns, within the noise."""
    m0, m1, both = timed(0.02876), timed(0.02608), timed(0.05102)
    said = l01.at_once_verdict(both, [m0, m1], "logical CPU", cores=1)
    assert "impossible" not in said and "took 1.77x the longer chain alone" in said
    assert (
        "as the model's 1.91x (1 usable CPU core: the chains alone take 28.760 ms + 26.080 ms = "
        "54.84 ms, 1 at a time) says" in said
    )
    assert "below it by less than that" in said and "taking turns" in said
    # against 2 x the longer alone, the same time was read faster than the model
    assert "impossible" in l01.at_once_verdict(both, m0, "logical CPU", cores=1)
    # below the sum beyond both noises: impossible still (5% floors: 2.55 + 1.44 + 1.30 ms)
    fast = l01.at_once_verdict(timed(0.0495), [m0, m1], "logical CPU", cores=1)
    assert "faster than the model's 1.91x" in fast and "impossible" in fast
    # with a core each, the model is the longer alone (26.08 ms does not set it)
    apart = l01.at_once_verdict(timed(0.0290), [m1, m0], "logical CPU", cores=2)
    assert "as the model's 1.00x (2 usable CPU cores) says" in apart
    assert "running at the same time" in apart and "chains alone take" not in apart
    assert "took 1.01x the longer chain alone" in apart
    three = l01.at_once_verdict(timed(0.030), [m0, m1, m1], "GPU")
    assert three.startswith("3 chains launched together in one graph took 1.04x the longest")
    # slower than the sum beyond the noise: slower even than one after the other
    slow = l01.at_once_verdict(timed(0.070), [m0, m1], "logical CPU", cores=1)
    assert "slower than the model's 1.91x" in slow and "slower even than" in slow


def test_single_samples_outside_their_runs_band_are_named():
    def sample(name, seconds):
        b = Benchmark(name, clock=iter([0.0, seconds]).__next__, sync=lambda: None)
        with b:
            pass
        return b

    runs = [timed(0.050), timed(0.050), timed(0.0505)]
    agree = [sample("device 0", 0.0488), sample("device 1", 0.0481), sample("both", 0.0520)]
    said = l01.single_samples_verdict(list(zip(agree, runs, strict=True)))
    assert said.startswith("Each single sample above (48.80 ms, 48.10 ms, 52.00 ms) lies within")
    # read 85: the pair's sample at 1.88x its runs' median, the band 5% (the floor)
    off = agree[:2] + [sample("device 0 & device 1", 0.0952)]
    said = l01.single_samples_verdict(list(zip(off, runs, strict=True)))
    assert "'device 0 & device 1' 95.20 ms is 1.89x the median of its 5 runs (50.50 ms ±5% " in said
    assert "'device 0'" not in said and "the verdicts here read the medians" in said
    edge = [sample("at the band", 0.0524), sample("past it", 0.0526)]  # 50 ms ±2.5 ms
    said = l01.single_samples_verdict(list(zip(edge, runs[:2], strict=True)))
    assert "'past it'" in said and "'at the band'" not in said
    # read 160: '1.05x' beside '±5%' listed outside: the digits that show it past 1.05
    assert "'past it' 52.60 ms is 1.052x the median of its 5 runs (50.00 ms ±5% (floor))" in said
    below = l01.single_samples_verdict([(sample("short", 0.0474), runs[0])])
    assert "'short' 47.40 ms is 0.948x the median" in below  # past 0.95 on the other side


def test_separate_calls_verdict_tells_overlap_from_sequence():
    one, other = timed(0.010), timed(0.0098)
    in_turn = l01.separate_calls_verdict(timed(0.0199), one, other)
    assert "consistent with one after the other" in in_turn and "cannot tell which" in in_turn
    assert "their work overlapped" in l01.separate_calls_verdict(timed(0.0102), one, other)
    assert "overlapped in part" in l01.separate_calls_verdict(timed(0.015), one, other)
    noisy = Measurement("noisy", [0.008, 0.009, 0.010, 0.012, 0.013])  # IQR 3 ms
    assert "one after the other" in l01.separate_calls_verdict(timed(0.0165), noisy, other)
    assert "impossible" in l01.separate_calls_verdict(timed(0.007), one, other)
    assert "something else" in l01.separate_calls_verdict(timed(0.025), one, other)
    # read 84: one device's call an outlier (71 ms against 52 ms for the same work): not read
    outlier = l01.separate_calls_verdict(timed(0.0978), timed(0.0714), timed(0.0521))
    assert outlier == (
        "two separate calls took 1.37x the longer call alone; but the two calls alone, the same "
        "work on like devices, took 71.40 ms and 52.10 ms, apart beyond their noise, so neither "
        "the longer nor their sum is a steady yardstick: not read (run it again)"
    )
    # read 76: within the noise of one call and of the sum (noisy runs): neither is read
    wide = Measurement("wide", [0.05, 0.07, 0.138, 0.15, 0.19])  # IQR 80 ms
    both_ways = l01.separate_calls_verdict(wide, timed(0.053), timed(0.0558))
    assert both_ways.endswith(
        "within the noise of both, so too noisy to tell whether their work overlapped or took turns"
    )
    assert "within the noise of one: their work overlapped" not in both_ways
    # One core (1 device computes at a time): less than the sum beyond the noise cannot be; the
    # sum within the noise is still one after the other.
    alone = l01.separate_calls_verdict(timed(0.015), one, other, at_once=1)
    assert alone.startswith(
        "two separate calls took 1.50x the longer call alone; the sum of both is 1.98x: less, "
        "beyond the noise, though at most 1 of the devices can compute at a time here, so the "
        "two could only take turns: impossible, so not a result"
    )
    assert "consistent with one after the other" in l01.separate_calls_verdict(
        timed(0.0199), one, other, at_once=1
    )


def test_the_verdicts_edges_make_mutate_found_unpinned(monkeypatch):
    """make mutate on this module (2026-12-04): the noise sums, the own-peak ceiling's edge, the
    one-device line's pronoun and a cached baseline's cause were not pinned by any test."""
    # the serial comparison adds both runs' noise: 2.1x two chains' 2.0x is inside it
    near_serial = l01.at_once_verdict(timed(0.021), timed(0.010), "logical CPU", cores=2)
    assert "slower than the model's 1.00x" in near_serial and "slower even" not in near_serial
    # separate GPUs: the model is 1.00x, no cores named; cores default to the usable ones
    assert "than 1.00x" in l01.at_once_verdict(timed(0.016), timed(0.010), "GPU", cores=2)
    assert "the model's" not in l01.at_once_verdict(timed(0.016), timed(0.010), "GPU", cores=2)
    monkeypatch.setattr(l01_verdicts, "usable_cores", lambda: 1)
    assert "(1 usable CPU core) says" in l01.at_once_verdict(
        timed(0.020), timed(0.010), "logical CPU"
    )
    # two calls against their sum: the band holds all three runs' noise (0.95 + 0.5 + 0.5 ms)
    summed = l01.separate_calls_verdict(timed(0.019), timed(0.010), timed(0.010))
    assert "within the noise: consistent with one after the other" in summed
    baseline = {"flops_per_s": 2e11, "noise": 0.02}  # its noise counted at the 5% floor
    one = rate("one", 1e11, None)
    # their own peak caps them below the baseline beyond both noises (5% + 5%): 1.8e11 is the edge
    edge = 2e11 * (1 - 0.10)
    for peak, capped in [(1.7e11, True), (edge, False), (1.85e11, False)]:
        said = l01.baseline_verdict(rate("both", 1.5e11, peak), one, baseline, "logical CPU")
        assert ("(but their own measured peak allows only" in said) == capped, peak
    lone = l01.baseline_verdict(
        rate("both", 1.5e11, None), rate("one", 1.5e11, 1.7e11), baseline, "GPU"
    )
    assert "(but its own measured peak allows only 0.85 of it" in lone.splitlines()[1]
    chip = l01.baseline_verdict(rate("both", 1.5e11, 1.6e11), one, baseline, "virtual GPU")
    assert "(but their own measured peak allows only 0.80 of it" in chip.splitlines()[0]
    gpus = l01.baseline_verdict(rate("both", 3.9e11, None), one, baseline, "GPU")
    assert "(expected, not measured), and do, within the noise" in gpus
    # read 78: a noisy run within the band is too noisy to check, not 'and does' / 'match it'
    wobbly = rate("one", 1.5e11, None, times=(0.6, 0.8, 1.0, 1.4, 1.6))  # IQR 60% of its median
    loose = l01.baseline_verdict(wobbly, wobbly, baseline, "logical CPU")
    assert loose.splitlines()[1].endswith(
        "at best it can match it (expected, not measured); within the noise of 65%, too noisy to "
        "check: its runs spread by more than 10% of their median"
    )
    assert "they match it" not in loose and "too noisy to check" in loose.splitlines()[0]
    # a rate exactly at its own peak is not above it: read against the baseline as usual
    at_peak = l01.baseline_verdict(
        rate("both", 2e11, None), rate("one", 2e11, 2e11), baseline, "GPU"
    )
    assert "not read against the baseline" not in at_peak and "and does" in at_peak
    # one device alone (k = 1) is read against the baseline as a ceiling, not a yardstick
    alone = l01.baseline_verdict(rate("both", 1.5e11, None), one, baseline, "logical CPU", k=1)
    assert alone.startswith("1 device together") and "at best it can match it" in alone
    # a cached baseline beaten by a virtual GPU pair names the cache as the first cause
    cached = {**baseline, "from_cache": True, "measured_at": "2026-11-30T10:00:00"}
    stale = l01.baseline_verdict(rate("both", 2.5e11, None), one, cached, "virtual GPU")
    assert (
        ": impossible, so not a result. Possible causes, not measured here: (1) the baseline was "
        "measured "
        "low: it is 2026-11-30T10:00:00's, from the cache; (2) the runs were too noisy"
    ) in stale


CAUSES = (
    "Possible causes, not measured here: (1) the runs were too noisy (another program, or another "
    "copy of this notebook, was running); (2) the reference (peak or baseline) was measured low; "
    "(3) work was skipped or merged, or the clock stopped before the device finished"
)


def test_each_l01_verdict_reads_as_a_whole_sentence(monkeypatch):
    """Whole sentences, one per branch the tests above check by phrase: a changed word, a lost
    clause or a dropped argument shows here (the mutation survivors of stop 39)."""
    monkeypatch.setattr(cache.os, "getloadavg", lambda: (0.4, 0.0, 0.0), raising=False)
    assert l01.at_once_verdict(timed(0.012), timed(0.010), "virtual GPU", k=3) == (
        "3 chains launched together in one graph took 1.20x one chain (virtual GPUs share one "
        "chip: no model is checked)"
    )
    assert l01.at_once_verdict(timed(0.006), timed(0.010), "GPU") == (
        "2 chains launched together in one graph took 0.60x one chain, faster than 1.00x: "
        "impossible, so not a result. " + CAUSES
    )
    spread = Measurement("both", [0.016, 0.018, 0.020, 0.024, 0.026])  # noisy, beyond the band
    assert l01.at_once_verdict(spread, timed(0.010), "logical CPU", cores=2) == (
        "2 chains launched together in one graph took 2.00x one chain, slower than the model's "
        "1.00x (2 usable CPU cores) beyond both runs' noise, wide as it is: the load average (0.4 "
        "on 2 usable CPU cores) does not show another program beyond what this run's own threads "
        "could be (it counts them too, and cannot see other tenants of a shared host), so the "
        "cause is not measured here; hypotheses: another program shared the cores, or the work "
        "did not keep the devices busy at once (too short, or the runtime's threads)"
    )
    clean = l01.at_once_verdict(timed(0.016), timed(0.010), "logical CPU", cores=2)
    assert "1.00x (2 usable CPU cores): the load average" in clean  # quiet runs: no 'beyond'
    near = Measurement("both", [0.008, 0.009, 0.0105, 0.012, 0.013])
    assert l01.at_once_verdict(near, timed(0.010), "logical CPU", cores=2) == (
        "2 chains launched together in one graph took 1.05x one chain; too noisy to check it "
        "against the model's 1.00x (2 usable CPU cores): its runs spread by more than 10% of "
        "their median, and this time is within their noise of the model's"
    )
    one, other = timed(0.010), timed(0.0098)
    assert l01.separate_calls_verdict(timed(0.007), one, other) == (
        "two separate calls took 0.70x the longer call alone, faster than that call alone: "
        "impossible, so not a result. " + CAUSES
    )
    assert l01.separate_calls_verdict(timed(0.0199), one, other) == (
        "two separate calls took 1.99x the longer call alone; the sum of both is 1.98x, within "
        "the noise: consistent with one after the other (or with both at once, starved of cores: "
        "timing alone cannot tell which)"
    )
    baseline = {"flops_per_s": 2e11, "noise": 0.02}
    cached = {**baseline, "from_cache": True, "measured_at": "2026-11-30T10:00:00"}
    one = rate("one", 1e11, None)
    chip = l01.baseline_verdict(rate("both", 2.3e11, None), one, baseline, "virtual GPU")
    assert chip.splitlines()[1] == (
        "one device: 100.0 GFLOP/s = 0.50 of the baseline (not read against it: the line above "
        "puts the baseline in doubt)"
    )
    stale = l01.baseline_verdict(rate("both", 2.3e11, None), one, cached, "virtual GPU")
    assert stale.splitlines()[0].endswith(
        "; at best they can match it (expected, not measured); above that by more than the noise "
        "of 10%: impossible, so not a result. Possible causes, not measured here: (1) the "
        "baseline was measured low: it is 2026-11-30T10:00:00's, from the cache; (2) the runs "
        "were too noisy (another program, or another copy of this notebook, was running); (3) the "
        "reference (peak or baseline) was measured low; (4) work was skipped or merged, or the "
        "clock stopped before the device finished"
    )
    yardstick = l01.baseline_verdict(rate("both", 2.3e11, None), one, cached, "logical CPU")
    assert yardstick.splitlines()[0] == (
        "2 devices together: 230.0 GFLOP/s = 1.15 of the usable cores' baseline 200.0 GFLOP/s; "
        "above it by more than the noise of 10%: independent chains, one thread each, got more "
        "from these cores than TensorFlow's default threading on one chain (the baseline is a "
        "yardstick, not a ceiling; hypotheses: one matmul split across threads pays for the "
        "split, and a rate depends on the matrix size, which the baseline's chain need not "
        "share); the baseline is 2026-11-30T10:00:00's, from the cache "
        "(d2l.machine_baseline_rate(refresh=True) measures it again)"
    )
    # One logical CPU device alone is one chain on the usable cores: a ceiling, not a yardstick.
    alone = l01.baseline_verdict(rate("one", 2.3e11, None), one, baseline, "logical CPU", k=1)
    assert "impossible" in alone.splitlines()[0] and "yardstick" not in alone
    capped = l01.baseline_verdict(rate("both", 1.5e11, 1.6e11), one, baseline, "logical CPU")
    assert capped.splitlines()[0].endswith(
        "; below it by more than the noise of 10% (but their own measured peak allows only 0.80 "
        "of it: the baseline runs TensorFlow's default threads with oneDNN on, the devices one "
        "thread per op, as the package runs each (its design, not shown by a cell), so 'below' "
        "here says little)"
    )
