"""Verdicts computed from numbers: each sentence changes when the data change."""

from types import SimpleNamespace

import pytest

from d2lhelpers.core.units import format_rate
from d2lhelpers.core.verdicts import (
    LIKELY_CAUSES,
    Comparison,
    Spread,
    TwoParts,
    above_limit,
    agree_within_noise,
    beats_ideal,
    compare,
    faster_or_slower,
    fraction_flags,
    how_below_ideal,
    impossible,
    median_of,
    noise_of,
    noise_text,
    noisy_run,
    parts_between_runs,
    ratio_noise,
    relative_noise,
    with_noise,
)
from d2lhelpers.timing.benchmark import Measurement


def quiet(median: float, iqr: float = 0.0, n: int = 5) -> Measurement:
    """A measurement whose median is `median` and whose IQR is `iqr` (inclusive quartiles)."""
    half = iqr / 2
    times = [median - half, median - half, median, median + half, median + half]
    return Measurement("m", times[:n] if n < 5 else times)


def test_noise_is_the_iqr_or_the_floor_whichever_is_larger():
    assert noise_of(quiet(1.0, iqr=0.2)) == pytest.approx(0.2)
    assert noise_of(quiet(1.0, iqr=0.01)) == pytest.approx(0.05)  # the floor wins
    assert noise_of(2.0) == pytest.approx(0.1)  # a bare number: the floor of itself
    assert median_of(quiet(3.0, 0.4)) == pytest.approx(3.0) and median_of(7) == 7.0


def test_compare_sums_both_noises_and_orders_a_against_b():
    c = compare(quiet(1.0, 0.2), quiet(2.0, 0.3))
    assert (c.a, c.b) == (pytest.approx(1.0), pytest.approx(2.0))
    assert c.noise == pytest.approx(0.5) and c.ratio == pytest.approx(0.5)
    assert c.measurable and c.a_faster and not c.a_slower
    reverse = compare(quiet(2.0, 0.3), quiet(1.0, 0.2))
    assert reverse.a_slower and not reverse.a_faster and reverse.ratio == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("a", "b", "noise", "measurable"),
    [
        (1.0, 1.25, 0.25, False),
        (1.0, 1.25, 0.24, True),
        (1.5, 1.0, 0.5, False),
        (1.5, 1.0, 0.49, True),
    ],
)
def test_a_difference_equal_to_the_noise_is_not_measurable(a, b, noise, measurable):
    c = Comparison(a, b, noise)
    assert c.measurable is measurable
    assert c.a_faster is (measurable and a < b)
    assert c.a_slower is (measurable and a > b)


def test_faster_or_slower_reads_differently_with_the_data():
    assert faster_or_slower(quiet(1.0), quiet(2.0), "split", "one") == (
        "split is 2.00x faster than one"
    )
    assert faster_or_slower(quiet(3.0), quiet(2.0), "split", "one") == (
        "split is 1.50x slower than one"
    )
    same = faster_or_slower(quiet(9.03e-3, 0.5e-3), quiet(9.27e-3, 0.5e-3), "split", "one")
    assert same.startswith("no measurable difference between split and one")
    assert "9.03 ms vs 9.27 ms" in same and "within the noise of 1.00 ms" in same
    # read 69: a gap just inside the noise printed as wide as it; more digits show the side
    edge = faster_or_slower(quiet(10.5155e-3, 0.5262e-3), quiet(9.5165e-3, 0.4758e-3), "a", "b")
    assert "(10.516 ms vs 9.517 ms, within the noise of 1.002 ms)" in edge


