"""Worker processes on loopback: start K, wait until each is ready, collect results, end them all.

A `WorkerGroup` runs one target function in K fresh Python processes (this interpreter), each told
its index, every worker's port (free ports on this machine, addressed as 127.0.0.1:PORT) and, for
`tf.distribute`, its `TF_CONFIG`:

    with WorkerGroup("package.module:function", count=2, ready_timeout=30) as group:  # all ready
        results = group.results(timeout=60)                                          # one each
    # here every worker process, and every process a worker started, has ended

The `with` ends them whatever happens: success, an exception, KeyboardInterrupt (the notebook's
Stop button) or a timeout. Each worker leads its own process group, so ending it reaches its
children too: SIGTERM to the group, SIGKILL after a grace period. Two last resorts cover what a
`with` cannot: a finalizer (also run at interpreter exit) and a watchdog in each worker that kills
it when its parent process dies. A worker that fails raises `WorkerError` naming it (index, pid,
exit code, its traceback, the last lines of its stderr) as soon as the failure is seen.

Other hosts: `hosts` gives each worker its address (in `TF_CONFIG` and `addresses`) and `launch`
the command that starts it there, e.g. `["ip", "netns", "exec", "ns1"]` for a network namespace
(`benchmarks/hosts.py`). `code` sends the workers a notebook's function to run instead of the
target's (`function_source.function_source(worker=...)`; `worker_main.load_target`).

`tf_servers` builds notebook 02's TensorFlow servers on top of this; `worker_messages` holds the
group's message loop and `worker_failures` the diagnosis of a failed worker.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence

from d2lhelpers.core.system import require_linux
from d2lhelpers.processes import worker_main
from d2lhelpers.processes.failures import (
    PortInUseError,
    WorkerError,
    WorkerState,
    WorkerTimeout,
)
from d2lhelpers.processes.messages import WorkerMessages
from d2lhelpers.processes.worker_main import LOOPBACK

__all__ = [  # the errors live with their diagnosis; callers catch them from here
    "PortInUseError",
    "WorkerError",
    "WorkerGroup",
    "WorkerTimeout",
    "end_processes",
    "free_ports",
    "tf_config",
]

WORKER_MAIN_PATH = os.path.abspath(worker_main.__file__)
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(WORKER_MAIN_PATH)))
STDERR_LINES_KEPT = 50
REAP_S = 5.0  # how long to wait for a SIGKILLed process to be reaped before giving up on it
TF_SERVER_JOB = "worker"  # the job name in TF_CONFIG and in remote device names
OP_THREADS = 1  # each worker's intra- and inter-op threads unless told: one core's worth each


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports that are free right now.

    Each comes from binding port 0 and reading the port the kernel chose; all stay bound until all
    are chosen, so none is handed out twice. The probe binds the wildcard address, not only
    127.0.0.1, because TensorFlow's gRPC server will itself bind 0.0.0.0:PORT. The probes are
    never listened on. Another program can still take a port before a worker binds it:
    `WorkerGroup` then picks again.
    """
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(probe)
            probe.bind(("", 0))
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def tf_config(
    ports: Sequence[int], index: int, job: str = TF_SERVER_JOB, hosts: Sequence[str] | None = None
) -> dict:
    """The TF_CONFIG of task `index` in a one-job cluster of workers on `hosts` (127.0.0.1 for
    each by default) at `ports`."""
    hosts = hosts or [LOOPBACK] * len(ports)
    return {
        "cluster": {job: [f"{host}:{port}" for host, port in zip(hosts, ports, strict=True)]},
        "task": {"type": job, "index": index},
    }


