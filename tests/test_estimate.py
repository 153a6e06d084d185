"""timing.estimate: an estimate follows measure's own rules, checked on a fake clock."""

import pytest

from d2lhelpers.timing import stopping
from d2lhelpers.timing.benchmark import measure
from d2lhelpers.timing.estimate import TRACE_OP_S, call_seconds, measure_seconds, trace_seconds

OPTIONS = [{}, {"min_runs": 3, "max_runs": 5, "budget_s": 0.2}, {"budget_s": 1.0, "max_runs": 30}]


@pytest.mark.parametrize("call_s", [1e-4, 3e-3, 0.05, 0.4, 1.5])
@pytest.mark.parametrize("options", OPTIONS)
def test_the_estimate_is_the_time_measure_takes_when_its_runs_agree(call_s, options):
    now = [0.0]

    def run():  # every call takes exactly call_s, so every block's spread is 0
        now[0] += call_s

    measure(run, clock=lambda: now[0], sync=lambda: None, **options)
    assert measure_seconds(call_s, **options) == pytest.approx(now[0])


def test_call_seconds():
    assert call_seconds(2e9, 1e9) == 2.0
    with pytest.raises(ValueError, match="rate must be > 0"):
        call_seconds(1, 0)


def test_tracing_grows_with_the_ops_in_the_graph():
    assert trace_seconds(1) == pytest.approx(11 * TRACE_OP_S)  # a few ms for one op
    assert trace_seconds(400) - trace_seconds(100) == pytest.approx(300 * TRACE_OP_S)


def test_a_measure_that_does_not_settle_runs_to_its_cap_and_the_next_estimate_expects_it():
    now, calls = [0.0], [0]

    def run():  # alternate 1 ms and 2 ms calls: the spread never falls to 10%
        calls[0] += 1
        now[0] += 1e-3 if calls[0] % 2 else 2e-3

    options = {"min_runs": 3, "max_runs": 8, "budget_s": 10.0, "number": 1, "warmup": 0}
    assert stopping.share_past_fewest() == 0.0  # a quiet machine's, before any measure
    quiet = measure_seconds(1.5e-3, **options)
    m = measure(run, clock=lambda: now[0], sync=lambda: None, **options)
    assert len(m.times) == 8  # ran to max_runs
    assert stopping.share_past_fewest() == 1.0
    assert measure_seconds(1.5e-3, **options) == pytest.approx(8 / 3 * quiet)
    assert measure_seconds(1.5e-3, share=0, **options) == pytest.approx(quiet)


def test_the_record_is_the_mean_stop_between_fewest_and_cap():
    assert stopping.run_counts(0.01, 5, 50, 2.0) == (5, 50)
    assert stopping.run_counts(0.01, 5, 50, 0.1) == (5, 11)  # the first block past 0.1 s
    assert stopping.run_counts(1.0, 5, 50, 0.5) == (3, 3)  # the budget stops it at 3
    assert stopping.run_counts(0.0, 5, 50, 2.0) == (5, 50)  # a clock that never moved
    stopping.record(3, 3, 3)  # a measure with no choice says nothing
    assert stopping.share_past_fewest() == 0.0
    stopping.record(5, 5, 50)
    stopping.record(50, 5, 50)
    stopping.record(10, 3, 17)
    assert stopping.share_past_fewest() == pytest.approx((0 + 1 + 0.5) / 3)
    assert stopping.expected_runs(5, 50) == pytest.approx(5 + 0.5 * 45)
    stopping.forget()
    assert stopping.expected_runs(5, 50) == 5
    m = measure(lambda: None, clock=lambda: 0.0, sync=lambda: None, number=1, min_runs=3)
    assert m.times == [0.0] * 3  # recorded without dividing by its zero block