def testtimes_within_adds_decimals_only_until_the_gap_reads_inside_the_noise():
    from d2lhelpers.core.verdicts import times_within

    assert times_within(10.5e-3, 9.5e-3, 2e-3) == ("10.50 ms", "9.50 ms", "2.00 ms")
    assert times_within(2.5156, 1.5164, 1.0002) == ("2.5156 s", "1.5164 s", "1.0002 s")
    # mixed units: as format_seconds prints them
    assert times_within(1.5155, 0.5165, 0.5002) == ("1.516 s", "516.50 ms", "500.20 ms")
    assert times_within(15.155e-6, 5.165e-6, 10.002e-6) == ("15.16 µs", "5.17 µs", "10.00 µs")
    # a gap inside the noise by less than three more decimals can show: printed as it was
    assert times_within(2.999999e-3, 2.0e-3, 1.0e-3) == ("3.00 ms", "2.00 ms", "1.00 ms")
    assert times_within(2.99999e-3, 2.0e-3, 1.0e-3)[0] == "2.99999 ms"  # three more: enough
    assert times_within(3e-9, 2e-9, 2e-9) == ("3.0 ns", "2.0 ns", "2.0 ns")
    # read 166: two different times never print alike (6.48 ms vs 6.48 ms 'below')
    assert times_within(6.4793e-3, 6.4831e-3, 0.6e-3) == ("6.479 ms", "6.483 ms", "0.600 ms")
    assert times_within(6.48e-3, 6.48e-3, 0.6e-3) == ("6.48 ms", "6.48 ms", "600.0 µs")


def test_a_comparisons_outcome_word_for_a_table_cell():
    assert compare(quiet(1.0), quiet(2.0)).outcome == "faster"
    assert compare(quiet(3.0), quiet(2.0)).outcome == "slower"
    assert compare(quiet(9.03e-3, 0.5e-3), quiet(9.27e-3, 0.5e-3)).outcome == (
        "no measurable difference"
    )


def test_beats_ideal_only_beyond_the_noise():
    assert not beats_ideal(quiet(1.0, 0.0), 1.0)
    assert not beats_ideal(quiet(0.96, 0.0), 1.0)  # inside the 5% floor of 0.96 s
    assert beats_ideal(quiet(0.94, 0.0), 1.0)  # 0.94 + 0.047 < 1
    assert not beats_ideal(quiet(0.94, 0.0), 1.0, ideal_noise=0.02)
    assert not beats_ideal(quiet(0.8, 0.25), 1.0)  # a wide IQR: could be noise
    assert beats_ideal(0.5, 1.0) and not beats_ideal(1.5, 1.0)
    assert not beats_ideal(quiet(0.5, 0.5), 1.0)  # exactly at the edge of the noise: not beyond


def test_how_below_ideal_reads_the_floor_then_the_noise():
    assert how_below_ideal(quiet(1.0, 0.0), 1.0) is None
    assert how_below_ideal(quiet(0.951, 0.0), 1.0) is None  # inside the 5% floor
    assert how_below_ideal(quiet(0.951, 0.0), 1.0, floor=0.0) == "beyond"  # 0.951 + 0.0476 < 1
    assert how_below_ideal(quiet(0.94, 0.0), 1.0) == "beyond"
    assert how_below_ideal(quiet(0.94, 0.0), 1.0, ideal_noise=0.02) == "inside"
    assert how_below_ideal(quiet(0.8, 0.25), 1.0) == "inside"  # a wide IQR: could be noise
    assert how_below_ideal(0.5, 1.0, floor=0.6) is None


def test_impossible_lists_the_causes_in_order():
    text = impossible("hidden fraction of 288%")
    assert text.startswith("hidden fraction of 288%: impossible, so not a result.")
    positions = [text.index(f"({i}) {cause}") for i, cause in enumerate(LIKELY_CAUSES, 1)]
    assert positions == sorted(positions) and len(positions) == 3
    assert f"(1) {LIKELY_CAUSES[0]}; (2) {LIKELY_CAUSES[1]}; (3) " in text
    assert "noisy" in LIKELY_CAUSES[0] and "measured low" in LIKELY_CAUSES[1]
    assert "skipped" in LIKELY_CAUSES[2]
    assert impossible("x", causes=("only one",)).endswith("not measured here: (1) only one")


@pytest.mark.parametrize(
    ("value", "flagged"), [(0.0, False), (1.0, False), (0.5, False), (1.01, True), (-0.01, True)]
)
def test_fraction_flags_outside_zero_to_one(value, flagged):
    flags = fraction_flags(value, "hidden")
    assert bool(flags) is flagged
    if flagged:
        assert len(flags) == 1 and flags[0].startswith(f"hidden of {value:.0%} is outside 0%..100%")


