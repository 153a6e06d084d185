"""One progress protocol for worker processes: each worker's reports become
`progress(done, total, status)`, with a status that names every worker and what it is doing:

    worker 0: training (2 workers) step 30/105; worker 1: training (2 workers) step 28/105

A `ProgressBoard` spans several stages (one cluster each); `total` counts every stage's units
(sizes, steps) over its workers, so the bar moves from 0 to `total` once. Give `board.watch` to a
`WorkerGroup` as its `watch`: while the workers start (seconds: TensorFlow's import) the status
says so, with the seconds waited, so the status changes at least every second; an unchanged
status is sent again every `HEARTBEAT_S` while a group waits (it calls `watch` every 0.1 s).
"""

from __future__ import annotations

import time

from d2lhelpers.core.progress import HEARTBEAT_S, Progress


def units_of(info) -> tuple[int, int, str]:
    """(done, of, words) from a worker's progress report: sizes or steps done so far, or, in a
    time window (the failure demo), hundredths of the window."""
    if "window_s" in info:
        share = min(1.0, max(0.0, info["elapsed_s"] / info["window_s"]))
        return round(100 * share), 100, f"step {info['step']}, {share:.0%} of its time"
    if "step" in info:
        return info["step"], info["of"], f"step {info['step']}/{info['of']}"
    return info["done"], info["of"], f"size {info['done']}/{info['of']}"


class ProgressBoard:
    """Per-worker lines, and the sum of their units, reported through `progress`."""

    def __init__(self, progress: Progress | None, total: int, clock=time.monotonic):
        self.progress, self.total, self.clock = progress, max(1, total), clock
        self.finished = 0  # units of the stages already over
        self.name, self.units, self.began = "", 0, clock()
        self.words: dict[int, str] = {}  # each worker's latest report, in words
        self.states: dict[int, str] = {}  # each worker's state, as its group last said
        self.done: dict[int, int] = {}
        self.last, self.sent_at = None, -float("inf")

    def stage(self, name: str, n_workers: int, units_per_worker: int) -> None:
        """A new stage begins: `n_workers` workers, each with `units_per_worker` to do."""
        self.finished += sum(self.done.values())
        workers = f"{n_workers} worker{'s' if n_workers != 1 else ''}"
        self.name, self.units = f"{name} ({workers})", units_per_worker
        self.began = self.clock()
        self.words, self.states = {}, dict.fromkeys(range(n_workers), "starting")
        self.done = dict.fromkeys(range(n_workers), 0)
        self._emit()

    def end_stage(self) -> None:
        """This stage is done, whatever its workers reported (a failure demo's stops early)."""
        self.done = dict.fromkeys(self.done, self.units)
        self._emit()

    def heard(self, index: int, info) -> None:
        """A worker's progress report (a `WorkerGroup`'s `on_progress`)."""
        done, _, words = units_of(info)
        self.done[index] = min(done, self.units)
        self.words[index] = words
        if self.states.get(index, "starting") == "starting":  # it reports: it is up
            self.states[index] = "ready"
        self._emit()

    def watch(self, group) -> None:
        """A `WorkerGroup`'s `watch`: each worker's state (starting, ready, done, failed)."""
        self.set_states(dict(enumerate(group.states)))

    def set_states(self, states: dict[int, str]) -> None:
        """Workers' states by their index in this stage (several groups may make one stage)."""
        self.states.update(states)
        self._emit()

    def line(self, index: int, waited: float) -> str:
        state, words = self.states.get(index, "starting"), self.words.get(index)
        if state == "starting":
            return f"starting (importing TensorFlow, {waited:.0f} s)"
        if words is None:
            return "ready, waiting for the others" if state == "ready" else state
        return words if state == "ready" else f"{state} at {words}"

    def status(self) -> str:
        waited = self.clock() - self.began
        lines = (f"worker {i}: {self.name} {self.line(i, waited)}" for i in sorted(self.states))
        return "; ".join(lines)

    def _emit(self) -> None:
        done = min(self.total, self.finished + sum(self.done.values()))
        now = (done, self.status())
        due = self.clock() - self.sent_at >= HEARTBEAT_S
        if self.progress is not None and (now != self.last or due):
            self.last, self.sent_at = now, self.clock()
            self.progress(done, self.total, now[1])
