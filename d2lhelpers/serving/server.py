"""Serving requests with continuous batching: a load generator, a load balancer and a server loop.

Requests arrive open-loop (Poisson: the next arrival does not wait for the server), queue, and
join the batch between decoding steps whenever a slot is free; a finished request leaves at once
(iteration-level batching, as in Orca and vLLM). Each step advances every busy slot by one token:
first the prompt's tokens (prefill, one per step here; real engines prefill a prompt in one pass),
then one generated token per step. Times are real: the server runs against `clock`.

The load balancer sends a queued request to the group with the fewest busy slots (least loaded).
A failure removes one device: a replica's requests are re-routed to the survivors (started again;
none lost), while a tensor-parallel or pipeline group, which needs every device, fails its
in-flight requests and serves nothing after.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np

from d2lhelpers.serving.decoder import Layout

PROGRESS_PERIOD_S = 0.5


@dataclasses.dataclass
class Request:
    """One request: its arrival and prompt, and what the server made of it (times from start)."""

    id: int
    arrival_s: float
    prompt: list[int]
    n_out: int
    started_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    tokens: list[int] = dataclasses.field(default_factory=list)
    failed: bool = False
    rerouted: int = 0

    @property
    def done(self) -> bool:
        return self.finished_s is not None and not self.failed

    @property
    def ttft_s(self) -> float | None:
        """Time to first token, from arrival (queueing included)."""
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def latency_s(self) -> float | None:
        return self.finished_s - self.arrival_s if self.done else None


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list[float]:
    """`n` arrival times of a Poisson process of `rate` per second (exponential gaps)."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    return [float(t) for t in np.cumsum(gaps)]


def make_requests(n: int, rate: float, prompt_len: int, n_out: int, vocab: int, seed: int = 0):
    """`n` requests with random prompts, arriving as a Poisson process of `rate` per second."""
    rng = np.random.default_rng(seed + 1)
    return [
        Request(i, t, [int(v) for v in rng.integers(0, vocab, prompt_len)], n_out)
        for i, t in enumerate(poisson_arrivals(n, rate, seed))
    ]


@dataclasses.dataclass
class ServeLog:
    """What one serving run did: the requests, the queue over time, the steps and the failure."""

    layout: str
    devices: list[str]
    slots: int
    requests: list[Request]
    wall_s: float
    steps: int
    queue: list[tuple[float, int, int]]  # (time, queued, busy slots) after each step
    failed_at_s: float | None = None
    failover_s: float = 0.0  # the pause while the survivors took over (replicas)
    timed_out: bool = False

    @property
    def tokens(self) -> int:
        return sum(len(r.tokens) for r in self.requests if r.done)

    @property
    def throughput(self) -> float:
        """Generated tokens of finished requests per second of the run."""
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


class Server:
    """Runs `layout` over a list of requests in real time; `clock` and `sleep` can be injected."""

    def __init__(self, layout: Layout, clock=time.perf_counter, sleep=time.sleep):
        self.layout, self.clock, self.sleep = layout, clock, sleep

    def serve(
        self,
        requests: list[Request],
        max_wall_s: float = 30.0,
        fail_at_s: float | None = None,
        progress: Callable[[int, int, str], None] | None = None,
    ) -> ServeLog:
        for r in requests:
            if len(r.prompt) + r.n_out - 1 > self.layout.config.max_len:
                raise ValueError(
                    f"prompt {len(r.prompt)} + output {r.n_out} tokens exceed the model's "
                    f"{self.layout.config.max_len} positions: choose a shorter output length"
                )
        state = _State(self.layout, requests)
        start, last_report = self.clock(), -math.inf
        log = ServeLog(
            self.layout.name, list(self.layout.devices), self.layout.slots, requests, 0.0, 0, []
        )
        while True:
            now = self.clock() - start
            state.arrive(now)
            if fail_at_s is not None and log.failed_at_s is None and now >= fail_at_s:
                log.failed_at_s = now
                if not state.fail_one_device(now):
                    break
                log.failover_s = self.clock() - start - now
                now = self.clock() - start
            state.admit(now)
            if now > max_wall_s:
                log.timed_out = state.unfinished() > 0
                break
            if not state.busy():
                if state.unfinished() == 0:
                    break
                wait = state.next_arrival() - now
                self.sleep(min(max(wait, 0.0), 0.01))
                continue
            state.step(self.clock() - start, self.clock, start)
            log.steps += 1
            now = self.clock() - start
            log.queue.append((now, len(state.queue), len(state.busy())))
            if progress and now - last_report >= PROGRESS_PERIOD_S:
                last_report = now
                finished = sum(r.done or r.failed for r in requests)
                progress(
                    finished,
                    len(requests),
                    f"{self.layout.name}: {finished} of "
                    f"{len(requests)} requests done, {len(state.queue)} queued, "
                    f"step {log.steps}",
                )
        log.wall_s = self.clock() - start
        state.fail_remaining(log.wall_s)
        log.layout, log.devices, log.slots = state.layout.name, state.devices0, state.slots0
        return log