class WorkerGroup(WorkerMessages):
    """K worker processes running `target` ('module:function' or 'file.py:function').

    The target gets a `worker_main.WorkerContext` (index, ports, addresses, args) and returns a
    JSON-able result; it may call `context.ready(**info)` once it is up (after binding its port)
    and `context.progress(**info)` on the way. Entering the `with` starts the workers and waits
    until all are ready; leaving it ends them all.

    Each worker's environment: this process's, plus TF_ENABLE_ONEDNN_OPTS=0,
    TF_CPP_MIN_LOG_LEVEL=3, TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS, `TF_CONFIG` when
    `tf_config_job` names a job, and `env` last. A worker whose port was taken before it bound it
    (its error says so) makes the group start over on new ports, up to `port_attempts` times.

    `watch(group)`, if given, is called after the messages already said are taken in, at least
    once per wait and every `POLL_S` while the group waits (starting, `results`,
    `wait_for_progress`), the last time after the answer it waited for: a caller's progress
    display reads `states` and `latest_progress` there, and a KeyboardInterrupt it raises ends
    the group.
    """

    def __init__(
        self,
        target: str,
        count: int = 1,
        *,
        args: dict | None = None,
        env: dict | None = None,
        tf_config_job: str | None = None,
        intra_op_threads: int = OP_THREADS,
        inter_op_threads: int = OP_THREADS,
        ready_timeout: float = 60.0,
        grace_s: float = 2.0,
        port_attempts: int = 3,
        pick_ports: Callable[[int], list[int]] = free_ports,
        watch: Callable[[WorkerGroup], None] | None = None,
        code: dict | None = None,
        hosts: Sequence[str] | None = None,
        launch: Callable[[int], list[str]] | None = None,
    ):
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        if hosts is not None and len(hosts) != count:
            raise ValueError(f"hosts must name one address per worker ({count}), got {hosts}")
        self.code, self.hosts, self.launch = code, hosts, launch
        self.target, self.count, self.args = target, count, dict(args or {})
        self.env, self.tf_config_job = dict(env or {}), tf_config_job
        self.threads = (intra_op_threads, inter_op_threads)
        self.ready_timeout, self.grace_s = ready_timeout, grace_s
        self.port_attempts, self.pick_ports = port_attempts, pick_ports
        self.watch = watch
        self.ports: list[int] = []
        self.attempts = 0  # starts made, port retries included
        self._workers: list[WorkerState] = []
        self._events: queue.Queue = queue.Queue()
        self._unheard_progress: collections.deque = collections.deque()
        # Shared with the finalizer, which must not hold `self`: whatever is in it gets ended.
        self._processes: list[subprocess.Popen] = []
        self._finalizer: weakref.finalize | None = None

    # --- life cycle -------------------------------------------------------------------------

    def __enter__(self) -> WorkerGroup:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> WorkerGroup:
        """Start the workers and wait until every one is ready (or raise, having ended them)."""
        require_linux("Starting worker processes (notebooks 02 and 06)")
        if self._workers:
            raise RuntimeError("this worker group is already running")
        self._finalizer = weakref.finalize(self, end_processes, self._processes, self.grace_s)
        try:
            last_error = None
            for attempt in range(1, self.port_attempts + 1):
                self.attempts = attempt
                self.ports = list(self.pick_ports(self.count))
                self._spawn()
                try:
                    self._wait_for("ready", self.ready_timeout)
                    return self
                except WorkerError as error:
                    if not error.port_in_use:
                        raise
                    last_error = error
                    self._end_workers()
            raise PortInUseError(
                f"could not start {self.count} worker(s): a port was taken by another program "
                f"each time, in {self.port_attempts} tries. Last failure:\n{last_error}",
                port_in_use=True,
            )
        except BaseException:  # KeyboardInterrupt included: `with` never reaches __exit__ here
            self.close()
            raise

    def close(self) -> None:
        """End every worker and every process it started; safe to call more than once."""
        self._end_workers()
        if self._finalizer is not None and not self._processes:
            self._finalizer.detach()

    def _spawn(self) -> None:
        # Nothing from an earlier try may leak into this one.
        self._events, self._unheard_progress = queue.Queue(), collections.deque()
        for index in range(self.count):
            prefix = self.launch(index) if self.launch else []
            process = subprocess.Popen(
                [*prefix, sys.executable, WORKER_MAIN_PATH, self.target],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._environment(index),
                encoding="utf-8",
                errors="replace",
                start_new_session=True,  # its own process group: killpg reaches its children
            )
            self._processes.append(process)
            worker = WorkerState(index, self.ports[index], process, _tail(), [])
            worker.threads = [
                _daemon(_read_messages, worker, self._events),
                _daemon(_read_stderr, worker),
            ]
            self._workers.append(worker)

    def _environment(self, index: int) -> dict:
        environment = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        python_path = [PROJECT_ROOT] + [p for p in [environment.get("PYTHONPATH")] if p]
        environment.update(
            TF_ENABLE_ONEDNN_OPTS="0",
            TF_CPP_MIN_LOG_LEVEL="3",
            TF_NUM_INTRAOP_THREADS=str(self.threads[0]),
            TF_NUM_INTEROP_THREADS=str(self.threads[1]),
            PYTHONPATH=os.pathsep.join(python_path),
        )
        environment[worker_main.INDEX_VAR] = str(index)
        environment[worker_main.PORTS_VAR] = json.dumps(self.ports)
        environment[worker_main.ARGS_VAR] = json.dumps(self.args)
        environment[worker_main.PARENT_VAR] = str(os.getpid())
        if self.code:
            environment[worker_main.CODE_VAR] = json.dumps(self.code)
        if self.tf_config_job:
            config = tf_config(self.ports, index, self.tf_config_job, self.hosts)
            environment["TF_CONFIG"] = json.dumps(config)
        environment.update(self.env)
        return environment

    def _end_workers(self) -> None:
        try:
            end_processes([worker.process for worker in self._workers], self.grace_s)
        finally:
            for worker in self._workers:
                streams = (worker.process.stdout, worker.process.stderr)
                for thread, stream in zip(worker.threads, streams, strict=True):
                    thread.join(timeout=1.0)
                    # A process that escaped its group may still hold the pipe; closing a stream
                    # under a blocked reader would block here for good, so leave that one open.
                    if not thread.is_alive():
                        with contextlib.suppress(OSError, ValueError):
                            stream.close()
            # Interrupted half-way (a second Stop), the finalizer still holds the rest.
            ended = [w.process for w in self._workers if w.process.returncode is not None]
            self._processes[:] = [p for p in self._processes if p not in ended]
            self._workers = [w for w in self._workers if w.process not in ended]

    # --- talking to the workers -----------------------------------------------------------------

    @property
    def addresses(self) -> list[str]:
        """'HOST:PORT' of every worker (127.0.0.1 unless `hosts` says), in index order."""
        hosts = self.hosts or [LOOPBACK] * len(self.ports)
        return [f"{host}:{port}" for host, port in zip(hosts, self.ports, strict=True)]

    @property
    def pids(self) -> list[int]:
        return [worker.process.pid for worker in self._workers]

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to worker `index` and its children (failure demos and tests)."""
        _signal_group(self._workers[index].process.pid, sig)


def end_processes(processes: Sequence[subprocess.Popen], grace_s: float = 2.0) -> None:
    """End each process and everything in its process group: SIGTERM, then SIGKILL after
    `grace_s`, then reap. Groups whose leader already exited are signalled too, for stragglers.
    """
    processes = list(processes)
    for process in processes:
        _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        _signal_group(process.pid, signal.SIGKILL)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=REAP_S)


def _signal_group(pgid: int, sig: int) -> None:
    # The kernel keeps a group id from being reused as a pid while the group has members, so this
    # reaches only our worker's own (possibly orphaned) children, or nobody.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _read_messages(worker: WorkerState, events: queue.Queue) -> None:
    for line in worker.process.stdout:
        try:
            ((kind, payload),) = json.loads(line).items()
        except (ValueError, AttributeError):
            worker.stderr_tail.append(line.rstrip("\n"))  # not protocol: keep it as output
            continue
        events.put((worker.index, kind, payload))
    events.put((worker.index, "exit", worker.process.wait()))


def _read_stderr(worker: WorkerState) -> None:
    # Reading it also keeps a chatty worker from blocking on a full pipe.
    for line in worker.process.stderr:
        if line.strip():
            worker.stderr_tail.append(line.rstrip())


def _daemon(function, *args) -> threading.Thread:
    thread = threading.Thread(target=function, args=args, daemon=True)
    thread.start()
    return thread


def _tail() -> collections.deque:
    return collections.deque(maxlen=STDERR_LINES_KEPT)
