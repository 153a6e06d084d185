"""Notebook 02's experiment: the notebook's functions, run by a driver process against a TF worker.

Two processes do the work: a TensorFlow server (the "GPU", `tf_servers`) and a driver connected to
it (the "CPU" that receives the copies, times and traces everything). The kernel sends the driver
the source of the notebook's three functions (`chain_on`, `copy_to`, `run_and_copy`, as the
learner last ran them; `function_source`) and waits for its JSON answer with a time limit: a
stuck or dead TF worker ends the driver (`exit_if_worker_dies`) or makes the wait time out, but
can never hang the kernel (a connected process's `sync_devices()` waits for a dead worker
forever). The kernel's own TensorFlow context is never connected to a remote.

The worker is started on this machine by default; `worker_address='HOST:PORT'` connects to a TF
server already running there instead (`python -m d2lhelpers.processes.tf_servers --address
HOST:PORT`, e.g. in another network namespace behind a rate-limited link).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
import traceback
from collections.abc import Callable

from d2lhelpers.core.checks import (
    require_count,
    require_measure_options,
    require_memory,
    require_processes,
)
from d2lhelpers.core.counts import chain_flops
from d2lhelpers.core.progress import HEARTBEAT_S, no_progress
from d2lhelpers.core.units import BYTES_PER_FLOAT, MiB, usable_cores
from d2lhelpers.devices import Device, check_fits
from d2lhelpers.lessons.l02_compute_copy.result import ComputeCopyResult
from d2lhelpers.processes import compute_copy
from d2lhelpers.processes.failures import cause_sentence
from d2lhelpers.processes.function_source import function_source, load_functions
from d2lhelpers.processes.group import WorkerError, WorkerGroup, WorkerTimeout
from d2lhelpers.processes.tf_servers import (
    HOST,
    TCP_PROBE_BYTES,
    exit_if_worker_dies,
    remote_tf_workers,
    split_address,
    tcp_fetch,
    tf_worker_at,
    trace_with_worker,
)
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.timing.estimate import PROCESS_START_S, TRACE_S, call_seconds, measure_seconds
from d2lhelpers.timing.interleaved import measure_interleaved
from d2lhelpers.tracing.timeline import OpEvent, device_label
from d2lhelpers.workloads import random_matrix

DRIVER_TARGET = "d2lhelpers.lessons.l02_compute_copy.experiment:drive_compute_copy"
# The worker multiplies on one thread (intra-op 1); a second inter-op thread hands each result
# to the link beside the next matmul, as a GPU's copy engine works beside its SMs. With one,
# the sends wait between matmuls (measured: traced overlap 0-90% from run to run, vs 60-90%).
WORKER_INTER_OP_THREADS = 2
MAX_SIZE, MAX_MATMULS, MAX_ROUNDS = 8192, 200, 20
ROUNDS = 3
PROCESS_BYTES = 600 * MiB  # one TensorFlow process's own memory, about (measured RSS ~450 MiB)
READY_TIMEOUT_S = 120.0  # the driver imports TensorFlow before it says it is ready
MIN_RESULT_TIMEOUT_S = 180.0
MEASURE_DEFAULTS = {"min_runs": 3, "max_runs": 5, "budget_s": 0.2}
VARIANTS = ("link", "run", "copy", "launch", "sequential", "overlapped")


# --- admission: refused in the kernel, before any process starts -------------------------------


def check_compute_copy_fits(size, n_matmuls) -> int:
    """Refuse bad or too-large inputs before anything starts; return the bytes copied.

    This machine holds both sides: the worker's x and n results, the driver's n copies, and two
    TensorFlow processes.
    """
    size = require_count("size (the 'matrix size' slider)", size, 1, MAX_SIZE)
    n_matmuls = require_count(
        "n_matmuls (the 'number of matmuls' slider)", n_matmuls, 1, MAX_MATMULS
    )
    require_processes("notebook 02's experiment (a driver and a worker)", 2)
    nbytes = n_matmuls * size * size * BYTES_PER_FLOAT
    held = 2 * nbytes + size * size * BYTES_PER_FLOAT
    what = f"{n_matmuls} results of {size}², held by worker and driver"
    check_fits(held, [Device(HOST, "CPU", 0, "this machine's memory", memory_bytes=None)], what)
    require_memory(f"{what}, plus two TensorFlow processes", held + 2 * PROCESS_BYTES)
    return nbytes


# --- in the kernel ------------------------------------------------------------------------------


def run_compute_copy(
    size: int = 512,
    n_matmuls: int = 10,
    overlap: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    *,
    chain_on: Callable | None = None,
    copy_to: Callable | None = None,
    run_and_copy: Callable | None = None,
    worker_address: str | None = None,
    rounds: int = ROUNDS,
    timeout_s: float | None = None,
    **measure_options,
) -> ComputeCopyResult:
    """Run the three functions in a driver against a TF worker; time, trace, end both processes.

    The functions default to the package's (`processes.compute_copy`, saved from notebook 02);
    a notebook passes its own, and their source is what the driver runs. overlap=False times
    only the one-after-the-other variants; overlap=True adds the overlapped one and traces it.
    The variants are timed in turns, `rounds` times. Bad or too-large inputs are refused before
    any process starts; `progress(done, total, status)` hears every timed block. A failure is
    raised as one sentence naming its cause (the wait is bounded by `timeout_s`, by default
    from the work; past it both processes are ended).
    """
    check_compute_copy_fits(size, n_matmuls)
    rounds = require_count("rounds", rounds, 1, MAX_ROUNDS)
    if not isinstance(overlap, bool):
        raise TypeError(f"overlap must be True or False, got {overlap!r}")
    if worker_address is not None:
        split_address(worker_address)
    options = require_measure_options({**MEASURE_DEFAULTS, **measure_options})
    code = function_source(
        chain_on=chain_on or compute_copy.chain_on,
        copy_to=copy_to or compute_copy.copy_to,
        run_and_copy=run_and_copy or compute_copy.run_and_copy,
    )
    if timeout_s is None:
        expected = estimate_compute_copy_s(size, n_matmuls, overlap, rounds)
        timeout_s = max(MIN_RESULT_TIMEOUT_S, 10 * expected)
    report = progress or no_progress
    report(0, 1, "starting the driver process (it imports TensorFlow)")
    args = {
        "size": int(size),
        "n_matmuls": int(n_matmuls),
        "overlap": overlap,
        "rounds": rounds,
        "options": options,
        "code": code,
        "worker_address": worker_address,
    }
    try:
        with WorkerGroup(DRIVER_TARGET, 1, args=args, ready_timeout=READY_TIMEOUT_S) as group:
            on_progress = lambda _, info: report(info["done"], info["total"], info["status"])  # noqa: E731
            (raw,) = group.results(timeout_s, on_progress=on_progress)
    except WorkerTimeout as error:
        raise TimeoutError(
            f"notebook 02's driver sent no result within {error_seconds(error, timeout_s)}, so "
            "it and its worker were ended"
        ) from error
    except WorkerError as error:
        raise RuntimeError(
            f"notebook 02's driver process failed: {cause_sentence(error)}"
        ) from error
    if "failed" in raw:
        raise RuntimeError(f"notebook 02's experiment failed in its driver: {raw['failed']}")
    return result_from_json(raw)


def error_seconds(error: WorkerTimeout, timeout_s: float) -> str:
    """How long was waited: the ready wait or the result wait."""
    waited = READY_TIMEOUT_S if "become ready" in str(error) else timeout_s
    return f"{waited:.0f} s"


def one_sentence(error: BaseException) -> str:
    """An exception as one line a learner can act on: TensorFlow's node and op names cut off."""
    text = str(error).split("\n")[0]
    for marker in (" [[", " [Op:"):
        text = text.split(marker)[0]
    text = text.removeprefix("{{function_node ").partition("}} ")[2] or text
    return f"{type(error).__name__}: {text.strip()}"


