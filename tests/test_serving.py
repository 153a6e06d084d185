"""The server loop with a fake model and a fake clock: batching, balancing, failures, timing."""

import numpy as np
import pytest

from d2lhelpers.serving.decoder import ModelConfig
from d2lhelpers.serving.server import Request, Server, make_requests, poisson_arrivals

STEP_S = 0.01


class TickingClock:
    """Time moves only when the fake model steps (STEP_S a step) or the server sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += max(seconds, 1e-4)


class FakeLayout:
    """Next token = input token + 1; `groups` of slots; records which slots were busy."""

    name = "fake"

    def __init__(self, clock, groups=2, per_group=2, max_len=32):
        self.clock, self.per_group, self.n_groups = clock, per_group, groups
        self.config = ModelConfig(vocab=1000, width=8, heads=1, layers=1, max_len=max_len)
        self.devices = [f"/device:CPU:{i}" for i in range(groups)]
        self.busy_per_step = []

    @property
    def slots(self):
        return self.per_group * self.n_groups

    @property
    def groups(self):
        return [
            list(range(g * self.per_group, (g + 1) * self.per_group)) for g in range(self.n_groups)
        ]

    def step(self, tokens, positions):
        self.clock.now += STEP_S
        return (np.asarray(tokens) + 1) % 1000


class FakeReplicas(FakeLayout):
    name = "replicas"

    def without_last_device(self):
        survivors = FakeReplicas(self.clock, self.n_groups - 1, self.per_group)
        return survivors


def serve(layout, requests, **kw):
    return Server(layout, clock=layout.clock, sleep=layout.clock.sleep).serve(requests, **kw)


def test_tokens_follow_the_prompt_and_times_add_up():
    clock = TickingClock()
    request = Request(0, 0.0, [5, 6, 7], n_out=4)
    log = serve(FakeLayout(clock, groups=1, per_group=1), [request])
    assert request.tokens == [8, 9, 10, 11]
    # 3 prompt positions (the last one yields token 1), then 3 more steps: 6 steps
    assert log.steps == 6
    assert request.ttft_s == pytest.approx(3 * STEP_S)
    assert request.latency_s == pytest.approx(6 * STEP_S)
    assert log.throughput == pytest.approx(4 / log.wall_s)


def test_requests_join_and_leave_between_steps():
    clock = TickingClock()
    long = Request(0, 0.0, [1], n_out=10)
    late = Request(1, 0.025, [1], n_out=2)
    log = serve(FakeLayout(clock, groups=1, per_group=2), [long, late])
    assert late.started_s == pytest.approx(0.03)  # admitted at the first step after it arrived
    assert late.finished_s < long.finished_s  # left while the long one kept decoding
    assert max(busy for _, _, busy in log.queue) == 2


def test_a_full_server_queues_and_the_balancer_picks_the_least_loaded():
    clock = TickingClock()
    layout = FakeLayout(clock, groups=2, per_group=2)
    requests = [Request(i, 0.0, [1], n_out=3) for i in range(6)]
    log = serve(layout, requests)
    assert max(q for _, q, _ in log.queue) == 2  # 4 slots busy, 2 wait
    starts = sorted(r.started_s for r in requests)
    assert starts[:4] == [0.0] * 4 and starts[4] > 0
    assert all(r.done for r in requests)


def test_a_replica_lost_reroutes_and_loses_nothing():
    clock = TickingClock()
    layout = FakeReplicas(clock, groups=2, per_group=1)
    requests = [Request(i, 0.0, [1, 2], n_out=5) for i in range(2)]
    log = serve(layout, requests, fail_at_s=0.025)
    assert all(r.done for r in requests)
    assert sum(r.rerouted for r in requests) == 1
    assert all(r.tokens == [3, 4, 5, 6, 7] for r in requests)
    assert log.failed_at_s == pytest.approx(0.03)


def test_a_lost_group_fails_in_flight_and_refuses_the_rest():
    clock = TickingClock()
    requests = [Request(0, 0.0, [1], n_out=20), Request(1, 5.0, [1], n_out=2)]
    serve(FakeLayout(clock, groups=1, per_group=1), requests, fail_at_s=0.05)
    assert requests[0].failed and requests[0].finished_s is not None
    assert requests[1].failed and requests[1].started_s is None


def test_too_long_a_request_is_refused_before_serving():
    clock = TickingClock()
    with pytest.raises(ValueError, match="output length"):
        serve(FakeLayout(clock, max_len=4), [Request(0, 0.0, [1, 2, 3], n_out=3)])
    assert clock.now == 0.0


def test_poisson_arrivals_are_reproducible_and_have_the_asked_rate():
    times = poisson_arrivals(4000, rate=50.0, seed=3)
    assert times == poisson_arrivals(4000, rate=50.0, seed=3)
    assert all(b > a for a, b in zip(times, times[1:], strict=False))
    assert len(times) / times[-1] == pytest.approx(50.0, rel=0.05)
    requests = make_requests(3, 10.0, prompt_len=4, n_out=2, vocab=9)
    assert [len(r.prompt) for r in requests] == [4, 4, 4]
    assert all(0 <= t < 9 for r in requests for t in r.prompt)
