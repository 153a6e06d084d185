"""Notebook 04, splitting work: replicas, tensor and pipeline parallel, and their costs.

In notebook order, one module each: the seed's picture (`picture`); the pipeline's bubble, traced
and measured against the microbatches (`pipeline_trace`); the cost model of "when more GPUs make
it slower" (`cost_model`: result, plot, panel); the three schemes run side by side
(`three_schemes`: validation, estimate, result, plot, panel). The schemes themselves are the
notebook's saved code (`parallel.replicas`, `parallel.tensor_parallel`,
`parallel.pipeline_parallel`), measured by `parallel.*_runs`.
"""

from d2lhelpers.lessons.l04_splitting_work.cost_model import (
    SpeedupModelResult,
    plot_speedup_model,
    speedup_model,
    speedup_model_panel,
)
from d2lhelpers.lessons.l04_splitting_work.picture import plot_three_schemes
from d2lhelpers.lessons.l04_splitting_work.pipeline_trace import (
    BubbleComparisonResult,
    PipelineTraceResult,
    compare_bubbles,
    run_pipeline_trace,
)
from d2lhelpers.lessons.l04_splitting_work.three_schemes import (
    ThreeSchemesResult,
    check_three_schemes,
    estimate_three_schemes,
    parallelism_panel,
    plot_three_scheme_speedups,
    run_three_schemes,
)

__all__ = [
    "BubbleComparisonResult",
    "PipelineTraceResult",
    "SpeedupModelResult",
    "ThreeSchemesResult",
    "check_three_schemes",
    "compare_bubbles",
    "estimate_three_schemes",
    "parallelism_panel",
    "plot_speedup_model",
    "plot_three_scheme_speedups",
    "plot_three_schemes",
    "run_pipeline_trace",
    "run_three_schemes",
    "speedup_model",
    "speedup_model_panel",
]