def test_fraction_flags_with_other_bounds():
    assert fraction_flags(0.1, "bubble", low=0.2) != []
    assert "outside 20%..90%" in fraction_flags(0.95, "bubble", low=0.2, high=0.9)[0]
    assert fraction_flags(0.9, "bubble", low=0.2, high=0.9) == []


def test_above_a_limit_only_beyond_the_summed_noise():
    assert not above_limit(1.05, 1.0, 0.05)  # exactly at the edge of the noise: not beyond
    assert above_limit(1.051, 1.0, 0.05)
    assert not above_limit(1.09, 1.0, 0.1) and above_limit(1.09, 1.0, 0.08)
    assert not above_limit(0.5, 1.0, 0.0) and above_limit(2.1e9, 2e9, 0.04)


def test_relative_noise_and_a_noisy_run():
    assert relative_noise(quiet(2.0, iqr=0.4)) == pytest.approx(0.2)
    assert relative_noise(quiet(2.0, iqr=0.0)) == pytest.approx(0.05)  # the floor
    assert relative_noise(Measurement("m", [0.0, 0.0, 0.0])) == float("inf")
    # Printed: the floor says it is the floor; a spread at or above it is the runs' own.
    assert noise_text(quiet(2.0, iqr=0.4)) == "±20%"
    assert noise_text(quiet(2.0, iqr=0.0)) == "±5% (floor)"
    # a ratio of two runs: 20% and the 5% floor, summed, of a 3x ratio
    assert ratio_noise(3.0, quiet(2.0, iqr=0.4), quiet(1.0, iqr=0.0)) == pytest.approx(0.75)
    assert noise_text(quiet(2.0, iqr=0.12)) == "±6%"  # just above the floor: the runs' own
    assert not noisy_run(quiet(1.0, iqr=0.09)) and noisy_run(quiet(1.0, iqr=0.11))
    # The edges, exactly: a spread at the floor is the runs' own, at the limit not yet noisy;
    # both scale with the median (at 0.5 s, 4% and 8% of it).
    assert noise_text(SimpleNamespace(median=2.0, iqr=0.1)) == "±5%"  # 0.1 = 5% of 2.0 exactly
    assert noise_text(quiet(0.5, iqr=0.02)) == "±5% (floor)"
    assert noise_text(quiet(0.5, iqr=0.04)) == "±8%"
    assert noise_text(SimpleNamespace(median=0.0, iqr=0.25)) == "(median 0, IQR 0.25)"  # no ±inf%
    assert not noisy_run(SimpleNamespace(median=1.0, iqr=0.1))
    # A value with its band, one home (with_noise): a time, or a rate in its unit, with
    # `decimals` more for both where a verdict's digits need them.
    assert with_noise(quiet(2.0, iqr=0.4)) == "2.000 s ±20%"
    assert with_noise(quiet(0.01234)) == "12.34 ms ±5% (floor)"
    assert with_noise(quiet(0.012345, iqr=0.002469), decimals=1) == "12.345 ms ±20.0%"
    assert with_noise(quiet(2345.0, iqr=469.0), "tok/s") == "2.3 ktok/s ±20%"
    assert with_noise(quiet(2345.0, iqr=469.0), "tok/s", 1) == "2.35 ktok/s ±20.0%"
    assert noisy_run(quiet(0.5, iqr=0.06)) and not noisy_run(quiet(0.5, iqr=0.04))


