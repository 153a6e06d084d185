"""Helpers for the parallelism notebooks: devices, honest timing, workloads, plots and panels.

`import d2lhelpers as d2l` gives the d2l names the seeds use (`try_all_gpus`, `Benchmark`, ...).
"""

from d2lhelpers import _tf_settings  # noqa: F401  (must run before TensorFlow is imported)
from d2lhelpers.collectives.costs import (
    AlphaBeta,
    break_even_comm_ms,
    efficiency_table,
    fit_alpha_beta,
    format_efficiency_table,
    pipeline_bubble_fraction,
    replicas_vs_one_group,
)
from d2lhelpers.collectives.tf_allreduce import allreduce_in_one_graph
from d2lhelpers.core.counts import chain_flops, mlp_flops
from d2lhelpers.core.units import format_bytes, format_rate, format_seconds, usable_cores
from d2lhelpers.devices import (
    Device,
    check_fits,
    cpu,
    device_summary,
    gpu,
    num_gpus,
    on_gpu,
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
from d2lhelpers.lessons.l02_compute_copy import (
    compute_copy_panel,
    local_copy_cost,
    plot_compute_copy,
    run_compute_copy,
    seed_reading,
)
from d2lhelpers.lessons.l03_mlp_across_devices import (
    BranchResult,
    mlp_panel,
    model_speedup,
    overlap_sentence,
    plot_branches,
    run_mlp_branches,
)
from d2lhelpers.lessons.l04_splitting_work import (
    compare_bubbles,
    parallelism_panel,
    plot_three_schemes,
    run_pipeline_trace,
    run_three_schemes,
    speedup_model_panel,
)
from d2lhelpers.lessons.l05_collectives import (
    AllreduceModel,
    AllreduceOverlap,
    AllreduceSweep,
    allreduce_panel,
    plot_allreduce_steps,
    plot_allreduce_sweep,
    plot_rounds_and_bytes,
    run_allreduce_overlap,
    run_allreduce_sweep,
)
from d2lhelpers.lessons.l06_multi_process import (
    break_even,
    cluster_panel,
    failure_panel,
    machine_defaults,
    plot_allreduce_job,
    plot_failure,
    plot_training_sweep,
    run_allreduce_job,
    run_failure,
    run_training,
    run_training_sweep,
)
from d2lhelpers.lessons.l07_serving import (
    check_layout_tokens,
    decoder_config,
    largest_batch,
    plot_latency_throughput,
    plot_requests,
    run_load_sweep,
    run_serving,
    run_serving_failure,
    serving_panel,
)
from d2lhelpers.parallel.common import (
    ParallelRun,
    communication_note,
)
from d2lhelpers.parallel.pipeline_parallel import (
    PipelineRun,
    measured_bubble,
    run_pipeline_parallel,
)
from d2lhelpers.parallel.replicas import replica_sweep, run_replicas
from d2lhelpers.parallel.tensor_parallel import (
    TensorParallelRun,
    all_reduce_sum,
    allreduce_sum,
    run_tensor_parallel,
)
from d2lhelpers.processes.group import WorkerError, WorkerGroup
from d2lhelpers.processes.mwms import real_cluster_tf_config
from d2lhelpers.processes.tf_servers import remote_tf_workers
from d2lhelpers.references import SEED_000, reference_table
from d2lhelpers.timing.benchmark import (
    Benchmark,
    Measurement,
    compare_to_ideal,
    measure,
    sync_devices,
)
from d2lhelpers.timing.peaks import describe_devices, device_peak_rate, machine_baseline_rate
from d2lhelpers.tracing.graph import levels as dependency_levels
from d2lhelpers.tracing.graph import op_graph, plot_op_graph
from d2lhelpers.tracing.timeline import (
    EmptyTraceError,
    OpEvent,
    busy_intervals,
    busy_seconds,
    overlap_seconds,
    plot_timeline,
    trace,
    tracing_overhead,
)
from d2lhelpers.ui.panel import Panel
from d2lhelpers.workloads import (
    branch_weights,
    chains_in_one_graph,
    identical_matmuls,
    matmul_chain,
    mlp_branches_in_one_graph,
    random_matrix,
)

# Old names, kept for code written against them (README's compatibility list).
concurrency_sweep = run_concurrency
mlp_branch_experiment = run_mlp_branches
compute_copy_experiment = run_compute_copy
allreduce_sweep = run_allreduce_sweep
overlap_experiment = run_allreduce_overlap
allreduce_job = run_allreduce_job
training_job = run_training
training_sweep = run_training_sweep
failure_demo = run_failure

__all__ = [
    "all_reduce_sum",
    "allreduce_in_one_graph",
    "allreduce_job",
    "allreduce_panel",
    "allreduce_sum",
    "allreduce_sweep",
    "AllreduceModel",
    "AllreduceOverlap",
    "AllreduceSweep",
    "AlphaBeta",
    "at_once_verdict",
    "Benchmark",
    "branch_weights",
    "BranchResult",
    "break_even",
    "break_even_comm_ms",
    "busy_intervals",
    "busy_seconds",
    "chain_flops",
    "chains_in_one_graph",
    "check_fits",
    "check_layout_tokens",
    "cluster_panel",
    "communication_note",
    "compare_bubbles",
    "compare_to_ideal",
    "compute_copy_experiment",
    "compute_copy_panel",
    "concurrency_panel",
    "concurrency_sweep",
    "ConcurrencyResult",
    "cpu",
    "decoder_config",
    "dependency_levels",
    "describe_devices",
    "Device",
    "device_peak_rate",
    "device_summary",
    "efficiency_table",
    "EmptyTraceError",
    "failure_demo",
    "failure_panel",
    "fit_alpha_beta",
    "format_bytes",
    "format_efficiency_table",
    "format_rate",
    "format_seconds",
    "gpu",
    "identical_matmuls",
    "largest_batch",
    "local_copy_cost",
    "machine_baseline_rate",
    "machine_defaults",
    "matmul_chain",
    "measure",
    "measured_bubble",
    "Measurement",
    "MergeProbeResult",
    "mlp_branch_experiment",
    "mlp_branches_in_one_graph",
    "mlp_flops",
    "mlp_panel",
    "model_speedup",
    "num_gpus",
    "on_gpu",
    "op_graph",
    "OpEvent",
    "overlap_experiment",
    "overlap_seconds",
    "overlap_sentence",
    "Panel",
    "parallelism_panel",
    "ParallelRun",
    "pipeline_bubble_fraction",
    "PipelineRun",
    "plot_allreduce_job",
    "plot_allreduce_steps",
    "plot_allreduce_sweep",
    "plot_branches",
    "plot_compute_copy",
    "plot_concurrency",
    "plot_failure",
    "plot_latency_throughput",
    "plot_op_graph",
    "plot_requests",
    "plot_rounds_and_bytes",
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
    "run_allreduce_job",
    "run_allreduce_overlap",
    "run_allreduce_sweep",
    "run_compute_copy",
    "run_concurrency",
    "run_failure",
    "run_load_sweep",
    "run_merge_probe",
    "run_mlp_branches",
    "run_pipeline_parallel",
    "run_pipeline_trace",
    "run_replicas",
    "run_serving",
    "run_serving_failure",
    "run_tensor_parallel",
    "run_three_schemes",
    "run_training",
    "run_training_sweep",
    "SEED_000",
    "seed_reading",
    "select_devices",
    "separate_calls_verdict",
    "serving_panel",
    "setup_devices",
    "speedup_model_panel",
    "sync_devices",
    "TensorParallelRun",
    "trace",
    "tracing_overhead",
    "training_job",
    "training_sweep",
    "try_all_gpus",
    "try_gpu",
    "usable_cores",
    "WorkerError",
    "WorkerGroup",
]
