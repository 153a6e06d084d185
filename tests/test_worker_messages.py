"""A worker group's message loop, without processes: events in, states and waits out."""

import collections
import queue

import pytest

from d2lhelpers.processes.failures import WorkerError, WorkerState, WorkerTimeout
from d2lhelpers.processes.messages import WorkerMessages


class _Running:
    pid, returncode = 42, None

    def poll(self):
        return None

    def wait(self, timeout=None):
        return None


class _Joined:
    def join(self, timeout=None):
        pass


class _Loop(WorkerMessages):
    """The state a WorkerGroup owns, with events put in by the test instead of reader threads."""

    def __init__(self, count):
        self.count, self.watch, self.watched = count, None, 0
        self._workers = [
            WorkerState(i, 5000 + i, _Running(), collections.deque(), [_Joined(), _Joined()])
            for i in range(count)
        ]
        self._events, self._unheard_progress = queue.Queue(), collections.deque()

    def say(self, index, kind, payload=None):
        self._events.put((index, kind, payload))


def test_states_follow_the_messages():
    loop = _Loop(2)
    assert loop.states == ["starting", "starting"]
    loop.say(0, "ready", {"port": 5000})
    loop.check_alive()
    assert loop.states == ["ready", "starting"] and loop.ready_info == [{"port": 5000}, None]
    loop.say(1, "ready")
    loop.say(1, "result", 7)
    loop.check_alive()
    assert loop.states == ["ready", "done"]


def test_results_hand_on_progress_that_came_while_nobody_listened():
    loop = _Loop(1)
    loop.say(0, "ready")
    loop.say(0, "progress", {"step": 1})
    loop.check_alive()  # nobody listens: kept
    loop.say(0, "progress", {"step": 2})
    loop.say(0, "result", "done")
    heard = []
    assert loop.results(1.0, on_progress=lambda i, info: heard.append(info["step"])) == ["done"]
    assert heard == [1, 2] and loop.latest_progress == [{"step": 2}]


def test_wait_for_progress_until_a_condition_and_watch_is_called():
    loop = _Loop(2)
    calls = []
    loop.watch = lambda group: calls.append(group.states)
    for step in (1, 2, 3):
        loop.say(0, "progress", {"step": step})
        loop.say(1, "progress", {"step": step})
    latest = loop.wait_for_progress(1.0, until=lambda i, info: info["step"] >= 3)
    assert latest == [{"step": 3}, {"step": 3}]
    with pytest.raises(WorkerTimeout, match="report the progress waited for"):
        loop.wait_for_progress(0.3, until=lambda i, info: info["step"] >= 4)
    assert calls  # watched while waiting


def test_an_error_message_is_raised_naming_the_worker():
    loop = _Loop(1)
    loop.say(0, "ready")
    loop.say(0, "error", {"text": "ValueError: no", "port_in_use": False})
    with pytest.raises(WorkerError, match="worker 0 of 1 .pid 42, port 5000. reported an error"):
        loop.results(2.0)