def test_the_hidden_share_and_its_ceiling():
    # Parts of 4 and 10 ms, a launch of 1 ms: one after the other 13 ms, overlapped 10 ms.
    def two(combined, launch=1e-3, parts=(4e-3, 10e-3)):
        found = TwoParts()
        found.parts = tuple(Measurement("part", [t] * 5) for t in parts)
        found.launch, found.combined = (
            Measurement("l", [launch] * 5),
            Measurement("c", [combined] * 5),
        )
        return found

    assert two(11e-3).ideal_sequential == pytest.approx(13e-3)
    assert two(11e-3).ideal_overlapped == 10e-3 and two(11e-3, parts=(10e-3, 4e-3)).shorter == 4e-3
    assert two(11e-3).hidden_fraction == pytest.approx(0.5)
    assert two(13e-3).hidden_fraction == pytest.approx(0)
    assert two(10e-3).hidden_fraction == pytest.approx(two(10e-3).hidden_ceiling)
    assert two(10e-3).hidden_ceiling == pytest.approx(0.75)  # not 100%: the launch is no overlap
    assert two(10e-3, launch=0.0).hidden_ceiling == 1
    # the noise: each time's 5% floor; the overlapped ideal's is the longer part's
    assert two(11e-3).hidden_noise == pytest.approx(0.05 * (4 + 10 + 1 + 11) / 4)
    assert two(11e-3, parts=(10e-3, 4e-3)).ideal_overlapped_noise == pytest.approx(0.05 * 10e-3)


def test_the_hidden_share_is_shown_only_as_far_as_its_noise_allows():
    def two(combined, iqr=0.0, refused=""):
        found = TwoParts()
        found.parts = (Measurement("a", [4e-3] * 5), Measurement("b", [10e-3] * 5))
        found.launch = Measurement("l", [1e-3] * 5)
        found.combined = Measurement("c", [combined - iqr, combined, combined, combined + iqr])
        found.sum_name, found.not_a_result = "a + b - launch", lambda: refused
        return found

    # noise 5% floors: (0.2 + 0.5 + 0.05 + 0.55) ms over 4 ms = 32.5%
    assert two(11e-3).hidden_text() == "50% ±32%"
    assert two(12e-3).hidden_text() == "none measurable (±34%)"  # 25% inside its 34%
    assert two(11e-3, refused="why").hidden_text() == "not shown (see the warnings)"
    # 16 ms against 13: below 0 beyond the noise, said as time lost, never as -75%
    assert two(16e-3).hidden_text() == "none: took 3.00 ms longer than a + b - launch"
    # a band past MAX_HIDDEN_BAND (read 164: '71% ± 249%'): the value with the cut-off
    wide = two(11e-3, iqr=6e-3).hidden_text()
    assert wide.startswith("too noisy to tell: 50% ±")
    assert wide.endswith(", a band wider than the ±50% this notebook reads a share from")
    assert two(20e-3, iqr=8e-3).hidden_text().startswith("too noisy to tell: ±")  # -175%: no value

    # the edges, on exact numbers (mutate, 2026-12-05): noises given above their 5% floors
    def exact(parts, launch, combined, iqrs):
        found = TwoParts()
        found.parts = tuple(Spread(m, q) for m, q in zip(parts, iqrs[:2], strict=True))
        found.launch, found.combined = Spread(launch, iqrs[2]), Spread(combined, iqrs[3])
        found.sum_name, found.not_a_result = "a + b - launch", lambda: ""
        return found.hidden_text()

    quarters = (0.25, 0.5, 0.25, 1.0)  # (0.25 + 0.5 + 0.25 + 1.0) / 4: a band of 50% exactly
    assert exact((4.0, 10.0), 1.0, 11.0, quarters) == "none measurable (±50%)"  # at the cut-off
    ones = (1.0, 1.0, 1.0, 1.0)  # a band of 100%
    assert exact((4.0, 10.0), 1.0, 13.0, ones).startswith("too noisy to tell: 0% ±100%")
    assert exact((4.0, 10.0), 1.0, 9.0, ones).startswith("too noisy to tell: 100% ±100%")
    assert exact((4.0, 10.0), 1.0, 7.0, ones).startswith("too noisy to tell: ±100%")  # 150%
    tenths = (0.5, 0.5, 0.5, 1.5)  # 3.0 / 10: a band of 30%
    assert exact((10.0, 10.0), 1.0, 22.0, tenths) == "none measurable (±30%)"  # -30%: its edge
    assert exact((10.0, 10.0), 1.0, 16.0, tenths) == "none measurable (±30%)"  # +30%: its edge


