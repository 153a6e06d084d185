"""What every notebook-06 job shares: admission before any process starts, the machine's
defaults (smaller on a small machine, `devices.small_machine`), one MWMS job running the
notebook's worker function (its source shipped to the workers), and the workers' memory.
"""

from __future__ import annotations

import dataclasses
import numbers
import time
from collections.abc import Callable

from d2lhelpers.collectives.tf_allreduce import sizes_up_to
from d2lhelpers.core.checks import (
    MEMORY_SHARE,
    available_memory_bytes,
    max_worker_processes,
    require_count,
    require_memory,
    require_processes,
)
from d2lhelpers.core.report import Table
from d2lhelpers.core.units import MiB, cores_phrase, format_bytes, usable_cores
from d2lhelpers.devices import small_machine
from d2lhelpers.processes import mwms
from d2lhelpers.processes.failures import WorkerError, cause_sentence
from d2lhelpers.processes.function_source import function_source
from d2lhelpers.processes.group import WorkerGroup
from d2lhelpers.processes.progress import ProgressBoard
from d2lhelpers.processes.worker_main import memory_now
from d2lhelpers.processes.worker_memory import WORKER_BYTES, worker_memory_bytes

GRACE_S = 0.3  # MWMS ignores SIGTERM: SIGKILL follows soon


@dataclasses.dataclass(frozen=True)
class MachineDefaults:
    """The sizes notebook 06 runs with by default on this machine, and why."""

    cores: int
    available_bytes: int
    small: bool
    largest_message: int
    repeats: int
    steps: int

    @property
    def sizes(self) -> list[int]:
        """The cluster panel's sweep at its default slider: the notebook's job is the panel's."""
        return sizes_up_to(self.largest_message)

    def __str__(self) -> str:
        memory = 2 * worker_memory_bytes(self.largest_message)
        head = (
            f"{cores_phrase(self.cores)} for this kernel and its worker processes, "
            f"{format_bytes(self.available_bytes)} of memory available"
        )
        if not self.small:
            return (
                f"{head}: the full defaults (2 workers need about {format_bytes(memory)}, the "
                "memory check's estimate)"
            )
        return (
            f"{head}: a small machine, so smaller defaults: messages up to "
            f"{format_bytes(self.largest_message)}, {self.repeats} repeats, {self.steps} training "
            f"steps; 2 workers need about {format_bytes(memory)} summed (the memory check's "
            "estimate)"
        )


def machine_defaults(cores: int | None = None, available: int | None = None) -> MachineDefaults:
    """Full defaults, or smaller ones on a small machine (`devices.small_machine`)."""
    cores = usable_cores() if cores is None else cores
    available = available_memory_bytes() if available is None else available
    if small_machine(cores, available):
        return MachineDefaults(cores, available, True, 4 * MiB, 5, 40)
    return MachineDefaults(cores, available, False, 16 * MiB, 10, 100)


# --- admission: before any process starts ---------------------------------------------------------


