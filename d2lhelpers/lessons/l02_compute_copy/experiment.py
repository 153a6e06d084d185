"""Notebook 02's experiment: a worker computes, a driver copies; this kernel only waits, bounded.

Two processes do the work: a TensorFlow server (the "GPU", `tf_servers.remote_tf_workers`) and a
driver connected to it (the "CPU" that receives the copies, times and traces everything). The
notebook's kernel starts the driver as a `WorkerGroup` worker and waits for its JSON result with
a time limit: a stuck or dead TF worker can end the driver (`exit_if_workers_die`) or make the
wait time out, but can never hang the kernel (a connected process's `sync_devices()` waits for a
dead worker forever). The kernel's own TensorFlow context is never connected to a remote.

Overlap needs compute and copies in ONE `tf.function`: the runtime then sends y_i while y_{i+1}
is computed. `run_and_copy(..., overlap=False)` is the same function with control dependencies
that hold every copy until the last matmul: the honest "one after the other" in one graph.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import tensorflow as tf

from d2lhelpers.core.checks import require_count, require_memory, require_processes
from d2lhelpers.core.counts import chain_flops
from d2lhelpers.core.progress import HEARTBEAT_S
from d2lhelpers.core.units import BYTES_PER_FLOAT, MiB, format_bytes
from d2lhelpers.devices import Device, check_fits
from d2lhelpers.lessons.l02_compute_copy.result import BOTH_TRACED, ComputeCopyResult
from d2lhelpers.processes.group import WorkerGroup, WorkerTimeout
from d2lhelpers.processes.tf_servers import (
    HOST,
    exit_if_workers_die,
    loopback_tcp_bandwidth,
    remote_tf_workers,
    trace_with_worker,
)
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.timing.interleaved import measure_interleaved
from d2lhelpers.tracing.timeline import OpEvent, TracingOverhead, device_label, tracing_overhead
from d2lhelpers.workloads import (
    random_matrix,
)

DRIVER_TARGET = "d2lhelpers.lessons.l02_compute_copy.experiment:drive_compute_copy"
# The worker multiplies on one thread (intra-op 1); a second inter-op thread hands each result
# to the link beside the next matmul, as a GPU's copy engine works beside its SMs. With one,
# the sends wait between matmuls (measured: traced overlap 0-90% from run to run, vs 60-90%).
WORKER_INTER_OP_THREADS = 2
MAX_SIZE, MAX_MATMULS, MAX_ROUNDS = 8192, 200, 20
PROCESS_BYTES = 600 * MiB  # one TensorFlow process's own memory, about (measured RSS ~450 MiB)
READY_TIMEOUT_S = 120.0  # the driver imports TensorFlow before it says it is ready
MIN_RESULT_TIMEOUT_S = 180.0
MEASURE_DEFAULTS = {"min_runs": 3, "max_runs": 5, "budget_s": 0.2}


# --- the work -----------------------------------------------------------------------------------


def chain_on(device: str, n: int) -> Callable:
    """A tf.function: x -> [y_1, ..., y_n], y_i = y_{i-1} @ x, all computed and kept on `device`."""

    @tf.function
    def run(x):
        with tf.device(device):
            return _chain(x, n)

    return run


def copy_to(device: str) -> Callable:
    """A tf.function: tensors (anywhere) -> their copies on `device`, one `tf.identity` each."""

    @tf.function
    def copy(tensors):
        with tf.device(device):
            return [tf.identity(t) for t in tensors]

    return copy


def run_and_copy(worker: str, host: str, n: int, overlap: bool = True) -> Callable:
    """A tf.function: x -> the chain's n results computed on `worker`, copied to `host`.

    overlap=True: y_i's copy depends on y_i alone, so it goes while y_{i+1} is computed.
    overlap=False: every copy waits for the last matmul (control dependencies on the worker,
    where the sends start; a dependency on the receiving side would not stop the bytes moving).
    """

    @tf.function
    def run(x):
        with tf.device(worker):
            results = _chain(x, n)
            if not overlap:
                with tf.control_dependencies([results[-1]]):
                    results = [tf.identity(y) for y in results]
        with tf.device(host):
            return [tf.identity(y) for y in results]

    return run


def _chain(x, n: int) -> list:
    results, y = [], x
    for _ in range(n):
        y = tf.linalg.matmul(y, x)
        results.append(y)
    return results


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
    host = Device(HOST, "CPU", 0, "this machine's memory", memory_bytes=None)
    check_fits(held, [host], what)
    require_memory(f"{what}, plus two TensorFlow processes", held + 2 * PROCESS_BYTES)
    return nbytes


# --- in the kernel ------------------------------------------------------------------------------


def run_compute_copy(
    size: int = 512,
    n_matmuls: int = 10,
    overlap: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    *,
    rounds: int = 3,
    trace_overhead: bool = True,
    timeout_s: float | None = None,
    **measure_options,
) -> ComputeCopyResult:
    """Start a driver (which starts a worker), time run / copy / launch / both, trace; end both.

    overlap=False runs only the one-after-the-other variants; overlap=True adds the overlapped
    one, and traces it. The variants are timed in turns, `rounds` times. Bad or too-large inputs
    are refused before any process starts. `progress(done, total, status)` is called at every
    timed block. The wait for the driver's result is bounded (`timeout_s`, default from the
    work): past it, both processes are ended and `TimeoutError` says so.
    """
    nbytes = check_compute_copy_fits(size, n_matmuls)
    rounds = require_count("rounds", rounds, 1, MAX_ROUNDS)
    if not isinstance(overlap, bool):
        raise TypeError(f"overlap must be True or False, got {overlap!r}")
    for name in ("min_runs", "max_runs"):
        if name in measure_options:
            require_count(name, measure_options[name], 1, 1000)
    options = {**MEASURE_DEFAULTS, **measure_options}
    if timeout_s is None:
        timeout_s = max(MIN_RESULT_TIMEOUT_S, 10 * estimate_compute_copy_s(size, n_matmuls, rounds))
    report = progress or (lambda done, total, status: None)
    report(0, 1, "starting the driver process (it imports TensorFlow)")
    args = {
        "size": int(size),
        "n_matmuls": int(n_matmuls),
        "overlap": overlap,
        "rounds": rounds,
        "trace_overhead": bool(trace_overhead),
        "options": options,
    }
    with WorkerGroup(DRIVER_TARGET, 1, args=args, ready_timeout=READY_TIMEOUT_S) as group:
        try:
            (raw,) = group.results(
                timeout_s,
                on_progress=lambda _, info: report(info["done"], info["total"], info["status"]),
            )
        except WorkerTimeout as error:
            raise TimeoutError(
                f"notebook 02's experiment sent no result within {timeout_s:.0f} s; its driver "
                "and worker processes have been ended, nothing is left running. Last known "
                f"state:\n{error}"
            ) from error
    return result_from_json(raw, nbytes)


# --- in the driver process ----------------------------------------------------------------------


def drive_compute_copy(context) -> dict:
    """Worker target: measure the link, start a TF worker, time and trace; return JSON."""
    a = dict(context.args)
    context.ready()
    total = 2 + a["rounds"] + 1 + a["trace_overhead"]
    state = {"done": 0, "status": "", "at": time.monotonic()}
    lock, stop = threading.Lock(), threading.Event()

    def step(status: str, advance: bool = True):
        with lock:
            state.update(done=state["done"] + advance, status=status, at=time.monotonic())
            context.progress(done=state["done"], total=total, status=status)

    def heartbeat():  # a step that takes long (a worker starting) still says it is alive
        while not stop.wait(HEARTBEAT_S):
            with lock:
                quiet = time.monotonic() - state["at"]
                if quiet >= HEARTBEAT_S:
                    status = f"{state['status']} ({quiet:.0f} s)"
                    context.progress(done=state["done"], total=total, status=status)

    threading.Thread(target=heartbeat, daemon=True).start()
    try:
        step("measuring the loopback TCP peak", advance=False)
        link_peak = a["link_peak"] = loopback_tcp_bandwidth()
        step("starting the worker (a TensorFlow server)")
        with remote_tf_workers(1, inter_op_threads=WORKER_INTER_OP_THREADS) as remote:
            with exit_if_workers_die(remote.group):
                step("worker connected; timing in turns")
                # In a function of its own: its remote tensors are freed when it returns.
                parts = _time_and_trace(remote, a, step)
    finally:
        stop.set()
    parts["link_peak"] = link_peak
    return parts


def _time_and_trace(remote, a: dict, step) -> dict:
    size, n, overlap, rounds = a["size"], a["n_matmuls"], a["overlap"], a["rounds"]
    worker = remote.device
    nbytes = n * size * size * BYTES_PER_FLOAT
    x = random_matrix(size, worker)
    run, copy = chain_on(worker, n), copy_to(HOST)
    sequential = run_and_copy(worker, HOST, n, overlap=False)
    overlapped = run_and_copy(worker, HOST, n, overlap=True) if overlap else None
    results = run(x)
    tiny = random_matrix(1, worker)
    runs = [
        (
            lambda: run(x),
            f"run: {n} matmuls of {size}² on the worker",
            {"flops": chain_flops(size, n)},
        ),
        (
            lambda: copy(results),
            f"copy: {n} results ({format_bytes(nbytes)}) worker -> driver",
            {"nbytes": nbytes, "peak": a.get("link_peak")},
        ),
        (lambda: sequential(tiny), "launch: one function on 1x1 matrices", {}),
        (lambda: sequential(x), "run and copy, one after the other", {}),
    ]
    if overlapped is not None:
        runs.append((lambda: overlapped(x), "run and copy, overlapped", {}))
    labels = {label: i for i, (_, label, _) in enumerate(runs, 1)}

    def on_repeat(round_number, label, repeat):
        step(
            f"round {round_number} of {rounds}: timing {label.split(':')[0]} "
            f"({labels[label]} of {len(runs)}), repeat {repeat}",
            advance=False,
        )

    timed = measure_interleaved(
        runs, rounds, on_round=lambda: step("round done"), on_repeat=on_repeat, **a["options"]
    )
    m_run, m_copy, m_launch, m_sequential, *rest = timed
    m_overlapped = rest[0] if rest else None
    traced_fn = overlapped if overlapped is not None else sequential
    step("tracing one call in the worker and the driver", advance=False)
    rows, source = trace_with_worker(
        traced_fn,
        x,
        worker_address=remote.addresses[0],
        worker_device=worker,
        expected_matmuls=n,
        expected_s=(m_overlapped or m_sequential).median,
    )
    step("traced")
    overhead = None
    if a["trace_overhead"]:
        step("timing the tracing overhead", advance=False)
        overhead = tracing_overhead(traced_fn, x, min_runs=3, max_runs=10, budget_s=0.3)
        step("done")
    return {
        "measurements": {
            k: _m(m)
            for k, m in zip(
                ("run", "copy", "launch", "sequential", "overlapped"),
                (m_run, m_copy, m_launch, m_sequential, m_overlapped),
                strict=True,
            )
        },
        "rows": [dataclasses.asdict(r) for r in rows],
        "source": BOTH_TRACED if source == "worker and notebook" else "driver only",
        "worker_device": device_label(worker),
        "overhead": None if overhead is None else [_m(overhead.untraced), _m(overhead.traced)],
        "size": size,
        "n_matmuls": n,
        "overlap": overlap,
    }


def _m(m: Measurement | None) -> dict | None:
    return None if m is None else dataclasses.asdict(m)


def _measurement(d: dict | None) -> Measurement | None:
    return None if d is None else Measurement(**d)


def result_from_json(raw: dict, nbytes: int) -> ComputeCopyResult:
    """The driver's JSON answer as a `ComputeCopyResult`."""
    m = {k: _measurement(v) for k, v in raw["measurements"].items()}
    m["copy"].peak = raw["link_peak"]
    overhead = raw.get("overhead")
    return ComputeCopyResult(
        size=raw["size"],
        n_matmuls=raw["n_matmuls"],
        overlap=raw["overlap"],
        nbytes=nbytes,
        run=m["run"],
        copy=m["copy"],
        sequential=m["sequential"],
        overlapped=m["overlapped"],
        link_peak=raw["link_peak"],
        rows=[OpEvent(**r) for r in raw["rows"]],
        trace_source=raw["source"],
        worker_device=raw["worker_device"],
        launch=m["launch"],
        overhead=None if overhead is None else TracingOverhead(*map(_measurement, overhead)),
    )


