"""Notebook 06, part 3 (seed 004, "Try it" 3): kill one worker of a replica set, or of one big
group, and measure what is lost: the steps per second all workers completed before the kill
against those after it, beside the model's share (`costs.replicas_vs_one_group`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import statistics
import tempfile
import time

import matplotlib.pyplot as plt

from d2lhelpers.collectives.costs import replicas_vs_one_group
from d2lhelpers.core.checks import require_count
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import cores_phrase, format_seconds, usable_cores
from d2lhelpers.core.verdicts import compare
from d2lhelpers.lessons.l06_multi_process.jobs import require_seconds
from d2lhelpers.lessons.l06_multi_process.training import MAX_STEPS, check_training
from d2lhelpers.processes.failures import WorkerError, error_line
from d2lhelpers.processes.group import WorkerGroup
from d2lhelpers.processes.mwms import GRACE_S, TRAINING_ARGS, TRAINING_TARGET
from d2lhelpers.processes.progress import ProgressBoard
from d2lhelpers.timing.benchmark import Measurement

LAYOUTS = ("replicas", "group")
# Steps of ~10-30 ms on one op thread: long enough that the kill lands mid-run even when this
# process is slow to hear a report (a busy machine), short enough for a demo of a few seconds.
DEMO_STEPS, DEMO_WIDTH, DEMO_BATCH = 200, 1024, 256


def steps_per_s(reports: list[dict]) -> float:
    """One worker's rate over `reports` (one per step, in order): steps per second of wall
    clock between the first and the last, so time spent waiting for a shared core counts;
    0 with fewer than two."""
    if len(reports) < 2 or reports[-1]["at"] <= reports[0]["at"]:
        return 0.0
    return (len(reports) - 1) / (reports[-1]["at"] - reports[0]["at"])


def intervals(reports: list[dict]) -> list[float]:
    """The wall-clock seconds between consecutive step ends."""
    return [b["at"] - a["at"] for a, b in zip(reports, reports[1:], strict=False)]


@dataclasses.dataclass
class FailureDemo(Reported):
    """One worker killed mid-run, in a set of independent replicas or in one big group, and the
    steps every worker completed, each with the monotonic time it ended (`reports`)."""

    layout: str  # "replicas" or "group"
    n_workers: int
    killed_at_step: int
    killed_at: float  # the monotonic clock at the kill (one clock for every process here)
    errors: list[str]  # one line per WorkerError, the killed worker's first
    error_after_s: list[float]  # from the kill to each error
    reports: list[list[dict]]  # [worker][step]: step, step_s, at
    finished: list[bool]  # [worker]: sent its result (all its steps)
    wall_s: float
    cores: int = dataclasses.field(default_factory=usable_cores)

    def _split(self, worker: int) -> tuple[list[dict], list[dict]]:
        # The first steps trace the tf.function and warm up: not the pace of a running job.
        steps = self.reports[worker][max(1, self.killed_at_step // 5) :]
        return [r for r in steps if r["at"] <= self.killed_at], [
            r for r in steps if r["at"] > self.killed_at
        ]

    @property
    def rate_before(self) -> float:
        """Steps per second, all workers together, before the kill."""
        return sum(steps_per_s(self._split(k)[0]) for k in range(self.n_workers))

    @property
    def rate_after(self) -> float:
        """Steps per second, all workers together, after the kill (a worker with fewer than two
        steps after it counts 0)."""
        return sum(steps_per_s(self._split(k)[1]) for k in range(self.n_workers))

    @property
    def steps_after_kill(self) -> int:
        return sum(len(self._split(k)[1]) for k in range(self.n_workers))

    @property
    def lost_share(self) -> float:
        """Measured: the share of the steps per second lost at the kill."""
        return 1 - self.rate_after / self.rate_before

    @property
    def model_lost(self) -> float:
        model = replicas_vs_one_group(self.n_workers, 1, 1.0, 0.0, 0.0)
        return (model.replicas if self.layout == "replicas" else model.one_group).lost_on_failure

    @property
    def failed_as_whole(self) -> bool:
        """Every worker stopped without finishing: what this run shows, not what was expected."""
        return not any(self.finished)

    @property
    def survivors_sped_up(self) -> tuple[Measurement, Measurement] | None:
        """The survivors' times between step ends before and after the kill, if measurably
        shorter after (blocks of ten steps are the runs: their spread is the medians' noise)."""
        befores, afters = [], []
        for k in range(self.n_workers):
            before, after = self._split(k)
            if self.finished[k] and len(before) >= 2 and len(after) >= 2:
                befores += _blocks(intervals(before))
                afters += _blocks(intervals(after))
        if not befores:
            return None
        pair = Measurement("before", befores), Measurement("after", afters)
        return pair if compare(pair[1], pair[0]).a_faster else None

    @property
    def measured_after(self) -> bool:
        """Whether every worker that finished was still stepping after the kill (two steps or
        more): else the window after the kill is empty for it, and nothing can be compared."""
        return all(len(self._split(k)[1]) >= 2 for k in range(self.n_workers) if self.finished[k])

    def _lost_words(self) -> str:
        if not self.measured_after:
            return "not measured: a survivor had finished before the kill (choose more steps)"
        if self.lost_share < 0:
            return "nothing: the survivors made more steps per second than all workers before"
        return f"{self.lost_share:.0%} of the steps per second"

    @property
    def verdict(self) -> str:
        survivors = sum(self.finished)
        if not self.errors:
            return (
                "the killed worker had finished all its steps before the kill reached it: "
                "nothing was lost, nothing measured (choose more steps)"
            )
        lost = f"lost {self._lost_words()}"
        if self.failed_as_whole:
            return (
                f"the job failed as a whole: all {self.n_workers} workers stopped with an error "
                f"within {max(self.error_after_s):.1f} s of the kill, {lost} "
                f"(model: {self.model_lost:.0%})"
            )
        return (
            f"{survivors} of {self.n_workers} workers finished every step: {lost} "
            f"(model: {self.model_lost:.0%})"
        )

    def tables(self) -> list[Table]:
        rows = [
            ("killed", f"one worker (SIGKILL) at step {self.killed_at_step}"),
            ("steps/s before the kill, all workers", f"{self.rate_before:.0f}"),
            ("steps/s after the kill, all workers", f"{self.rate_after:.0f}"),
            ("steps completed after the kill", self.steps_after_kill),
            ("lost (measured)", self._lost_words()),
            ("lost (model)", f"{self.model_lost:.0%}"),
        ]
        rows += [
            (f"error {i + 1}, {t:.2f} s after the kill", e)
            for i, (e, t) in enumerate(zip(self.errors, self.error_after_s, strict=True))
        ]
        verdicts = [self.verdict]
        sped = self.survivors_sped_up
        if sped is not None:
            before, after = sped
            verdicts.append(
                f"the survivors' steps took {format_seconds(before.median)} before the kill and "
                f"{format_seconds(after.median)} after: they ran faster once the killed worker "
                f"stopped, so less was lost than the model's {self.model_lost:.0%}, which gives "
                f"every worker one fixed speed (a hypothesis for why: {self.n_workers} workers "
                f"and any other program shared {cores_phrase(self.cores)})"
            )
        if not self.failed_as_whole and self.layout == "group":
            verdicts.append("the group did not fail as a whole in this run")
        verdicts.append(f"the demo took {self.wall_s:.1f} s; every process has ended")
        title = (
            f"{self.n_workers} replicas of one worker each"
            if self.layout == "replicas"
            else f"one group of {self.n_workers} workers"
        )
        return [Table(title, ("", "value"), rows, verdicts)]


def _blocks(times: list[float], size: int = 10) -> list[float]:
    """Medians of consecutive blocks of `size` (one, of all, when there are fewer)."""
    if len(times) < size:
        return [statistics.median(times)]
    return [statistics.median(times[i : i + size]) for i in range(0, len(times) - size + 1, size)]


def check_failure(layout, n_workers, steps, width, batch_per_worker, timeout_s, collective_s):
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'replicas' or 'group', got {layout!r}")
    # a quarter of the steps come before the kill: a window to measure
    require_count("steps", steps, 20, MAX_STEPS)
    require_seconds("collective_timeout_s", collective_s)
    check_training(n_workers, width, batch_per_worker, steps, 0, timeout_s, low=2)


def run_failure(
    layout: str = "replicas",
    n_workers: int = 2,
    steps: int = DEMO_STEPS,
    width: int = DEMO_WIDTH,
    batch_per_worker: int = DEMO_BATCH,
    timeout_s: float = 30.0,
    collective_timeout_s: float = 5.0,
    progress=None,
) -> FailureDemo:
    """Kill one worker right after a quarter of its `steps`; measure what is lost.

    'replicas': `n_workers` independent one-worker jobs (a start file lets them begin together);
    replica 0 dies. 'group': one job of `n_workers`; its last worker dies. The worker SIGKILLs
    itself right after reporting that step (`mwms.training_worker`'s `die_at_step`), so the kill
    lands at that step however short a step is. Every worker reports every step, so the steps
    per second before and after the kill are counted, not assumed. `progress(done, total,
    status)` with a status per worker.
    """
    check_failure(
        layout, n_workers, steps, width, batch_per_worker, timeout_s, collective_timeout_s
    )
    began = time.monotonic()
    args = {
        **TRAINING_ARGS,
        "width": width,
        "batch": batch_per_worker,
        "steps": steps,
        "warmup": 0,
        "timeout_s": collective_timeout_s,
        "report_every": 1,
        "start_timeout_s": timeout_s * n_workers,  # the groups start one after another
    }
    sizes = [1] * n_workers if layout == "replicas" else [n_workers]
    offsets = [sum(sizes[:g]) for g in range(len(sizes))]
    kill_step = max(2, steps // 4)
    # Replicas: the survivors do every step; a group: every worker stops at the kill.
    total = (n_workers - 1) * steps + kill_step if layout == "replicas" else n_workers * kill_step
    board = ProgressBoard(progress, total)
    board.stage(f"{layout} demo", n_workers, steps)
    reports = collections.defaultdict(list)

    def heard(g):
        def record(index, info):
            reports[offsets[g] + index].append(info)
            board.heard(offsets[g] + index, info)

        return record

    def watch(_group):  # every group's workers, whichever group is waiting
        board.set_states(
            {
                offsets[g] + i: s
                for g, group in enumerate(groups)
                for i, s in enumerate(group.states)
            }
        )

    groups: list[WorkerGroup] = []
    killed = sizes[0] - 1
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        args["start_file"] = os.path.join(folder, "start")
        for g, size in enumerate(sizes):
            # The victim's job: its worker `killed` SIGKILLs itself right after `kill_step`.
            dies = {"die_at_step": kill_step, "die_index": killed} if g == 0 else {}
            group = WorkerGroup(
                TRAINING_TARGET,
                size,
                args={**args, **dies},
                tf_config_job="worker",
                ready_timeout=timeout_s,
                grace_s=GRACE_S,
                watch=watch,
            )
            groups.append(stack.enter_context(group))
        open(args["start_file"], "w").close()
        victim, errors, seen_at = groups[0], [], []
        for _ in range(sizes[0]):  # each worker of the victim's job fails, none hangs
            try:
                victim.results(timeout=timeout_s + collective_timeout_s, on_progress=heard(0))
            except WorkerError as error:
                errors.append(error_line(error))
                seen_at.append(time.monotonic())
        finished = [False] * sizes[0]
        for g, group in enumerate(groups[1:], start=1):
            group.results(timeout_s, on_progress=heard(g))
            finished.append(True)
    board.finish()
    killed_at = reports[killed][-1]["at"]  # its last report: the kill came right after it
    killed_at_step = reports[killed][-1]["step"]
    after = [t - killed_at for t in seen_at]
    wall = time.monotonic() - began
    ordered = [reports[k] for k in range(n_workers)]
    return FailureDemo(
        layout, n_workers, killed_at_step, killed_at, errors, after, ordered, finished, wall
    )


def plot_failure(demo: FailureDemo, ax=None):
    """Steps per second of all workers before and after the kill, and the model's after."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 2.6))
    expected = demo.rate_before * (1 - demo.model_lost)
    labels = ["before the kill", "after (measured)", "after (model)"]
    values = [demo.rate_before, demo.rate_after, expected]
    ax.barh(labels, values, color=["tab:blue", "tab:red", "lightgray"])
    ax.invert_yaxis()
    ax.set(xlabel=f"steps per second, all {demo.n_workers} workers", xlim=(0, None))
    ax.set_title(f"{demo.layout}: one worker killed at step {demo.killed_at_step}")
    ax.figure.tight_layout()
    return ax.figure
