"""Progress, one protocol everywhere: `progress(done, total, status)`, and the steps of a run.

Every long run calls its `progress` at least every `HEARTBEAT_S` while it works (a panel's bar
and status, a worker's message to its parent), so a learner never watches a silent run. `Steps`
counts a run's measurements and turns `measure`'s `on_repeat` into statuses.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Progress = Callable[[int, int, str], None]
HEARTBEAT_S = 2.0  # a running job says something at least this often, even if nothing changed
REPORT_EVERY_S = 0.5  # repeats are reported at most this often: each is a message to the browser


def no_progress(done: int, total: int, status: str = "") -> None:
    """The `progress` of a run that nobody watches."""


class Steps:
    """`total` measurements of a run, reported as `progress(done, total, status)`.

    `start(what)` says what is measured now and returns the `on_repeat` callback for `measure`
    ("measuring one device (step 1 of 2), repeat 7", at most every `REPORT_EVERY_S`);
    `finish(what)` counts it done; `say(status)` reports anything else (a trace, a start-up).
    """

    def __init__(self, progress: Progress | None, total: int, clock=time.monotonic):
        self.progress, self.total, self.clock = progress or no_progress, total, clock
        self.done, self._last = 0, -float("inf")

    def say(self, status: str, force: bool = True) -> None:
        now = self.clock()
        if force or now - self._last >= REPORT_EVERY_S:
            self._last = now
            self.progress(self.done, self.total, status)

    def start(self, what: str) -> Callable[[int], None]:
        step = f"{what} (step {self.done + 1} of {self.total})"
        self.say(f"measuring {step}")
        return lambda repeat: self.say(f"measuring {step}, repeat {repeat}", force=False)

    def finish(self, what: str) -> None:
        self.done += 1
        self.say("finished" if self.done >= self.total else f"done: {what}")