def test_a_model_holds_only_where_the_run_could_have_told_it_from_no_gain():
    from d2lhelpers.core.verdicts import model_test

    quiet = Measurement("m", [1.0] * 5)  # noise: the 5% floor
    assert model_test(quiet, 1.0, alternative=2.0) == "held"
    assert model_test(quiet, 1.5, alternative=2.0) == "missed"
    wide = Measurement("m", [0.4, 0.6, 1.0, 1.6, 2.0])  # IQR 1.0 around 1.0
    assert model_test(wide, 1.0, alternative=3.0) == "noisy"  # a noisy run holds nothing
    # Quiet runs, band 0.1 (two 5% floors): an alternative 0.08 away is inside it, 0.12 is not.
    assert model_test(quiet, 1.0, alternative=1.08) == "untestable"
    assert model_test(quiet, 1.0, alternative=1.12) == "held"
    assert model_test(quiet, 1.0, alternative=1.04) == "held"  # within the floor: the same
    assert model_test(wide, 3.0, alternative=1.0) == "missed"  # but a miss beyond it is a miss
    spread = Measurement("m", [0.8, 1.0, 1.0, 1.0, 1.2])  # IQR 0: quiet, a wide-ish band
    assert model_test(spread, 1.0, alternative=3.0) == "held"
    assert model_test(quiet, 1.0, alternative=1.0) == "held"  # the model is the alternative
    # read 96: a model scaled from a noisy run (one device's step at ±48%) holds nothing either
    from d2lhelpers.core.verdicts import Spread

    assert model_test(quiet, Spread(1.0, 0.48), alternative=3.0) == "noisy yardstick"
    assert model_test(quiet, Spread(1.0, 0.09), alternative=3.0) == "held"  # within NOISY_IQR
    assert model_test(quiet, Spread(3.0, 0.48), alternative=1.0) == "missed"  # a miss still is
    # The edges, exactly: an alternative at the floor's distance is the same prediction (held);
    # one at exactly the band's distance is inside the band (untestable).
    at_floor = Measurement("m", [21.0] * 5)
    assert model_test(at_floor, 21.0, alternative=20.0) == "held"  # 1.0 = 5% of 20
    ten = Measurement("m", [10.0] * 5)
    assert model_test(ten, 10.0, alternative=11.0) == "untestable"  # 1.0 = 0.5 + 0.5


def test_a_slower_run_is_read_against_the_load_average_it_names(monkeypatch):
    from d2lhelpers.core import cache
    from d2lhelpers.core.verdicts import slower_cause

    load = [0.4]
    monkeypatch.setattr(cache.os, "getloadavg", lambda: (load[0], 0.0, 0.0))
    assert slower_cause(2) == (
        "the load average (0.4 on 2 usable CPU cores) does not show another program beyond what "
        "this run's own threads could be (it counts them too, and cannot see other tenants of a "
        "shared host), so the cause is not measured here; hypotheses: another program shared the "
        "cores, or the work did not keep the devices busy at once (too short, or the runtime's "
        "threads)"
    )
    assert slower_cause(2, beyond_serial=True) == (
        "slower even than the same work one after the other, so missing overlap cannot explain "
        "it: something slowed the work itself (contention for the cores or memory, or another "
        "program)"
    )
    load[0] = 3.5  # above 2 cores: busy, but the run's own threads count too
    assert slower_cause(2) == (
        "the load average, 3.5, was above 2 usable CPU cores (it counts the whole machine and "
        "this run's own threads): possibly another program on the cores, or the work did not "
        "keep the devices busy at once"
    )
    assert slower_cause(2, True).endswith(
        "or another program; the load average, 3.5, was above 2 usable CPU cores (it counts the "
        "whole machine and this run's own threads))"
    )
    assert slower_cause(4).startswith("the load average (3.5 on 4 usable CPU cores) does not show")

    def no_load():
        raise OSError("no load average")

    monkeypatch.setattr(cache.os, "getloadavg", no_load)
    assert slower_cause(2).startswith(
        "no load average can be read here, so the cause is not measured here; hypotheses: "
    )


