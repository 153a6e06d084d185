"""The diagnosis of a failed worker group: the dead worker is named as the cause, whatever order
the news came in; one error line keeps the exception and TensorFlow's reason."""

import collections
import signal
import subprocess
import sys
import time

import pytest

from d2lhelpers.processes.failures import (
    CAUSE_WINDOW_S,
    WorkerError,
    WorkerState,
    cause_sentence,
    failure_to_report,
    how_it_ended,
    timeout_error,
)


class _Ended:
    """Stands for a finished Popen: `poll` and `returncode` give its exit code."""

    def __init__(self, code, pid=100):
        self.returncode, self.pid = code, pid

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        return self.returncode


class _Joined:
    def join(self, timeout=None):
        pass


def _state(index, code=None, error=None, failed_at=None) -> WorkerState:
    state = WorkerState(index, 5000 + index, _Ended(code, 100 + index), collections.deque(), [])
    state.threads = [_Joined(), _Joined()]
    state.is_ready, state.error, state.failed_at = True, error, failed_at
    return state


def test_a_peers_error_waits_for_the_dead_worker_then_names_it():
    now = time.monotonic()
    aborted = {"text": "UnavailableError: Collective ops is aborted by: Socket closed"}
    peer = _state(0, code=None, error=aborted, failed_at=now)
    dead = _state(1, code=None)  # still running, as far as anyone knows
    assert failure_to_report([peer, dead], force=False) is None  # wait a moment for news
    dead.process.returncode = -signal.SIGKILL  # now the process table says it was killed
    error = failure_to_report([peer, dead], force=False)
    assert (error.index, error.exit_code) == (1, -signal.SIGKILL)
    assert "worker 1 of 2 (pid 101, port 5001) was killed by SIGKILL" in str(error)
    assert "Then worker 0 of 2" in str(error) and "Socket closed" in str(error)


def test_an_error_alone_is_reported_after_the_cause_window():
    error_info = {"text": "ValueError: bad"}
    peer = _state(0, error=error_info, failed_at=time.monotonic() - 2 * CAUSE_WINDOW_S)
    other = _state(1)
    error = failure_to_report([peer, other], force=False)
    assert error.index == 0 and "ValueError: bad" in str(error)
    assert failure_to_report([peer, other], force=False) is None  # reported once


def test_timeout_names_every_missing_worker():
    error = timeout_error([_state(0), _state(2)], 3, "result", 1.5)
    assert str(error).startswith("timed out after 1.5 s waiting for worker 0 of 3")
    assert "worker 2 of 3" in str(error) and "send a result" in str(error)
    assert isinstance(error, TimeoutError)


def test_how_it_ended_reads_signals_and_codes():
    assert how_it_ended(-9) == "was killed by SIGKILL (exit code -9)"
    assert how_it_ended(3) == "exited with code 3"
    assert how_it_ended(None) == "reported an error (still running)"


def test_the_cause_is_one_sentence_with_tfs_reason_and_no_node_names():
    error = WorkerError(
        "worker 0 of 2 (pid 7, port 9) exited with code 1 before sending its result\n"
        "Its error:\n    Traceback (most recent call last):\n"
        "    tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:\n"
        "    Collective ops is aborted by: Collective ops is aborted by: Socket closed "
        "[[{{node CollectiveReduceV2}}]] [Op:__inference_train_step_1234] name: \n"
        "Last lines of its stderr:\n    I0000 something"
    )
    assert cause_sentence(error) == (
        "worker 0 of 2 (pid 7, port 9) exited with code 1 before sending its result: "
        "UnavailableError: Collective ops is aborted by: Socket closed."
    )
    killed = WorkerError(f"worker 1 of 2 was killed by {signal.SIGKILL.name}\nLast lines: x")
    assert cause_sentence(killed) == "worker 1 of 2 was killed by SIGKILL."
    raised = WorkerError(
        "worker 0 of 2 reported an error\nIts error:\n    Traceback (most recent call last):\n"
        "    File \"<shipped>\", line 3\n    KeyError: 'sizes'\n"
    )
    assert cause_sentence(raised) == "worker 0 of 2 reported an error: KeyError: 'sizes'."
    long = WorkerError("worker 0 failed\n    ValueError: " + "x" * 500)
    assert cause_sentence(long).endswith("x...") and len(cause_sentence(long)) < 250


def test_a_real_process_that_died_is_diagnosed_from_its_exit_code():
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    process.wait()
    state = WorkerState(0, 1, process, collections.deque(["boom"]), [_Joined(), _Joined()])
    state.failed_at = time.monotonic()
    error = failure_to_report([state], force=True)
    assert error.exit_code == 3 and "exited with code 3 before it was ready" in str(error)
    assert "Last lines of its stderr:\n    boom" in str(error)
    with pytest.raises(WorkerError):
        raise error
