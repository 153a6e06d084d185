"""timing.estimate: an estimate follows measure's own rules, checked on a fake clock."""

import pytest

from d2lhelpers.timing.benchmark import measure
from d2lhelpers.timing.estimate import TRACE_OP_S, call_seconds, measure_seconds, trace_seconds

OPTIONS = [{}, {"min_runs": 3, "max_runs": 5, "budget_s": 0.2}, {"budget_s": 1.0, "max_runs": 30}]


@pytest.mark.parametrize("call_s", [1e-4, 3e-3, 0.05, 0.4, 1.5])
@pytest.mark.parametrize("options", OPTIONS)
def test_the_estimate_is_the_time_measure_takes_on_a_quiet_machine(call_s, options):
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