def test_higher_or_lower_reads_rates_against_both_noises():
    from d2lhelpers.core.verdicts import Spread, higher_or_lower

    # 0.8 against 1.0, each at the 5% floor: band 0.04 + 0.05 = 0.09, 9% of 1.0.
    assert higher_or_lower(Spread(0.8, 0.0), Spread(1.0, 0.0), "A", "B") == (
        "A is 0.80x B: lower beyond the noise (±0.09 on the ratio: "
        "the first's ±5% x 0.80 + the second's ±5%)"
    )
    # 1.6 against 2.0: band 0.08 + 0.10 = 0.18, 9% of 2.0 (a share of the second value)
    assert higher_or_lower(Spread(1.6, 0.0), Spread(2.0, 0.0), "A", "B") == (
        "A is 0.80x B: lower beyond the noise (±0.09 on the ratio: "
        "the first's ±5% x 0.80 + the second's ±5%)"
    )
    assert higher_or_lower(Spread(1.2, 0.0), 1.0, "A", "B") == (
        "A is 1.20x B: higher beyond the noise (±0.11 on the ratio: "
        "the first's ±5% x 1.20 + the second's ±5%)"
    )
    assert higher_or_lower(Spread(1.05, 0.2), 1.0, "A", "B") == (
        "A is 1.05x B: no measurable difference, within the noise (±0.25 on the ratio: "
        "the first's ±19% x "
        "1.05 + the second's ±5%)"
    )
    assert higher_or_lower(0.0, 0.0, "A", "B") == "A is 0 against B of 0: no measurable difference"
    # read 60: 0.58x beside ±42% put 1.00 on the band's edge; one more digit shows the side
    # (0.577 against 1.0: band 0.02885 + 0.39115 = 0.42, gap 0.423: beyond it)
    assert higher_or_lower(Spread(0.577, 0.0), Spread(1.0, 0.39115), "A", "B") == (
        "A is 0.577x B: lower beyond the noise (±0.420 on the ratio: the first's ±5% x 0.577 + the "
        "second's ±39%)"
    )
    assert higher_or_lower(Spread(0.583, 0.0), Spread(1.0, 0.39115), "A", "B") == (
        "A is 0.58x B: no measurable difference, within the noise (±0.42 on the ratio: "
        "the first's ±5% x "
        "0.58 + the second's ±39%)"
    )  # gap 0.417 inside 0.42: on the edge at two digits is inside, so two digits say it
    assert higher_or_lower(Spread(3.0, 0.0), 0.0, "A", "B") == "A is 3 against B of 0: higher"
    # A spread scales with its value (a rate per device, times the devices).
    assert Spread(2.0, 0.5).scaled(3) == Spread(6.0, 1.5)
    assert Spread(2.0, 0.5).scaled(-1) == Spread(-2.0, 0.5)  # an IQR stays a width


def test_the_edges_of_the_digit_and_noise_rules():
    from d2lhelpers.core.verdicts import (
        Spread,
        agreeing_digits,
        higher_or_lower,
        how_below_ideal,
        noisy_warning,
    )

    # a zero first value: its noise is printed as a share of the second, not of itself
    assert higher_or_lower(Spread(0.0, 0.1), Spread(2.0, 0.0), "A", "B") == (
        "A is 0.00x B: lower beyond the noise (±0.10 on the ratio: "
        "the first's 5% of the second + the "
        "second's ±5%)"
    )
    assert how_below_ideal(0.95, 1.0) is None  # exactly at the floor: not below it
    assert how_below_ideal(0.9499, 1.0) == "beyond"
    assert agreeing_digits(0.89531, 0.104683, True) == 5  # 0.8953x ± 0.1047 does not show it
    assert agreeing_digits(0.8953, 0.1046, True) == 4 and agreeing_digits(0.8, 0.1, True) == 2
    assert agreeing_digits(1.0000499, 5e-05, True) == 6  # at the band's edge: the most decimals
    assert agreeing_digits(0.8953101, 0.1046898, True) == 6  # only a 7th shows it: 6, the most
    assert noisy_warning(Spread(0.0, 1.0)) is None  # no share of a zero median


