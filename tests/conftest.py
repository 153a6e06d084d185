"""Shared set-up: the test process's devices are set up once, before any test's first op."""

import os
import subprocess
import sys
import textwrap

import pytest

import d2lhelpers as d2l

d2l.setup_devices()  # 4 logical CPUs on CI: TensorFlow allows this only before its first op


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


class FakeClock:
    """A clock that returns the given readings in turn: timing tests without real time."""

    def __init__(self, *readings: float):
        self.readings = list(readings)

    def __call__(self) -> float:
        return self.readings.pop(0)


@pytest.fixture
def devices():
    return d2l.setup_devices()
