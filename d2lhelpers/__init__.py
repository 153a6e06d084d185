"""Helpers for the parallelism notebooks: devices, honest timing, workloads, plots and panels.

`import d2lhelpers as d2l` gives the d2l names the seeds use (`try_all_gpus`, `Benchmark`, ...).
"""

from d2lhelpers import _tf_settings  # noqa: F401  (must run before TensorFlow is imported)
from d2lhelpers.benchmark import (
    Benchmark,
    Measurement,
    compare_to_ideal,
    measure,
    sync_devices,
)
from d2lhelpers.cluster import (
    allreduce_job,
    failure_demo,
    plot_allreduce_job,
    plot_training_sweep,
    real_cluster_tf_config,
    training_job,
    training_sweep,
)
from d2lhelpers.compute_copy import compute_copy_experiment, local_copy_cost
from d2lhelpers.costs import (
    AlphaBeta,
    break_even_comm_ms,
    efficiency_table,
    fit_alpha_beta,
    format_efficiency_table,
    pipeline_bubble_fraction,
    replicas_vs_one_group,
)
from d2lhelpers.dependency_graph import levels as dependency_levels
from d2lhelpers.dependency_graph import op_graph, plot_op_graph
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
from d2lhelpers.lessons.l01_two_devices import (
    ConcurrencyResult,
    MergeProbeResult,
    at_once_verdict,
    concurrency_panel,
    plot_concurrency,
    rates_verdict,
    run_concurrency,
    run_merge_probe,
    separate_calls_verdict,
)
from d2lhelpers.lessons.l01_two_devices import run_concurrency as concurrency_sweep  # old name
from d2lhelpers.lessons.l02_compute_copy import compute_copy_panel
from d2lhelpers.lessons.l03_mlp_across_devices import (
    BranchResult,
    mlp_panel,
    model_speedup,
    overlap_sentence,
    plot_branches,
    run_mlp_branches,
)
from d2lhelpers.lessons.l03_mlp_across_devices import (  # old name
    run_mlp_branches as mlp_branch_experiment,
)
from d2lhelpers.lessons.l04_splitting_work import (
    parallelism_panel,
    plot_three_schemes,
    speedup_model_panel,
)
from d2lhelpers.lessons.l05_collectives import allreduce_panel
from d2lhelpers.lessons.l06_multi_process import cluster_panel, failure_panel
from d2lhelpers.panel import Panel
from d2lhelpers.parallelism import ParallelRun
from d2lhelpers.peaks import describe_devices, device_peak_rate, machine_baseline_rate
from d2lhelpers.pipeline_parallel import PipelineRun, measured_bubble, run_pipeline_parallel
from d2lhelpers.references import SEED_000, reference_table
from d2lhelpers.replicas import replica_sweep, run_replicas
from d2lhelpers.tensor_parallel import TensorParallelRun, all_reduce_sum, run_tensor_parallel
from d2lhelpers.tf_allreduce import (
    allreduce_in_one_graph,
    allreduce_sweep,
    overlap_experiment,
    plot_allreduce_sweep,
)
from d2lhelpers.timeline import (
    EmptyTraceError,
    OpEvent,
    busy_intervals,
    busy_seconds,
    overlap_seconds,
    plot_timeline,
    trace,
    tracing_overhead,
)
from d2lhelpers.units import format_bytes, format_rate, format_seconds, usable_cores
from d2lhelpers.workers import WorkerError, WorkerGroup, remote_tf_workers
from d2lhelpers.workloads import (
    branch_weights,
    chain_flops,
    chains_in_one_graph,
    identical_matmuls,
    matmul_chain,
    mlp_branches_in_one_graph,
    mlp_flops,
    random_matrix,
)

__all__ = [
    "AlphaBeta",
    "Benchmark",
    "BranchResult",
    "ConcurrencyResult",
    "Device",
    "EmptyTraceError",
    "Measurement",
    "MergeProbeResult",
    "OpEvent",
    "Panel",
    "ParallelRun",
    "PipelineRun",
    "SEED_000",
    "TensorParallelRun",
    "WorkerError",
    "WorkerGroup",
    "all_reduce_sum",
    "allreduce_in_one_graph",
    "allreduce_job",
    "allreduce_panel",
    "allreduce_sweep",
    "at_once_verdict",
    "branch_weights",
    "break_even_comm_ms",
    "busy_intervals",
    "busy_seconds",
    "chain_flops",
    "chains_in_one_graph",
    "check_fits",
    "cluster_panel",
    "compare_to_ideal",
    "compute_copy_experiment",
    "compute_copy_panel",
    "concurrency_panel",
    "concurrency_sweep",
    "cpu",
    "dependency_levels",
    "describe_devices",
    "device_peak_rate",
    "device_summary",
    "efficiency_table",
    "failure_demo",
    "failure_panel",
    "fit_alpha_beta",
    "format_bytes",
    "format_efficiency_table",
    "format_rate",
    "format_seconds",
    "gpu",
    "identical_matmuls",
    "local_copy_cost",
    "machine_baseline_rate",
    "matmul_chain",
    "measure",
    "measured_bubble",
    "mlp_branch_experiment",
    "mlp_branches_in_one_graph",
    "mlp_flops",
    "mlp_panel",
    "model_speedup",
    "num_gpus",
    "op_graph",
    "overlap_experiment",
    "overlap_seconds",
    "overlap_sentence",
    "parallelism_panel",
    "pipeline_bubble_fraction",
    "plot_allreduce_job",
    "plot_allreduce_sweep",
    "plot_branches",
    "plot_concurrency",
    "plot_op_graph",
    "plot_three_schemes",
    "plot_timeline",
    "plot_training_sweep",
    "random_matrix",
    "rates_verdict",
    "real_cluster_tf_config",
    "reference_table",
    "remote_tf_workers",
    "replica_sweep",
    "replicas_vs_one_group",
    "run_concurrency",
    "run_merge_probe",
    "run_mlp_branches",
    "run_pipeline_parallel",
    "run_replicas",
    "run_tensor_parallel",
    "select_devices",
    "separate_calls_verdict",
    "setup_devices",
    "speedup_model_panel",
    "sync_devices",
    "trace",
    "tracing_overhead",
    "training_job",
    "training_sweep",
    "try_all_gpus",
    "try_gpu",
    "usable_cores",
]
