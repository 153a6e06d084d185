"""Notebook 05, collectives: all-reduce algorithms step by step, their alpha-beta cost,
TensorFlow's own all-reduce measured per size, hidden behind compute, and the panel.

In notebook order: `steps` (the ring and the tree drawn round by round), `sweep` (TF's
all-reduce against the alpha-beta model), `overlap` (all-reduce and matmuls in one function),
`panel` (the learner's ranks, size, alpha and beta). `runs` holds what the measured runs share.
"""

from d2lhelpers.lessons.l05_collectives.overlap import (
    AllreduceOverlap,
    estimate_allreduce_overlap_s,
    run_allreduce_overlap,
)
from d2lhelpers.lessons.l05_collectives.panel import (
    AllreduceModel,
    allreduce_panel,
    estimate_allreduce_model_s,
    plot_allreduce_model,
    run_allreduce_model,
)
from d2lhelpers.lessons.l05_collectives.steps import plot_allreduce_steps, plot_rounds_and_bytes
from d2lhelpers.lessons.l05_collectives.sweep import (
    AllreduceSweep,
    estimate_allreduce_sweep_s,
    plot_allreduce_sweep,
    run_allreduce_sweep,
)

__all__ = [
    "AllreduceModel",
    "AllreduceOverlap",
    "AllreduceSweep",
    "allreduce_panel",
    "estimate_allreduce_model_s",
    "estimate_allreduce_overlap_s",
    "estimate_allreduce_sweep_s",
    "plot_allreduce_model",
    "plot_allreduce_steps",
    "plot_allreduce_sweep",
    "plot_rounds_and_bytes",
    "run_allreduce_model",
    "run_allreduce_overlap",
    "run_allreduce_sweep",
]