def test_agreeing_within_the_noise_shares_a_yardstick_only_when_no_run_is_noisy():
    calm = [Measurement("a", [1.0] * 5), Measurement("b", [1.02] * 5)]
    assert agree_within_noise("they", calm, "both share one yardstick") == (
        "they agree within their noise, so both share one yardstick"
    )
    wide = [calm[0], Measurement("b", [0.5, 0.7, 1.0, 1.4, 1.6])]  # IQR 70% of its median
    assert agree_within_noise("they", wide, "both share one yardstick") == (
        "they agree within their noise, but a run among them spread by more than 10% of its "
        "median: too noisy to tell whether both share one yardstick"
    )


def test_two_runs_are_read_part_by_part_against_both_noises():
    def m(seconds, spread=0.0):
        return Measurement("x", [seconds * (1 + spread * k) for k in (-1, -0.5, 0, 0.5, 1)])

    same = parts_between_runs([("a", m(0.010), m(0.0102)), ("b", m(0.020), m(0.0199))], "x")
    assert same.startswith("a: 10.00 ms ±5% (floor) here, 10.20 ms ±5% (floor) in the other run")
    assert same.endswith("the parts agree within their noise, so x")
    moved = parts_between_runs([("a", m(0.010), m(0.0102)), ("b", m(0.020), m(0.012))], "x")
    assert (
        "b: 20.00 ms ±5% (floor) here, 12.00 ms ±5% (floor) in the other run: 1.67x, "
        "beyond both noises (1.60 ms)" in moved
    )
    assert moved == (  # the whole sentence, parts joined by '; ' (mutation: wording unpinned)
        "a: 10.00 ms ±5% (floor) here, 10.20 ms ±5% (floor) in the other run: within both "
        "noises; b: 20.00 ms ±5% (floor) here, 12.00 ms ±5% (floor) in the other run: 1.67x, "
        "beyond both noises (1.60 ms); a part moved between the runs beyond both noises (the "
        "machine's speed or load changed: a hypothesis, not measured), so each run's verdict "
        "holds against its own parts, and neither run alone is the result"
    )
    rates = parts_between_runs(
        [("c", m(2.0), m(1.0))], "x", other="the sweep", show=lambda v, e=0: f"{v:.1f} s", holds="y"
    )
    assert rates == (
        "c: 2.0 s ±5% (floor) here, 1.0 s ±5% (floor) in the sweep: 2.00x, beyond both noises "
        "(0.2 s); a part moved between the runs beyond both noises (the machine's speed or load "
        "changed: a hypothesis, not measured), so y"
    )
    noisy = parts_between_runs([("a", m(0.010, 0.4), m(0.0102))], "x")  # IQR 40%: too noisy
    assert "too noisy to tell whether x" in noisy
    # read 155: '3.3 ktok/s ±5% (floor)' and '3.7 ktok/s ±5%' read beyond both noises from
    # their digits beside 'within both noises': a decimal more where the digits need it
    here, sweep = Spread(3339.0, 0.04 * 3339), Spread(3704.0, 0.054 * 3704)
    tokens = parts_between_runs(
        [("pipeline", here, sweep)], "x", show=lambda v, e=0: format_rate(v, "tok/s", 1 + e)
    )
    assert tokens.startswith(
        "pipeline: 3.34 ktok/s ±5.0% (floor) here, 3.70 ktok/s ±5.4% in the other run: within "
        "both noises"
    )
    # the same for times below a second, in format_seconds' own units
    times = parts_between_runs(
        [("step", Spread(3.339e-3, 0.04 * 3.339e-3), Spread(3.704e-3, 0.054 * 3.704e-3))], "x"
    )
    assert times.startswith("step: 3.339 ms ±5.0% (floor) here, 3.704 ms ±5.4% in the other run")
    # a part at 0 prints its spread, not a ± to read back: its usual digits
    gone = parts_between_runs([("z", Spread(1e-3, 5e-5), Spread(0.0, 0.0))], "x")
    assert "in the other run: beyond both noises (50.0 µs)" in gone  # no ratio to a 0
    zero = parts_between_runs([("z", Spread(0.0, 0.0), Spread(1e-3, 5e-5))], "x")
    assert zero.startswith("z: 0.0 µs (median 0, IQR 0) here, 1.00 ms ±5% in the other run")
    zero = parts_between_runs([("z", Spread(1e-3, 5e-5), Spread(0.0, 0.0))], "x")
    assert zero.startswith("z: 1.00 ms ±5% here, 0.0 µs (median 0, IQR 0) in the other run")


