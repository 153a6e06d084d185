"""Computation overlapped with communication, over a real link: a worker computes, we copy.

The seed runs a chain on GPU 0 and copies its results to the CPU. Here a second TensorFlow
process (a `tf.distribute.Server` on loopback, `workers.remote_tf_workers`) stands in for the
GPU, and this notebook's own CPU is the CPU: every copy crosses a real gRPC link over loopback
TCP, so its cost is measured, not simulated. For the chain y_i = y_{i-1} @ x (i = 1..n) computed
on the worker, and its n results copied here (n·size²·4 bytes):

    run        = T(y_1 .. y_n on the worker)
    copy       = T(y_1 .. y_n, already computed, worker -> here)      rate = n·size²·4 B / copy
    ideal one after the other  = run + copy
    ideal overlapped           = max(run, copy)
    hidden = (run + copy - overlapped) / min(run, copy)       1: the shorter part all hidden

Each call also pays a fixed launch (here ~2 ms: an RPC to the worker and back), measured as the
same one function on 1x1 matrices. run + copy pays it twice, one function once, so the forced
one-after-the-other function is compared with run + copy - launch.

Overlap needs compute and copies in ONE `tf.function`: the runtime then sends y_i while y_{i+1}
is computed. `run_and_copy(..., overlap=False)` is the same function with control dependencies
that hold every copy until the last matmul: the honest "one after the other" in one graph.

The timeline puts both processes on one clock: the worker's gRPC server also serves TF's profiler
(`tf.profiler.experimental.client.trace('grpc://127.0.0.1:PORT', ...)`, no extra server needed),
traced in a thread while this process profiles itself; both XSpaces are merged by
`timeline.events_from_xspace`. Both write to this machine's disk, and one machine has one
wall clock; across machines the worker would write on its own disk, with its own clock.

Why a real link: a "copy" between two logical CPU devices of one process moves no bytes (the
receiver gets the sender's buffer), so it costs microseconds whatever its size
(`local_copy_cost`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import glob
import numbers
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from d2lhelpers import benchmark
from d2lhelpers.benchmark import Measurement, compare_to_ideal, measure, sync_devices
from d2lhelpers.devices import Device, check_fits, select_devices
from d2lhelpers.timeline import (
    OpEvent,
    TracingOverhead,
    busy_intervals,
    busy_seconds,
    device_label,
    events_from_xspace,
    graph_op_devices,
    overlap_seconds,
    profiling,
    read_xspace,
    trace,
    tracing_overhead,
)
from d2lhelpers.units import format_bytes, format_rate, format_seconds
from d2lhelpers.workers import remote_tf_workers
from d2lhelpers.workloads import BYTES_PER_FLOAT, chain_flops, random_matrix

HOST = "/job:localhost/replica:0/task:0/device:CPU:0"  # this process's CPU once connected
MiB = 1024 * 1024
GB = 1e9
SEED_PCIE_PRACTICAL = 25e9  # PCIe 4.0 x16 in practice, B/s (32 GB/s raw each way)
SEED_COPY_BYTES = 50 * 4000 * 4000 * BYTES_PER_FLOAT  # the seed's 50 results of 4000²
SEED_COPY_S = 2.1474
SEED_RUN_S, SEED_BOTH_S = 0.0557, 2.5692  # 'Run on GPU1', 'Run on GPU1 and copy to CPU'
TCP_PROBE_BYTES = 256 * MiB
TCP_CHUNK_BYTES = 4 * MiB
TCP_TIMEOUT_S = 10.0
TRACE_START_WAIT_S = 0.05  # measured: the worker's profiler is recording ~20 ms after the request
TRACE_MARGIN_S = 0.25
# The worker multiplies on one thread (intra-op 1); a second inter-op thread hands each result
# to the link beside the next matmul, as a GPU's copy engine works beside its SMs. With one,
# the sends wait between matmuls (measured: traced overlap 0-90% from run to run, vs 60-90%).
WORKER_INTER_OP_THREADS = 2


# --- the work -----------------------------------------------------------------------------------


def chain_on(device: str, n: int) -> Callable:
    """A tf.function: x -> [y_1, ..., y_n] with y_i = y_{i-1} @ x, all computed and kept on
    `device`."""

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


# --- the link's peak, and why a local "copy" is no copy -------------------------------------------


def loopback_tcp_bandwidth(
    nbytes: int = TCP_PROBE_BYTES, chunk: int = TCP_CHUNK_BYTES, repeats: int = 2
) -> float:
    """Raw TCP throughput over 127.0.0.1, bytes/s: the best of `repeats` sends of `nbytes`.

    A plain socket sender (this thread) and receiver (another thread; both release the GIL in
    the kernel calls): the most the link under gRPC can carry on this machine.
    """
    if nbytes < chunk or chunk < 1:
        raise ValueError(f"need nbytes >= chunk >= 1, got nbytes={nbytes}, chunk={chunk}")
    return max(_tcp_send_once(nbytes, chunk) for _ in range(repeats))


def _tcp_send_once(nbytes: int, chunk: int) -> float:
    chunks = nbytes // chunk
    total = chunks * chunk
    received, failures = [0], []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(TCP_TIMEOUT_S)

        def receive():
            try:
                connection, _ = server.accept()
                with connection:
                    connection.settimeout(TCP_TIMEOUT_S)
                    buffer = memoryview(bytearray(chunk))
                    while received[0] < total:
                        got = connection.recv_into(buffer)
                        if not got:
                            break
                        received[0] += got
            except OSError as error:
                failures.append(error)

        receiver = threading.Thread(target=receive, daemon=True)
        receiver.start()
        payload = bytes(chunk)
        with socket.create_connection(server.getsockname(), timeout=TCP_TIMEOUT_S) as sender:
            began = time.perf_counter()
            for _ in range(chunks):
                sender.sendall(payload)
            receiver.join(TCP_TIMEOUT_S)
            elapsed = time.perf_counter() - began
    if failures or received[0] != total:
        raise RuntimeError(f"loopback TCP probe received {received[0]} of {total} bytes {failures}")
    return total / elapsed


@dataclasses.dataclass
class LocalCopyResult:
    """`tf.identity` from one logical device to another of this process, at several sizes."""

    source: str
    destination: str
    sizes: list[int]  # bytes
    copies: list[Measurement]
    memcpy: Measurement  # a real copy of the largest size in this machine's memory (NumPy)

    @property
    def size_ratio(self) -> float:
        return self.sizes[-1] / self.sizes[0]

    @property
    def time_ratio(self) -> float:
        """Time of the largest over the smallest: about 1 when no bytes move."""
        return self.copies[-1].median / self.copies[0].median

    @property
    def moved_no_bytes(self) -> bool:
        """True when the time hardly grew with the size (on GPUs the same call really copies)."""
        return self.time_ratio < self.size_ratio**0.5

    def lines(self) -> list[str]:
        src, dst = device_label(self.source), device_label(self.destination)
        lines = [
            f"'copy' {src} -> {dst} of {format_bytes(size)}: {format_seconds(m.median)}"
            for size, m in zip(self.sizes, self.copies, strict=True)
        ]
        verdict = (
            "no bytes moved (the receiver got the sender's buffer)"
            if self.moved_no_bytes
            else "the time grew with the bytes: this copy really moves them"
        )
        lines.append(
            f"{self.size_ratio:.0f}x the bytes took {self.time_ratio:.2f}x the time: {verdict}"
        )
        lines.append(
            f"a real copy of {format_bytes(self.sizes[-1])} in this machine's memory takes "
            f"{format_seconds(self.memcpy.median)} ({format_rate(self.memcpy.rate, 'B/s')})"
        )
        return lines


def local_copy_cost(
    sizes: Sequence[int] = (1 * MiB, 64 * MiB), **measure_options
) -> LocalCopyResult:
    """Time `tf.identity` of a tensor of each size (bytes) from set-up device 0 to device 1,
    inside one tf.function, and a real memory copy of the largest size for comparison."""
    sizes = sorted(sizes)
    if not sizes or sizes[0] < BYTES_PER_FLOAT:
        raise ValueError(f"sizes must be at least {BYTES_PER_FLOAT} bytes, got {sizes}")
    source, destination = select_devices(2)
    check_fits(2 * sizes[-1], [source], "the local copy probe")
    measure_options = {"min_runs": 5, "budget_s": 0.5, **measure_options}

    @tf.function
    def copy(x):
        with tf.device(destination.name):
            return tf.identity(x)

    copies = []
    for size in sizes:
        with tf.device(source.name):
            x = tf.zeros([size // BYTES_PER_FLOAT])
        copies.append(
            measure(lambda x=x: copy(x), f"identity of {format_bytes(size)}", **measure_options)
        )
    array = np.ones(sizes[-1] // BYTES_PER_FLOAT, np.float32)
    target = np.empty_like(array)
    memcpy = measure(
        lambda: np.copyto(target, array),
        f"NumPy copy of {format_bytes(sizes[-1])}",
        nbytes=array.nbytes,
        sync=lambda: None,
        **measure_options,
    )
    return LocalCopyResult(source.name, destination.name, list(sizes), copies, memcpy)


# --- one timeline for two processes -------------------------------------------------------------


def trace_with_worker(
    fn: Callable,
    *args,
    worker_address: str,
    worker_device: str,
    expected_matmuls: int,
    expected_s: float = 0.1,
    tries: int = 2,
) -> tuple[list[OpEvent], str]:
    """One call of `fn(*args)` traced in this process and in the worker, on one time axis.

    Returns (rows, source): source 'worker and notebook' when the worker's trace holds all
    `expected_matmuls` matmuls of `worker_device`; after `tries` that do not, the local trace
    alone ('notebook only': the copies' receiving ends, no worker compute).
    """
    op_devices, identities = graph_op_devices(fn.get_concrete_function(*args).graph)
    worker = device_label(worker_device)
    fn(*args)  # warm: the trace shows a steady call, not tracing and compiling
    sync_devices()
    for attempt in range(tries):
        wait_s = TRACE_START_WAIT_S * (1 + 3 * attempt)
        window_s = wait_s + 3 * (1 + attempt) * expected_s + TRACE_MARGIN_S
        with contextlib.suppress(tf.errors.OpError, RuntimeError):
            spaces = _trace_both(fn, args, worker_address, wait_s, window_s)
            rows = _without_sync(events_from_xspace(spaces, op_devices, HOST, identities))
            if sum(r.device == worker and r.kind == "matmul" for r in rows) >= expected_matmuls:
                return rows, "worker and notebook"
    return _without_sync(trace(fn, *args, warmup=False)), "notebook only"


def _trace_both(fn, args, worker_address: str, wait_s: float, window_s: float) -> list:
    options = tf.profiler.experimental.ProfilerOptions(
        host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
    )
    failures = []
    with (
        tempfile.TemporaryDirectory() as worker_dir,
        tempfile.TemporaryDirectory() as local_dir,
        _c_stdout_silenced(),  # the profiler client prints "Starting to trace..." from C++
    ):

        def trace_worker():
            try:
                tf.profiler.experimental.client.trace(
                    f"grpc://{worker_address}",
                    worker_dir,
                    max(1, round(window_s * 1e3)),
                    num_tracing_attempts=1,
                    options=options,
                )
            except Exception as error:  # reported below, in this thread
                failures.append(error)

        client = threading.Thread(target=trace_worker, daemon=True)
        with profiling(local_dir):
            client.start()
            time.sleep(wait_s)  # the worker's profiler starts when the request arrives
            fn(*args)
            sync_devices()
        client.join(window_s + 30)
        if failures or client.is_alive():
            raise RuntimeError(f"the worker's trace failed: {failures or 'no answer'}")
        paths = glob.glob(f"{worker_dir}/plugins/profile/*/*.xplane.pb")
        paths += glob.glob(f"{local_dir}/plugins/profile/*/*.xplane.pb")
        return [read_xspace(path) for path in paths]


def _without_sync(rows: list[OpEvent]) -> list[OpEvent]:
    # SyncDevice is the clock's wait after the call, not the call's work.
    return [r for r in rows if not r.op.startswith("SyncDevice")]


@contextlib.contextmanager
def _c_stdout_silenced():
    """C/C++ writes to file descriptor 1 go to /dev/null inside the block (Python's don't)."""
    libc = ctypes.CDLL(None)
    libc.fflush(None)
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 1)
        yield
    finally:
        libc.fflush(None)  # C's buffered stdout must drain to /dev/null, not later to the cell
        os.dup2(saved, 1)
        os.close(saved)


def traced_overlap(rows: Sequence[OpEvent], worker_device: str, host: str = HOST) -> float:
    """|worker's matmuls ∩ copies here| / the shorter of the two busy times, from a trace.

    1: the shorter ran entirely while the other did; 0: they took turns.
    """
    computing = busy_intervals(rows, worker_device, "matmul")
    copying = busy_intervals(rows, host, "copy")
    shorter = min(busy_seconds(computing), busy_seconds(copying))
    return overlap_seconds(computing, copying) / shorter if shorter > 0 else 0.0


# --- the experiment behind notebook 02's panel ----------------------------------------------------


@dataclasses.dataclass
class ComputeCopyResult:
    """Run, copy, and both in one function (forced one after the other, and overlapped)."""

    size: int
    n_matmuls: int
    overlap: bool
    nbytes: int  # the n results copied
    run: Measurement
    copy: Measurement
    sequential: Measurement  # one function, copies held until the last matmul
    overlapped: Measurement | None  # one function, copies as soon as each result is ready
    link_peak: float  # loopback TCP, B/s, measured
    rows: list[OpEvent]  # one traced call of the overlapped (or, without overlap, sequential) run
    trace_source: str  # 'worker and notebook' (one clock) or 'notebook only' (fallback)
    worker_device: str
    launch: Measurement | None = None  # the one function on 1x1 matrices: a call's fixed cost
    overhead: TracingOverhead | None = None

    @property
    def ideal_sequential(self) -> float:
        return self.run.median + self.copy.median

    @property
    def ideal_overlapped(self) -> float:
        return max(self.run.median, self.copy.median)

    @property
    def ideal_sequential_one_function(self) -> float:
        """run + copy - launch: one function pays one launch, the two calls paid two."""
        return self.ideal_sequential - (self.launch.median if self.launch else 0.0)

    @property
    def combined(self) -> Measurement:
        """The run whose hidden fraction is reported: overlapped if run, else sequential."""
        return self.overlapped if self.overlapped is not None else self.sequential

    @property
    def hidden_fraction(self) -> float:
        """(run + copy - launch - combined) / min(run, copy): 1 the shorter part all hidden, 0 none.

        One function pays one launch where the separate run and copy calls paid two; that saved
        launch is taken off so it is not counted as hidden copy time.
        """
        saved = self.ideal_sequential_one_function - self.combined.median
        return saved / min(self.run.median, self.copy.median)

    @property
    def hidden_vs_forced(self) -> float | None:
        """(sequential - overlapped) / min(run, copy): what overlap alone hid, both runs being
        one function (a separate copy call also pays its own launch, which one function saves).
        """
        if self.overlapped is None:
            return None
        saved = self.sequential.median - self.overlapped.median
        return saved / min(self.run.median, self.copy.median)

    @property
    def hidden_forced(self) -> float:
        """(run + copy - launch - sequential) / min(run, copy): ideally 0, nothing overlaps."""
        saved = self.ideal_sequential_one_function - self.sequential.median
        return saved / min(self.run.median, self.copy.median)

    @property
    def copy_rate(self) -> float:
        """Bytes per second the copy moved over the link."""
        return self.nbytes / self.copy.median

    @property
    def traced_overlap(self) -> float:
        return traced_overlap(self.rows, self.worker_device)

    def lines(self) -> list[str]:
        """Print-ready: each time beside its ideal, the link's rate beside its peak."""
        link = format_bytes(self.nbytes)
        lines = [
            str(self.run),
            str(self.copy),
            f"copy: {self.copy_rate / GB:.2f} GB/s over loopback gRPC; the link's raw peak here "
            f"(loopback TCP, measured) {self.link_peak / GB:.2f} GB/s; the seed's copy moved "
            f"{SEED_COPY_BYTES / SEED_COPY_S / GB:.1f} GB/s on PCIe 4 x16 "
            f"(≈{SEED_PCIE_PRACTICAL / GB:.0f} GB/s in practice)",
        ]
        if self.launch is not None:
            lines.append(
                f"launch: each call costs {format_seconds(self.launch.median)} whatever its work "
                "(the one function on 1x1 matrices); run + copy counts it twice"
            )
        lines.append(
            compare_to_ideal(
                self.sequential.median,
                self.ideal_sequential_one_function,
                "one after the other (one function), ideal run + copy"
                + (" - launch" if self.launch is not None else ""),
            )
        )
        if self.overlapped is not None:
            lines.append(
                compare_to_ideal(
                    self.overlapped.median,
                    self.ideal_overlapped,
                    "overlapped (one function), ideal max(run, copy)",
                )
            )
            lines.append(
                f"hidden by overlap: {self.hidden_fraction:.0%} of min(run, copy) "
                "(ideal 100%: (run + copy - launch - overlapped) / min(run, copy))"
            )
        else:
            lines.append(
                f"hidden by the forced order: {self.hidden_forced:.0%} of min(run, copy) "
                "(ideal 0%: (run + copy - launch - one after the other) / min(run, copy))"
            )
        if self.hidden_vs_forced is not None:
            lines.append(
                f"  measured against the forced order in the same one function: "
                f"{self.hidden_vs_forced:.0%} (ideal 100%)"
            )
        what = "overlapped" if self.overlap else "one-after-the-other"
        if self.trace_source == "worker and notebook":
            lines.append(
                f"traced {what} call ({link} copied, worker and notebook on one clock): copies "
                f"ran while the worker multiplied for {self.traced_overlap:.0%} of the shorter part"
            )
        else:
            lines.append(
                f"traced {what} call: NOTE the worker's trace could not be taken, so the "
                "timeline shows only this process (the copies' receiving ends), not the matmuls"
            )
        if self.overhead is not None:
            lines.append(f"tracing overhead (this process's profiler): {self.overhead}")
        for m in (self.run, self.copy, self.sequential, self.overlapped, self.launch):
            for warning in m.warnings if m is not None else ():
                lines.append(f"WARNING ({m.label}): {warning}")
        return lines


def seed_lines() -> list[str]:
    """What the seed's own numbers show (a GPU, PCIe): no overlap at all, and a slow copy."""
    sequential, overlapped = SEED_RUN_S + SEED_COPY_S, max(SEED_RUN_S, SEED_COPY_S)
    rate = SEED_COPY_BYTES / SEED_COPY_S
    return [
        f"seed: run {SEED_RUN_S} s + copy {SEED_COPY_S} s = {sequential:.4f} s one after the "
        f"other; overlapped it could take max(run, copy) = {overlapped:.4f} s",
        f"seed: 'run and copy' took {SEED_BOTH_S} s = {SEED_BOTH_S / sequential:.2f}x run + copy"
        ": no overlap at all (its copies were separate calls, made after the run)",
        f"seed: its copy moved {SEED_COPY_BYTES / GB:.1f} GB in {SEED_COPY_S} s = "
        f"{rate / GB:.2f} GB/s on a PCIe 4 x16 link that carries ≈{SEED_PCIE_PRACTICAL / GB:.0f}"
        f" GB/s: {rate / SEED_PCIE_PRACTICAL:.0%} of it",
    ]


def host_device() -> Device:
    """This process's CPU (the copies' destination), as a `Device` for `check_fits`."""
    return Device(HOST, "CPU", 0, "this notebook's CPU", memory_bytes=None)


def check_compute_copy_fits(size: int, n_matmuls: int) -> int:
    """Refuse bad or too-large inputs before anything starts; return the bytes copied.

    This machine holds both sides: the worker's x and n results, and the n copies here.
    """
    for name, value in (("size", size), ("n_matmuls", n_matmuls)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    size, n_matmuls = int(size), int(n_matmuls)
    nbytes = n_matmuls * size * size * BYTES_PER_FLOAT
    held = 2 * nbytes + size * size * BYTES_PER_FLOAT
    check_fits(held, [host_device()], f"{n_matmuls} results of {size}², held by worker and here")
    return nbytes


def measure_interleaved(
    runs: Sequence[tuple[Callable[[], object], str, dict]],
    rounds: int = 3,
    on_round: Callable[[], None] | None = None,
    **measure_options,
) -> list[Measurement]:
    """Time several (run, label, rate options) in turns: each of `rounds` rounds `measure`s every
    run once; each run's times from all rounds are pooled into one Measurement.

    Taking turns spreads every run over the same stretch of time, so a machine that gets busier
    half-way slows them all alike and their ratios stay fair (one after the other, the last
    run would take all of it).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    parts: list[list[Measurement]] = [[] for _ in runs]
    for _ in range(rounds):
        for taken, (run, label, rate_options) in zip(parts, runs, strict=True):
            taken.append(measure(run, label, **rate_options, **measure_options))
        if on_round:
            on_round()
    pooled = []
    for taken in parts:
        first = taken[0]
        times = [t for m in taken for t in m.times]
        merged = Measurement(first.label, times, first.work, first.unit, first.peak)
        # The pooled times get measure's own checks (noisy, above the peak), private there.
        merged.warnings = benchmark.measurement_warnings(merged)
        pooled.append(merged)
    return pooled


def compute_copy_experiment(
    size: int = 512,
    n_matmuls: int = 10,
    overlap: bool = True,
    progress: Callable[[int, int], None] | None = None,
    *,
    rounds: int = 3,
    trace_overhead: bool = True,
    **measure_options,
) -> ComputeCopyResult:
    """Start a worker, time run / copy / both (see the module's equations), trace, end it.

    overlap=False runs only the one-after-the-other variants (run, copy, forced sequential);
    overlap=True adds the overlapped one, and traces it. The variants are timed in turns,
    `rounds` times (`measure_interleaved`; `measure_options` apply to each turn). Sizes that do
    not fit are refused before the worker starts; the worker is ended whatever happens.
    `progress(done, total)` is called after each step.
    """
    nbytes = check_compute_copy_fits(size, n_matmuls)
    size, n_matmuls = int(size), int(n_matmuls)
    measure_options = {"min_runs": 3, "max_runs": 5, "budget_s": 0.2, **measure_options}
    total = 3 + rounds + trace_overhead
    done = [0]

    def step():
        done[0] += 1
        if progress:
            progress(done[0], total)

    link_peak = loopback_tcp_bandwidth()
    step()
    with remote_tf_workers(1, inter_op_threads=WORKER_INTER_OP_THREADS) as remote:
        step()
        # In a function of its own: its remote tensors are freed when it returns, while the
        # worker still lives.
        parts = _time_and_trace(
            remote,
            size,
            n_matmuls,
            overlap,
            rounds,
            trace_overhead,
            link_peak,
            step,
            measure_options,
        )
    return ComputeCopyResult(size, n_matmuls, overlap, nbytes, *parts[:4], link_peak, *parts[4:])


def _time_and_trace(
    remote, size, n, overlap, rounds, trace_overhead, link_peak, step, measure_options
):
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
            f"copy: {n} results ({format_bytes(nbytes)}) worker -> this CPU",
            {"nbytes": nbytes, "peak": link_peak},
        ),
        (lambda: sequential(tiny), "launch: one function on 1x1 matrices", {}),
        (lambda: sequential(x), "run and copy, one after the other", {}),
    ]
    if overlapped is not None:
        runs.append((lambda: overlapped(x), "run and copy, overlapped", {}))
    m_run, m_copy, m_launch, m_sequential, *rest = measure_interleaved(
        runs, rounds, on_round=step, **measure_options
    )
    m_overlapped = rest[0] if rest else None
    traced_fn = overlapped if overlapped is not None else sequential
    rows, source = trace_with_worker(
        traced_fn,
        x,
        worker_address=remote.addresses[0],
        worker_device=worker,
        expected_matmuls=n,
        expected_s=(m_overlapped or m_sequential).median,
    )
    step()
    overhead = None
    if trace_overhead:
        overhead = tracing_overhead(traced_fn, x, min_runs=3, max_runs=10, budget_s=0.3)
        step()
    return (
        m_run,
        m_copy,
        m_sequential,
        m_overlapped,
        rows,
        source,
        device_label(worker),
        m_launch,
        overhead,
    )
