"""A timed load on a layout's servers: the load balancer routes each request as it arrives.

Each engine has its own server loop in its own thread (`ServingCode.server_loop`) with its own
inbox; this thread is the balancer. It sleeps until each request's arrival time (generated in
advance: open loop), then routes it to the server with the fewest outstanding requests (queued or
in flight: join the shortest queue). A device lost mid-run stops the servers that used it; their
unfinished requests start again from their prompts (their KV cache is gone): on the surviving
replicas, or, for a group, on the group rebuilt on the surviving devices (`rebuild`).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable

from d2lhelpers.core.progress import REPORT_EVERY_S, no_progress
from d2lhelpers.serving.engines import Engine
from d2lhelpers.serving.requests import Request


@dataclasses.dataclass
class LoadLog:
    """What one timed load did: its requests, each server's passes, and a failure if any."""

    layout: str
    requests: list[Request]
    passes: list[tuple[float, int, int]]  # (time, tokens made, waiting) of every server's passes
    engine_calls: list[tuple[float, float, str]]  # (end, seconds, kind) of every engine call
    servers: int
    wall_s: float
    failed_at_s: float | None = None
    rebuild_s: float = 0.0  # re-placing the weights and building, warming new tf.functions
    # (end, seconds, seconds its thread ran, server) of every gap between one engine's calls
    engine_gaps: list[tuple[float, float, float, int]] = dataclasses.field(default_factory=list)


class _Servers:
    """The running servers: an inbox, a log and a thread each, and what each has outstanding."""

    def __init__(self, loop: Callable, clock: Callable[[], float], deadline: float):
        self.loop, self.clock, self.deadline = loop, clock, deadline
        self.engines, self.inboxes, self.threads, self.open = [], [], [], []
        self.logs: list[list] = []
        self.left: dict[int, list[Request]] = {}

    def start(self, engine: Engine) -> None:
        i, inbox, log = len(self.engines), queue.Queue(), []

        def run():
            self.left[i] = self.loop(engine, inbox, log, self.clock, self.deadline)

        thread = threading.Thread(target=run, name=f"server {i}: {engine.name}", daemon=True)
        self.engines.append(engine)
        self.inboxes.append(inbox)
        self.logs.append(log)
        self.threads.append(thread)
        self.open.append([])
        thread.start()

    def alive(self) -> list[int]:
        return [i for i, e in enumerate(self.engines) if not e.lost]

    def route(self, request: Request) -> None:
        """Join the shortest queue: the live server with the fewest unfinished requests."""
        for i in self.alive():
            self.open[i] = [r for r in self.open[i] if not r.done]
        i = min(self.alive(), key=lambda k: len(self.open[k]))
        self.open[i].append(request)
        request.server = i
        self.inboxes[i].put(request)

    def lose(self, indices: list[int]) -> list[Request]:
        """Stop these servers; their unfinished requests, to start again elsewhere."""
        for i in indices:
            self.engines[i].lost = True
        orphans = []
        for i in indices:
            self.threads[i].join()
            orphans += self.left.get(i, [])
            while not self.inboxes[i].empty():
                item = self.inboxes[i].get_nowait()
                if item is not None:
                    orphans.append(item)
        for r in orphans:
            r.restart()
        return sorted(orphans, key=lambda r: r.arrival_s)

    def close(self) -> None:
        for i in self.alive():
            self.inboxes[i].put(None)
        for i in self.alive():
            self.threads[i].join(max(0.0, self.deadline - self.clock()) + 5.0)


def serve_load(
    engines: list[Engine],
    requests: list[Request],
    server_loop: Callable,
    drain_s: float,
    fail_at_s: float | None = None,
    rebuild: Callable[[], list[Engine]] | None = None,
    progress=no_progress,
    clock=time.perf_counter,
) -> LoadLog:
    """Serve `requests` (arrival times from the start) on `engines`, then up to `drain_s` more.

    At `fail_at_s` the last device is lost: a replica's server stops and its requests go to the
    others; a group's server stops and `rebuild()` makes the group's engines on the survivors.
    """
    requests = sorted(requests, key=lambda r: r.arrival_s)
    last = requests[-1].arrival_s if requests else 0.0
    start = clock()

    def now() -> float:
        return clock() - start

    servers = _Servers(server_loop, now, last + drain_s)
    for engine in engines:
        servers.start(engine)
    failed_at, rebuild_s, reported = None, 0.0, -1.0
    try:
        for n, request in enumerate(requests):
            while (wait := request.arrival_s - now()) > 0:
                if fail_at_s is not None and failed_at is None and now() >= fail_at_s:
                    failed_at, rebuild_s = now(), _fail(servers, rebuild, now)
                    continue
                if now() - reported >= REPORT_EVERY_S:
                    reported = now()
                    progress(n, len(requests), f"{engines[0].name}: {n} of {len(requests)} arrived")
                time.sleep(min(wait, 0.002))
            servers.route(request)
        if fail_at_s is not None and failed_at is None:
            failed_at, rebuild_s = now(), _fail(servers, rebuild, now)
    finally:
        servers.close()
    return LoadLog(
        engines[0].name,
        requests,
        sorted(p for log in servers.logs for p in log),
        sorted((end - start, s, kind) for e in servers.engines for end, s, kind in e.calls),
        len(engines),
        now(),
        failed_at,
        rebuild_s,
        sorted(
            (end - start, s, ran, i)
            for i, e in enumerate(servers.engines)
            for end, s, ran in e.gaps
        ),
    )


def _fail(servers: _Servers, rebuild, now) -> float:
    """Lose the last device; returns the time spent rebuilding (0 for replicas)."""
    alive = servers.alive()
    if len(alive) > 1:  # independent replicas: the last one is gone, the others go on
        for r in servers.lose(alive[-1:]):
            servers.route(r)
        return 0.0
    orphans = servers.lose(alive)
    started = now()
    engines = rebuild()
    paused = now() - started
    servers.deadline += paused  # the pause delays every arrival's service: drain as long after it
    for engine in engines:
        servers.start(engine)
    for r in orphans:
        servers.route(r)
    return paused