# --- how long it will take ----------------------------------------------------------------------

START_S = 8.0  # two TensorFlow processes start (each ~3 s on an idle 2-core machine)
ASSUMED_FLOPS = 10e9  # one worker thread, the low end of what we measured; a guess
ASSUMED_LINK = 0.3e9  # loopback gRPC, B/s, the low end of what we measured; a guess


def estimate_compute_copy_s(
    size: int,
    n_matmuls: int,
    rounds: int = 3,
    flops_per_s: float | None = None,
    link_bytes_per_s: float | None = None,
) -> float:
    """Expected seconds of `run_compute_copy`: start-up, then each variant's timed blocks.

    Rates default to conservative guesses; pass a previous run's measured rates for a better one.
    """
    size = require_count("size (the 'matrix size' slider)", size, 1, MAX_SIZE)
    n_matmuls = require_count(
        "n_matmuls (the 'number of matmuls' slider)", n_matmuls, 1, MAX_MATMULS
    )
    rounds = require_count("rounds", rounds, 1, MAX_ROUNDS)
    run = chain_flops(size, n_matmuls) / (flops_per_s or ASSUMED_FLOPS)
    copy = n_matmuls * size * size * BYTES_PER_FLOAT / (link_bytes_per_s or ASSUMED_LINK)
    calls = [run, copy, 2e-3, run + copy, max(run, copy)]
    # measure: a warm-up, a calibration, then 3-5 blocks of at least 10 ms or the budget
    per_round = sum(2 * t + max(3 * max(t, 0.01), min(0.2, 5 * max(t, 0.01))) for t in calls)
    return START_S + 1.0 + rounds * per_round + 8 * max(run + copy, 0.05)
