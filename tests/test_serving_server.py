"""The server loop (a saved cell) and the balancer with fake engines: batching, prefill in one
pass, routing to the shortest queue, a lost replica and a lost group, the steady-state window."""

import collections
import queue
import time

import numpy as np
import pytest

from d2lhelpers.core.verdicts import Spread
from d2lhelpers.serving.load import serve_load
from d2lhelpers.serving.requests import Request, make_requests, poisson_arrivals
from d2lhelpers.serving.server import admit, decode, server_loop
from d2lhelpers.serving.steady import percentile, rate_in_window

STEP_S = 0.002


class FakeEngine:
    """Next token = last token + 1; prefill gives prompt[-1] + 1; each call takes STEP_S."""

    def __init__(self, slots=2, name="fake"):
        self.slots, self.name, self.lost, self.calls, self.gaps = slots, name, False, [], []
        self.prefills, self.decodes = [], []

    def prefill(self, slot, prompt):
        time.sleep(STEP_S)
        self.prefills.append((slot, list(prompt)))
        return prompt[-1] + 1

    def decode(self, tokens, positions):
        time.sleep(STEP_S)
        self.decodes.append((np.array(tokens), np.array(positions)))
        return np.asarray(tokens) + 1


def clock():
    return time.perf_counter()


def test_admit_reads_each_prompt_in_one_call_and_decode_advances_every_busy_slot():
    engine = FakeEngine(slots=2)
    requests = [Request(i, 0.0, [5, 6, 7], n_out=3) for i in range(3)]
    waiting = collections.deque(requests)
    held = [None, None]
    assert admit(engine, waiting, held, clock) == 2  # two free slots, two first tokens
    assert engine.prefills == [(0, [5, 6, 7]), (1, [5, 6, 7])] and len(waiting) == 1
    assert decode(engine, held, clock) == 2
    tokens, positions = engine.decodes[0]
    assert list(tokens) == [8, 8] and list(positions) == [3, 3]  # the position after the prompt
    decode(engine, held, clock)
    assert held == [None, None]  # 3 tokens out: both left at once
    assert requests[0].tokens == requests[1].tokens == [8, 9, 10] and requests[2].tokens == []


def test_the_loop_serves_everything_and_returns_nothing_left():
    engine, inbox, log = FakeEngine(slots=2), queue.Queue(), []
    requests = [Request(i, 0.0, [1], n_out=4) for i in range(5)]
    for r in requests:
        inbox.put(r)
    inbox.put(None)
    left = server_loop(engine, inbox, log, clock, deadline=clock() + 5)
    assert left == [] and all(r.tokens == [2, 3, 4, 5] for r in requests)
    assert sum(made for _, made, _ in log) == 5 * 4
    assert max(waiting for _, _, waiting in log) == 3  # two slots: three waited at first


def test_a_deadline_ends_the_loop_and_hands_back_the_unfinished():
    engine, inbox = FakeEngine(slots=1), queue.Queue()
    for i in range(3):
        inbox.put(Request(i, 0.0, [1], n_out=1000))
    left = server_loop(engine, inbox, [], clock, deadline=clock() + 0.05)
    assert len(left) == 3 and not any(r.done for r in left)


def test_the_balancer_joins_the_shortest_queue():
    engines = [FakeEngine(slots=1, name="replicas") for _ in range(2)]
    requests = [Request(i, 0.001 * i, [1], n_out=5) for i in range(4)]
    log = serve_load(engines, requests, server_loop, drain_s=2.0)
    assert all(r.done for r in requests)
    served = [len(e.prefills) for e in engines]
    assert served == [2, 2]  # alternating: each arrival went to the emptier server
    assert log.servers == 2


def test_a_lost_replica_restarts_only_its_requests_on_the_survivor():
    engines = [FakeEngine(slots=2, name="replicas") for _ in range(2)]
    requests = [Request(i, 0.0, [1], n_out=30) for i in range(4)]
    log = serve_load(engines, requests, server_loop, drain_s=3.0, fail_at_s=0.0)
    assert all(r.done and r.tokens == list(range(2, 32)) for r in requests)
    assert sum(r.restarted for r in requests) == 2  # the lost replica's two
    assert log.rebuild_s == 0.0 and log.failed_at_s is not None


def test_a_lost_group_restarts_everything_on_its_rebuilt_engines():
    rebuilt = []

    def rebuild():
        time.sleep(0.02)
        rebuilt.append(FakeEngine(slots=2, name="group"))
        return rebuilt

    requests = [Request(i, 0.0, [1], n_out=30) for i in range(2)]
    log = serve_load([FakeEngine(2, "group")], requests, server_loop, 3.0, 0.0, rebuild)
    assert all(r.done and r.restarted == 1 for r in requests)
    assert log.rebuild_s >= 0.02 and len(rebuilt[0].prefills) == 2


def test_one_seed_gives_one_draw_of_gaps_rescaled_to_each_load():
    """Notebook 07's sweep: the same seed at every load, so the arrivals at twice the rate are
    the same draw at half the gaps, not an independent draw."""
    slow, fast = poisson_arrivals(50.0, 2.0, seed=0), poisson_arrivals(100.0, 2.0, seed=0)
    common = min(len(slow), len(fast))
    assert common > 50
    assert fast[:common] == pytest.approx([t / 2 for t in slow[:common]])
    assert poisson_arrivals(100.0, 2.0, seed=1)[:10] != pytest.approx(fast[:10])


def test_poisson_arrivals_are_reproducible_and_have_the_asked_rate():
    times = poisson_arrivals(50.0, 80.0, seed=3)
    assert times == poisson_arrivals(50.0, 80.0, seed=3)
    assert all(b > a for a, b in zip(times, times[1:], strict=False)) and times[-1] < 80
    assert len(times) / 80 == pytest.approx(50.0, rel=0.05)
    requests = make_requests(10.0, 1.0, prompt_len=4, n_out=2, vocab=9)
    assert all(len(r.prompt) == 4 and all(0 <= t < 9 for t in r.prompt) for r in requests)


def test_a_rate_in_a_window_leaves_out_what_is_outside_it():
    events = [(t / 100, 2) for t in range(100)]  # 2 per 10 ms over 1 s: 200/s
    inside = rate_in_window(events + [(-0.5, 1000), (1.5, 1000)], 0.2, 0.6)
    assert inside.median == pytest.approx(200, rel=0.15) and inside.iqr < 60


def test_percentiles_say_how_many_and_when_there_are_too_few():
    values = list(np.linspace(0.001, 0.1, 1000))
    p50 = percentile(values, 50)
    assert p50.n == 1000 and p50.low < p50.value < p50.high
    assert p50.low == pytest.approx(0.0475, abs=0.004) and p50.high == pytest.approx(
        0.0535, abs=0.004
    )
    few = percentile(values[:50], 99)
    assert not few.enough and few.value == values[49] and "max" in str(few) and "of 50" in str(few)
    unfinished = percentile([0.01, float("inf"), float("inf")], 50)
    assert "unfinished" in str(unfinished)


def test_a_spread_scales_with_its_noise():
    assert Spread(3, 2).scaled(2) == Spread(6, 4) and Spread(3, 2).scaled(-1) == Spread(-3, 2)