# --- in the driver process ----------------------------------------------------------------------


class _DriverSteps:
    """The driver's `progress(done, total, status)` to the kernel, with a heartbeat: a long step
    (a worker starting, a long matmul) still says every `HEARTBEAT_S` that it is alive."""

    def __init__(self, context, total: int):
        self.context, self.total, self.done = context, total, 0
        self.status, self.at = "", time.monotonic()
        self.lock, self.stop = threading.Lock(), threading.Event()
        threading.Thread(target=self._beat, daemon=True).start()

    def __call__(self, status: str, advance: bool = False) -> None:
        with self.lock:
            self.done += advance
            self.status, self.at = status, time.monotonic()
            self.context.progress(done=self.done, total=self.total, status=status)

    def _beat(self):
        while not self.stop.wait(HEARTBEAT_S):
            with self.lock:
                quiet = time.monotonic() - self.at
                if quiet >= HEARTBEAT_S:
                    status = f"{self.status} ({quiet:.0f} s)"
                    self.context.progress(done=self.done, total=self.total, status=status)


def drive_compute_copy(context) -> dict:
    """Worker target: start (or reach) a TF worker, time and trace the sent functions; JSON back.

    A failure comes back as {'failed': one sentence}; its traceback goes to this driver's stderr.
    """
    a = dict(context.args)
    context.ready()
    step = _DriverSteps(context, total=1 + a["rounds"] + 1)
    try:
        functions = load_functions(a["code"])
        step("starting the worker (a TensorFlow server)")
        worker = (
            remote_tf_workers(1, inter_op_threads=WORKER_INTER_OP_THREADS)
            if a["worker_address"] is None
            else tf_worker_at(a["worker_address"])
        )
        with worker as remote, exit_if_worker_dies(remote.check_alive):
            step("worker connected; timing in turns", advance=True)
            # In a function of its own: its remote tensors are freed when it returns.
            return _time_and_trace(remote, functions, a, step)
    except Exception as error:
        traceback.print_exc(file=sys.stderr)
        return {"failed": one_sentence(error)}
    finally:
        step.stop.set()


