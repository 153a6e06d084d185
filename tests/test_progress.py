"""core.progress: the steps of a run, reported as progress(done, total, status)."""

from d2lhelpers.core.progress import Steps
from tests.conftest import FakeClock


def test_steps_report_each_measurement_and_throttle_repeats():
    calls = []
    clock = FakeClock(0.0, 0.1, 0.2, 0.7, 0.8, 0.9, 1.0)
    steps = Steps(lambda *a: calls.append(a), 2, clock=clock)
    on_repeat = steps.start("one device")  # t=0: always reported
    on_repeat(1)  # t=0.1: too soon
    on_repeat(2)  # t=0.2: too soon
    on_repeat(3)  # t=0.7: reported
    steps.finish("one device")  # t=0.8: always reported
    steps.start("two devices")  # t=0.9
    steps.finish("two devices")  # t=1.0: the last one
    assert calls == [
        (0, 2, "measuring one device (step 1 of 2)"),
        (0, 2, "measuring one device (step 1 of 2), repeat 3"),
        (1, 2, "done: one device"),
        (1, 2, "measuring two devices (step 2 of 2)"),
        (2, 2, "finished"),
    ]


def test_steps_without_a_listener_call_nothing():
    steps = Steps(None, 1)
    steps.start("nothing")(1)
    steps.say("still nothing")
    steps.finish("nothing")
    assert steps.done == 1
