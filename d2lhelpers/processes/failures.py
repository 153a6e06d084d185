"""Which worker failed, and why: the diagnosis `WorkerGroup` raises, apart from its message loop.

A worker that dies takes its peers' collectives down with it, and a peer's error ("Collective ops
is aborted by: Socket closed") can reach the parent before the dead worker's end of output does.
`failure_to_report` looks at the processes, waits a moment (`CAUSE_WINDOW_S`) for news, then names
the dead one, the cause, and lists the peers that failed after it. Every error names the worker
(index, pid, port), how it ended (exit code or signal), its traceback and its stderr's last lines.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import re
import signal
import subprocess
import threading
import time
from collections.abc import Sequence

STDERR_LINES_SHOWN = 15
CAUSE_WINDOW_S = 1.0  # after a worker's error, how long to look for a peer's death that caused it


class WorkerError(RuntimeError):
    """A worker raised, exited or was killed, or did not answer in time; the message names it."""

    def __init__(
        self,
        message: str,
        index: int | None = None,
        pid: int | None = None,
        exit_code: int | None = None,
        port_in_use: bool = False,
    ):
        super().__init__(message)
        self.index, self.pid, self.exit_code, self.port_in_use = index, pid, exit_code, port_in_use


class WorkerTimeout(WorkerError, TimeoutError):
    """Some worker did not become ready, or send its result, within the timeout."""


class PortInUseError(WorkerError):
    """Every try to start the workers found one of their ports taken by another program."""


@dataclasses.dataclass
class WorkerState:
    """What the parent knows of one worker process: what it said, and how it ended."""

    index: int
    port: int
    process: subprocess.Popen
    stderr_tail: collections.deque
    threads: list[threading.Thread]  # its stdout (messages) and stderr readers
    ready: object = None
    is_ready: bool = False
    progress: object = None
    result: object = None
    has_result: bool = False
    error: dict | None = None
    exit_code: int | None = None
    failed_at: float | None = None  # when its error or its early exit came in
    reported: bool = False  # a WorkerError about it has been raised

    def label(self, count: int) -> str:
        return f"worker {self.index} of {count} (pid {self.process.pid}, port {self.port})"


def failure_to_report(workers: Sequence[WorkerState], force: bool) -> WorkerError | None:
    """The error to raise now, naming the worker that failed first, or None (nothing, or wait:
    a peer's error came in first and the cause may still be on its way)."""
    count = len(workers)
    failed = [w for w in workers if w.failed_at is not None and not w.reported]
    if not failed:
        return None
    peers = [w for w in workers if w.failed_at is None and not w.has_result]
    for peer in peers:
        code = peer.process.poll()
        if code is not None and code < 0:  # killed by a signal: it will send no error
            peer.failed_at = time.monotonic()
            failed.append(peer)
    peers = [w for w in peers if w.failed_at is None]
    failed.sort(key=lambda w: w.failed_at)
    died = [w for w in failed if w.error is None]
    recent = time.monotonic() - failed[0].failed_at < CAUSE_WINDOW_S
    if not died and peers and recent and not force:
        return None
    cause = (died or failed)[0]
    cause.reported = True
    return failure(cause, count, [w for w in failed if w is not cause])


def failure(
    worker: WorkerState, count: int, also_failed: Sequence[WorkerState] = ()
) -> WorkerError:
    """The `WorkerError` of one failed worker, with the peers that failed after it."""
    # Let the process finish dying and its stderr drain, so the message can show both.
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.process.wait(timeout=1.0)
    worker.threads[1].join(timeout=1.0)
    code = worker.process.returncode
    when = "before sending its result" if worker.is_ready else "before it was ready"
    lines = [f"{worker.label(count)} {how_it_ended(code)} {when}"]
    if worker.error:
        lines += ["Its error:", _indent(worker.error["text"].rstrip())]
    tail = list(worker.stderr_tail)[-STDERR_LINES_SHOWN:]
    if tail:
        lines += ["Last lines of its stderr:", _indent("\n".join(tail))]
    for other in also_failed:
        last = (other.error or {}).get("text", "").strip().splitlines()[-1:]
        lines += [f"Then {other.label(count)} failed too: {' '.join(last)}"]
    port_in_use = bool(worker.error and worker.error.get("port_in_use"))
    message = "\n".join(line.rstrip() for line in lines)
    return WorkerError(message, worker.index, worker.process.pid, code, port_in_use)


def timeout_error(
    missing: Sequence[WorkerState], count: int, wanted: str | None, timeout: float
) -> WorkerTimeout:
    """The `WorkerTimeout` naming every worker still `missing` what was `wanted`."""
    what = {"ready": "become ready", "progress": "report progress", "result": "send a result"}
    what = what.get(wanted, wanted)
    names = ", ".join(worker.label(count) for worker in missing)
    lines = [f"timed out after {timeout:g} s waiting for {names} to {what}"]
    first = missing[0]
    tail = list(first.stderr_tail)[-STDERR_LINES_SHOWN:]
    if tail:
        lines += [f"Last lines of worker {first.index}'s stderr:", _indent("\n".join(tail))]
    return WorkerTimeout("\n".join(lines), first.index, first.process.pid)


def how_it_ended(code: int | None) -> str:
    if code is None:
        return "reported an error (still running)"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name} (exit code {code})"
    return f"exited with code {code}"


# An exception's line in a traceback: its name, and its message.
_EXCEPTION_LINE = re.compile(r"\s+(?:\w+\.)*(\w+(?:Error|Exception|Interrupt|Exit)): ?(.*)")
# TensorFlow's annotations of where in its graph an error came from: not a cause a learner can use.
_TF_LOCATIONS = re.compile(r"\[\[\{\{node [^}]*\}\}\]\]|\[Op:[^\]]*\]( name:\s*\S*)?")
REASON_CHARS = 200  # a longer message is cut: the sentence stays readable
_REASONS = ("aborted by", "timed out", "Deadline")


def cause_sentence(error: WorkerError) -> str:
    """One sentence: which worker failed and how (the message's first line), then the last
    exception's name and TensorFlow's reason (or the exception's own message), without TF's node
    names, operation names or repeated prefixes."""
    lines = str(error).splitlines()
    found = [m for m in map(_EXCEPTION_LINE.match, lines[1:]) if m]
    parts = lines[:1]
    if found:
        name, message = found[-1].groups()
        reasons = [line.strip() for line in lines if any(r in line for r in _REASONS)]
        parts.append(f"{name}: {reasons[0] if reasons else message}")
    text = " ".join(_TF_LOCATIONS.sub(" ", ": ".join(parts)).split())
    # Each peer that passes an abort on prefixes it again: keep one.
    text = re.sub(r"(Collective ops is aborted by: )+", r"\1", text)
    text = re.sub(r"(Graph execution error: ?)", "", text).rstrip(" :.;")
    if len(text) > len(lines[0]) + REASON_CHARS:
        return text[: len(lines[0]) + REASON_CHARS].rstrip() + "..."
    return f"{text}."


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