def _time_and_trace(remote, functions: dict, a: dict, step) -> dict:
    size, n, rounds = a["size"], a["n_matmuls"], a["rounds"]
    worker = remote.device
    x = random_matrix(size, worker)
    run, copy = functions["chain_on"](worker, n), functions["copy_to"](HOST)
    sequential = functions["run_and_copy"](worker, HOST, n, False)
    overlapped = functions["run_and_copy"](worker, HOST, n, True) if a["overlap"] else None
    matmuls = count_matmuls(run, x)
    results = run(x)
    nbytes = sum(t.shape.num_elements() * t.dtype.size for t in results)
    tiny = random_matrix(1, worker)
    source = remote.sources[0]
    runs = [
        (lambda: tcp_fetch(source), "raw TCP", {"nbytes": TCP_PROBE_BYTES}),
        (lambda: run(x), "run", {"flops": matmuls * 2 * size**3}),
        (lambda: copy(results), "copy", {"nbytes": nbytes}),
        (lambda: sequential(tiny), "launch", {}),
        (lambda: sequential(x), "one after the other", {}),
    ]
    if overlapped is not None:
        runs.append((lambda: overlapped(x), "overlapped", {}))

    def on_repeat(round_number, label, repeat):
        step(f"round {round_number} of {rounds}: timing {label}, repeat {repeat}")

    timed = measure_interleaved(
        runs,
        rounds,
        on_round=lambda: step("round done", advance=True),
        on_repeat=on_repeat,
        **a["options"],
    )
    traced_fn = overlapped if overlapped is not None else sequential
    step("tracing one call in the worker and the driver")
    rows, source = trace_with_worker(
        traced_fn,
        x,
        worker_address=remote.addresses[0],
        worker_device=worker,
        expected_matmuls=count_matmuls(traced_fn, x),
        expected_s=timed[-1].median,
    )
    step("traced", advance=True)
    return {
        "measurements": {k: dataclasses.asdict(m) for k, m in zip(VARIANTS, timed, strict=False)},
        "rows": [dataclasses.asdict(r) for r in rows],
        "source": source,
        "worker_device": device_label(worker),
        # the worker's own cores when started here (it inherits the affinity); unknown at an
        # address (read 106: one core here said nothing about a worker elsewhere)
        "worker_cores": usable_cores(remote.group.pids[0]) if remote.group else None,
        "size": size,
        "n_matmuls": n,
        "matmuls": matmuls,
        "nbytes": nbytes,
        "overlap": a["overlap"],
    }


