"""A training worker's steps: a count, or the failure demo's time window with its kill."""

import io
import json
import signal

import pytest

from d2lhelpers.processes import schedule as schedule_module
from d2lhelpers.processes.schedule import StepSchedule
from d2lhelpers.processes.worker_main import WorkerContext


def _context(args, index=0):
    stream = io.StringIO()
    return WorkerContext(index, [1], args, stream), stream


def _messages(stream):
    return [json.loads(line)["progress"] for line in stream.getvalue().splitlines()]


def test_a_count_of_steps_after_the_warmup_with_about_ten_reports():
    context, stream = _context({"steps": 20, "warmup": 2})
    schedule = StepSchedule(context)
    for step in schedule:
        schedule.record(step, loss=1.0 / (step + 1), seconds=0.01 * step)
    result = schedule.result()
    assert len(result["losses"]) == 22 and result["step_s"] == [0.01 * s for s in range(2, 22)]
    assert [m["step"] for m in _messages(stream)] == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22]


def test_a_window_starts_at_the_parents_time_and_its_victim_dies_on_time(tmp_path, monkeypatch):
    now = [100.0]  # a fake monotonic clock; sleeping moves it

    def sleep(seconds):
        now[0] += seconds

    killed = []
    monkeypatch.setattr(schedule_module.time, "sleep", sleep)
    monkeypatch.setattr(schedule_module.os, "kill", lambda pid, sig: killed.append((now[0], sig)))
    start_file = tmp_path / "start"
    start_file.write_text("101.0")
    args = {"warmup": 1, "window_s": 1.0, "start_file": str(start_file), "start_timeout_s": 5}
    args |= {"kill_index": 0, "kill_after_s": 0.3}
    context, stream = _context(args)
    schedule = StepSchedule(context, clock=lambda: now[0])
    steps = []
    for step in schedule:
        steps.append(step)
        now[0] += 0.125  # each step takes 1/8 s (exact in binary: no rounding at the window's end)
        schedule.record(step, 1.0, 0.125)
        if killed:
            break
    first, *rest = _messages(stream)
    assert first["warm"] and first["step"] == 1  # said before the window, after the warm-up
    assert rest[0]["at"] == 101.125 and rest[0]["elapsed_s"] == 0.125
    assert killed == [(101.375, signal.SIGKILL)]  # right after the first step past 0.3 s
    survivor, stream = _context({**args, "kill_index": 1})
    now[0] = 100.0
    schedule = StepSchedule(survivor, clock=lambda: now[0])
    count = 0
    for step in schedule:
        now[0] += 0.125
        schedule.record(step, 1.0, 0.125)
        count += 1
    assert count == 1 + 8 and now[0] == 102.0  # the warm-up, then 1 s of steps from the start
    assert len(killed) == 1


def test_no_start_file_in_time_is_an_error(tmp_path):
    args = {"warmup": 0, "window_s": 1.0, "start_file": str(tmp_path / "never")}
    context, _ = _context({**args, "start_timeout_s": 0.05})
    with pytest.raises(TimeoutError, match="start file"):
        list(StepSchedule(context))