def test_a_comparison_is_rebuilt_from_its_printed_digits():
    from d2lhelpers.core.verdicts import printed_comparison

    # 100 ±5% against 110.5 ±5%: 10.5 apart, 5 + 5.525 allowed: within
    within = printed_comparison((100.0, "±5%"), (110.5, "±5.0% (floor)"))
    assert within.noise == pytest.approx(10.525) and not within.measurable
    assert printed_comparison((100.0, "±5%"), (111.0, "±5%")).measurable


def test_two_rates_get_the_digits_that_show_their_verdict():
    from d2lhelpers.core.verdicts import rates_as_judged

    # Read 116: 3.2 ktok/s ±5% 'within both noises' of 2.8 ktok/s ±8%, though from those
    # digits 3.2 x 0.95 = 3.04 > 2.8 x 1.08 = 3.02 reads beyond them.
    bound = SimpleNamespace(median=2820.0, iqr=0.076 * 2820)
    within = SimpleNamespace(median=3170.0, iqr=10.0)
    assert not compare(within, bound).measurable
    assert rates_as_judged(within, bound, "tok/s") == ("3.17 ktok/s ±5% (floor)", "2.82 ktok/s ±8%")
    beyond = SimpleNamespace(median=3250.0, iqr=10.0)
    assert compare(beyond, bound).measurable
    assert rates_as_judged(beyond, bound, "tok/s") == ("3.2 ktok/s ±5% (floor)", "2.8 ktok/s ±8%")
    # Read 116's rule at its last resort: a gap this close to the summed bands reads the other
    # way at 2 and 3 decimals, so 4 are printed.
    close = SimpleNamespace(median=1361.7665502230002, iqr=0.0)
    below = SimpleNamespace(median=1232.3263005989436, iqr=0.0)
    assert rates_as_judged(close, below, "tok/s") == (
        "1.3618 ktok/s ±5% (floor)",
        "1.2323 ktok/s ±5% (floor)",
    )
    # Different prefixes stay as `format_rate` prints them where those digits read as judged.
    assert rates_as_judged(
        SimpleNamespace(median=1050.0, iqr=0.0), SimpleNamespace(median=999.0, iqr=0.0), "tok/s"
    ) == ("1.1 ktok/s ±5% (floor)", "999.0 tok/s ±5% (floor)")
    # read 159: '4.1410 ktok/s' and '±6%' beside '3.7076 ktok/s ±5%' read within; the noises'
    # digits decided it, so they get decimals too
    value = SimpleNamespace(median=4141.0, iqr=0.0596 * 4141)
    reach = SimpleNamespace(median=3707.6, iqr=0.0)
    assert compare(value, reach).measurable
    assert rates_as_judged(value, reach, "tok/s") == (
        "4.141 ktok/s ±5.96%",
        "3.708 ktok/s ±5.00% (floor)",
    )
    # read 160: two different rates are never printed as one ('3.4 ktok/s above 3.4 ktok/s')
    near = rates_as_judged(
        SimpleNamespace(median=3440.0, iqr=0.0),
        reach_34 := SimpleNamespace(median=3420.0, iqr=0.0),
        "tok/s",
    )
    assert near == ("3.44 ktok/s ±5% (floor)", "3.42 ktok/s ±5% (floor)")
    assert rates_as_judged(reach_34, reach_34, "tok/s")[0] == "3.4 ktok/s ±5% (floor)"
    # where the rates' usual digits do and only the noises' need one more
    noisy = SimpleNamespace(median=4091.0, iqr=0.0751 * 4091)
    assert compare(noisy, SimpleNamespace(median=3600.0, iqr=0.0)).measurable  # 7.5% decides
    assert rates_as_judged(noisy, SimpleNamespace(median=3600.0, iqr=0.0), "tok/s") == (
        "4.1 ktok/s ±7.5%",
        "3.6 ktok/s ±5.0% (floor)",
    )