def count_matmuls(fn, x) -> int:
    """MatMul ops in the graph `fn(x)` runs: the work of a chain, as the notebook wrote it."""
    graph = fn.get_concrete_function(x).graph
    return sum(op.type in ("MatMul", "BatchMatMulV2") for op in graph.get_operations())


def result_from_json(raw: dict) -> ComputeCopyResult:
    """The driver's JSON answer as a `ComputeCopyResult`."""
    m = {k: Measurement(**v) for k, v in raw["measurements"].items()}
    return ComputeCopyResult(
        size=raw["size"],
        n_matmuls=raw["n_matmuls"],
        matmuls=raw["matmuls"],
        overlap=raw["overlap"],
        nbytes=raw["nbytes"],
        run=m["run"],
        copy=m["copy"],
        launch=m["launch"],
        sequential=m["sequential"],
        overlapped=m.get("overlapped"),
        link=m["link"],
        rows=[OpEvent(**r) for r in raw["rows"]],
        trace_source=raw["source"],
        worker_device=raw["worker_device"],
        worker_cores=raw.get("worker_cores"),
    )


# --- how long it will take ----------------------------------------------------------------------

# Guesses for a first run, below what one run measured on a shared 2-core machine (TF 2.21: one
# worker thread multiplied 512² at 95 GFLOP/s, gRPC over loopback carried 0.75 GB/s); the panel
# passes the last run's measured rates after that.
ASSUMED_FLOPS = 80e9
ASSUMED_LINK = 0.6e9
LAUNCH_S = 2e-3  # one call of a function on the worker, 1x1 matrices (measured: 1-3 ms)
CONNECT_S = 1.0  # connecting to the worker and the first remote call (measured)
ASSUMED_TCP = 2e9  # raw TCP over loopback, B/s (measured 2.4-4.9 GB/s)
TRACE_CALL_S = 1.5  # one call traced in both processes: the profilers' start, stop, collection


def estimate_compute_copy_s(
    size: int,
    n_matmuls: int,
    overlap: bool = True,
    rounds: int = ROUNDS,
    flops_per_s: float | None = None,
    link_bytes_per_s: float | None = None,
) -> float:
    """Expected seconds of `run_compute_copy`: two processes start, each function is built,
    every variant is `measure`d `rounds` times, one call is traced. The workers' measures are
    expected to stop as this process's recent ones did (`timing.stopping`).

    Rates default to guesses (`ASSUMED_FLOPS`, `ASSUMED_LINK`); pass a previous run's.
    """
    nbytes = check_compute_copy_fits(size, n_matmuls)
    rounds = require_count("rounds", rounds, 1, MAX_ROUNDS)
    run = call_seconds(chain_flops(size, n_matmuls), flops_per_s or ASSUMED_FLOPS)
    copy = call_seconds(nbytes, link_bytes_per_s or ASSUMED_LINK)
    link = call_seconds(TCP_PROBE_BYTES, ASSUMED_TCP)
    calls = [link, run, copy, LAUNCH_S, run + copy] + ([max(run, copy)] if overlap else [])
    timed = rounds * sum(measure_seconds(t, **MEASURE_DEFAULTS) for t in calls)
    built = (len(calls) - 1) * TRACE_S + run  # each tf.function traced once; the first run
    traced = TRACE_CALL_S + 4 * calls[-1]  # a warm call, then a window of 3 calls and margins
    return 2 * PROCESS_START_S + CONNECT_S + built + timed + traced
