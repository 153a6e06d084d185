"""Helpers for the parallelism notebooks: devices, honest timing, traces, plots and panels.

`import d2lhelpers as d2l` gives the d2l names the seeds use (`try_all_gpus`, `Benchmark`, ...)
and what the notebooks call: one section of imports per topic or notebook; `__all__` is every
name they bind.
"""

from types import ModuleType as _ModuleType

from d2lhelpers import _tf_settings  # noqa: F401  (must run before TensorFlow is imported)

# --- devices, timing, units and reference results ---
from d2lhelpers.core.concurrency import (
    devices_at_once,
)
from d2lhelpers.core.counts import (
    chain_flops,
)
from d2lhelpers.core.units import (
    usable_cores,
)
from d2lhelpers.devices import (
    cpu,
    device_summary,
    on_gpu,
    select_devices,
    setup_devices,
    try_all_gpus,
)
from d2lhelpers.references import (
    reference_table,
)
from d2lhelpers.timing.benchmark import (
    Benchmark,
    measure,
)
from d2lhelpers.timing.peaks import (
    describe_devices,
    device_peak_rate,
    machine_baseline_rate,
)

# --- tracing and timelines ---
from d2lhelpers.tracing.graph import (
    dependency_levels,
    op_graph,
    plot_op_graph,
)
from d2lhelpers.tracing.perfetto import (
    save_trace,
)
from d2lhelpers.tracing.timeline import (
    plot_timeline,
    trace,
)


# --- notebook 01: two devices, two jobs ---
from d2lhelpers.lessons.l01_two_devices import (
    at_once_verdict,
    baseline_verdict,
    concurrency_panel,
    rates_verdict,
    run_merge_probe,
    separate_calls_verdict,
    single_samples_verdict,
)
from d2lhelpers.references import (
    seed_without_copy,
)
from d2lhelpers.workloads import (
    random_matrix,
)

# --- notebook 02: compute and copy ---
from d2lhelpers.lessons.l02_compute_copy import (
    compute_copy_panel,
    local_copy_cost,
    run_compute_copy,
    seed_reading,
)

# --- notebook 03: the MLP across devices ---
from d2lhelpers.lessons.l03_mlp_across_devices import (
    baseline_sentences,
    mlp_panel,
    model_speedup,
    overlap_sentence,
    run_mlp_branches,
)

# --- notebook 04: splitting work ---
from d2lhelpers.lessons.l04_splitting_work import (
    compare_bubbles,
    parallelism_panel,
    plot_three_schemes,
    run_pipeline_trace,
    speedup_model_panel,
)
from d2lhelpers.parallel.model import (
    dense_stack,
    input_batch,
    max_difference,
    mlp,
    mlp_weights,
    stack_weights,
)
from d2lhelpers.parallel.pipeline_runs import (
    run_pipeline_parallel,
)
from d2lhelpers.parallel.replica_runs import (
    run_replicas,
)
from d2lhelpers.parallel.result import (
    communication_note,
)
from d2lhelpers.parallel.tensor_parallel import (
    allreduce_sum,
)
from d2lhelpers.parallel.tensor_parallel_runs import (
    run_tensor_parallel,
)

# --- notebook 05: collectives (and the cost models notebook 04 uses) ---
from d2lhelpers.collectives.algorithms import (
    allreduce_time_s,
)
from d2lhelpers.collectives.costs import (
    break_even_comm_ms,
    bus_bandwidth_bound_s,
    efficiency_table,
    pipeline_bubble_fraction,
    replicas_vs_one_group,
)
from d2lhelpers.collectives.seed_port import (
    seed_program_output,
)
from d2lhelpers.lessons.l05_collectives import (
    allreduce_panel,
    plot_rounds_and_bytes,
    run_allreduce_overlap,
    run_allreduce_sweep,
)
from d2lhelpers.workloads import (
    matmul_chain,  # notebook 01's, called by notebook 05's saved allreduce_and_compute
)

# --- notebook 06: multiple processes ---
from d2lhelpers.lessons.l06_multi_process import (
    break_even,
    cluster_panel,
    failure_panel,
    hosts_reference,
    machine_defaults,
    run_allreduce_job,
    run_training_sweep,
)
from d2lhelpers.processes.group import (
    tf_config,
)
from d2lhelpers.processes.real_cluster import (
    real_cluster_tf_config,
)

# --- notebook 07: serving ---
from d2lhelpers.lessons.l07_serving import (
    check_layout_tokens,
    memory_fit,
    run_load_sweep,
    run_lockstep_comparison,
    run_pipeline_in_flight,
    run_serving,
    run_serving_failure,
    serving_panel,
)
from d2lhelpers.serving.config import decoder_config
from d2lhelpers.serving.engines import ServingCode

# The front door is the imports above, read by section: every name they bind is exported
# (review: the same 86 names were listed twice, here and in those imports).
__all__ = [
    name
    for name, value in list(globals().items())
    if not name.startswith("_") and not isinstance(value, _ModuleType)
]
