"""Notebook 07, serving requests: replicas behind a load balancer vs a split model, under load.

In notebook order: `runs` (one serving run, its result, the memory and the capacity model),
`sweep` (the latency-throughput sweep per layout, the failure), `plots`, `panel`.
"""

from d2lhelpers.lessons.l07_serving.panel import serving_panel
from d2lhelpers.lessons.l07_serving.plots import plot_latency_throughput, plot_requests
from d2lhelpers.lessons.l07_serving.runs import (
    ServingRun,
    check_layout_tokens,
    decoder_config,
    largest_batch,
    run_serving,
)
from d2lhelpers.lessons.l07_serving.sweep import LoadSweep, run_load_sweep, run_serving_failure

__all__ = [
    "LoadSweep",
    "ServingRun",
    "check_layout_tokens",
    "largest_batch",
    "decoder_config",
    "plot_latency_throughput",
    "plot_requests",
    "run_serving_failure",
    "run_load_sweep",
    "run_serving",
    "serving_panel",
]
