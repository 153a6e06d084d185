"""A second TensorFlow process as a device at the end of a real link, and how to watch it.

`remote_tf_workers(k)` starts k `tf.distribute.Server` workers on this machine (a `WorkerGroup`)
and connects this process to them: ops placed on '/job:worker/replica:0/task:0/device:CPU:0' run
in the worker, and their results cross a real gRPC link, so a copy's cost is measured, not
simulated (between two logical CPU devices of one process a "copy" moves (almost) no bytes:
notebook 02 bounds how many).
`tf_worker_at('HOST:PORT')` connects to a server already running elsewhere instead (another
network namespace, another machine), started there with

    python -m d2lhelpers.processes.tf_servers --address HOST:PORT

Every worker also runs a TCP source (`tcp_source`, on the next port by default), so that timing
`tcp_fetch(worker.sources[0])` measures raw TCP over the very link the copies cross, in their
direction.

Connect from a *driver* process, never from a notebook's kernel: probed on TF 2.21, once a
connected worker has died, a call placed on it raises `UnavailableError` within milliseconds, but
`tf.test.experimental.sync_devices()` (which every `measure` and `Benchmark` calls) waits for it
forever. A driver that is a `WorkerGroup` worker itself can be ended by its parent's timeout, and
`exit_if_worker_dies` ends it at once when its worker dies.

`trace_with_worker(fn, ...)` traces one call in this process and in the worker on one clock: the
worker's gRPC server also serves TF's profiler (`tf.profiler.experimental.client.trace(
'grpc://HOST:PORT', ...)`), traced from a thread while this process profiles itself; both XSpaces
are merged by `timeline.events_from_xspace`. That needs one wall clock: on one machine (network
namespaces included) there is one; across machines the clocks would need aligning.

Caveat: TensorFlow's gRPC servers listen on every interface (0.0.0.0:PORT, hard-coded in TF) and
accept unauthenticated work while they live; the workers here live only as long as their `with`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import os
import socket
import struct
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
    Trace,
    busy_intervals,
    busy_seconds,
    device_label,
    events_from_xspace,
    fresh_copy,
    graph_op_devices,
    incomplete_reason,
    overlap_seconds,
    profiler_options,
    profiling,
    read_logdir,
    trace,
)

TF_SERVER_TARGET = "d2lhelpers.processes.tf_servers:tf_server"
HOST = "/job:localhost/replica:0/task:0/device:CPU:0"  # this process's CPU once connected
TCP_PROBE_BYTES = 64 * MiB
TCP_CHUNK_BYTES = 4 * MiB
TCP_TIMEOUT_S = 10.0
TCP_MAX_PROBE_BYTES = 4 * GiB
TRACE_START_WAIT_S = 0.05  # measured: the worker's profiler is recording ~20 ms after the request
TRACE_MARGIN_S = 0.25
TRACE_JOIN_EXTRA_S = 30.0  # the profiler client's answer may come this long after its window
WATCH_PERIOD_S = 0.5
WORKER_DIED_EXIT_CODE = 3
BOTH_TRACED, DRIVER_TRACED = "worker and driver", "driver only"  # what a trace holds


# --- the worker, and this process connected to it ---------------------------------------------


def start_tf_server(addresses: Sequence[str], index: int, intra: int, inter: int):
    """A started `tf.distribute.Server`, task `index` of job 'worker' at `addresses`."""
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=intra, inter_op_parallelism_threads=inter
    )
    return tf.distribute.Server(
        tf.train.ClusterSpec({TF_SERVER_JOB: list(addresses)}),
        job_name=TF_SERVER_JOB,
        task_index=index,
        protocol="grpc",
        config=config,
        start=True,
    )


def tf_server(context: worker_main.WorkerContext) -> None:
    """Worker target: a TF server (task `index` of job 'worker') and a TCP source, up until ended.

    TensorFlow servers have no `stop()`; ending the process is the only way to end one.
    """
    server = start_tf_server(
        context.addresses,
        context.index,
        int(os.environ["TF_NUM_INTRAOP_THREADS"]),
        int(os.environ["TF_NUM_INTEROP_THREADS"]),
    )
    source = tcp_source()
    context.ready(target=server.target, source_port=source.getsockname()[1])
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
    """Connected TF server workers: `devices[i]` names task i's CPU, `sources[i]` its TCP source.

    `check_alive()` raises (`WorkerError` or `OSError`) once a worker is gone.
    """

    devices: list[str]
    addresses: list[str]
    sources: list[str]
    check_alive: Callable[[], None]
    group: WorkerGroup | None = None  # the processes, when started here

    @property
    def device(self) -> str:
        """The first worker's CPU: '/job:worker/replica:0/task:0/device:CPU:0'."""
        return self.devices[0]


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
    """Start `count` TF server workers on this machine, connect this process to them, yield them
    as `RemoteTFWorkers`; on leaving, disconnect this process, then end the workers.

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
        hosts = [address.rpartition(":")[0] for address in group.addresses]
        sources = [
            f"{h}:{info['source_port']}" for h, info in zip(hosts, group.ready_info, strict=True)
        ]
        devices = connect_tf_workers(group.addresses)
        try:
            yield RemoteTFWorkers(devices, group.addresses, sources, group.check_alive, group)
        finally:
            disconnect_tf_workers()


@contextlib.contextmanager
def tf_worker_at(address: str, source: str | None = None):
    """Connect this process to a TF server already running at 'HOST:PORT' (started there by
    `python -m d2lhelpers.processes.tf_servers --address HOST:PORT`); yield it as
    `RemoteTFWorkers`, disconnect on leaving. Its TCP source is `source`, by default HOST:PORT+1.
    """
    host, port = split_address(address)
    source = source or f"{host}:{port + 1}"
    split_address(source)

    def check_alive():
        socket.create_connection((host, port), timeout=TCP_TIMEOUT_S).close()

    check_alive()  # refused now, with the address in the message, rather than inside TensorFlow
    devices = connect_tf_workers([address])
    try:
        yield RemoteTFWorkers(devices, [address], [source], check_alive)
    finally:
        disconnect_tf_workers()


def split_address(address: str) -> tuple[str, int]:
    """'HOST:PORT' as (host, port), or a ValueError naming the address."""
    host, _, port = str(address).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65535:
        raise ValueError(
            f"a worker address must be 'HOST:PORT' with a port below 65535, got {address!r}"
        )
    return host, int(port)


@contextlib.contextmanager
def exit_if_worker_dies(check_alive: Callable[[], None], period_s: float = WATCH_PERIOD_S):
    """Inside the block, end this whole process (exit code 3, one line on stderr) as soon as
    `check_alive()` raises (a `RemoteTFWorkers`' own): a wait on a dead TF worker would
    otherwise never return. Meant for driver processes (a `WorkerGroup` worker whose parent
    then reports the line).
    """
    stop = threading.Event()

    def watch():
        while not stop.wait(period_s):
            try:
                check_alive()
            except (WorkerError, OSError) as error:
                sys.stderr.write(f"the TensorFlow worker died, so this driver ends: {error}\n")
                sys.stderr.flush()
                os._exit(WORKER_DIED_EXIT_CODE)

    watcher = threading.Thread(target=watch, daemon=True, name="exit_if_worker_dies")
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=period_s + 1.0)


# --- the link's peak ----------------------------------------------------------------------------


def tcp_source(port: int = 0) -> socket.socket:
    """A listening socket on every interface that answers each `tcp_fetch` (an 8-byte count)
    with that many bytes: the worker's side of the link's raw TCP rate, sent the way the
    copies go. It serves as long as this process lives."""
    server = socket.create_server(("", port))
    payload = bytes(TCP_CHUNK_BYTES)

    def answer(connection):
        with connection:
            connection.settimeout(TCP_TIMEOUT_S)
            (left,) = struct.unpack("!Q", _receive_exactly(connection, 8))
            while left > 0:
                connection.sendall(payload[: min(left, len(payload))])
                left -= min(left, len(payload))

    def serve():
        while True:
            connection, _ = server.accept()
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    threading.Thread(target=serve, daemon=True, name="tcp_source").start()
    return server


def _receive_exactly(connection: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        got = connection.recv(count - len(data))
        if not got:
            raise ConnectionError(f"the connection closed after {len(data)} of {count} bytes")
        data += got
    return data


def tcp_fetch(source: str, nbytes: int = TCP_PROBE_BYTES) -> None:
    """Fetch `nbytes` from a `tcp_source` at 'HOST:PORT' over raw TCP; time it to get the most
    the link under gRPC can carry. Every socket operation times out after `TCP_TIMEOUT_S`."""
    nbytes = require_count("nbytes", nbytes, 1, TCP_MAX_PROBE_BYTES)
    with socket.create_connection(split_address(source), timeout=TCP_TIMEOUT_S) as connection:
        connection.sendall(struct.pack("!Q", nbytes))
        buffer, left = memoryview(bytearray(min(nbytes, TCP_CHUNK_BYTES))), nbytes
        while left > 0:
            got = connection.recv_into(buffer, min(left, len(buffer)))
            if not got:
                raise ConnectionError(
                    f"the TCP source at {source} sent {nbytes - left} of {nbytes} bytes"
                )
            left -= got


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

    Returns (rows, source): source `BOTH_TRACED` when the worker's trace holds all
    `expected_matmuls` matmuls of `worker_device`; after `tries` that do not, this process's
    trace alone (`DRIVER_TRACED`: the copies' receiving ends, no worker compute). A fresh copy
    of `fn` is traced, so that small ops are not left out (see `timeline`'s notes).
    """
    fn = fresh_copy(fn)
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
                return rows, BOTH_TRACED
    return _without_sync(trace(fn, *args)), DRIVER_TRACED


def _trace_both(fn, args, worker_address: str, wait_s: float, window_s: float) -> list:
    options = profiler_options()
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
        return read_logdir(worker_dir) + read_logdir(local_dir)


def _without_sync(rows: list[OpEvent]) -> Trace:
    # SyncDevice is the clock's wait after the call, not the call's work.
    return Trace([r for r in rows if not r.op.startswith("SyncDevice")], incomplete_reason(rows))


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


def copies_after_matmuls_s(
    rows: Sequence[OpEvent], worker_device: str, host: str = HOST
) -> float | None:
    """The first copy here's start less the worker's last matmul's end, from a trace: >= 0 when
    every copy started after the last matmul ended; None when either is missing."""
    computing = busy_intervals(rows, worker_device, "matmul")
    copying = busy_intervals(rows, host, "copy")
    if not (computing and copying):
        return None
    return min(start for start, _ in copying) - max(end for _, end in computing)


def main(argv=None) -> None:
    """`python -m d2lhelpers.processes.tf_servers --address HOST:PORT`: a TF server (task 0 of
    job 'worker' at that address) and its TCP source, until ended (Ctrl-C)."""
    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="HOST:PORT the driver will connect to")
    parser.add_argument("--source-port", type=int, help="the TCP source's port (default PORT + 1)")
    parser.add_argument("--intra-op-threads", type=int, default=1)
    parser.add_argument("--inter-op-threads", type=int, default=2)
    args = parser.parse_args(argv)
    _, port = split_address(args.address)
    start_tf_server([args.address], 0, args.intra_op_threads, args.inter_op_threads)
    source = tcp_source(args.source_port or port + 1)
    print(f"TF server at {args.address}, TCP source on port {source.getsockname()[1]}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
