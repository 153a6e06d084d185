"""Timing in turns, with a fake clock: the order of calls, the pooled times, the callbacks."""

import pytest

from d2lhelpers.timing.interleaved import measure_interleaved


def fake_options(now):
    return {"warmup": 0, "number": 1, "clock": lambda: now[0], "sync": lambda: None}


def test_measure_interleaved_takes_turns_and_pools_every_rounds_times():
    now, calls = [0.0], []

    def work(name, seconds):
        def run():
            calls.append(name)
            now[0] += seconds

        return run

    runs = [(work("a", 0.02), "a", {}), (work("b", 0.03), "b", {"nbytes": 3e6})]
    rounds_seen, repeats = [], []
    a, b = measure_interleaved(
        runs,
        3,
        on_round=lambda: rounds_seen.append(len(calls)),
        on_repeat=lambda *seen: repeats.append(seen),
        min_runs=2,
        max_runs=2,
        **fake_options(now),
    )
    assert calls == ["a", "a", "b", "b"] * 3  # in turns, round after round
    assert rounds_seen == [4, 8, 12]
    assert repeats[:4] == [(1, "a", 1), (1, "a", 2), (1, "b", 1), (1, "b", 2)]
    assert repeats[-1] == (3, "b", 2) and len(repeats) == 12
    assert a.times == pytest.approx([0.02] * 6) and b.times == pytest.approx([0.03] * 6)
    assert b.rate == pytest.approx(1e8) and a.rate is None
    assert a.warnings == [] and b.warnings == []


@pytest.mark.parametrize("rounds", [0, -1, 2.5, True])
def test_rounds_must_be_a_positive_whole_number(rounds):
    with pytest.raises(ValueError, match="rounds"):
        measure_interleaved([(lambda: None, "x", {})], rounds)


def test_pooled_times_that_disagree_are_flagged_noisy():
    now, cost = [0.0], [0.01]

    def run():
        now[0] += cost[0]

    def slower_each_round():
        cost[0] *= 3

    (m,) = measure_interleaved(
        [(run, "drifting", {})],
        3,
        on_round=slower_each_round,
        min_runs=2,
        max_runs=2,
        **fake_options(now),
    )
    assert len(m.times) == 6 and any("noisy" in w for w in m.warnings)


def test_pooled_times_keep_the_peaks_noise_and_its_remeasure():
    from d2lhelpers.timing.benchmark import MeasuredPeak, PeakRecord

    now = [0.0]

    def run():
        now[0] += 0.01

    # 1 GFLOP in 10 ms is 100 GFLOP/s, above a 50 GFLOP/s peak: measured again at 120.
    peak = MeasuredPeak(PeakRecord(50e9, 0.03, lambda: (120e9, 0.02)))
    (m,) = measure_interleaved(
        [(run, "r", {"flops": 1e9, "peak": peak})], 2, min_runs=3, max_runs=3, **fake_options(now)
    )
    assert m.remeasured_peak == 120e9 and m.best_peak == 120e9
    assert m.peak_noise == pytest.approx(70 / 120)  # round 2 saw the gap between the readings
    assert not any("impossible" in w for w in m.warnings)


def test_pooled_times_keep_a_k_device_ceiling_and_the_remeasured_noise():
    """Review: pooling dropped `peak_factor`, so 2 x the peak printed as 'the peak'."""
    from d2lhelpers.timing.benchmark import MeasuredPeak, PeakRecord

    now = [0.0]

    def run():
        now[0] += 0.01

    # 1 GFLOP in 10 ms is 100 GFLOP/s, above 2 x a 40 GFLOP/s peak: measured again at 60.
    ceiling = MeasuredPeak(PeakRecord(40e9, 0.03, lambda: (60e9, 0.02))) * 2
    (m,) = measure_interleaved(
        [(run, "r", {"flops": 1e9, "peak": ceiling})],
        2,
        min_runs=3,
        max_runs=3,
        **fake_options(now),
    )
    assert m.peak_factor == 2 and "the ceiling" in m.peak_words(m.peak)
    assert m.peak_source is ceiling  # review: later readings use its newest rate (peak_now)
    assert m.remeasured_peak == 120e9 and m.remeasured_noise == pytest.approx(20 / 60)


def test_measure_in_turns_tells_each_round_and_turn_on_its_steps():
    from d2lhelpers.core.progress import Steps
    from d2lhelpers.timing.interleaved import measure_in_turns

    now, seen, freed = [0.0], [], []

    def run():
        now[0] += 0.01

    steps = Steps(lambda done, total, status: seen.append((done, total, status)), 2)
    (m,) = measure_in_turns(
        [(run, "a", {})],
        steps,
        2,
        after_round=lambda: freed.append(steps.done),  # before the round is counted
        min_runs=2,
        max_runs=2,
        budget_s=4.0,
        **fake_options(now),
    )
    assert len(m.times) == 4 and freed == [0, 1] and steps.done == 2
    assert (0, 2, "measuring a (round 1 of 2), repeat 1") in seen
    assert (1, 2, "done: round 1 of 2") in seen and seen[-1] == (2, 2, "finished")
    assert (1, 2, "measuring a (round 2 of 2), repeat 1") in seen
