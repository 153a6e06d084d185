"""Which steps a training worker takes, what it reports, and (in the failure demo) when it dies.

Two ways to run, both starting with `warmup` untimed steps (the first traces the tf.function):

- `steps` timed steps, progress every `report_every` steps (about ten reports by default);
- the failure demo: after the warm-up, say so (a progress report with `warm`), wait for the
  parent's start file (it holds the start time on the monotonic clock, one clock for every
  process of this machine) and for that time, then step until
  `window_s` after it, reporting every step with the time it ended; the worker `kill_index`
  SIGKILLs itself right after the first step that ends `kill_after_s` after the start. A time
  window, not a step count: the kill lands inside every worker's window however long a step
  takes, so there are steps to count before and after it. Only for jobs that lose a worker: in
  one group, workers whose windows end a step apart would wait for each other's all-reduce.
"""

from __future__ import annotations

import os
import signal
import time

START_POLL_S = 0.02


class StepSchedule:
    """Iterate over the step numbers to run; `record` each step; `result` at the end."""

    def __init__(self, context, clock=time.monotonic):
        self.context, self.args, self.clock = context, context.args, clock
        self.warmup = self.args.get("warmup", 0)
        self.window_s = self.args.get("window_s")
        total = self.warmup + self.args.get("steps", 0)
        self.report_every = (
            1 if self.window_s else self.args.get("report_every") or max(1, total // 10)
        )
        self.losses: list[float] = []
        self.times: list[float] = []
        self.start: float | None = None

    def __iter__(self):
        step = 0
        while step < self.warmup:
            yield step
            step += 1
        if self.window_s is None:
            yield from range(step, self.warmup + self.args["steps"])
            return
        report = {"step": step, "elapsed_s": 0.0, "window_s": self.window_s, "warm": True}
        self.context.progress(**report)  # the parent starts the window once all are warm
        self.start = self._wait_for_start()
        while self.clock() < self.start + self.window_s:
            yield step
            step += 1

    def record(self, step: int, loss: float, seconds: float) -> None:
        """One step done: keep its loss and time, report it when due, die if it is the demo's
        victim and its time has come."""
        self.losses.append(loss)
        if step >= self.warmup:
            self.times.append(seconds)
        done = step + 1
        if self.window_s is None:
            total = self.warmup + self.args["steps"]
            if done % self.report_every == 0 or done == total:
                self.context.progress(step=done, of=total, loss=loss, step_s=seconds)
            return
        now = self.clock()
        if step >= self.warmup:
            elapsed = now - self.start
            report = {"step": done, "elapsed_s": elapsed, "window_s": self.window_s, "at": now}
            self.context.progress(**report, loss=loss, step_s=seconds)
            kill_after = self.args.get("kill_after_s")
            if self.context.index == self.args.get("kill_index") and now >= self.start + kill_after:
                os.kill(os.getpid(), signal.SIGKILL)  # the failure demo: a worker dies mid-run

    def result(self) -> dict:
        return {"step_s": self.times, "losses": self.losses}

    def _wait_for_start(self) -> float:
        path, deadline = self.args["start_file"], self.clock() + self.args["start_timeout_s"]
        while self.clock() < deadline:
            try:
                with open(path) as file:
                    start = float(file.read())
            except (OSError, ValueError):  # not written yet
                time.sleep(START_POLL_S)
                continue
            time.sleep(max(0.0, start - self.clock()))
            return start
        raise TimeoutError(f"the start file {path} did not appear in time")
