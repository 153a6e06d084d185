"""A worker group's message loop: what each worker said (ready, progress, result, error), and
the waits on it, apart from starting and ending the processes (`workers.WorkerGroup`).

Each worker's stdout reader thread puts `(index, kind, payload)` on the group's event queue; a
wait takes in everything already said, raises the diagnosis of a failure
(`worker_failures.failure_to_report`), and otherwise blocks on the queue for `POLL_S` at most,
calling the group's `watch` between looks.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

from d2lhelpers.processes.failures import WorkerState, failure_to_report, timeout_error

POLL_S = 0.1  # how often a wait looks at the clock when no message comes


class WorkerMessages:
    """The waits of a `WorkerGroup`, which owns `_workers`, `_events`, `_unheard_progress`,
    `count` and `watch`."""

    @property
    def ready_info(self) -> list:
        """What each worker sent with its ready signal."""
        return [worker.ready for worker in self._workers]

    @property
    def latest_progress(self) -> list:
        """The last progress report of each worker (None before its first), in index order."""
        return [worker.progress for worker in self._workers]

    @property
    def states(self) -> list[str]:
        """Each worker's state: 'starting', 'ready', 'done' (result sent) or 'failed'."""
        return [
            "failed"
            if w.failed_at is not None
            else "done"
            if w.has_result
            else "ready"
            if w.is_ready
            else "starting"
            for w in self._workers
        ]

    def results(
        self, timeout: float = 120.0, on_progress: Callable[[int, object], None] | None = None
    ) -> list:
        """Every worker's result, in index order; `on_progress(index, info)` sees progress reports.

        Raises `WorkerError` naming the first worker that fails, or `WorkerTimeout` naming those
        still missing after `timeout` seconds. Either way the workers keep running until the
        group is closed (the `with` does it).
        """
        self._wait_for("result", timeout, on_progress)
        return [worker.result for worker in self._workers]

    def wait_for_progress(
        self,
        timeout: float,
        on_progress: Callable[[int, object], None] | None = None,
        until: Callable[[int, object], bool] | None = None,
    ) -> list:
        """Wait until every worker has reported progress (or its result), or, with `until`,
        until `until(index, latest_progress)` holds for every worker that has not sent its
        result; return the latest progress of each, in index order. Raises like `results`."""
        wanted = "progress" if until is None else until
        self._wait_for(wanted, timeout, on_progress)
        return [worker.progress for worker in self._workers]

    def check_alive(self, on_progress: Callable[[int, object], None] | None = None) -> None:
        """Take in what the workers said so far (progress to `on_progress`); raise `WorkerError`
        if any worker has failed or ended without a result; else return at once."""
        self._wait_for(None, 0.0, on_progress)

    def _wait_for(self, wanted, timeout: float, on_progress=None) -> None:
        if not self._workers:
            raise RuntimeError("the workers are not running: enter the group's `with` first")
        deadline = time.monotonic() + timeout
        if on_progress is not None:  # reports that came while nobody was listening come first
            while self._unheard_progress:
                on_progress(*self._unheard_progress.popleft())
        while True:
            while True:  # take in everything already said before looking at the clock
                try:
                    index, kind, payload = self._events.get_nowait()
                except queue.Empty:
                    break
                self._record(self._workers[index], kind, payload, on_progress)
            missing = [worker for worker in self._workers if not _has(worker, wanted)]
            past_deadline = time.monotonic() >= deadline
            failure = failure_to_report(self._workers, force=past_deadline or not missing)
            if failure is not None:
                raise failure
            if self.watch is not None:  # at least once a wait, also when all had answered
                self.watch(self)
            if not missing:
                return
            if past_deadline:
                raise timeout_error(missing, self.count, _describe(wanted), timeout)
            try:
                index, kind, payload = self._events.get(timeout=POLL_S)
            except queue.Empty:
                continue
            self._record(self._workers[index], kind, payload, on_progress)

    def _record(self, worker: WorkerState, kind: str, payload, on_progress) -> None:
        if kind == "ready":
            worker.ready, worker.is_ready = payload, True
        elif kind == "progress":
            worker.progress = payload
            if on_progress is None:
                self._unheard_progress.append((worker.index, payload))
            else:
                on_progress(worker.index, payload)
        elif kind == "result":
            worker.result, worker.has_result = payload, True
        elif kind == "error":
            worker.error = payload
            worker.failed_at = worker.failed_at or time.monotonic()
        elif kind == "exit":
            worker.exit_code = payload
            if not worker.has_result:
                worker.failed_at = worker.failed_at or time.monotonic()


def _describe(wanted) -> str | None:
    return "report the progress waited for" if callable(wanted) else wanted


def _has(worker: WorkerState, wanted) -> bool:
    if callable(wanted):
        return worker.has_result or (
            worker.progress is not None and wanted(worker.index, worker.progress)
        )
    reached = {
        "ready": worker.is_ready,
        "progress": worker.progress is not None or worker.has_result,
        "result": worker.has_result,
    }
    return reached.get(wanted, True)
