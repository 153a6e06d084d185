"""Requests and their open-loop arrivals: a Poisson process generated before the clock starts."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(eq=False)
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
    restarted: int = 0  # times its KV cache was lost with a device and it started again
    server: int | None = None  # the server the balancer sent it to (the last, if it moved)

    @property
    def done(self) -> bool:
        return self.finished_s is not None

    @property
    def ttft_s(self) -> float:
        """Time to first token, from arrival (queueing and prefill included); inf if none yet."""
        return float("inf") if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def latency_s(self) -> float:
        """From arrival to the last token; inf while unfinished."""
        return self.finished_s - self.arrival_s if self.done else float("inf")

    def restart(self) -> None:
        """Its slot's cache is gone: it queues again from its prompt (its arrival stays)."""
        self.started_s = self.first_token_s = self.finished_s = None
        self.tokens = []
        self.restarted += 1


def poisson_arrivals(rate: float, duration_s: float, seed: int = 0) -> list[float]:
    """Arrival times in [0, duration_s) of a Poisson process of `rate` per second."""
    rng = np.random.default_rng(seed)
    expected = rate * duration_s
    gaps = rng.exponential(1.0 / rate, size=int(expected + 6 * expected**0.5 + 10))
    times = np.cumsum(gaps)
    return [float(t) for t in times[times < duration_s]]


def make_requests(
    rate: float, duration_s: float, prompt_len: int, n_out: int, vocab: int, seed: int = 0
) -> list[Request]:
    """Requests with random prompts arriving as a Poisson process of `rate` for `duration_s`."""
    arrivals = poisson_arrivals(rate, duration_s, seed)
    prompts = np.random.default_rng(seed + 1).integers(0, vocab, (len(arrivals), prompt_len))
    return [
        Request(i, t, [int(v) for v in prompt], n_out)
        for i, (t, prompt) in enumerate(zip(arrivals, prompts, strict=True))
    ]
