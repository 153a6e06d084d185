"""Notebook 02, compute and copy: a worker process computes, a driver process copies.

In notebook order: the seed read carefully (`seed`), why a local copy is no copy (`local_copy`),
the experiment run in a driver process (`experiment`), its result with verdicts (`result`), the
plot and the panel (`panel`).
"""

from d2lhelpers.lessons.l02_compute_copy.experiment import (
    check_compute_copy_fits,
    estimate_compute_copy_s,
    run_compute_copy,
)
from d2lhelpers.lessons.l02_compute_copy.local_copy import LocalCopyResult, local_copy_cost
from d2lhelpers.lessons.l02_compute_copy.panel import compute_copy_panel, plot_compute_copy
from d2lhelpers.lessons.l02_compute_copy.result import ComputeCopyResult
from d2lhelpers.lessons.l02_compute_copy.seed import SeedReadingResult, seed_reading

__all__ = [
    "ComputeCopyResult",
    "LocalCopyResult",
    "SeedReadingResult",
    "check_compute_copy_fits",
    "compute_copy_panel",
    "estimate_compute_copy_s",
    "local_copy_cost",
    "plot_compute_copy",
    "run_compute_copy",
    "seed_reading",
]
