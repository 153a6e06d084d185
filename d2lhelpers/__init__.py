"""Helpers for the parallelism notebooks: devices, honest timing, workloads, plots and panels.

`import d2lhelpers as d2l` gives the d2l names the seeds use (`try_all_gpus`, `Benchmark`, ...).
"""

from d2lhelpers import _tf_settings  # noqa: F401  (must run before TensorFlow is imported)
from d2lhelpers.benchmark import (
    Benchmark,
    Measurement,
    compare_to_ideal,
    format_rate,
    format_seconds,
    measure,
    sync_devices,
)
from d2lhelpers.devices import (
    Device,
    check_fits,
    cpu,
    device_summary,
    gpu,
    num_gpus,
    select_devices,
    setup_devices,
    try_all_gpus,
    try_gpu,
)
from d2lhelpers.peaks import describe_devices, device_peak_rate, machine_baseline_rate
from d2lhelpers.widgets import Panel, concurrency_panel
from d2lhelpers.workloads import (
    chain_flops,
    chains_in_one_graph,
    concurrency_sweep,
    identical_matmuls,
    matmul_chain,
    random_matrix,
)

__all__ = [
    "Benchmark",
    "Device",
    "Measurement",
    "Panel",
    "chain_flops",
    "chains_in_one_graph",
    "check_fits",
    "compare_to_ideal",
    "concurrency_panel",
    "concurrency_sweep",
    "cpu",
    "describe_devices",
    "device_peak_rate",
    "device_summary",
    "format_rate",
    "format_seconds",
    "gpu",
    "identical_matmuls",
    "machine_baseline_rate",
    "matmul_chain",
    "measure",
    "num_gpus",
    "random_matrix",
    "select_devices",
    "setup_devices",
    "sync_devices",
    "try_all_gpus",
    "try_gpu",
]
