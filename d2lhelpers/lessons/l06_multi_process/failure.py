"""Notebook 06, part 3 (seed 004, "Try it" 3): kill one worker of a replica set, and of one big
group, and measure what is lost: the steps per second all workers completed before the kill
against those after it, beside the model's share (`costs.replicas_vs_one_group`).

Every worker trains for the same `window_s` seconds from a common start (`schedule.StepSchedule`)
and reports every step with the time it ended; one worker dies `kill_after_s` after the start. A
time window, not a step count, so the kill lands inside every worker's run and both sides of it
are measured, however fast a step is. The link can be cut instead (`cut_link`, other hosts only).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable

import matplotlib.pyplot as plt

from d2lhelpers.collectives.costs import replicas_vs_one_group
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import cores_phrase, format_seconds, usable_cores
from d2lhelpers.core.verdicts import (
    Comparison,
    compare,
    digits_that_agree,
    noise_text,
    relative_noise,
)
from d2lhelpers.lessons.l06_multi_process.jobs import GRACE_S, require_seconds, worker_code
from d2lhelpers.lessons.l06_multi_process.training import check_training
from d2lhelpers.processes import mwms
from d2lhelpers.processes.failures import WorkerError, cause_sentence
from d2lhelpers.processes.group import WorkerGroup
from d2lhelpers.processes.progress import ProgressBoard
from d2lhelpers.processes.real_cluster import TRAINING_ARGS
from d2lhelpers.timing.benchmark import Measurement

LAYOUTS = ("replicas", "group")
# Steps of a few ms on one op thread: hundreds in the window, each reported to this process.
DEMO_WIDTH, DEMO_BATCH = 1024, 1024
WINDOW_S, KILL_AFTER_S = 3.0, 1.0  # each worker trains this long; one dies this far in
WARMUP = 2  # untimed steps before the common start (the first traces the tf.function)
START_MARGIN_S = 0.2  # the start time is set this far ahead, so every worker sees it in time
JOB_TIMEOUT_S = 30.0  # each job's slack: to start, to warm up, and past its window for results
COLLECTIVE_TIMEOUT_S = 5.0  # how long a survivor waits on a dead peer's collective before it errs
UNITS = 100  # a worker's progress: hundredths of its window


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
class WorkerLossResult(Reported):
    """One worker lost mid-run (killed, or its link cut), in a set of independent replicas or in
    one big group, and the steps every worker completed, each with the monotonic time it ended."""

    layout: str  # "replicas" or "group"
    n_workers: int
    killed_at: float  # the monotonic clock at the kill (one clock for every process here)
    errors: list[str]  # one sentence per failed worker, the lost worker's first
    error_after_s: list[float]  # from the kill to each error
    reports: list[list[dict]]  # [worker][step]: step, step_s, at
    finished: list[bool]  # [worker]: sent its result (its whole window)
    wall_s: float
    cores: int = dataclasses.field(default_factory=usable_cores)
    how: str = "killed (SIGKILL)"  # or "its link cut"
    collective_timeout_s: float | None = None  # how long a survivor's collective waits
    step: tuple[int, int] | None = None  # (width, batch per worker) of each training step

    def _split(self, worker: int) -> tuple[list[dict], list[dict]]:
        steps = self.reports[worker]
        return [r for r in steps if r["at"] <= self.killed_at], [
            r for r in steps if r["at"] > self.killed_at
        ]

    @property
    def killed_at_step(self) -> int:
        """How many steps the lost worker had completed when it was lost."""
        return len(self._split(self.victim)[0])

    @property
    def victim(self) -> int:
        return 0 if self.layout == "replicas" else self.n_workers - 1

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
    def measured_before(self) -> bool:
        """Every worker completed two steps or more before the kill: a rate to compare with."""
        return all(len(self._split(k)[0]) >= 2 for k in range(self.n_workers))

    @property
    def measured_after(self) -> bool:
        """Every worker that finished was still stepping after the kill (two steps or more)."""
        return all(len(self._split(k)[1]) >= 2 for k in range(self.n_workers) if self.finished[k])

    @property
    def survivors_sped_up(self) -> tuple[Measurement, Measurement] | None:
        """The survivors' times between step ends before and after the kill, if measurably
        shorter after (blocks of ten steps are the runs: their spread is the medians' noise)."""
        pair = self._survivor_times()
        return pair if pair is not None and compare(pair[1], pair[0]).a_faster else None

    def _survivor_times(self) -> tuple[Measurement, Measurement] | None:
        befores, afters = [], []
        for k in range(self.n_workers):
            before, after = self._split(k)
            if self.finished[k] and len(before) >= 2 and len(after) >= 2:
                befores += _blocks(intervals(before))
                afters += _blocks(intervals(after))
        if not befores:
            return None
        return Measurement("before", befores), Measurement("after", afters)

    @property
    def rate_noises(self) -> tuple[float, float] | None:
        """The relative noise of the step rates before (every worker) and after (the
        survivors): each worker's from its own intervals (blocks of ten steps as the runs), the
        noisiest worker's for the sum (a sum of rates moves, relatively, at most as much as its
        noisiest part). None when either side has no steps to read."""
        before, after = [], []
        for k in range(self.n_workers):
            was, now = self._split(k)
            if len(was) >= 2:
                before.append(relative_noise(Measurement("before", _blocks(intervals(was)))))
            if self.finished[k] and len(now) >= 2:
                after.append(relative_noise(Measurement("after", _blocks(intervals(now)))))
        return (max(before), max(after)) if before and after else None

    @property
    def lost_noise(self) -> float:
        """How far the lost share could move: `rate_noises` through 1 - lost; infinite when
        either side has no steps to read."""
        noises = self.rate_noises
        return math.inf if noises is None else (1 - self.lost_share) * sum(noises)

    def lost_words(self) -> str:
        if not self.measured_before:
            return "not measured: a worker had no steps before the loss (a longer window helps)"
        if not self.measured_after:
            return "not measured: a survivor had no steps after the loss (a longer window helps)"
        if self.lost_share < 0:  # with its band (read 70: "more" read without its noise)
            before, after = self.rate_noises
            beyond = -self.lost_share > self.lost_noise
            # read 84: 'nothing' from a point estimate whose band reaches an 81% loss
            lead = "nothing" if beyond else "nothing measurable"
            return (
                f"{lead}: the survivors made {-self.lost_share:.1%} ± {self.lost_noise:.1%} more "
                f"steps per second than all workers before (the band: {1 - self.lost_share:.3f} x "
                f"(±{before:.1%} before + ±{after:.1%} after); "
                + ("beyond the noise)" if beyond else "within the noise, so not measurably more)")
            )
        if self.rate_after == 0:
            return "all of the steps per second (no steps after the loss: exact)"
        before, after = self.rate_noises
        return (
            f"{self.lost_share:.1%} ± {self.lost_noise:.1%} of the steps per second (the band: "
            f"{1 - self.lost_share:.3f} x (±{before:.1%} before + ±{after:.1%} after))"
        )

    def _against_model(self) -> Comparison:
        """The lost share against the model's, within `lost_noise`."""
        return Comparison(self.lost_share, self.model_lost, self.lost_noise)

    def model_reading(self) -> str:
        """The model's share, and whether the measured one differs from it beyond the noise."""
        model = f"model: {self.model_lost:.0%}"
        if not (self.measured_before and self.measured_after):
            return model
        if self.rate_after == 0:  # nothing after: the loss is exact, no noise to read
            return f"{model}, as measured" if self.model_lost == 1 else f"{model}; more was lost"
        noise = self.lost_noise
        c = self._against_model()
        if not c.measurable:
            # no loss is as close as the model (read 68: 16% ± 42% against 50%): untested
            if self.model_lost <= noise or self.lost_share <= noise:
                return f"{model}: too noisy to test, its band (±{noise:.0%}) covers no loss too"
            return f"{model}, within the noise"
        word = "less" if c.a < c.b else "more"
        said = f"{model}; {word} than the model beyond the noise"
        if word != "less" or self.survivors_sped_up is not None:  # its note says why
            return said
        times = self._survivor_times()
        if times is None:
            said += " (the survivors' own speed-up was not measurable: why is not shown)"
        else:
            before, after = times  # read 119: the survivors' own times, so a reader can see
            # read 160: 5.14 ms and 3.90 ms at whole-percent noises read beyond: the digits
            e = digits_that_agree(after, before, compare(after, before).measurable)
            said += (
                f" (the survivors' steps took {format_seconds(before.median, e)} "
                f"{noise_text(before, e)} before the loss and {format_seconds(after.median, e)} "
                f"{noise_text(after, e)} after: no measurable speed-up, so why less was lost is "
                "not shown; workers of unequal speed before the loss, or a speed-up inside the "
                "noise, are hypotheses)"
            )
        return said

    @property
    def verdict(self) -> str:
        lost = f"lost {self.lost_words()} ({self.model_reading()})"
        if not self.errors:
            return f"no worker failed after one was {self.how}: every worker finished; {lost}"
        if self.failed_as_whole:
            return (
                # read 171: the killed worker's stop is its kill, not a collective's error
                f"the job failed as a whole: all {self.n_workers} workers stopped"
                + (
                    f": the killed one, and {self.n_workers - 1} with an error, "
                    if self.how.startswith("killed")
                    else " with an error, "
                )
                + f"the last {max(self.error_after_s):.2f} s after the loss"
                + self._timeout_words()
                + f"; {lost}"
            )
        return f"{sum(self.finished)} of {self.n_workers} workers finished their run: {lost}"

    def _timeout_words(self) -> str:
        """This demo's collective timeout beside the time the group failed in (read 72), and
        whether the timeout or an error came first (read 78: 2.07 s on 'Socket closed' beside a
        5 s timeout read as if the timeout had ended them)."""
        timeout = self.collective_timeout_s
        if not timeout:
            return ""
        first = (
            "an error came before it, not the timeout"
            if max(self.error_after_s) < timeout
            else "the timeout had passed"
        )
        return (
            f" (a survivor's collective gives up after {timeout:g} s, this demo's timeout: {first})"
        )

    def notes(self) -> list[str]:
        """What else this run shows: survivors that sped up, a group that did not fail whole."""
        notes = []
        sped = self.survivors_sped_up
        if sped is not None:
            before, after = sped
            band = compare(after, before).noise
            c = self._against_model()  # read 129: 'less was lost' only where measured so
            less = (
                "so less was lost than"
                if self.measured_before and self.measured_after and c.measurable and c.a < c.b
                else "which would make less lost than"
            )
            notes.append(
                f"{self.layout}: the survivors' steps took {format_seconds(before.median)} "
                f"{noise_text(before)} before the loss and {format_seconds(after.median)} "
                f"{noise_text(after)} after, {format_seconds(before.median - after.median)} "
                f"shorter, beyond both noises ({format_seconds(band)}): they ran faster once one "
                f"worker stopped, {less} the model's {self.model_lost:.0%}, which "
                f"gives every worker one fixed speed (a hypothesis for why: {self.n_workers} "
                f"workers and any other program shared {cores_phrase(self.cores)})"
            )
            if less.startswith("which"):
                notes[-1] += ", though the loss measured here is not below it beyond its noise"
        if not self.failed_as_whole and self.layout == "group":
            notes.append("the group did not fail as a whole in this run")
        return notes

    def rate_words(self, after: bool) -> str:
        """The step rate before (or after) the loss, with its noise (its noisiest worker's)
        when it has one: what the lost share's band is made of."""
        rate, noises = (self.rate_after if after else self.rate_before), self.rate_noises
        return f"{rate:.0f}" + (f" ±{noises[after]:.1%} (its noisiest worker's)" if noises else "")

    def rows(self) -> list[tuple]:
        return [
            ("lost", f"one worker {self.how} after {self.killed_at_step} of its steps"),
            ("steps/s before the loss, all workers", self.rate_words(after=False)),
            ("steps/s after the loss, all workers", self.rate_words(after=True)),
            ("steps completed after the loss", self.steps_after_kill),
            ("lost (measured)", self.lost_words()),
            ("lost (model)", self.model_reading()),
        ] + [
            (f"error {i + 1}, {t:.2f} s after the loss", e)
            for i, (e, t) in enumerate(zip(self.errors, self.error_after_s, strict=True))
        ]

    def step_words(self) -> str:
        """' (each step: width 1024, batch 1024 per worker)': the demo's own step, not the
        sweep's (read 127); '' where not known."""
        if self.step is None:
            return ""
        return f" (each step: width {self.step[0]}, batch {self.step[1]} per worker)"

    def tables(self) -> list[Table]:
        title = (
            f"{self.n_workers} replicas of one worker each"
            if self.layout == "replicas"
            else f"one group of {self.n_workers} workers"
        )
        title += self.step_words()
        verdicts = [self.verdict, *self.notes(), f"the demo took {self.wall_s:.1f} s"]
        return [Table(title, ("", "value"), self.rows(), verdicts)]


def _blocks(times: list[float], size: int = 10) -> list[float]:
    """Medians of consecutive blocks of `size` (one, of all, when there are fewer)."""
    if len(times) < size:
        return [statistics.median(times)]
    return [statistics.median(times[i : i + size]) for i in range(0, len(times) - size + 1, size)]


def check_failure(layout, n_workers, window_s, kill_after_s, width, batch, timeout_s, collective_s):
    """Admission for `run_failure`: every value, and the workers' memory and count."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'replicas' or 'group', got {layout!r}")
    window = require_seconds("window_s", window_s)
    kill = require_seconds("kill_after_s", kill_after_s)
    if not kill < window:
        raise ValueError(f"kill_after_s ({kill:g}) must be less than window_s ({window:g})")
    require_seconds("collective_timeout_s", collective_s)
    check_training(n_workers, width, batch, 1, WARMUP, timeout_s, low=2)


def run_failure(
    layout: str = "replicas",
    n_workers: int = 2,
    window_s: float = WINDOW_S,
    kill_after_s: float = KILL_AFTER_S,
    width: int = DEMO_WIDTH,
    batch_per_worker: int = DEMO_BATCH,
    timeout_s: float = JOB_TIMEOUT_S,
    collective_timeout_s: float = COLLECTIVE_TIMEOUT_S,
    progress=None,
    worker=mwms.training_worker,
    board: ProgressBoard | None = None,
    cut_link: Callable[[int], None] | None = None,
    **group_options,
) -> WorkerLossResult:
    """Lose one worker `kill_after_s` into a `window_s` run of every worker; measure what is lost.

    'replicas': `n_workers` independent one-worker jobs; replica 0 dies. 'group': one job of
    `n_workers`; its last worker dies. The worker SIGKILLs itself right after its first step that
    ends past the kill time (`schedule.StepSchedule`), or, with `cut_link(index)` (a group on other
    hosts, `group_options`), this process cuts that worker's link at the kill time. `worker` is
    the training function each worker runs (the notebook's own, in the notebook).
    `progress(done, total, status)` with a status per worker.
    """
    check_failure(
        layout,
        n_workers,
        window_s,
        kill_after_s,
        width,
        batch_per_worker,
        timeout_s,
        collective_timeout_s,
    )
    if cut_link is not None and layout != "group":
        raise ValueError("a cut link stops only a group: replicas do not use the link")
    if board is None:
        board = ProgressBoard(progress, n_workers * UNITS)
    board.stage(f"{layout} demo", n_workers, UNITS)
    target, code = worker_code(worker)
    sizes = [1] * n_workers if layout == "replicas" else [n_workers]
    offsets = [sum(sizes[:g]) for g in range(len(sizes))]
    killed = sizes[0] - 1  # in the victim's job: replica 0, or the group's last worker
    args = {
        **TRAINING_ARGS,
        "width": width,
        "batch": batch_per_worker,
        "warmup": WARMUP,
        "window_s": window_s,
        "timeout_s": collective_timeout_s,
        "start_timeout_s": timeout_s * len(sizes),  # the jobs start one after another
    }
    reports = collections.defaultdict(list)
    groups: list[WorkerGroup] = []

    def heard(g):
        def record(index, info):
            if not info.get("warm"):  # the report that it is warm precedes the window
                reports[offsets[g] + index].append(info)
            board.heard(offsets[g] + index, info)

        return record

    def watch(_group):  # every job's workers, whichever job is waiting
        states = {
            offsets[g] + i: s for g, job in enumerate(groups) for i, s in enumerate(job.states)
        }
        board.set_states(states)

    began = time.monotonic()
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        args["start_file"] = os.path.join(folder, "start")
        for g, size in enumerate(sizes):
            dies = {"kill_index": killed, "kill_after_s": kill_after_s}
            options = {**group_options}
            if "hosts" in group_options:  # each job's workers on their own hosts
                options["hosts"] = group_options["hosts"][offsets[g] : offsets[g] + size]
            if "launch" in group_options:
                options["launch"] = _shifted(group_options["launch"], offsets[g])
            group = WorkerGroup(
                target,
                size,
                args={**args, **(dies if g == 0 and cut_link is None else {})},
                tf_config_job="worker",
                ready_timeout=timeout_s,
                grace_s=GRACE_S,
                watch=watch,
                code=code,
                **options,
            )
            groups.append(stack.enter_context(group))
        for g, group in enumerate(groups):  # the window starts once every worker is warm
            group.wait_for_progress(timeout_s, heard(g), until=lambda _, info: "window_s" in info)
        start = _write_start(args["start_file"])
        cut = _cut_at(cut_link, killed, start + kill_after_s) if cut_link else None
        errors, seen_at, finished = [], [], [False] * sizes[0]
        for _ in range(sizes[0]):  # each worker of the victim's job fails, none hangs
            try:
                groups[0].results(timeout_s + window_s + collective_timeout_s, heard(0))
                finished = [True] * sizes[0]
                break
            except WorkerError as error:
                errors.append(cause_sentence(error))
                seen_at.append(time.monotonic())
        for g, group in enumerate(groups[1:], start=1):
            group.results(timeout_s + window_s, on_progress=heard(g))
            finished.append(True)
    board.end_stage()
    if cut is not None:
        cut.join()
        killed_at = cut.at
    else:  # its last report: it killed itself right after it
        killed_at = reports[killed][-1]["at"] if reports[killed] else start + kill_after_s
    how = "killed (SIGKILL)" if cut_link is None else "cut off (its link down)"
    return WorkerLossResult(
        layout,
        n_workers,
        killed_at,
        errors,
        [t - killed_at for t in seen_at],
        [reports[k] for k in range(n_workers)],
        finished,
        time.monotonic() - began,
        how=how,
        collective_timeout_s=collective_timeout_s,
        step=(width, batch_per_worker),
    )


def _shifted(launch, offset: int):
    """A job's `launch` by its workers' index among all the demo's workers."""
    return lambda index: launch(offset + index)


class _Cut(threading.Thread):
    """Cuts a worker's link at a given time on the monotonic clock; `at` is when it was done."""

    def __init__(self, cut_link, index, when):
        super().__init__(daemon=True)
        self.cut_link, self.index, self.when, self.at = cut_link, index, when, when

    def run(self):
        time.sleep(max(0.0, self.when - time.monotonic()))
        self.cut_link(self.index)
        self.at = time.monotonic()


def _cut_at(cut_link, index, when) -> _Cut:
    cut = _Cut(cut_link, index, when)
    cut.start()
    return cut


def _write_start(path: str) -> float:
    """Write the common start time (monotonic clock) atomically; return it."""
    start = time.monotonic() + START_MARGIN_S
    with open(path + ".tmp", "w") as file:
        file.write(repr(start))
    os.replace(path + ".tmp", path)
    return start


def plot_failure(demo: WorkerLossResult, ax=None):
    """Steps per second of all workers before and after the loss, and the model's after."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 2.6))
    expected = demo.rate_before * (1 - demo.model_lost)
    labels = ["before the loss", "after (measured)", "after (model)"]
    values = [demo.rate_before, demo.rate_after, expected]
    ax.barh(labels, values, color=["tab:blue", "tab:red", "lightgray"])
    ax.invert_yaxis()
    ax.set(xlabel=f"steps per second, all {demo.n_workers} workers", xlim=(0, None))
    ax.set_title(f"{demo.layout}: one worker {demo.how} after {demo.killed_at_step} steps")
    ax.figure.tight_layout()
    return ax.figure
