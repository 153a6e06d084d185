"""A second TensorFlow process as a device at the end of a real link, and how to watch it.

`remote_tf_workers(k)` starts k `tf.distribute.Server` workers on loopback (a `WorkerGroup`) and
connects this process to them: ops placed on '/job:worker/replica:0/task:0/device:CPU:0' run in
the worker, and their results cross a real loopback gRPC link, so a copy's cost is measured, not
simulated (between two logical CPU devices of one process a "copy" moves no bytes).

Connect from a *driver* process, never from a notebook's kernel: probed on TF 2.21, once a
connected worker has died, a call placed on it raises `UnavailableError` within milliseconds, but
`tf.test.experimental.sync_devices()` (which every `measure` and `Benchmark` calls) waits for it
forever. A driver that is a `WorkerGroup` worker itself can be ended by its parent's timeout, and
`exit_if_workers_die` ends it at once when its worker dies.

Two more tools serve the link:
- `loopback_tcp_bandwidth()`: raw TCP over 127.0.0.1, the most the link under gRPC can carry.
- `trace_with_worker(fn, ...)`: one call traced in this process and in the worker on one clock.
  The worker's gRPC server also serves TF's profiler (`tf.profiler.experimental.client.trace(
  'grpc://127.0.0.1:PORT', ...)`), traced from a thread while this process profiles itself;
  both XSpaces are merged by `timeline.events_from_xspace`. Both processes are on one machine,
  with one wall clock; across machines the clocks would need aligning.

Caveat: TensorFlow's gRPC servers listen on every interface (0.0.0.0:PORT, hard-coded in TF) and
accept unauthenticated work while they live; the workers here live only as long as their `with`.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import glob
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

import tensorflow as tf
from tensorflow.python.eager import context as eager_context

from d2lhelpers.core.checks import require_count, require_processes
from d2lhelpers.core.units import GiB, MiB
from d2lhelpers.devices import setup_devices
from d2lhelpers.processes import worker_main
from d2lhelpers.processes.group import TF_SERVER_JOB, WorkerError, WorkerGroup, free_ports
from d2lhelpers.timing.benchmark import sync_devices
from d2lhelpers.tracing.timeline import (
    OpEvent,
    busy_intervals,
    busy_seconds,
    device_label,
    events_from_xspace,
    graph_op_devices,
    overlap_seconds,
    profiling,
    read_xspace,
    trace,
)

TF_SERVER_TARGET = "d2lhelpers.processes.tf_servers:tf_server"
HOST = "/job:localhost/replica:0/task:0/device:CPU:0"  # this process's CPU once connected
TCP_PROBE_BYTES = 256 * MiB
TCP_CHUNK_BYTES = 4 * MiB
TCP_TIMEOUT_S = 10.0
TCP_MAX_CHUNK_BYTES, TCP_MAX_PROBE_BYTES = 64 * MiB, 4 * GiB
TRACE_START_WAIT_S = 0.05  # measured: the worker's profiler is recording ~20 ms after the request
TRACE_MARGIN_S = 0.25
TRACE_JOIN_EXTRA_S = 30.0  # the profiler client's answer may come this long after its window
WATCH_PERIOD_S = 0.5
WORKER_DIED_EXIT_CODE = 3


# --- the worker, and this process connected to it ---------------------------------------------


def tf_server(context: worker_main.WorkerContext) -> None:
    """Worker target: a `tf.distribute.Server`, task `index` of job 'worker', up until ended.

    TensorFlow servers have no `stop()`; ending the process is the only way to end one.
    """
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=int(os.environ["TF_NUM_INTRAOP_THREADS"]),
        inter_op_parallelism_threads=int(os.environ["TF_NUM_INTEROP_THREADS"]),
    )
    server = tf.distribute.Server(
        tf.train.ClusterSpec({TF_SERVER_JOB: context.addresses}),
        job_name=TF_SERVER_JOB,
        task_index=context.index,
        protocol="grpc",
        config=config,
        start=True,
    )
    context.ready(target=server.target)
    context.wait_until_ended()


def tf_worker_device(task: int, job: str = TF_SERVER_JOB) -> str:
    """The name of task `task`'s CPU, for `tf.device(...)` once connected."""
    return f"/job:{job}/replica:0/task:{task}/device:CPU:0"


def connect_tf_workers(addresses: Sequence[str], job: str = TF_SERVER_JOB) -> list[str]:
    """Make the workers' CPUs usable from this process; returns their device names.

    Connecting starts this process's TensorFlow runtime, after which its own devices can no
    longer be set up, so `setup_devices()` runs first: the logical CPU devices stay, beside the
    remote ones. (Connecting first, then setting up, raises: the runtime has started.)
    """
    setup_devices()
    server_def = eager_context.get_server_def()
    if server_def is None:
        tf.config.experimental_connect_to_host(list(addresses), job_name=job)
    else:
        _update_job(server_def, job, addresses)
    return [tf_worker_device(task, job) for task in range(len(addresses))]


def disconnect_tf_workers(job: str = TF_SERVER_JOB) -> None:
    """Drop job `job` from this process's TensorFlow context, keeping its own devices.

    Needed before the workers end: with a dead worker still in the context,
    `tf.test.experimental.sync_devices()` (and so every `Benchmark`) waits forever. Tensors on
    local devices stay valid; tensors still held on a worker do not.
    """
    server_def = eager_context.get_server_def()
    if server_def is not None:
        _update_job(server_def, job, [])


