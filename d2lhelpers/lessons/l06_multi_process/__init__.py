"""Notebook 06, multi-process: worker processes, MultiWorkerMirroredStrategy, failures.

In notebook order, one module each: `jobs` (admission, the machine's defaults, one job on
loopback), `allreduce` (the all-reduce sweep, its fit and plot), `training` (data-parallel
training and its cost model), `break_even` (the Try-it answer), `failure` (killing a worker of
replicas or of a group), `panels` (the two panels). The code that runs inside each worker is
`d2lhelpers.processes.mwms`.
"""

from d2lhelpers.lessons.l06_multi_process.allreduce import (
    AllReduceJob,
    plot_allreduce_job,
    run_allreduce_job,
)
from d2lhelpers.lessons.l06_multi_process.break_even import (
    BreakEven,
    break_even,
    break_even_step_s,
)
from d2lhelpers.lessons.l06_multi_process.failure import FailureDemo, plot_failure, run_failure
from d2lhelpers.lessons.l06_multi_process.jobs import MachineDefaults, machine_defaults
from d2lhelpers.lessons.l06_multi_process.panels import ClusterRun, cluster_panel, failure_panel
from d2lhelpers.lessons.l06_multi_process.training import (
    TrainingJob,
    TrainingSweep,
    plot_training_sweep,
    predict_step_s,
    run_training,
    run_training_sweep,
)

__all__ = [
    "AllReduceJob",
    "BreakEven",
    "ClusterRun",
    "FailureDemo",
    "MachineDefaults",
    "TrainingJob",
    "TrainingSweep",
    "break_even",
    "break_even_step_s",
    "cluster_panel",
    "failure_panel",
    "machine_defaults",
    "plot_allreduce_job",
    "plot_failure",
    "plot_training_sweep",
    "predict_step_s",
    "run_allreduce_job",
    "run_failure",
    "run_training",
    "run_training_sweep",
]
