"""How long a run will take, before it starts: the one home of every panel's estimate.

An estimate is built from the same rules that `measure` follows (warm-up, one sizing call, blocks
of at least `MIN_BLOCK_S`, `min_runs` of them when they agree, more up to a cap when they do not)
and a guess of one call's time from its work and a measured rate. How far past `min_runs` a
measure goes is this machine's: the recent measures' record (`timing.stopping`), none before the
first (a quiet machine's time). A machine that gets busier takes longer, and the panel says so
when a run overshoots.
"""

from __future__ import annotations

import math

from d2lhelpers.timing.benchmark import MAX_NUMBER, MIN_BLOCK_S
from d2lhelpers.timing.interleaved import turn_options
from d2lhelpers.timing.stopping import expected_runs, run_counts

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
    share: float | None = None,
    **_ignored,
) -> float:
    """Seconds one `measure(run, ...)` takes when each `run()` takes `call_s`.

    Takes `measure`'s own options, so `measure_seconds(t, **options)` matches `measure(f,
    **options)`; options that do not change the time (flops, peak, clock) are ignored. It
    expects the runs this machine's recent measures took (`stopping`); `share=0` is a quiet
    machine's time, where every measure stops at its fewest runs.
    """
    call_s = max(float(call_s), 1e-6)
    sizing = 0.0
    if number is None:
        sizing = call_s
        number = max(1, min(MAX_NUMBER, math.ceil(MIN_BLOCK_S / call_s)))
    block = number * call_s
    runs = expected_runs(*run_counts(block, min_runs, max_runs, budget_s), share)
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
