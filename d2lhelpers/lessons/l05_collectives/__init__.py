"""Notebook 05, collectives: the all-reduces drawn round by round, TensorFlow's own all-reduce
timed per size against the alpha-beta model, hidden behind compute, and the panel.

The experiments' code is the notebook's, saved into `collectives/` (`patterns`, `schedules`,
`tf_collective`); every run here takes the notebook's functions. In notebook order: `plots`
(the steps, rounds and bytes, the sweep, the panel's bars), `sweep` and `sweep_result` (TF's
all-reduce against the alpha-beta model), `overlap` and `overlap_result` (all-reduce and
matmuls in one function), `panel` (the learner's ranks, size, alpha and beta).
"""

from d2lhelpers.lessons.l05_collectives.overlap import run_allreduce_overlap
from d2lhelpers.lessons.l05_collectives.overlap_result import AllreduceOverlapResult
from d2lhelpers.lessons.l05_collectives.panel import (
    AllreduceModelResult,
    allreduce_panel,
    run_allreduce_model,
)
from d2lhelpers.lessons.l05_collectives.plots import (
    plot_allreduce_model,
    plot_allreduce_sweep,
    plot_rounds_and_bytes,
)
from d2lhelpers.lessons.l05_collectives.sweep import run_allreduce_sweep
from d2lhelpers.lessons.l05_collectives.sweep_result import AllreduceSweepResult

__all__ = [
    "AllreduceModelResult",
    "AllreduceOverlapResult",
    "AllreduceSweepResult",
    "allreduce_panel",
    "plot_allreduce_model",
    "plot_allreduce_sweep",
    "plot_rounds_and_bytes",
    "run_allreduce_model",
    "run_allreduce_overlap",
    "run_allreduce_sweep",
]