def require_seconds(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be more than 0 s, got {value}")
    return float(value)


def require_workers(what: str, n_workers, low: int = 1) -> int:
    """A worker count of at least `low`, within the cap on worker processes."""
    n = require_count("n_workers", n_workers, low)
    return require_processes(what, n)


def require_workers_memory(
    what: str, n_workers: int, per_worker: int, largest_fit: Callable[[float], str]
) -> None:
    """Refuse `what` if `n_workers` workers of `per_worker` bytes each do not fit, summed; the
    message ends with `largest_fit(bytes one worker may use)`."""
    available = available_memory_bytes()
    try:
        require_memory(f"{what} ({n_workers} worker processes)", n_workers * per_worker, available)
    except ValueError as error:
        per = MEMORY_SHARE * available / n_workers
        if per < WORKER_BYTES:
            fit = int(MEMORY_SHARE * available // WORKER_BYTES)
            hint = (
                f"not even one TensorFlow worker each (~{format_bytes(WORKER_BYTES)}) fits: at "
                f"most {fit} workers fit"
            )
        else:
            hint = largest_fit(per)
        raise ValueError(f"{error}; {hint}") from None


# --- one job --------------------------------------------------------------------------------------


def run_job(
    worker,
    n_workers: int,
    args: dict,
    timeout_s: float,
    board: ProgressBoard,
    on_progress=None,
    **group_options,
):
    """One MWMS job running `worker` (a function of `processes.mwms`, or the notebook's own
    version of it) in `n_workers` processes: (per-worker results, seconds to start, in all).

    `group_options` go to the `WorkerGroup` (other hosts: `hosts`, `launch`). Every process has
    ended when this returns or raises; a failed worker raises `WorkerError` whose message is one
    sentence naming the worker and the cause (the details stay in its `__cause__`)."""
    deadline = time.monotonic() + timeout_s
    began = time.monotonic()
    args = {**args, "timeout_s": args.get("timeout_s", mwms.COLLECTIVE_TIMEOUT_S)}
    target, code = worker_code(worker)

    def heard(index, info):
        board.heard(index, info)
        if on_progress is not None:
            on_progress(index, info)

    try:
        with WorkerGroup(
            target,
            n_workers,
            args=args,
            tf_config_job="worker",
            ready_timeout=timeout_s,
            grace_s=GRACE_S,
            watch=board.watch,
            code=code,
            **group_options,
        ) as group:
            started = time.monotonic() - began
            results = group.results(max(1.0, deadline - time.monotonic()), on_progress=heard)
    except WorkerError as error:
        raise one_sentence(error) from error
    return results, started, time.monotonic() - began


def worker_code(worker) -> tuple[str, dict | None]:
    """(target, code) for a `WorkerGroup` running `worker`: the package's own function by name,
    any other (the notebook's) sent as source with what it uses (`function_source`)."""
    target = f"{mwms.__name__}:{getattr(worker, '__name__', '?')}"
    if getattr(worker, "__module__", None) == mwms.__name__:
        return target, None
    return target, function_source(worker=worker)


def one_sentence(error: WorkerError) -> WorkerError:
    """The same error, its message cut to one sentence that names the worker and the cause."""
    return type(error)(
        cause_sentence(error), error.index, error.pid, error.exit_code, error.port_in_use
    )


def max_workers() -> int:
    """The most worker processes one job may start here (`admission.max_worker_processes`)."""
    return max_worker_processes()


def memory_table(
    workers: list[dict], this: int | None = None, estimate: int | None = None
) -> Table:
    """Peak RSS of every worker and of this process (`this`, as the job recorded it; read now
    when None), with PSS beside (shared pages split); with `estimate`, the memory check's
    estimate for the workers, summed, read against their measured peak (read 130: printed
    before the run, never compared)."""
    rows = [
        (f"worker {i}", format_bytes(w["peak_rss_bytes"]), format_bytes(w["pss_bytes"]))
        for i, w in enumerate(workers)
    ]
    this = memory_now()["peak_rss_bytes"] if this is None else this
    peak = sum(w["peak_rss_bytes"] for w in workers)
    rows.append(("this kernel", format_bytes(this), ""))
    verdicts = [
        f"the workers and this kernel summed: {format_bytes(peak + this)} of peak RSS, which "
        "counts TensorFlow's shared "
        f"libraries once per process; PSS splits them"
    ]
    flags = []
    if estimate:
        said = (
            # read 136: both in MiB, so the ratio rebuilds from the printed digits
            f"the memory check admitted the workers on an estimate of {estimate / MiB:.1f} MiB "
            f"summed; the workers' peak RSS summed {peak / MiB:.1f} MiB (this kernel not "
            f"counted), {peak / estimate:.2f}x it"
        )
        if peak > estimate:  # an admission that under-counts could let a run exceed memory
            flags.append(f"{said}: above the estimate, so the check under-counts on this machine")
        else:
            verdicts.append(f"{said}: within it")
    return Table("memory", ("process", "peak RSS", "PSS at the end"), rows, verdicts, flags)
