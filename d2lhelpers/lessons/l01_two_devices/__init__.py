"""Notebook 01, two devices, two jobs: independent chains on several devices at once.

In notebook order: `merging` (the seed's identical matmuls: which rate to believe, and which
optimisation merges them), `verdicts` (the sentences on the notebook's own cells: at once,
separate calls, the baseline), `concurrency` (one chain per device on 1..N devices beside the
model max(1, k / usable cores): the experiment, its result and estimate) and `panel`.
"""

from d2lhelpers.lessons.l01_two_devices.concurrency import (
    MAX_MATMULS,
    ConcurrencyResult,
    estimate_seconds,
    run_concurrency,
)
from d2lhelpers.lessons.l01_two_devices.merging import (
    MergeProbeResult,
    rates_verdict,
    run_merge_probe,
)
from d2lhelpers.lessons.l01_two_devices.panel import concurrency_panel, plot_concurrency
from d2lhelpers.lessons.l01_two_devices.verdicts import (
    at_once_verdict,
    baseline_verdict,
    separate_calls_verdict,
    single_samples_verdict,
)

__all__ = [
    "MAX_MATMULS",
    "ConcurrencyResult",
    "MergeProbeResult",
    "at_once_verdict",
    "baseline_verdict",
    "concurrency_panel",
    "estimate_seconds",
    "plot_concurrency",
    "rates_verdict",
    "run_concurrency",
    "run_merge_probe",
    "separate_calls_verdict",
    "single_samples_verdict",
]
