"""Notebook 01, two devices, two jobs: independent chains on several devices at once.

In notebook order: `merging` (the seed's identical matmuls: which rate to believe, and which
optimisation merges them) and `concurrency` (one chain per device on 1..N devices, the model
max(1, k / usable cores), the experiment, its result, plot and panel).
"""

from d2lhelpers.lessons.l01_two_devices.concurrency import (
    MAX_MATMULS,
    ConcurrencyResult,
    at_once_verdict,
    concurrency_model,
    concurrency_panel,
    estimate_seconds,
    noisy_run,
    plot_concurrency,
    plural,
    run_concurrency,
    separate_calls_verdict,
)
from d2lhelpers.lessons.l01_two_devices.merging import (
    MergeProbeResult,
    rates_verdict,
    run_merge_probe,
)

__all__ = [
    "MAX_MATMULS",
    "ConcurrencyResult",
    "MergeProbeResult",
    "at_once_verdict",
    "concurrency_model",
    "concurrency_panel",
    "estimate_seconds",
    "noisy_run",
    "plot_concurrency",
    "plural",
    "rates_verdict",
    "run_concurrency",
    "run_merge_probe",
    "separate_calls_verdict",
]