class _State:
    """The server's bookkeeping: who waits, which slot holds which request, at which position."""

    def __init__(self, layout: Layout, requests: list[Request]):
        self.layout, self.devices0, self.slots0 = layout, list(layout.devices), layout.slots
        self.pending = collections.deque(sorted(requests, key=lambda r: r.arrival_s))
        self.queue: collections.deque[Request] = collections.deque()
        self.slot_request: list[Request | None] = [None] * layout.slots
        self.slot_position = [0] * layout.slots
        self.requests, self.dead = requests, False

    def arrive(self, now: float) -> None:
        while self.pending and self.pending[0].arrival_s <= now:
            self.queue.append(self.pending.popleft())

    def next_arrival(self) -> float:
        return self.pending[0].arrival_s if self.pending else math.inf

    def busy(self) -> list[int]:
        return [s for s, r in enumerate(self.slot_request) if r is not None]

    def unfinished(self) -> int:
        return sum(not (r.done or r.failed) for r in self.requests)

    def admit(self, now: float) -> None:
        """Least-loaded group first: each queued request goes where the fewest slots are busy."""
        if self.dead:
            return
        while self.queue:
            free = [
                (sum(self.slot_request[s] is not None for s in group), group)
                for group in self.layout.groups
                if any(self.slot_request[s] is None for s in group)
            ]
            if not free:
                return
            _, group = min(free, key=lambda pair: pair[0])
            slot = next(s for s in group if self.slot_request[s] is None)
            request = self.queue.popleft()
            request.started_s = now
            self.slot_request[slot], self.slot_position[slot] = request, 0

    def step(self, now: float, clock, start: float) -> None:
        slots = self.layout.slots
        tokens, positions = np.zeros(slots, np.int32), np.zeros(slots, np.int32)
        for s in self.busy():
            r, p = self.slot_request[s], self.slot_position[s]
            tokens[s] = r.prompt[p] if p < len(r.prompt) else r.tokens[p - len(r.prompt)]
            positions[s] = p
        out = self.layout.step(tokens, positions)
        t = clock() - start
        for s in self.busy():
            r, p = self.slot_request[s], self.slot_position[s]
            if p >= len(r.prompt) - 1:
                r.tokens.append(int(out[s]))
                if len(r.tokens) == 1:
                    r.first_token_s = t
                if len(r.tokens) == r.n_out:
                    r.finished_s, self.slot_request[s] = t, None
            self.slot_position[s] = p + 1

    def fail_one_device(self, now: float) -> bool:
        """Lose the last device. Replicas: re-route its requests; otherwise the group fails."""
        layout = self.layout
        if hasattr(layout, "without_last_device") and len(layout.devices) > 1:
            lost = layout.groups[-1]
            for s in lost:
                r = self.slot_request[s]
                if r is not None:  # started again on a survivor: its cache was on the lost device
                    r.tokens, r.first_token_s, r.started_s = [], None, None
                    r.rerouted += 1
                    self.queue.appendleft(r)
            keep = [s for s in range(layout.slots) if s not in set(lost)]
            self.layout = layout.without_last_device()
            self.slot_request = [self.slot_request[s] for s in keep]
            self.slot_position = [self.slot_position[s] for s in keep]
            return True
        for s in self.busy():
            self.slot_request[s].failed, self.slot_request[s].finished_s = True, now
            self.slot_request[s] = None
        self.dead = True
        return False

    def fail_remaining(self, now: float) -> None:
        """Whatever is unfinished at the end failed: refused after a failure, or out of time."""
        for r in self.requests:
            if not (r.done or r.failed):
                r.failed = True
