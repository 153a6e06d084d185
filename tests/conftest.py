"""Shared set-up: the test process's devices are set up once, before any test's first op."""

import contextlib
import importlib
import os
import pathlib
import subprocess
import sys
import textwrap
import time
from unittest import mock

import pytest

import d2lhelpers as d2l
from d2lhelpers.processes import worker_main
from d2lhelpers.timing import stopping
from tests import nbval_book

ROOT = pathlib.Path(__file__).resolve().parent.parent

d2l.setup_devices()  # 4 logical CPUs on CI: TensorFlow allows this only before its first op

# `make test` runs two pytest-xdist workers, each taking whole files (`--dist loadfile`: a
# notebook's cells run in order in one kernel), except that the notebooks and the book's test are
# one unit (tests/nbval_book.py: nbval's runs are the book's, so each notebook runs once). The two
# longest units start first, one per worker, so that neither is left running alone at the end
# (`--no-loadscope-reorder` keeps this order instead of xdist's most-tests-first).
LONGEST_FIRST = ("tests/test_browser.py", "tests/test_book.py")


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        path = item.nodeid.split("::")[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: every other file keeps its order
    nbval_book.arrange(items)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: the controller's scheduler
def pytest_xdist_make_scheduler(config, log):
    return (
        nbval_book.NotebooksWithTheBook(config, log)
        if config.getvalue("dist") == "loadfile"
        else None
    )


def run_python(code: str, timeout: float = 120, env: dict | None = None, unset=()):
    """Run `code` in a fresh Python (a fresh TensorFlow runtime); return the finished process."""
    environment = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**environment, **(env or {})},
    )


@pytest.fixture(autouse=True)
def quiet_stopping_record():
    """Every test's estimates start from a quiet machine's: no measure has run past its fewest
    runs (a test that measured before it would otherwise change its expected time)."""
    stopping.forget()


class FakeClock:
    """A clock that returns the given readings in turn: timing tests without real time."""

    def __init__(self, *readings: float):
        self.readings = list(readings)

    def __call__(self) -> float:
        return self.readings.pop(0)


@pytest.fixture
def devices():
    return d2l.setup_devices()


class Built(BaseException):
    """Raised by a trapped builder; a BaseException, so no `except Exception` hides it."""


# What an experiment calls to make tensors, graphs, figures or processes: a refusal comes first.
# Named, not imported here: conftest imports d2lhelpers before TensorFlow (oneDNN's threads).
BUILDERS = {
    "tensorflow.random": ("normal", "uniform", "stateless_normal", "stateless_uniform"),
    "tensorflow": ("zeros", "ones", "fill", "constant", "range", "Variable", "function", "matmul"),
    "tensorflow.linalg": ("matmul",),
    "matplotlib.pyplot": ("figure", "subplots"),
    "subprocess": ("Popen",),
    "multiprocessing.Process": ("start",),
}


def _owner(dotted: str):
    top, *rest = dotted.split(".")
    owner = importlib.import_module(top)
    for name in rest:  # tf.random, multiprocessing.Process: attributes, not importable modules
        owner = getattr(owner, name)
    return owner


@contextlib.contextmanager
def builds_nothing():
    """Inside: every builder in BUILDERS raises `Built` naming itself.

    How a refusal is shown to come before the work, on any machine, in place of timing it."""

    def trap(name):
        def trapped(*args, **kwargs):
            raise Built(f"{name} was called before the refusal")

        return trapped

    with contextlib.ExitStack() as stack:
        for owner, names in BUILDERS.items():
            for name in names:
                stack.enter_context(mock.patch.object(_owner(owner), name, trap(f"{owner}.{name}")))
        yield


# --- the process table: no worker may be left behind ---------------------------------------------


def is_running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a dead child not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def started_by_this_process() -> list[int]:
    """Live processes that a WorkerGroup of this process started, directly or not.

    Found by the parent pid every worker carries in its environment (its children inherit it),
    so an orphan re-parented to init is found as well.
    """
    marker = f"{worker_main.PARENT_VAR}={os.getpid()}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                variables = environ.read().split(b"\0")
        except OSError:
            continue
        if marker in variables and is_running(int(entry)):
            found.append(int(entry))
    return found


def wait_until_gone(pids, timeout=3.0) -> list[int]:
    """The pids still running after up to `timeout` seconds of waiting for them to end."""
    deadline = time.monotonic() + timeout
    while any(map(is_running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if is_running(pid)]
