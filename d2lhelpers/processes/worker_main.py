"""The entry point of one worker process started by `d2lhelpers.processes.group.WorkerGroup`.

Run by path (`python .../worker_main.py TARGET`), not with `-m`: `-m
d2lhelpers.processes.worker_main` would import the package, and with it TensorFlow, costing
seconds in workers that never use it.
This file therefore imports nothing from d2lhelpers; `workers.py` imports its protocol from here.

Protocol: one JSON object per line on the process's original stdout, each with one key:
`{"ready": info}` once, `{"progress": info}` any number of times, then `{"result": value}` or
`{"error": {"text": traceback, "port_in_use": bool}}`. Everything else the target (or
TensorFlow's C++ code) prints goes to stderr, so stray prints cannot corrupt the protocol.

Environment set by the parent: the worker's index, every worker's port, JSON args, the
parent's pid, and optionally code: a notebook's functions as `function_source` sent them (the one
under "worker" is then the target, so that the worker runs the code the learner's kernel holds,
not the package's copy of it; only then is the package imported here). A watchdog thread ends the
worker (and its own children) if that parent dies, so that even a hard kill of the notebook's
kernel leaves no orphan behind.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import traceback

INDEX_VAR = "D2L_WORKER_INDEX"
PORTS_VAR = "D2L_WORKER_PORTS"
ARGS_VAR = "D2L_WORKER_ARGS"
PARENT_VAR = "D2L_WORKER_PARENT_PID"
CODE_VAR = "D2L_WORKER_CODE"
LOOPBACK = "127.0.0.1"
WATCHDOG_PERIOD_S = 0.5
# What a failed bind looks like: Python's OSError, or TensorFlow's gRPC server refusing to start.
PORT_IN_USE_TEXTS = ("Address already in use", "Could not start gRPC server")


class WorkerContext:
    """What a target function gets: its index, every worker's port, its args, and a way to talk."""

    def __init__(self, index: int, ports: list[int], args: dict, protocol):
        self.index, self.ports, self.args = index, ports, args
        self._protocol = protocol
        self._lock = threading.Lock()
        self.sent_ready = False

    @property
    def port(self) -> int:
        """This worker's own port."""
        return self.ports[self.index]

    @property
    def addresses(self) -> list[str]:
        """'127.0.0.1:PORT' of every worker, in index order."""
        return [f"{LOOPBACK}:{port}" for port in self.ports]

    def ready(self, **info) -> None:
        """Tell the parent this worker is up (send once, after binding its port)."""
        self.sent_ready = True
        self.send("ready", info)

    def progress(self, **info) -> None:
        """Tell the parent how far this worker has got."""
        self.send("progress", info)

    def send(self, kind: str, payload) -> None:
        line = json.dumps({kind: payload}) + "\n"
        with self._lock:  # a target's threads may report at once; lines must not interleave
            self._protocol.write(line)
            self._protocol.flush()

    def memory(self) -> dict:
        """This process's memory (`memory_now`), for a target's result."""
        return memory_now()

    def wait_until_ended(self) -> None:
        """Block until the parent ends this worker (for servers that have nothing else to do)."""
        while True:
            time.sleep(WATCHDOG_PERIOD_S)


def memory_now() -> dict:
    """This process's peak resident set, and its PSS now (shared library pages split)."""
    import resource  # Linux only, as worker groups are (`require_linux`): not at import time

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    pss = 0
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            pss = next(int(line.split()[1]) * 1024 for line in rollup if line[:4] == "Pss:")
    except OSError:
        pass
    return {"peak_rss_bytes": peak, "pss_bytes": pss}


def load_target(target: str, code: dict | None = None):
    """'package.module:function' or '/path/to/file.py:function' -> the function; with `code` (a
    `function_source` answer), its function "worker" instead, defined afresh from its source."""
    if code:
        from d2lhelpers.processes.function_source import load_functions

        return load_functions(code, label="notebook")["worker"]
    location, _, name = target.rpartition(":")
    if not location or not name:
        raise ValueError(f"target must be 'module:function' or 'file.py:function', got {target!r}")
    if location.endswith(".py"):
        spec = importlib.util.spec_from_file_location(f"_worker_target_{os.getpid()}", location)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(location)
    return getattr(module, name)


def is_port_in_use(error: BaseException) -> bool:
    if isinstance(error, OSError) and error.errno == errno.EADDRINUSE:
        return True
    return any(text in str(error) for text in PORT_IN_USE_TEXTS)


def _watch_parent(parent_pid: int) -> None:
    # Reparenting (to init or a subreaper) is the portable sign that the parent is gone.
    while os.getppid() == parent_pid:
        time.sleep(WATCHDOG_PERIOD_S)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def main(target: str) -> int:
    # Running by path puts this package's folder first on sys.path, where its module names
    # (devices, plots, ...) could shadow top-level ones.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    parent_pid = int(os.environ[PARENT_VAR])
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    context = WorkerContext(
        int(os.environ[INDEX_VAR]),
        json.loads(os.environ[PORTS_VAR]),
        json.loads(os.environ.get(ARGS_VAR, "{}")),
        protocol,
    )
    try:
        code = json.loads(os.environ.get(CODE_VAR, "null"))
        result = load_target(target, code)(context)
        json.dumps(result)  # a result that cannot be sent is reported as this worker's error
    except BaseException as error:  # SystemExit and KeyboardInterrupt are reported too
        report = {"text": traceback.format_exc(), "port_in_use": is_port_in_use(error)}
        context.send("error", report)
        return 1
    if not context.sent_ready:
        context.ready()
    context.send("result", result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
