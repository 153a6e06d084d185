"""How long a run will take, before it starts: the one home of every panel's estimate.

An estimate is built from the same rules that `measure` follows (warm-up, one sizing call, blocks
of at least `MIN_BLOCK_S`, `min_runs` blocks on a quiet machine, fewer once the time budget is
spent) and a guess of one call's time from its work and a measured rate. It is a quiet machine's
time: a busy one takes longer, and the panel says so when a run overshoots.
"""

from __future__ import annotations

import math

from d2lhelpers.timing.benchmark import MAX_NUMBER, MIN_BLOCK_S, MIN_RUNS_IN_BUDGET
from d2lhelpers.timing.interleaved import turn_options

TRACE_S = 0.3  # building and tracing one small tf.function, on 2 CPU cores (measured: 0.1-0.5 s)
PROCESS_START_S = 3.0  # a fresh Python process importing TensorFlow, on an idle 2-core machine
# Tracing a graph of n ops, once TensorFlow has traced one in this process: about
# TRACE_OP_S * (n + 10) (chains of 1-400 matmuls: 7, 20, 57, 97, 271 ms of CPU time for 1, 20, 80,
# 100, 400 ops on 2 cores). One call of a traced tf.function costs CALL_S whatever its work
# (0.3-0.4 ms of CPU time for a one-op graph).
TRACE_OP_S = 7e-4
CALL_S = 3e-4
DRAW_S = 0.3  # a panel's figure built and rendered to PNG once (notebook 03's: 0.2 s of CPU time)


def measure_seconds(
    call_s: float,
    *,
    warmup: int = 1,
    min_runs: int = 5,
    max_runs: int = 50,
    budget_s: float = 2.0,
    number: int | None = None,
    **_ignored,
) -> float:
    """Seconds one `measure(run, ...)` takes when each `run()` takes `call_s` (quiet machine).

    Takes `measure`'s own options, so `measure_seconds(t, **options)` matches `measure(f,
    **options)`; options that do not change the time (flops, peak, clock) are ignored.
    """
    call_s = max(float(call_s), 1e-6)
    sizing = 0.0
    if number is None:
        sizing = call_s
        number = max(1, min(MAX_NUMBER, math.ceil(MIN_BLOCK_S / call_s)))
    block = number * call_s
    within_budget = max(MIN_RUNS_IN_BUDGET, math.floor(budget_s / block) + 1)
    runs = min(max_runs, min_runs, within_budget)
    return warmup * call_s + sizing + runs * block


def call_seconds(work: float, rate: float) -> float:
    """One call's time from its work (FLOPs or bytes) and a measured rate (per second)."""
    if rate <= 0:
        raise ValueError(f"a rate must be > 0 to estimate a time, got {rate}")
    return work / rate


def trace_seconds(ops: int) -> float:
    """Seconds to build and trace one tf.function of `ops` ops (not the process's first)."""
    return TRACE_OP_S * (ops + 10)


def interleaved_seconds(call_s: float, rounds: int, **options) -> float:
    """Seconds one run takes in `measure_interleaved(..., rounds)`: `rounds` turns, each a
    `measure` with its share of the time budget (`turn_options`)."""
    return rounds * measure_seconds(call_s, **turn_options(options, rounds))
