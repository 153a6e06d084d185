"""Notebook 07, serving requests: replicas behind a load balancer vs a split model, under load.

In notebook order: `tokens` (every layout's tokens, what fits), `points` (capacity from timed
steps, one load read in its window), `sweep` (each layout's curve and saturation), `lockstep`
(independent replicas vs lock step), `failure` (a device lost), `in_flight` (the pipeline
against sequences in flight), `plots`, `panel`.
"""

from d2lhelpers.lessons.l07_serving.failure import FailureResult, run_serving_failure
from d2lhelpers.lessons.l07_serving.in_flight import PipelineInFlightResult, run_pipeline_in_flight
from d2lhelpers.lessons.l07_serving.lockstep import LockstepResult, run_lockstep_comparison
from d2lhelpers.lessons.l07_serving.one_run import ServingRunResult, run_serving
from d2lhelpers.lessons.l07_serving.panel import serving_panel
from d2lhelpers.lessons.l07_serving.plots import plot_requests
from d2lhelpers.lessons.l07_serving.points import Window
from d2lhelpers.lessons.l07_serving.sweep import (
    LoadSweepResult,
    plot_latency_throughput,
    run_load_sweep,
)
from d2lhelpers.lessons.l07_serving.tokens import (
    MemoryResult,
    TokenCheckResult,
    check_layout_tokens,
    largest_batch,
    memory_fit,
)

__all__ = [
    "FailureResult",
    "LoadSweepResult",
    "LockstepResult",
    "MemoryResult",
    "PipelineInFlightResult",
    "ServingRunResult",
    "TokenCheckResult",
    "Window",
    "check_layout_tokens",
    "largest_batch",
    "memory_fit",
    "plot_latency_throughput",
    "plot_requests",
    "run_load_sweep",
    "run_lockstep_comparison",
    "run_pipeline_in_flight",
    "run_serving",
    "run_serving_failure",
    "serving_panel",
]