def _update_job(server_def, job: str, addresses: Sequence[str]) -> None:
    # The public tf.config.experimental_connect_to_* would start a new local gRPC server on
    # each call and never stop the old one (measured: +2 servers and ~180 threads per
    # connect-disconnect); updating the server def reuses the one local server.
    for i in reversed(range(len(server_def.cluster.job))):
        if server_def.cluster.job[i].name == job:
            del server_def.cluster.job[i]
    if addresses:
        job_def = server_def.cluster.job.add(name=job)
        for task, address in enumerate(addresses):
            job_def.tasks[task] = address
    eager_context.context().update_server_def(server_def)


@dataclasses.dataclass
class RemoteTFWorkers:
    """Connected `tf.distribute.Server` workers: `devices[i]` names task i's CPU."""

    group: WorkerGroup
    devices: list[str]

    @property
    def device(self) -> str:
        """The first worker's CPU: '/job:worker/replica:0/task:0/device:CPU:0'."""
        return self.devices[0]

    @property
    def addresses(self) -> list[str]:
        return self.group.addresses


@contextlib.contextmanager
def remote_tf_workers(
    count: int = 1,
    *,
    intra_op_threads: int = 1,
    inter_op_threads: int = 1,
    ready_timeout: float = 60.0,
    grace_s: float = 2.0,
    pick_ports: Callable[[int], list[int]] = free_ports,
):
    """Start `count` TF server workers on loopback, connect this process to them, yield them as
    `RemoteTFWorkers`; on leaving, disconnect this process, then end the workers.

    Remote ops return before they finish: wait for them with `d2l.sync_devices()` (it syncs the
    remote devices too while they are connected) or by fetching a result (`.numpy()`).
    """
    count = require_processes("remote_tf_workers", count)
    with WorkerGroup(
        TF_SERVER_TARGET,
        count,
        intra_op_threads=intra_op_threads,
        inter_op_threads=inter_op_threads,
        ready_timeout=ready_timeout,
        grace_s=grace_s,
        pick_ports=pick_ports,
    ) as group:
        devices = connect_tf_workers(group.addresses)
        try:
            yield RemoteTFWorkers(group, devices)
        finally:
            disconnect_tf_workers()


@contextlib.contextmanager
def exit_if_workers_die(group: WorkerGroup, period_s: float = WATCH_PERIOD_S):
    """Inside the block, end this whole process (exit code 3, one line on stderr) as soon as a
    worker of `group` dies: a wait on a dead TF worker would otherwise never return.

    Meant for driver processes (a `WorkerGroup` worker whose parent then reports the line).
    """
    stop = threading.Event()

    def watch():
        while not stop.wait(period_s):
            try:
                group.check_alive()
            except WorkerError as error:
                sys.stderr.write(f"the TensorFlow worker died, so this driver ends: {error}\n")
                sys.stderr.flush()
                os._exit(WORKER_DIED_EXIT_CODE)

    watcher = threading.Thread(target=watch, daemon=True, name="exit_if_workers_die")
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=period_s + 1.0)


# --- the link's peak ----------------------------------------------------------------------------


def loopback_tcp_bandwidth(
    nbytes: int = TCP_PROBE_BYTES, chunk: int = TCP_CHUNK_BYTES, repeats: int = 2
) -> float:
    """Raw TCP throughput over 127.0.0.1, bytes/s: the best of `repeats` sends of `nbytes`.

    A plain socket sender (this thread) and receiver (another thread; both release the GIL in
    the kernel calls): the most the link under gRPC can carry on this machine. Every socket
    operation and the receiver's join time out after `TCP_TIMEOUT_S`.
    """
    chunk = require_count("chunk (bytes)", chunk, 1, TCP_MAX_CHUNK_BYTES)
    nbytes = require_count("nbytes", nbytes, chunk, TCP_MAX_PROBE_BYTES)
    repeats = require_count("repeats", repeats, 1, 100)
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
        c_stdout_silenced(),  # the profiler client prints "Starting to trace..." from C++
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
        client.join(window_s + TRACE_JOIN_EXTRA_S)
        if failures or client.is_alive():
            raise RuntimeError(f"the worker's trace failed: {failures or 'no answer'}")
        paths = glob.glob(f"{worker_dir}/plugins/profile/*/*.xplane.pb")
        paths += glob.glob(f"{local_dir}/plugins/profile/*/*.xplane.pb")
        return [read_xspace(path) for path in paths]


def _without_sync(rows: list[OpEvent]) -> list[OpEvent]:
    # SyncDevice is the clock's wait after the call, not the call's work.
    return [r for r in rows if not r.op.startswith("SyncDevice")]


@contextlib.contextmanager
def c_stdout_silenced():
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

    1: the shorter ran entirely while the other did; 0: they took turns (or one is missing).
    """
    computing = busy_intervals(rows, worker_device, "matmul")
    copying = busy_intervals(rows, host, "copy")
    shorter = min(busy_seconds(computing), busy_seconds(copying))
    return overlap_seconds(computing, copying) / shorter if shorter > 0 else 0.0
